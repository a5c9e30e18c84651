package main

import (
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EScheduleFiresOnceThroughKills runs three `gate serve` processes on
// one PostgreSQL database with a schedule firing every second (run_all, so
// a fire the hosts were all down for is still owed), SIGKILLs and restarts
// the hosts one after another, and once all three together, for about 25
// seconds, then checks that every fire from the first to the last enqueued
// exactly one task: no doubles, no gaps.
func TestE2EScheduleFiresOnceThroughKills(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t)
	results := t.TempDir() // the hosts of one database share one results folder
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	gates := []*gateProc{startGate(t, dirs[0], "--db", db, "--results-dir", results)}
	for _, dir := range dirs[1:] {
		// One database, one set of keys: the first host made the admin key.
		if err := os.WriteFile(dir+"/admin.key", []byte(gates[0].Admin+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		gates = append(gates, startGate(t, dir, "--db", db, "--results-dir", results))
	}
	gates[0].putType(t, "tick", map[string]any{}, "")
	agent := gates[0].newKey(t, "agent", "agent.cron", "")
	r := call(t, "POST", gates[1].URL+"/v1/schedules", agent, map[string]any{"name": "every-second", "interval_seconds": 1,
		"missed_policy": "run_all", "missed_cap": 100, "template": map[string]any{"task_type": "tick", "params": map[string]any{}}})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	var s struct {
		ID string `json:"schedule_id"`
	}
	if err := json.Unmarshal(r.Body, &s); err != nil {
		t.Fatal(err)
	}
	restart := func(i int) {
		if err := gates[i].Stop(syscall.SIGKILL); err == nil {
			t.Fatalf("host %d exited cleanly on SIGKILL", i)
		}
		gates[i] = startGate(t, dirs[i], "--db", db, "--results-dir", results)
	}
	end := time.Now().Add(25 * time.Second)
	kills := 0
	for round := 0; time.Now().Before(end); round++ {
		if round == 3 { // all three down at once: the fires of the gap are owed
			for i := range gates {
				_ = gates[i].Stop(syscall.SIGKILL)
			}
			time.Sleep(2500 * time.Millisecond) // a real outage, not a wait for a condition
			for i := range gates {
				gates[i] = startGate(t, dirs[i], "--db", db, "--results-dir", results)
			}
			kills += 3
			continue
		}
		// A host dies mid-second, at a different phase each round.
		time.Sleep(time.Duration(700+137*round%600) * time.Millisecond)
		restart(round % 3)
		kills++
	}
	// Stop the fires, then read every task of the schedule.
	r = call(t, "POST", gates[0].URL+"/v1/schedules/"+s.ID+"/pause", agent, nil)
	if r.Status != 200 {
		t.Fatalf("pause: %d %s", r.Status, r.Body)
	}
	var sched struct {
		Fires int `json:"fires"`
	}
	_ = json.Unmarshal(r.Body, &sched)
	per := map[string]int{}
	cursor := ""
	for {
		q := url.Values{"task_type": {"tick"}, "limit": {"500"}, "status": {"queued,scheduled"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := call(t, "GET", gates[2].URL+"/v1/tasks?"+q.Encode(), agent, nil)
		var page struct {
			Tasks []struct {
				Key string `json:"idempotency_key"`
			} `json:"tasks"`
			Cursor string `json:"cursor"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil || r.Status != 200 {
			t.Fatalf("list: %d %s", r.Status, r.Body)
		}
		for _, tk := range page.Tasks {
			per[tk.Key]++
		}
		if page.Cursor == "" {
			break
		}
		cursor = page.Cursor
	}
	var fires []time.Time
	for k, n := range per {
		at, ok := strings.CutPrefix(k, "schedule:"+s.ID+":")
		if !ok {
			t.Fatalf("a task not of the schedule: %q", k)
		}
		if n != 1 {
			t.Errorf("fire %s enqueued %d tasks", at, n)
		}
		ft, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			t.Fatal(err)
		}
		fires = append(fires, ft)
	}
	if len(fires) < 15 {
		t.Fatalf("only %d fires in about 25 s", len(fires))
	}
	first, last := fires[0], fires[0]
	for _, f := range fires {
		if f.Before(first) {
			first = f
		}
		if f.After(last) {
			last = f
		}
	}
	want := int(last.Sub(first)/time.Second) + 1
	if len(fires) != want {
		var missing []string
		have := map[int64]bool{}
		for _, f := range fires {
			have[f.Unix()] = true
		}
		for x := first; !x.After(last); x = x.Add(time.Second) {
			if !have[x.Unix()] {
				missing = append(missing, x.Format(time.TimeOnly))
			}
		}
		t.Fatalf("%d fires from %v to %v, want %d: missing %v", len(fires), first, last, want, missing)
	}
	if sched.Fires != len(fires) {
		t.Errorf("the schedule counts %d fires, the tasks %d", sched.Fires, len(fires))
	}
	t.Logf("%d fires, each one task, from %s to %s through %d SIGKILLs", len(fires), first.Format(time.TimeOnly), last.Format(time.TimeOnly), kills)
}
