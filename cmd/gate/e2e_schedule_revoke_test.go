package main

import (
	"strings"
	"testing"
	"time"
)

// TestE2EScheduleStopsWhenOwnerKeyRevoked: the real binary. An agent's
// every-second schedule fires; the operator revokes the agent's key with
// `gate keys revoke` (another process, on the data folder: the serving gate
// is not told); the gate's firer then pauses the schedule with
// paused_reason owner_revoked and queues nothing more as the agent, and an
// admin's resume is 409 owner_revoked.
func TestE2EScheduleStopsWhenOwnerKeyRevoked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := startGate(t, dir)
	g.putType(t, "tick", map[string]any{}, "")
	keyID, agent := g.newKeyID(t, "agent", "agent.cron", "")
	create := func(key string) string {
		r := call(t, "POST", g.URL+"/v1/schedules", key, map[string]any{"name": "every-second", "interval_seconds": 1,
			"template": map[string]any{"task_type": "tick"}})
		want(t, r, 201, "")
		return r.JSON(t)["schedule_id"].(string)
	}
	id := create(agent)
	// A live agent's schedule is the clock: its fires show the firer ran.
	witness := create(g.newKey(t, "agent", "agent.live", ""))
	getID := func(id string) map[string]any {
		r := call(t, "GET", g.URL+"/v1/schedules/"+id, g.Admin, nil)
		want(t, r, 200, "")
		return r.JSON(t)
	}
	get := func() map[string]any { return getID(id) }
	deadline := time.Now().Add(20 * time.Second)
	for get()["fires"].(float64) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the schedule did not fire in 20 s: %v", get())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, errs, code := gateCLI(t, "keys", "revoke", "--data", dir, keyID); code != 0 {
		t.Fatalf("gate keys revoke: exit %d %s %s", code, out, errs)
	}
	var s map[string]any
	for s = get(); s["paused"] != true; s = get() {
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatalf("the revoked agent's schedule still runs: %v", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s["paused_reason"] != "owner_revoked" {
		t.Fatalf("paused schedule: %v", s)
	}
	fires := s["fires"]
	// The live agent's schedule fires three more times; the paused one
	// takes none of its fires meanwhile.
	for w0 := getID(witness)["fires"].(float64); getID(witness)["fires"].(float64) < w0+3; {
		if time.Now().After(deadline.Add(40 * time.Second)) {
			t.Fatalf("the live agent's schedule stopped firing: %v", getID(witness))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s = get(); s["fires"] != fires || s["paused"] != true {
		t.Fatalf("after the pause the schedule went on: %v, fires were %v", s, fires)
	}
	r := call(t, "POST", g.URL+"/v1/schedules/"+id+"/resume", g.Admin, nil)
	if r.Status != 409 || !strings.Contains(string(r.Body), "owner_revoked") {
		t.Fatalf("admin resume while the owner is revoked: %d %s", r.Status, r.Body)
	}
}
