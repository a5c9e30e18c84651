package main

import (
	"strings"
	"testing"
)

// TestE2EAdminTenantIsTheQuerys: on both stores, every admin route acts on
// the tenant ?tenant= names, else the key's own; a tenant in the body never
// chooses it, and one that differs is 400 tenant_mismatch (it created the
// type or key in the body's tenant, or was ignored, in silence). Revoking a
// key acts in that tenant too: another tenant's key needs its ?tenant=.
func TestE2EAdminTenantIsTheQuerys(t *testing.T) {
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			acmeAdmin := g.newKey(t, "admin", "ops.acme", "acme")
			tt := g.URL + "/v1/admin/task-types/x"

			// Task types: PUT and PATCH.
			want(t, call(t, "PUT", tt, g.Admin, map[string]any{"tenant": "acme"}), 400, "tenant_mismatch")
			want(t, call(t, "PUT", tt+"?tenant=default", g.Admin, map[string]any{"tenant": "acme"}), 400, "tenant_mismatch")
			want(t, call(t, "PUT", tt+"?tenant=acme", g.Admin, map[string]any{"tenant": "default"}), 400, "tenant_mismatch")
			want(t, call(t, "GET", tt+"?tenant=acme", g.Admin, nil), 404, "not_found")
			want(t, call(t, "GET", tt, g.Admin, nil), 404, "not_found")
			r := call(t, "PUT", tt+"?tenant=acme", g.Admin, map[string]any{"tenant": "acme"})
			want(t, r, 200, "")
			if r.JSON(t)["tenant"] != "acme" {
				t.Fatalf("PUT ?tenant=acme: %s", r.Body)
			}
			want(t, call(t, "PUT", tt, g.Admin, map[string]any{"tenant": "default"}), 200, "")
			want(t, call(t, "PUT", tt, acmeAdmin, map[string]any{"tenant": "default"}), 400, "tenant_mismatch")
			want(t, call(t, "PATCH", tt, g.Admin, map[string]any{"tenant": "acme", "description": "d"}), 400, "tenant_mismatch")
			want(t, call(t, "PATCH", tt+"?tenant=default", acmeAdmin, map[string]any{"description": "d"}), 403, "forbidden")
			r = call(t, "PATCH", tt+"?tenant=acme", g.Admin, map[string]any{"tenant": "acme", "description": "acme's"})
			want(t, r, 200, "")
			if m := r.JSON(t); m["tenant"] != "acme" || m["description"] != "acme's" {
				t.Fatalf("PATCH ?tenant=acme: %s", r.Body)
			}
			if d := call(t, "GET", tt, g.Admin, nil).JSON(t)["description"]; d != nil {
				t.Fatalf("the default tenant's x took acme's patch: description %v", d)
			}

			// Keys: create.
			keys := g.URL + "/v1/admin/keys"
			want(t, call(t, "POST", keys+"?tenant=acme", g.Admin, map[string]any{"role": "agent", "principal": "agent.m1", "tenant": "default"}), 400, "tenant_mismatch")
			want(t, call(t, "POST", keys, g.Admin, map[string]any{"role": "agent", "principal": "agent.m2", "tenant": "acme"}), 400, "tenant_mismatch")
			want(t, call(t, "POST", keys, acmeAdmin, map[string]any{"role": "agent", "principal": "agent.m3", "tenant": "default"}), 400, "tenant_mismatch")
			var listed struct {
				Keys []struct {
					Principal string `json:"principal"`
				} `json:"keys"`
			}
			call(t, "GET", keys, g.Admin, nil).Into(t, &listed)
			for _, k := range listed.Keys {
				if strings.HasPrefix(k.Principal, "agent.m") {
					t.Fatalf("a refused POST made key %s", k.Principal)
				}
			}
			r = call(t, "POST", keys+"?tenant=acme", g.Admin, map[string]any{"role": "agent", "principal": "agent.acme", "tenant": "acme"})
			want(t, r, 201, "")
			acmeID, acmeKey := r.JSON(t)["key_id"].(string), r.JSON(t)["api_key"].(string)
			if r.JSON(t)["tenant"] != "acme" {
				t.Fatalf("POST ?tenant=acme: %s", r.Body)
			}
			defID, defKey := g.newKeyID(t, "agent", "agent.def", "")

			// Keys: revoke acts in the resolved tenant.
			want(t, call(t, "DELETE", keys+"/"+acmeID, g.Admin, nil), 404, "not_found")
			want(t, call(t, "DELETE", keys+"/"+acmeID+"?tenant=default", g.Admin, nil), 404, "not_found")
			want(t, call(t, "DELETE", keys+"/"+defID, acmeAdmin, nil), 404, "not_found")
			want(t, call(t, "DELETE", keys+"/"+defID+"?tenant=default", acmeAdmin, nil), 403, "forbidden")
			want(t, call(t, "GET", g.URL+"/v1/tasks", acmeKey, nil), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/tasks", defKey, nil), 200, "")
			want(t, call(t, "DELETE", keys+"/"+acmeID+"?tenant=acme", g.Admin, nil), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/tasks", acmeKey, nil), 401, "unauthorized")
			want(t, call(t, "DELETE", keys+"/"+defID, g.Admin, nil), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/tasks", defKey, nil), 401, "unauthorized")
		})
	}
}
