package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// TestSchedulesPage: the dashboard lists the tenant's schedules with their
// next runs and shows a paused one as paused; another tenant's admin does not
// see them.
func TestSchedulesPage(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	agent := engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent}
	v, err := b.eng.CreateSchedule(ctx, agent, engine.CreateScheduleRequest{Name: "nightly-report", Cron: "30 2 * * *", Timezone: "Europe/Berlin",
		Template: host.ScheduleTemplate{TaskType: "echo", Params: json.RawMessage(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.eng.CreateSchedule(ctx, agent, engine.CreateScheduleRequest{Name: "held", IntervalSeconds: 30, Paused: true,
		Template: host.ScheduleTemplate{TaskType: "echo"}})
	if err != nil {
		t.Fatal(err)
	}
	br := newBrowser(t, b.ts)
	br.signIn(b.admin)
	res, body := br.get("/ui/schedules")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/schedules: %d\n%s", res.StatusCode, body)
	}
	for _, want := range []string{"nightly-report", v.ID, "Europe/Berlin", "agent.a", "every 30 s", p.ID, "paused"} {
		if !strings.Contains(body, want) {
			t.Fatalf("schedules page lacks %q:\n%s", want, body)
		}
	}
	if n := strings.Count(body, "<time>"); n != 5 {
		t.Fatalf("%d next runs shown, want 5 (the paused schedule has none)", n)
	}
	if !strings.Contains(body, v.NextRuns[0].UTC().Format("2006-01-02 15:04:05Z")) {
		t.Fatalf("the first next run %v is not shown", v.NextRuns[0])
	}
	other := newBrowser(t, b.ts)
	other.signIn(b.acme)
	if _, body := other.get("/ui/schedules"); strings.Contains(body, v.ID) || !strings.Contains(body, "No schedule in this tenant") {
		t.Fatalf("another tenant's admin sees the schedules:\n%s", body)
	}
}
