package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

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

// TestSchedulesPageShowsLastSkip: a schedule whose task type was disabled
// shows its last skip and the error on the dashboard.
func TestSchedulesPageShowsLastSkip(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	agent := engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent}
	v, err := b.eng.CreateSchedule(ctx, agent, engine.CreateScheduleRequest{Name: "every-second", IntervalSeconds: 1,
		Template: host.ScheduleTemplate{TaskType: "echo"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.PatchTaskType(ctx, "default", "echo", json.RawMessage(`{"enabled":false}`)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := b.eng.FireSchedules(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := b.eng.GetSchedule(ctx, agent, v.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s.LastSkip != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no skip 10 s after the schedule's task type was disabled")
		}
		time.Sleep(50 * time.Millisecond)
	}
	br := newBrowser(t, b.ts)
	br.signIn(b.admin)
	_, body := br.get("/ui/schedules")
	for _, want := range []string{"Last skip", "skipped", host.CodeTaskTypeDisabled} {
		if !strings.Contains(body, want) {
			t.Fatalf("schedules page lacks %q:\n%s", want, body)
		}
	}
}
