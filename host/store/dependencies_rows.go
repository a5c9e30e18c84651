package store

import (
	"encoding/json"

	"github.com/asyncgate/asyncgate/host"
)

// DependencyRow is one edge as the SQL drivers send it in a JSON array
// (SQLite's json_each, PostgreSQL's jsonb_to_recordset), so one statement
// inserts any number of edges.
type DependencyRow struct {
	Waiter   string `json:"w"`
	Dep      string `json:"d"`
	Rule     string `json:"r"`
	Position int    `json:"p"`
	State    string `json:"s"`
	Depth    int    `json:"h"`
}

// DependencyRowsJSON is deps as a JSON array of DependencyRow, and the one
// tenant they all belong to; edges of several tenants are a bug.
func DependencyRowsJSON(deps []host.Dependency) (tenant, rows string, err error) {
	out := make([]DependencyRow, len(deps))
	for i, d := range deps {
		if i > 0 && d.Tenant != tenant {
			return "", "", host.Errorf(host.CodeInternal, "dependencies of two tenants in one insert")
		}
		tenant = d.Tenant
		out[i] = DependencyRow{Waiter: d.Waiter, Dep: d.DependsOn, Rule: string(d.Rule), Position: d.Position, State: string(d.DepState), Depth: d.Depth}
	}
	b, err := json.Marshal(out)
	return tenant, string(b), err
}

// IDsJSON is ids as a JSON array of strings.
func IDsJSON(ids []string) string {
	if ids == nil {
		ids = []string{}
	}
	b, _ := json.Marshal(ids)
	return string(b)
}
