package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/mail/mailtest"
)

// TestE2ESendEmailBudget: send_email is bounded per principal and per
// tenant (mail.send_limit), so one principal cannot flood the gate's one
// mail server and mailbox, which every tenant's results are read back
// from. Past a budget the call is 429 quota_exceeded with the budget's
// wait in Retry-After and retry_after_seconds, and nothing is queued; another principal, and another tenant, still send.
// On SQLite and PostgreSQL.
func TestE2ESendEmailBudget(t *testing.T) {
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			mp := mailtest.Start(t)
			cfg := mailConfigFile(t, mp, map[string]any{"send_limit": map[string]any{"per_principal_per_hour": 3, "per_tenant_per_hour": 5}})
			g := startGate(t, filepath.Join(t.TempDir(), "data"), append([]string{"--config", cfg}, sc.args(t)...)...)
			a, b2 := g.newKey(t, "agent", "agent.a", ""), g.newKey(t, "agent", "agent.b", "")
			other := g.newKey(t, "agent", "agent.a", "t2")
			send := func(key string) resp {
				t.Helper()
				return call(t, "POST", g.URL+"/v1/email", key, map[string]any{"to": "x@example.com", "subject": "s", "body": "b"})
			}
			pending := func() int {
				t.Helper()
				var st struct {
					Pending int `json:"pending"`
				}
				call(t, "GET", g.URL+"/v1/admin/outbox", g.Admin, nil).Into(t, &st)
				return st.Pending
			}
			// refused checks a refusal names its budget and the budget's
			// real wait: the next message's token, an hour over per, in
			// Retry-After and again in the body (not a fixed minute).
			refused := func(r resp, names string, per int) {
				t.Helper()
				want(t, r, 429, "quota_exceeded")
				if !strings.Contains(string(r.Body), names) {
					t.Fatalf("refusal %s does not name %s", r.Body, names)
				}
				var body struct {
					RetryAfter int `json:"retry_after_seconds"`
				}
				r.Into(t, &body)
				secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
				full := 3600 / per
				if err != nil || secs != body.RetryAfter || secs > full || secs < full-120 {
					t.Fatalf("refusal %s: Retry-After %q, retry_after_seconds %d; want both the token's wait, in (%d, %d]",
						r.Body, r.Header.Get("Retry-After"), body.RetryAfter, full-120, full)
				}
			}
			for i := 0; i < 3; i++ {
				want(t, send(a), 202, "")
			}
			before := pending()
			refused(send(a), "per_principal_per_hour", 3)
			if n := pending(); n > before {
				t.Fatalf("a refused send queued: pending %d -> %d", before, n)
			}
			want(t, send(b2), 202, "")
			want(t, send(b2), 202, "")
			refused(send(b2), "per_tenant_per_hour", 5)
			want(t, send(other), 202, "")
		})
	}
}
