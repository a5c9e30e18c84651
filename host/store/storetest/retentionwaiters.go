package storetest

import (
	"encoding/base64"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// testRetentionOwedResult: retention leaves a succeeded task alone while a
// task that waits on it has not finished (waiting on another dependency,
// queued, or leased), whether its payload is in a managed channel or
// inline, and archives it on a later sweep once none does. Owed tasks do
// not hold a batch: with one batch of two a sweep, the two oldest owed
// tasks do not keep a younger one from going.
func testRetentionOwedResult(t *testing.T, b *Bundle) {
	short := host.NewTaskType("short")
	short.Tenant, short.DefaultRetentionDays = "acme", 1
	b.MustPutType(t, short)
	eng, ch := retentionEngine(t, b, engine.RetentionConfig{Batch: 2, MaxBatches: 1})
	var ids [4]string // waited on by a waiting task, by a queued one, inline by the queued one, none
	for i, p := range []string{`{"a":1}`, `{"a":2}`, "inline", `{"c":1}`} {
		ids[i] = b.finish(t, eng, "short", p)
		b.Clock.Advance(time.Second)
	}
	a1, a2, in, c := ids[0], ids[1], ids[2], ids[3]
	x, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	w1, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a1, x.TaskID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a2, in}}); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(24*time.Hour + time.Minute)

	held := func(when string, owed ...string) {
		t.Helper()
		for _, id := range owed {
			tk := b.task(t, eng, id)
			if tk.State != host.StateSucceeded || tk.Result.Pointer == "" || tk.Result.PurgedAt != nil {
				t.Fatalf("%s: retention took task %s's result from its waiter: %s %+v", when, id, tk.State, tk.Result)
			}
			if strings.HasPrefix(tk.Result.Pointer, "mem:") {
				if _, err := ch.Get(b.Ctx, tk.Result.Pointer); err != nil {
					t.Fatalf("%s: task %s's payload was released: %v", when, id, err)
				}
			}
		}
	}
	rep, err := eng.RetentionSweep(b.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	held("first sweep", a1, a2, in)
	if tk := b.task(t, eng, c); tk.State != host.StateArchived || rep.Archived != 1 {
		t.Fatalf("first sweep (one batch of two, the two oldest owed): %+v, the task none waits on is %s", rep, tk.State)
	}

	// The queued waiter is leased: its worker reads both results.
	o := b.leaseOn(t, eng, "other")
	if rep, err = eng.RetentionSweep(b.Ctx); err != nil || rep.Archived != 0 {
		t.Fatalf("sweep with a leased waiter: %+v %v", rep, err)
	}
	held("sweep with a leased waiter", a1, a2, in)
	if got := readDependency(t, b, eng, o, a2); got != `{"a":2}` {
		t.Fatalf("the waiter's worker read %q of %s", got, a2)
	}
	for _, d := range o.Dependencies {
		if d.TaskID == in && (d.Result == nil || d.Result.Pointer != "inline:"+base64.StdEncoding.EncodeToString([]byte("secret"))) {
			t.Fatalf("the waiter's offer has the inline %s as %+v", in, d.Result)
		}
	}
	if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
		t.Fatal(err)
	}
	if rep, err = eng.RetentionSweep(b.Ctx); err != nil || rep.Archived != 2 || rep.Purged != 2 {
		t.Fatalf("sweep once the queued waiter finished: %+v %v", rep, err)
	}
	held("sweep with a waiting waiter", a1)
	for _, id := range []string{a2, in} {
		if tk := b.task(t, eng, id); tk.State != host.StateArchived || tk.Result.Pointer != "" || tk.Result.PurgedAt == nil {
			t.Fatalf("task %s once none waits on it: %s %+v", id, tk.State, tk.Result)
		}
	}

	// The waiting one: its other dependency finishes, it is leased, reads,
	// finishes; then its dependency goes.
	ox := b.leaseOn(t, eng, "work")
	if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", ox), Result: Pointer}); err != nil {
		t.Fatal(err)
	}
	o = b.leaseOn(t, eng, "other")
	if o.Task.ID != w1.TaskID {
		t.Fatalf("leased %s, want the waiter %s", o.Task.ID, w1.TaskID)
	}
	if got := readDependency(t, b, eng, o, a1); got != `{"a":1}` {
		t.Fatalf("the waiter's worker read %q of %s", got, a1)
	}
	if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
		t.Fatal(err)
	}
	if rep, err = eng.RetentionSweep(b.Ctx); err != nil || rep.Archived != 1 || rep.Purged != 1 {
		t.Fatalf("sweep once every waiter finished: %+v %v", rep, err)
	}
	if tk := b.task(t, eng, a1); tk.State != host.StateArchived || tk.Result.Pointer != "" || ch.held() != 0 {
		t.Fatalf("task %s once none waits on it: %s %+v, %d payloads held", a1, tk.State, tk.Result, ch.held())
	}
	if _, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a1}}); !host.IsCode(err, host.CodeConflict) {
		t.Fatalf("enqueue after a result retention released: %v", err)
	}
}

