package main

import (
	"strings"
	"testing"
)

// TestE2EResourceLeaseHolderIsTheCaller: through the real binary, on SQLite
// and PostgreSQL, an admin that acquires a resource lease naming an agent as
// holder is refused, over HTTP (403 forbidden) and over MCP (the tool takes
// no holder: a tool error), and nothing is held in the agent's name: the
// agent then takes the resource MUTATES itself. The admin's own acquire holds
// in the admin's name, and the admin may still release the agent's lease.
func TestE2EResourceLeaseHolderIsTheCaller(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			agent := g.newKey(t, "agent", "agent.alice", "")
			intents := []map[string]any{{"resource": "FILE:/repo/x.go", "predicate": "MUTATES"}}

			r := call(t, "POST", g.URL+"/v1/resource-leases", g.Admin, map[string]any{"intents": intents, "holder": "agent.alice"})
			want(t, r, 403, "forbidden")

			mc := httpMCPClient(t, g.URL+"/mcp", g.Admin, "holder-test")
			out, isErr := callTool(t, mc, "acquire_resource_leases", map[string]any{"intents": intents, "holder": "agent.alice"})
			if !isErr || out["granted"] == true {
				t.Fatalf("MCP acquire naming agent.alice as holder was answered %v (tool error %v)", out, isErr)
			}

			var held struct {
				Leases []map[string]any `json:"leases"`
			}
			call(t, "GET", g.URL+"/v1/admin/resource-leases?holder=agent.alice", g.Admin, nil).Into(t, &held)
			if len(held.Leases) != 0 {
				t.Fatalf("leases held in agent.alice's name that she never asked for: %v", held.Leases)
			}
			r = call(t, "POST", g.URL+"/v1/resource-leases", agent, map[string]any{"intents": intents})
			want(t, r, 201, "")
			r.Into(t, &held)
			if len(held.Leases) != 1 || held.Leases[0]["holder"] != "agent.alice" {
				t.Fatalf("agent.alice's own acquire: %s", r.Body)
			}
			mine := held.Leases[0]["lease_id"].(string)

			// The admin's own lease is in its own name, given or not.
			r = call(t, "POST", g.URL+"/v1/resource-leases", g.Admin, map[string]any{"intents": []map[string]any{{"resource": "FILE:/repo/y.go", "predicate": "READS"}}})
			want(t, r, 201, "")
			r.Into(t, &held)
			admin, _ := held.Leases[0]["holder"].(string)
			if admin == "" || admin == "agent.alice" {
				t.Fatalf("the admin's acquire: %s", r.Body)
			}
			want(t, call(t, "POST", g.URL+"/v1/resource-leases", g.Admin, map[string]any{"intents": []map[string]any{{"resource": "FILE:/repo/z.go", "predicate": "READS"}}, "holder": admin}), 201, "")

			// Keeping a lease alive is its holder's alone: an admin's
			// heartbeat would hold it in agent.alice's name.
			want(t, call(t, "POST", g.URL+"/v1/resource-leases/"+mine+"/heartbeat", g.Admin, nil), 403, "forbidden")
			want(t, call(t, "POST", g.URL+"/v1/resource-leases/heartbeat", g.Admin, map[string]any{"lease_ids": []string{mine}}), 403, "forbidden")
			want(t, call(t, "POST", g.URL+"/v1/resource-leases/"+mine+"/heartbeat", agent, nil), 200, "")
			var sess struct {
				Session struct {
					ID string `json:"session_id"`
				} `json:"session"`
			}
			r = call(t, "POST", g.URL+"/v1/resource-sessions", agent, map[string]any{})
			want(t, r, 201, "")
			r.Into(t, &sess)
			sid := sess.Session.ID
			want(t, call(t, "POST", g.URL+"/v1/resource-sessions/"+sid+"/heartbeat", g.Admin, map[string]any{}), 403, "forbidden")
			want(t, call(t, "POST", g.URL+"/v1/resource-sessions/"+sid+"/heartbeat", agent, map[string]any{}), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/resource-sessions/"+sid+"/end", g.Admin, nil), 200, "")

			// Taking a lease away stays the admin's.
			r = call(t, "POST", g.URL+"/v1/resource-leases/"+mine+"/release", g.Admin, nil)
			want(t, r, 200, "")
			if !strings.Contains(string(r.Body), `"released"`) {
				t.Fatalf("admin release of agent.alice's lease: %s", r.Body)
			}
		})
	}
}
