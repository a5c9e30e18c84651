package main

import (
	"testing"
)

// TestE2ENoPluginRefusedWithoutReason: GET /v1/admin/plugins lists every
// refused plugin with its reason (refused and refused_code); a drop-in
// whose files left the plugins folder and that was unloaded is "removed"
// with a note saying so. It was listed "refused" with no reason. Both
// stores.
func TestE2ENoPluginRefusedWithoutReason(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.dropIn(t, "pocket", "channel")
			g.removeChannel(t, "pocket")

			r := call(t, "GET", g.URL+"/v1/admin/plugins", g.Admin, nil)
			want(t, r, 200, "")
			var out struct {
				Plugins []struct {
					Name        string `json:"name"`
					State       string `json:"state"`
					Refused     string `json:"refused"`
					RefusedCode string `json:"refused_code"`
					Note        string `json:"note"`
				} `json:"plugins"`
			}
			r.Into(t, &out)
			found := false
			for _, p := range out.Plugins {
				if p.State == "refused" && (p.Refused == "" || p.RefusedCode == "") {
					t.Errorf("%s is listed refused without its reason: %s", p.Name, r.Body)
				}
				if p.Name == "pocket" {
					found = true
					if p.State != "removed" || p.Note == "" {
						t.Errorf("pocket after its files left: state %q, note %q; want removed with a note", p.State, p.Note)
					}
				}
			}
			if !found {
				t.Fatalf("pocket is not listed: %s", r.Body)
			}
		})
	}
}