// testRetentionRacesEnqueue: a retention sweep and an enqueue after the
// task it archives, at the same time, never leave a waiter whose
// dependency's payload is gone: an enqueue that the channel's ack finds
// committed holds the payload, and one that comes while the payload is
// being released is refused. Each round also enqueues from inside the ack
// itself, which must be refused.
func testRetentionRacesEnqueue(t *testing.T, b *Bundle) {
	short := host.NewTaskType("short")
	short.Tenant, short.DefaultRetentionDays = "acme", 1
	b.MustPutType(t, short)
	eng, ch := retentionEngine(t, b, engine.RetentionConfig{})
	var mu sync.Mutex
	var current string
	var inAck []error
	ch.onAck = func() {
		mu.Lock()
		a := current
		mu.Unlock()
		_, err := eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a}})
		mu.Lock()
		inAck = append(inAck, err)
		mu.Unlock()
	}
	var swept, waited int
	for i := range 20 {
		a := b.finish(t, eng, "short", `{"x":1}`)
		mu.Lock()
		current, inAck = a, nil
		mu.Unlock()
		b.Clock.Advance(24*time.Hour + time.Second)
		var wg sync.WaitGroup
		var rep engine.RetentionReport
		var sweepErr, enqErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			rep, sweepErr = eng.RetentionSweep(b.Ctx)
		}()
		go func() {
			defer wg.Done()
			_, enqErr = eng.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "other", After: []string{a}})
		}()
		wg.Wait()
		if sweepErr != nil {
			t.Fatalf("round %d: sweep: %v", i, sweepErr)
		}
		mu.Lock()
		acks := append([]error(nil), inAck...)
		mu.Unlock()
		for _, err := range acks {
			if !host.IsCode(err, host.CodeConflict) {
				t.Fatalf("round %d: an enqueue after %s while its payload was being released: %v, want conflict", i, a, err)
			}
		}
		tk := b.task(t, eng, a)
		switch {
		case enqErr == nil && (tk.Result.Pointer == "" || tk.Result.PurgedAt != nil || tk.State != host.StateSucceeded):
			t.Fatalf("round %d: a waiter was accepted and its dependency's result was released: %s %+v", i, tk.State, tk.Result)
		case enqErr != nil && !host.IsCode(enqErr, host.CodeConflict):
			t.Fatalf("round %d: enqueue racing the sweep: %v", i, enqErr)
		case enqErr != nil && (tk.State != host.StateArchived || tk.Result.PurgedAt == nil):
			t.Fatalf("round %d: the enqueue was refused but the result was not released: %s %+v (%v)", i, tk.State, tk.Result, enqErr)
		}
		if rep.Archived > 0 {
			swept++
		}
		if enqErr == nil { // the waiter reads its input, finishes; the next sweep archives the task
			waited++
			o := b.leaseOn(t, eng, "other")
			if got := readDependency(t, b, eng, o, a); got != `{"x":1}` {
				t.Fatalf("round %d: the waiter's worker read %q", i, got)
			}
			if _, err := eng.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer}); err != nil {
				t.Fatal(err)
			}
			if _, err := eng.RetentionSweep(b.Ctx); err != nil {
				t.Fatal(err)
			}
			if tk := b.task(t, eng, a); tk.State != host.StateArchived || tk.Result.PurgedAt == nil {
				t.Fatalf("round %d: once its waiter finished: %s %+v", i, tk.State, tk.Result)
			}
		}
	}
	t.Logf("of 20 rounds the sweep archived first in %d, the waiter went first in %d", swept, waited)
}

// readDependency reads dependency dep's payload through offer o's lease.
func readDependency(t *testing.T, b *Bundle, eng *engine.Engine, o host.Offer, dep string) string {
	t.Helper()
	rs, err := eng.OpenDependencyResult(b.Ctx, Call("w.1", o), dep)
	if err != nil {
		t.Fatalf("the worker of %s reading %s: %v", o.Task.ID, dep, err)
	}
	defer rs.Close()
	got, err := io.ReadAll(rs)
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}
