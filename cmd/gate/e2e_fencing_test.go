package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// rlLease is the part of a resource lease these tests read.
type rlLease struct {
	ID           string    `json:"lease_id"`
	Resource     string    `json:"resource"`
	Holder       string    `json:"holder"`
	ExpiresAt    time.Time `json:"expires_at"`
	TTLMs        int64     `json:"ttl_ms"`
	TaskID       string    `json:"task_id"`
	FencingToken int64     `json:"fencing_token"`
}

type rlAnswer struct {
	PriorityAt time.Time `json:"priority_at"`
	Leases     []rlLease `json:"leases"`
	ServerTime time.Time `json:"server_time"`
}

// TestE2EResourceLeaseFencing runs the real binary on SQLite and on
// PostgreSQL over HTTP: a holder stalls past its expiry, the next holder is
// granted the resource with a larger fencing token and writes, and the
// stalled holder's late write is refused by the protected system's token
// check (its heartbeat by the gate, with server_time). Then the small
// defects of issue 43: who holds a resource, a wait-die priority older than
// the holder's bound one, a shortening heartbeat, the minimum TTL, a quota
// refusal with server_time, a task's offer carrying its resource lease's
// token, and the counter surviving a restart of the gate.
func TestE2EResourceLeaseFencing(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var args []string
			if store == "postgres" {
				args = []string{"--db", postgresSchema(t)}
			}
			g := startGate(t, dir, args...)
			stalls := g.newKey(t, "agent", "agent.stalls", "")
			next := g.newKey(t, "agent", "agent.next", "")
			const worker = "fenced.w1"
			wkey := g.newKey(t, "worker", worker, "")
			const res = "DB:orders"
			mutates := func(r string) []any { return []any{map[string]any{"resource": r, "predicate": "MUTATES"}} }
			var db storetest.FencedStore

			var a rlAnswer
			r := call(t, "POST", g.URL+"/v1/resource-leases", stalls, map[string]any{"intents": mutates(res), "ttl_ms": 300})
			want(t, r, 201, "")
			r.Into(t, &a)
			first := a.Leases[0]
			if first.FencingToken != 1 || first.TTLMs != 300 {
				t.Fatalf("first grant: %+v", first)
			}
			if err := db.Write(res, first.FencingToken, "stalls: early"); err != nil {
				t.Fatal(err)
			}
			// The holder stalls (no heartbeat); the next holder gets the
			// resource once the lease ran out by the gate's clock.
			var b rlAnswer
			if !waitUntil(30*time.Second, func() bool {
				r := call(t, "POST", g.URL+"/v1/resource-leases", next, map[string]any{"intents": mutates(res), "ttl_ms": 60000})
				if r.Status == 201 {
					r.Into(t, &b)
					return true
				}
				want(t, r, 409, "resource_conflict")
				return false
			}) {
				t.Fatal("the stalled holder's lease never ran out")
			}
			second := b.Leases[0]
			if second.FencingToken <= first.FencingToken || b.ServerTime.Before(first.ExpiresAt) {
				t.Fatalf("next grant %+v at %s; stalled lease %+v", second, b.ServerTime, first)
			}
			if err := db.Write(res, second.FencingToken, "next"); err != nil {
				t.Fatal(err)
			}
			// The stalled holder wakes and writes as if it still held it.
			if err := db.Write(res, first.FencingToken, "stalls: late"); !errors.Is(err, storetest.ErrStaleToken) {
				t.Fatalf("the stalled holder's late write: %v, want a stale-token refusal", err)
			}
			if got := strings.Join(db.Writes(res), ","); got != "stalls: early,next" {
				t.Fatalf("writes %q", got)
			}
			r = call(t, "POST", g.URL+"/v1/resource-leases/heartbeat", stalls, map[string]any{"lease_ids": []string{first.ID}})
			want(t, r, 409, "lease_expired")
			if r.JSON(t)["server_time"] == nil {
				t.Fatalf("lease_expired without server_time: %s", r.Body)
			}

			// Who holds it, asked by the stalled holder without taking it.
			var h rlAnswer
			r = call(t, "GET", g.URL+"/v1/resource-leases?resource=db:orders", stalls, nil)
			want(t, r, 200, "")
			r.Into(t, &h)
			if len(h.Leases) != 1 || h.Leases[0].ID != second.ID || h.Leases[0].FencingToken != second.FencingToken || h.ServerTime.IsZero() {
				t.Fatalf("holders: %s", r.Body)
			}
			want(t, call(t, "GET", g.URL+"/v1/resource-leases?resource=FILE:", stalls, nil), 400, "invalid_resource")
			want(t, call(t, "GET", g.URL+"/v1/resource-leases", stalls, nil), 400, "bad_request")

			// Wait-die: the holder's priority is bound to its lease's.
			older := b.PriorityAt.Add(-time.Hour).Format(time.RFC3339Nano)
			r = call(t, "POST", g.URL+"/v1/resource-leases", next, map[string]any{"intents": mutates("DB:other"), "priority_at": older})
			want(t, r, 409, "conflict")
			if r.JSON(t)["server_time"] == nil {
				t.Fatalf("priority refusal without server_time: %s", r.Body)
			}
			var o rlAnswer
			r = call(t, "POST", g.URL+"/v1/resource-leases", next, map[string]any{"intents": mutates("DB:other"), "ttl_ms": 1})
			want(t, r, 201, "")
			r.Into(t, &o)
			if !o.PriorityAt.Equal(b.PriorityAt) || o.Leases[0].TTLMs != 100 {
				t.Fatalf("second acquire by the holder: priority %s (bound %s), ttl_ms %d (minimum 100)", o.PriorityAt, b.PriorityAt, o.Leases[0].TTLMs)
			}
			// A heartbeat with a shorter TTL shortens the lease.
			var hb rlAnswer
			r = call(t, "POST", g.URL+"/v1/resource-leases/"+second.ID+"/heartbeat", next, map[string]any{"ttl_ms": 20000})
			want(t, r, 200, "")
			r.Into(t, &hb)
			if l := hb.Leases[0]; l.TTLMs != 20000 || !l.ExpiresAt.Equal(hb.ServerTime.Add(20*time.Second)) {
				t.Fatalf("shortening heartbeat: %+v at %s", l, hb.ServerTime)
			}
			want(t, call(t, "POST", g.URL+"/v1/resource-leases/release", next, map[string]any{"lease_ids": []string{second.ID}}), 200, "")

			// The concurrent-lease quota (256 by default) refuses with server_time.
			quota := g.newKey(t, "agent", "agent.quota", "")
			for m := 0; m < 4; m++ {
				var many []any
				for i := 0; i < 64; i++ {
					many = append(many, map[string]any{"resource": fmt.Sprintf("Q:%d-%d", m, i), "predicate": "READS"})
				}
				want(t, call(t, "POST", g.URL+"/v1/resource-leases", quota, map[string]any{"intents": many}), 201, "")
			}
			r = call(t, "POST", g.URL+"/v1/resource-leases", quota, map[string]any{"intents": mutates("Q:more")})
			want(t, r, 429, "quota_exceeded")
			if r.JSON(t)["server_time"] == nil {
				t.Fatalf("quota_exceeded without server_time: %s", r.Body)
			}

			// A task whose intents name the resource: the offer carries its
			// resource lease with the next token.
			want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/fenced", g.Admin, map[string]any{"task_type": "fenced", "lease_seconds": 60,
				"resource_intents": mutates(res)}), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/tasks", next, map[string]any{"task_type": "fenced", "params": map[string]any{}}), 201, "")
			var offers struct {
				Leases []struct {
					LeaseID        string    `json:"lease_id"`
					ResourceLeases []rlLease `json:"resource_leases"`
					Task           struct {
						ID string `json:"task_id"`
					} `json:"task"`
				} `json:"leases"`
			}
			r = call(t, "POST", g.URL+"/v1/leases", wkey, map[string]any{"worker_id": worker, "task_types": []string{"fenced"}, "wait_seconds": 10})
			want(t, r, 200, "")
			r.Into(t, &offers)
			if len(offers.Leases) != 1 || len(offers.Leases[0].ResourceLeases) != 1 {
				t.Fatalf("offer: %s", r.Body)
			}
			task := offers.Leases[0].ResourceLeases[0]
			if task.Resource != res || task.Holder != worker || task.FencingToken != second.FencingToken+1 {
				t.Fatalf("the task's resource lease %+v: want token %d", task, second.FencingToken+1)
			}
			want(t, call(t, "POST", g.URL+"/v1/leases/"+offers.Leases[0].LeaseID+"/release", wkey, map[string]any{"reason": "offered again"}), 200, "")

			// The Lease Protocol's offer (POST /lease) carries it too: a
			// worker on the seed route holds the lease and needs its token.
			var seed struct {
				LeaseID        string    `json:"lease_id"`
				ResourceLeases []rlLease `json:"resource_leases"`
			}
			r = call(t, "POST", g.URL+"/lease", wkey, map[string]any{"worker_id": worker, "task_types": []string{"fenced"}, "wait_seconds": 10})
			want(t, r, 200, "")
			r.Into(t, &seed)
			if len(seed.ResourceLeases) != 1 || seed.ResourceLeases[0].Resource != res || seed.ResourceLeases[0].FencingToken != task.FencingToken+1 {
				t.Fatalf("seed offer: %s; want the resource lease with token %d", r.Body, task.FencingToken+1)
			}
			task = seed.ResourceLeases[0]
			want(t, call(t, "POST", g.URL+"/v1/leases/"+seed.LeaseID+"/release", wkey, map[string]any{"reason": "restart next"}), 200, "")

			// Across a restart of the gate the counter goes on.
			if err := g.Stop(syscall.SIGTERM); err != nil {
				t.Fatalf("stop: %v", err)
			}
			g = startGate(t, dir, args...)
			var after rlAnswer
			r = call(t, "POST", g.URL+"/v1/resource-leases", stalls, map[string]any{"intents": mutates(res)})
			want(t, r, 201, "")
			r.Into(t, &after)
			if after.Leases[0].FencingToken != task.FencingToken+1 {
				t.Fatalf("grant after a restart: token %d, want %d", after.Leases[0].FencingToken, task.FencingToken+1)
			}
		})
	}
}
