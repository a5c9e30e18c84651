package storetest

import (
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// testQueueCounts checks that the counts behind QueueStats, which the writer
// keeps instead of scanning tasks, stay exactly what a scan says through every
// kind of state change, failed updates included.
func testQueueCounts(t *testing.T, b *Bundle) {
	other := engine.Actor{Tenant: "globex", Principal: "agent.g", Role: engine.RoleAgent}
	gtt := host.NewTaskType("work")
	gtt.Tenant = "globex"
	b.MustPutType(t, gtt)
	check := func(step string) {
		t.Helper()
		for _, tenant := range []string{"acme", "globex", ""} {
			want := store.QueueStats{ByState: map[host.TaskState]int64{}, ByType: map[string]int64{}}
			var got store.QueueStats
			err := b.Store.View(b.Ctx, func(r store.Reader) error {
				for _, tn := range []string{"acme", "globex"} {
					if tenant != "" && tn != tenant {
						continue
					}
					ts, _, err := r.ListTasks(b.Ctx, store.TaskFilter{Tenant: tn, Limit: 1000})
					if err != nil {
						return err
					}
					for _, tk := range ts {
						want.AddCount(tk.Type, tk.State, 1)
					}
				}
				var err error
				got, err = r.QueueStats(b.Ctx, tenant)
				return err
			})
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if !sameCounts(got.ByState, want.ByState) || !sameCounts(got.ByType, want.ByType) {
				t.Fatalf("%s, tenant %q: stats by state %v by type %v, a scan says %v and %v", step, tenant, got.ByState, got.ByType, want.ByState, want.ByType)
			}
		}
	}
	check("empty")
	for i := 0; i < 5; i++ {
		b.Enqueue(t, "work")
	}
	b.Enqueue(t, "other")
	b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.IdempotencyKey = "k1" })
	b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.IdempotencyKey = "k1" }) // a duplicate writes nothing
	if _, err := b.Engine.Enqueue(b.Ctx, other, engine.EnqueueRequest{TaskType: "work"}); err != nil {
		t.Fatal(err)
	}
	check("enqueue")
	o1, o2, o3, o4 := b.LeaseOne(t, "w.1"), b.LeaseOne(t, "w.1"), b.LeaseOne(t, "w.1"), b.LeaseOne(t, "w.1")
	check("lease")
	b.Complete(t, "w.1", o1)
	if _, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o1), Result: Pointer}); err != nil {
		t.Fatal(err) // a repeat is answered from the ledger and writes nothing
	}
	check("complete")
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o2), Error: "again", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o3), Error: "fatal", Retryable: false}); err != nil {
		t.Fatal(err)
	}
	check("fail")
	// Updates that lose their fence change no count, alone or in a batch.
	_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o2), Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	check("fenced")
	queued, _, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{States: []host.TaskState{host.StateQueued, host.StateScheduled}, Limit: 1})
	if err != nil || len(queued) != 1 {
		t.Fatalf("list queued: %v %v", queued, err)
	}
	if _, err := b.Engine.Cancel(b.Ctx, b.Admin, queued[0].ID, "no"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Cancel(b.Ctx, b.Admin, o4.Task.ID, "no"); err != nil {
		t.Fatal(err)
	}
	check("cancel")
	b.LeaseOne(t, "w.2")
	b.Clock.Advance(2 * time.Hour)
	if n, err := b.Engine.Sweep(b.Ctx); err != nil || n == 0 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	check("expiry")
	if _, err := b.Engine.Redrive(b.Ctx, b.Admin, o3.Task.ID); err != nil {
		t.Fatal(err)
	}
	check("redrive")
}

func sameCounts[K comparable](a, b map[K]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
