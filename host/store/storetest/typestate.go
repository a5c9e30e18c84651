package storetest

import (
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// testQueueCountsByTypeAndState checks QueueStats.ByTypeState (the
// dashboard's table of every type in every state) against a scan, finished
// states included.
func testQueueCountsByTypeAndState(t *testing.T, b *Bundle) {
	for i := 0; i < 3; i++ {
		b.Enqueue(t, "work")
	}
	b.Enqueue(t, "other")
	o1, o2 := b.LeaseOne(t, "w.1"), b.LeaseOne(t, "w.1")
	b.Complete(t, "w.1", o1)
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o2), Error: "fatal", Retryable: false}); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[host.TaskState]int64{}
	var got store.QueueStats
	err := b.Store.View(b.Ctx, func(r store.Reader) error {
		ts, _, err := r.ListTasks(b.Ctx, store.TaskFilter{Tenant: "acme", Limit: 1000})
		if err != nil {
			return err
		}
		for _, tk := range ts {
			if want[tk.Type] == nil {
				want[tk.Type] = map[host.TaskState]int64{}
			}
			want[tk.Type][tk.State]++
		}
		got, err = r.QueueStats(b.Ctx, "acme")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ByTypeState) != len(want) {
		t.Fatalf("by type and state %v, a scan says %v", got.ByTypeState, want)
	}
	finished := int64(0)
	for typ, states := range want {
		if !sameCounts(got.ByTypeState[typ], states) {
			t.Fatalf("type %s: %v, a scan says %v", typ, got.ByTypeState[typ], states)
		}
		finished += states[host.StateSucceeded] + states[host.StateDeadLetter]
	}
	if finished != 2 {
		t.Fatalf("the scan found %d finished tasks, want 2 (one succeeded, one dead): %v", finished, want)
	}
}
