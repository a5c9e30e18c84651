package main

import (
	"strings"
	"testing"
)

// TestE2EPluginsListHeldToTheTenantRule: GET /v1/admin/plugins answers a
// tenant's admin naming another tenant (or one that does not exist) with
// 403 forbidden "cannot act on tenant", as every /v1/admin route does; its
// own tenant, and an operator naming any tenant, are answered.
func TestE2EPluginsListHeldToTheTenantRule(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			acme := g.newKey(t, "admin", "admin.acme", "acme")
			g.newKey(t, "admin", "admin.other", "other")
			for _, q := range []string{"other", "nonexistent", "default"} {
				r := call(t, "GET", g.URL+"/v1/admin/plugins?tenant="+q, acme, nil)
				want(t, r, 403, "forbidden")
				if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, "cannot act on tenant") {
					t.Fatalf("?tenant=%s: detail %q", q, d)
				}
				// As another admin route answers it.
				want(t, call(t, "GET", g.URL+"/v1/admin/task-types?tenant="+q, acme, nil), 403, "forbidden")
			}
			for _, q := range []string{"", "?tenant=acme"} {
				want(t, call(t, "GET", g.URL+"/v1/admin/plugins"+q, acme, nil), 200, "")
			}
			for _, q := range []string{"", "?tenant=acme", "?tenant=other"} {
				want(t, call(t, "GET", g.URL+"/v1/admin/plugins"+q, g.Admin, nil), 200, "")
			}
			want(t, call(t, "GET", g.URL+"/v1/admin/plugins?tenant=Not+A+Tenant", g.Admin, nil), 400, "bad_request")
		})
	}
}
