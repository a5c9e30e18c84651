package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// TestSchedules creates an every-second schedule on a real gate, waits for
// its tasks (each naming its fire in its idempotency key), pauses, resumes
// and deletes it; another agent is told not_found.
func TestSchedules(t *testing.T) {
	g := startGate(t)
	ctx := context.Background()
	admin := client.New(g.URL, g.Admin)
	if _, err := admin.Do(ctx, "PUT", "/v1/admin/task-types/report", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(g.URL, g.key(t, "agent", "producer.s"))
	_, err := c.CreateSchedule(ctx, client.NewSchedule{Name: "x", Cron: "70 * * * *", Template: client.ScheduleTemplate{TaskType: "report"}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_cron" {
		t.Fatalf("bad cron: %v", err)
	}
	s, err := c.CreateSchedule(ctx, client.NewSchedule{Name: "tick", IntervalSeconds: 1,
		Template: client.ScheduleTemplate{TaskType: "report", Params: json.RawMessage(`{"k":1}`)}})
	if err != nil || s.Owner != "producer.s" || len(s.NextRuns) != 5 {
		t.Fatalf("create: %+v %v", s, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ts, _, err := c.List(ctx, client.ListOptions{TaskTypes: []string{"report"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) >= 2 {
			if ts[0].IdempotencyKey == "" || ts[0].IdempotencyKey[:9+len(s.ScheduleID)] != "schedule:"+s.ScheduleID {
				t.Fatalf("a fired task's key: %q", ts[0].IdempotencyKey)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks after 60 s of an every-second schedule", len(ts))
		}
		time.Sleep(100 * time.Millisecond)
	}
	other := client.New(g.URL, g.key(t, "agent", "producer.o"))
	if _, err := other.Schedule(ctx, s.ScheduleID, 0); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" {
		t.Fatalf("another agent's get: %v", err)
	}
	if p, err := c.PauseSchedule(ctx, s.ScheduleID); err != nil || !p.Paused {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if r, err := c.ResumeSchedule(ctx, s.ScheduleID); err != nil || r.Paused {
		t.Fatalf("resume: %+v %v", r, err)
	}
	list, _, err := c.Schedules(ctx, "", 0, 3)
	if err != nil || len(list) != 1 || len(list[0].NextRuns) != 3 || list[0].Fires < 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := c.DeleteSchedule(ctx, s.ScheduleID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, s.ScheduleID, 0); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("after delete: %v", err)
	}
}
