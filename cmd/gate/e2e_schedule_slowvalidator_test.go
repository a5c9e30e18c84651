package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EScheduleWithASlowValidatorHoldsNoOneElse: a schedule whose task
// type's validator runs past its deadline on every fire waits on its own;
// every other schedule of the gate — another agent's, another tenant's, one
// of the same task type whose params the validator judges in time — keeps
// firing. (The firer used to give up the whole pass at that
// schedule, the oldest due, at the head of every pass: no schedule of the
// gate fired while the validator stayed slow.) The slow schedule fires
// none meanwhile. On SQLite and PostgreSQL.
func TestE2EScheduleWithASlowValidatorHoldsNoOneElse(t *testing.T) {
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, filepath.Join(t.TempDir(), "data"), sc.args(t)...)
			g.dropIn(t, "slowvalidator", "validator")
			// slowvalidator never returns for task type "loop": the type
			// starts without it, so the schedule can be created.
			// and on params {"loop": true} of type "mixed" (its other params
			// pass): the types start without it, so the schedules can be
			// created.
			g.putType(t, "loop", map[string]any{}, "")
			g.putType(t, "mixed", map[string]any{}, "")
			g.putType(t, "tick", map[string]any{}, "")
			g.putType(t, "tick", map[string]any{}, "acme")
			create := func(key, typ string, params map[string]any) string {
				t.Helper()
				r := call(t, "POST", g.URL+"/v1/schedules", key, map[string]any{"name": "every-second-" + typ, "interval_seconds": 1,
					"template": map[string]any{"task_type": typ, "params": params}})
				want(t, r, 201, "")
				return r.JSON(t)["schedule_id"].(string)
			}
			slowKey, otherKey, acmeKey := g.newKey(t, "agent", "agent.slow", ""), g.newKey(t, "agent", "agent.other", ""), g.newKey(t, "agent", "agent.acme", "acme")
			slow := create(slowKey, "loop", map[string]any{})
			slowParams := create(slowKey, "mixed", map[string]any{"loop": true})
			g.putType(t, "loop", map[string]any{"validators": []map[string]any{{"name": "slowvalidator"}}}, "")
			g.putType(t, "mixed", map[string]any{"validators": []map[string]any{{"name": "slowvalidator"}}}, "")
			other := create(otherKey, "tick", map[string]any{})
			// The same type as the slow params: its own params pass.
			sibling := create(otherKey, "mixed", map[string]any{"n": 1})
			acme := create(acmeKey, "tick", map[string]any{})
			keys := map[string]string{slow: slowKey, slowParams: slowKey, other: otherKey, sibling: otherKey, acme: acmeKey}
			fires := func(id string) float64 {
				t.Helper()
				r := call(t, "GET", g.URL+"/v1/schedules/"+id, keys[id], nil)
				want(t, r, 200, "")
				return r.JSON(t)["fires"].(float64)
			}
			// The validator is slow from its next check on: wait for the
			// gate to say so, then count.
			deadline := time.Now().Add(2 * time.Minute)
			for !strings.Contains(g.Log(), "schedule's template could not be checked") {
				if time.Now().After(deadline) {
					t.Fatalf("the slow schedule was never checked against its validator:\n%s", g.Log())
				}
				time.Sleep(100 * time.Millisecond)
			}
			slowFires, slowParamsFires := fires(slow), fires(slowParams)
			o0, s0, a0 := fires(other), fires(sibling), fires(acme)
			for fires(other) < o0+3 || fires(sibling) < s0+3 || fires(acme) < a0+3 {
				if time.Now().After(deadline) {
					t.Fatalf("behind the slow schedules the others stopped: other %v (from %v), same type %v (from %v), acme %v (from %v)\n%s",
						fires(other), o0, fires(sibling), s0, fires(acme), a0, g.Log())
				}
				time.Sleep(100 * time.Millisecond)
			}
			if n, m := fires(slow), fires(slowParams); n != slowFires || m != slowParamsFires {
				t.Fatalf("a schedule whose template could not be checked fired: %v then %v, %v then %v", slowFires, n, slowParamsFires, m)
			}
		})
	}
}
