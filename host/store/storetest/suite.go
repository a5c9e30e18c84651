package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Run runs every conformance case against stores made by open.
func Run(t *testing.T, open Opener) { run(t, open, true) }

func run(t *testing.T, open Opener, hammer bool) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b *Bundle)
	}{
		{"EnqueueWritesAssignedObligation", testEnqueue},
		{"RememberedLeaseGoneElsewhere", testRememberedLeaseGoneElsewhere},
		{"EnqueueIdempotency", testIdempotency},
		{"EnqueueIdempotencyConflict", testIdempotencyConflict},
		{"EnqueueIdempotencyPerProducer", testIdempotencyPerProducer},
		{"EnqueueIdempotencyPerProducerConcurrent", testIdempotencyPerProducerConcurrent},
		{"InboxMarksOnlyTheActor", testInboxMarksOnlyTheActor},
		{"EnqueueRefusesBadInput", testEnqueueBadInput},
		{"EnqueueDelayedStart", testDelayed},
		{"LeaseOrderAndBatch", testLeaseOrder},
		{"LeaseTypeFilter", testLeaseTypes},
		{"AcceptWritesObligationOnce", testAccept},
		{"HeartbeatExtendsAndRecordsProgress", testHeartbeat},
		{"HeartbeatExtendsByTheLeaseTTL", testHeartbeatTTL},
		{"StrictExpiry", testStrictExpiry},
		{"CompleteLocatableAndTerminates", testComplete},
		{"CompleteIdempotentPerLease", testCompleteIdempotent},
		{"EndedTaskStatusToHolder", testEndedTaskStatusToHolder}, // endedstatus.go
		{"FailRetriesWithBackoffThenDeadLetters", testFailRetry},
		{"FailNonRetryableDeadLetters", testFailFatal},
		{"ReleaseUsesNoAttempt", testRelease},
		{"SnoozeUsesNoAttempt", testSnooze}, {"ScheduledState", testScheduledState}, {"PauseLeasing", testPauseLeasing}, // verbs.go
		{"CancelQueuedAndLeased", testCancel},
		{"SweepRequeuesWithoutAttempt", testSweep},
		{"SweepCapsExpiries", testSweepCap},
		{"FencingStopsLateWorker", testFencing},
		{"RedriveDeadLetter", testRedrive},
		{"ReceiptsChainAndTerminators", testChain},
		{"AppendReceiptInvariants", testAppendReceipt},
		{"TenantIsolation", testTenants},
		{"GroupCommitIsolatesFailures", testGroupCommit},
		{"KeysTypesWorkers", testKeys},
		{"ListTasksPaging", testListPaging},
		{"ListTasksFilters", testListTasksFilters},
		{"ForgedLeaseIDs", testForgedLeaseIDs}, {"OlderLeaseIDs", testOlderLeaseIDs}, // leaseids.go
		{"VersionFence", testVersionFence},
		{"DedupeNamespaces", testDedupeNamespaces},
		{"ReceiptAddressing", testReceiptAddressing}, {"ReceiptReadsBetweenPrincipals", testReceiptReadsBetweenPrincipals}, {"DedupePerPrincipal", testDedupePerPrincipal}, {"AppendedReceiptsEndNoObligation", testAppendedReceiptsEndNoObligation}, // ledgerprincipals.go
		{"HostileInput", testHostileInput},
		{"CompleteAfterConcurrentWrite", testCompleteAfterConcurrentWrite},
		{"Hammer", testHammer},
		{"QueueCountsStayExact", testQueueCounts},
		{"ObligationsWithinOneUpdate", testObligationsWithinOneUpdate},
		{"RowsWithinOneUpdate", testRowsWithinOneUpdate}, {"ClashWithCommittedRow", testClashWithCommittedRow}, {"OldestReady", testOldestReady}, {"OldestReadyPerType", testOldestReadyPerType}, {"OldestReadyManyTypes", testOldestReadyManyTypes}, // writebehind.go, oldestready.go
		{"EnqueueBudget", testEnqueueBudget},                         // enqueuebudget.go
		{"QueueCountsByTypeAndState", testQueueCountsByTypeAndState}, // typestate.go
		{"PausedStats", testPausedStats},                             // pausedstats.go
		{"UpdateWritesEachField", testUpdateWritesEachField},         // taskupdate.go
		{"UpdateWritesTheTaskGiven", testUpdateWritesTheTaskGiven},   // taskupdate.go
		{"InsertWritesEveryField", testInsertWritesEveryField},       // taskupdate.go
		{"ProbeReadsAndCommits", testProbe},                          // probe.go
		{"UpdatesFailingAloneAreNoRefusedCommit", testRefusedCommit}, // probe.go
		{"ResourceLeaseUpdateIsFenced", testResourceLeaseUpdateIsFenced},
		{"AttemptsHistory", testAttemptsHistory},                             // attempts.go
		{"CancelRecordsWhoAsked", testCancelRecordsWhoAsked},                 // cancelask.go
		{"EnqueueKeepsTraceContext", testTraceContext},                       // tracecontext.go
		{"CompleteRefusalStoresNothing", testCompleteRefusalStoresNothing},   // completepayload.go
		{"CompleteLeaseLostWhileStoring", testCompleteLeaseLostWhileStoring}, // completepayload.go
	}
	cases = append(cases, dependencyCases()...) // dependencies.go
	cases = append(cases, workflowCases()...)   // workflows.go
	cases = append(cases, scheduleCases()...)   // schedules.go
	t.Run("Delivery", func(t *testing.T) { t.Parallel(); runDelivery(t, open) })
	for _, c := range cases {
		if c.name == "Hammer" && !hammer {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := Setup(t, open)
			c.fn(t, b)
			b.VerifyAfter(t)
		})
	}
	runResourceLeases(t, open, hammer)
	runTaskResources(t, open) // taskresources.go
}

func testEnqueue(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	if res.IsDuplicate || res.Status != "queued" || res.ReceiptID == "" || res.TaskID == "" {
		t.Fatalf("ack = %+v", res)
	}
	if res.EstimatedRuntimeSeconds != host.DefaultEstimatedRuntime || res.PollSuggestionSeconds != host.DefaultPollSuggestionSeconds || !res.InboxOnComplete {
		t.Fatalf("guidance missing from ack: %+v", res)
	}
	tk := b.Task(t, res.TaskID)
	if tk.Priority != 5 || tk.MaxRetries != 3 || tk.State != host.StateQueued || tk.Recipient != "agent.kee" {
		t.Fatalf("defaults not applied: %+v", tk)
	}
	obs := b.Open(t, "agent.kee")
	if len(obs) != 1 || obs[0].ReceiptID != res.ReceiptID || obs[0].Type != host.ReceiptAssigned || obs[0].Obligee != "agent.kee" {
		t.Fatalf("open obligations = %+v", obs)
	}
	b.Verify(t)
}

func testIdempotency(t *testing.T, b *Bundle) {
	key := func(r *engine.EnqueueRequest) { r.IdempotencyKey = "k1" }
	a := b.Enqueue(t, "work", key)
	c := b.Enqueue(t, "work", key)
	if !c.IsDuplicate || c.TaskID != a.TaskID || c.ReceiptID != a.ReceiptID {
		t.Fatalf("second enqueue = %+v, first %+v", c, a)
	}
	// Another recipient may use the same key.
	d := b.Enqueue(t, "work", key, func(r *engine.EnqueueRequest) { r.Recipient = "agent.hexy" })
	if d.IsDuplicate || d.TaskID == a.TaskID {
		t.Fatalf("other recipient's key treated as duplicate: %+v", d)
	}
	if n := len(b.Receipts(t, a.TaskID)); n != 1 {
		t.Fatalf("duplicate wrote receipts: %d", n)
	}
	// Concurrent duplicates: exactly one task.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", IdempotencyKey: "race"})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = res.TaskID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent idempotent enqueues made different tasks: %v", ids)
		}
	}
}

func testIdempotencyConflict(t *testing.T, b *Bundle) {
	req := engine.EnqueueRequest{TaskType: "work", IdempotencyKey: "k2", Priority: 7, Summary: "s",
		Params: json.RawMessage(`{"n":1,"tags":{"b":2,"a":[1,"x"]}}`)}
	first, err := b.Engine.Enqueue(b.Ctx, b.Agent, req)
	if err != nil {
		t.Fatal(err)
	}
	// The same task, params spelled with other key order and whitespace: the first task.
	same := req
	same.Params = json.RawMessage(`{ "tags": {"a": [1, "x"], "b": 2}, "n": 1 }`)
	same.DelaySeconds = 5 // start times are not compared
	same.Summary = ""     // nor the description
	same.Priority = 0     // an omitted priority does not contradict the first
	dup, err := b.Engine.Enqueue(b.Ctx, b.Agent, same)
	if err != nil || !dup.IsDuplicate || dup.TaskID != first.TaskID {
		t.Fatalf("same request under the same key = %+v, %v; want the first task %s", dup, err, first.TaskID)
	}
	for name, mod := range map[string]func(r *engine.EnqueueRequest){
		"params":      func(r *engine.EnqueueRequest) { r.Params = json.RawMessage(`{"n":2,"tags":{"b":2,"a":[1,"x"]}}`) },
		"task_type":   func(r *engine.EnqueueRequest) { r.TaskType = "other" },
		"priority":    func(r *engine.EnqueueRequest) { r.Priority = 3 },
		"max_retries": func(r *engine.EnqueueRequest) { r.MaxRetries = new(int) },
	} {
		r := req
		mod(&r)
		_, err := b.Engine.Enqueue(b.Ctx, b.Agent, r)
		WantCode(t, err, host.CodeIdempotencyConflict)
		if !contains(err.Error(), name) || !contains(err.Error(), first.TaskID) {
			t.Fatalf("conflict on %s does not name the field and the task: %v", name, err)
		}
	}
	tasks, _, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 {
		t.Fatalf("conflicting enqueues wrote tasks: %d tasks", len(tasks))
	}
}

func testEnqueueBadInput(t *testing.T, b *Bundle) {
	_, err := b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "nope"})
	WantCode(t, err, host.CodeUnknownTaskType)
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{"n":-1}`)})
	WantCode(t, err, host.CodeInvalidParams)
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`[1]`)})
	WantCode(t, err, host.CodeInvalidParams)
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(`{"n":`)})
	WantCode(t, err, host.CodeInvalidParams)
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Priority: 11})
	WantCode(t, err, host.CodeBadRequest)
	off := host.NewTaskType("off")
	off.Tenant, off.Enabled = "acme", false
	b.MustPutType(t, off)
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "off"})
	WantCode(t, err, host.CodeTaskTypeDisabled)
	bad := host.NewTaskType("bad")
	bad.Tenant, bad.ParamsSchema = "acme", json.RawMessage(`{"type": 12}`)
	_, err = b.Engine.PutTaskType(b.Ctx, bad)
	WantCode(t, err, host.CodeBadRequest)
	// Nothing was written by any of it.
	ts, _, err := b.Engine.ListTasks(b.Ctx, b.Admin, store.TaskFilter{})
	if err != nil || len(ts) != 0 {
		t.Fatalf("bad input left tasks: %d, %v", len(ts), err)
	}
	if rep := b.Verify(t); rep.Receipts != 0 {
		t.Fatalf("bad input left %d receipts", rep.Receipts)
	}
}

func testDelayed(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.DelaySeconds = 60 })
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1"})
	if err != nil || len(offers) != 0 {
		t.Fatalf("delayed task leased early: %v %v", offers, err)
	}
	b.Clock.Advance(60 * time.Second)
	b.LeaseOne(t, "w.1")
}

func testLeaseOrder(t *testing.T, b *Bundle) {
	low := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.Priority = 1 })
	mid1 := b.Enqueue(t, "work")
	mid2 := b.Enqueue(t, "work")
	high := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { r.Priority = 10 })
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", MaxTasks: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	seen := map[string]bool{}
	for _, o := range offers {
		got = append(got, o.Task.ID)
		if seen[o.LeaseID] || o.RunID != o.LeaseID || o.Task.State != host.StateLeased {
			t.Fatalf("bad offer %+v", o)
		}
		seen[o.LeaseID] = true
		if want := Epoch.Add(60 * time.Second); !o.LeaseExpiresAt.Equal(want) || o.LeaseSeconds != 60 || !o.ServerTime.Equal(Epoch) {
			t.Fatalf("lease expires %v after %d s granted at %v, want %v (task type's lease_seconds)", o.LeaseExpiresAt, o.LeaseSeconds, o.ServerTime, want)
		}
	}
	if want := []string{high.TaskID, mid1.TaskID, mid2.TaskID}; !reflect.DeepEqual(got, want) {
		t.Fatalf("lease order %v, want %v", got, want)
	}
	last := b.LeaseOne(t, "w.2")
	if last.Task.ID != low.TaskID {
		t.Fatalf("last lease got %s, want %s", last.Task.ID, low.TaskID)
	}
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2"}, "a leased task was offered again")
	_, err = b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "nodot"})
	WantCode(t, err, host.CodeInvalidWorkerID)
}

func testLeaseTypes(t *testing.T, b *Bundle) {
	w := b.Enqueue(t, "work")
	o := b.Enqueue(t, "other", func(r *engine.EnqueueRequest) { r.Priority = 9 })
	got := b.LeaseOne(t, "w.1", "work")
	if got.Task.ID != w.TaskID {
		t.Fatalf("type filter ignored")
	}
	got = b.LeaseOne(t, "w.1", "work", "other")
	if got.Task.ID != o.TaskID {
		t.Fatalf("multi-type lease got %s", got.Task.ID)
	}
	// Lease length capped by the engine's maximum.
	b.Enqueue(t, "other")
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", LeaseSeconds: 999999})
	if err != nil || len(offers) != 1 {
		t.Fatal(err)
	}
	if d := offers[0].LeaseExpiresAt.Sub(Epoch); d != time.Hour {
		t.Fatalf("lease not capped: %v", d)
	}
}

func testAccept(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	if obs := b.Open(t, "w.1"); len(obs) != 0 {
		t.Fatalf("an offer created an obligation: %+v", obs)
	}
	_, rid, err := b.Engine.Accept(b.Ctx, Call("w.1", o))
	if err != nil {
		t.Fatal(err)
	}
	_, rid2, err := b.Engine.Accept(b.Ctx, Call("w.1", o))
	if err != nil || rid2 != rid {
		t.Fatalf("second accept: %s %v (first %s)", rid2, err, rid)
	}
	obs := b.Open(t, "w.1")
	if len(obs) != 1 || obs[0].Type != host.ReceiptAccepted || obs[0].Obligor != "w.1" || obs[0].Obligee != "agent.kee" {
		t.Fatalf("worker obligations = %+v", obs)
	}
	_, _, err = b.Engine.Accept(b.Ctx, Call("w.2", o))
	WantCode(t, err, host.CodeLeaseExpired)
	if got := b.ReceiptTypes(t, res.TaskID); !reflect.DeepEqual(got, []host.ReceiptType{host.ReceiptAssigned, host.ReceiptAccepted}) {
		t.Fatalf("receipts %v", got)
	}
}

func testHeartbeat(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	b.Clock.Advance(50 * time.Second)
	pct := 45.5
	hb, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o), ProgressPercent: &pct, ProgressMessage: "450/1000"})
	if err != nil {
		t.Fatal(err)
	}
	if want := Epoch.Add(110 * time.Second); !hb.LeaseExpiresAt.Equal(want) || hb.CancelRequested {
		t.Fatalf("heartbeat = %+v, want expiry %v", hb, want)
	}
	hb, err = b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o), ExtendSeconds: 100000})
	if err != nil {
		t.Fatal(err)
	}
	if want := b.Clock.Now().Add(time.Hour); !hb.LeaseExpiresAt.Equal(want) {
		t.Fatalf("extension not capped: %v want %v", hb.LeaseExpiresAt, want)
	}
	tk, ps, err := b.Engine.Progress(b.Ctx, b.Agent, res.TaskID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if tk.ProgressPercent == nil || *tk.ProgressPercent != 45.5 || tk.ProgressMessage != "450/1000" || len(ps) != 1 || ps[0].Message != "450/1000" {
		t.Fatalf("progress not recorded: %+v %+v", tk, ps)
	}
	bad := -1.0
	_, err = b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o), ProgressPercent: &bad})
	WantCode(t, err, host.CodeBadRequest)
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, res.TaskID, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	hb, err = b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o)})
	if err != nil || !hb.CancelRequested {
		t.Fatalf("cancel_requested not reported: %+v %v", hb, err)
	}
}

// testHeartbeatTTL: a heartbeat without extend_lease_seconds extends by the
// TTL the lease was granted with, not by the task type's lease length, also
// after a heartbeat that asked for an explicit extension (KLIS-3 §3.2).
func testHeartbeatTTL(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work") // the type's lease is 60 s
	offers, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1", MaxTasks: 1, LeaseSeconds: 600})
	if err != nil || len(offers) != 1 {
		t.Fatalf("Lease = %v, %v", offers, err)
	}
	o := offers[0]
	if o.LeaseSeconds != 600 || o.Task.LeaseSeconds != 600 {
		t.Fatalf("offer lease_seconds = %d, task %d; want 600", o.LeaseSeconds, o.Task.LeaseSeconds)
	}
	b.Clock.Advance(100 * time.Second)
	hb, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o)})
	if err != nil {
		t.Fatal(err)
	}
	if want := b.Clock.Now().Add(600 * time.Second); !hb.LeaseExpiresAt.Equal(want) {
		t.Fatalf("heartbeat without extension: expiry %v, want now + the lease's 600 s TTL = %v", hb.LeaseExpiresAt, want)
	}
	b.Clock.Advance(10 * time.Second)
	if hb, err = b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o), ExtendSeconds: 1200}); err != nil {
		t.Fatal(err)
	}
	if want := b.Clock.Now().Add(1200 * time.Second); !hb.LeaseExpiresAt.Equal(want) {
		t.Fatalf("explicit extension: expiry %v, want %v", hb.LeaseExpiresAt, want)
	}
	b.Clock.Advance(1000 * time.Second)
	if hb, err = b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o)}); err != nil {
		t.Fatal(err)
	}
	if want := b.Clock.Now().Add(600 * time.Second); !hb.LeaseExpiresAt.Equal(want) {
		t.Fatalf("heartbeat after an explicit extension: expiry %v, want now + 600 s = %v", hb.LeaseExpiresAt, want)
	}
	if tk := b.Task(t, o.Task.ID); tk.LeaseSeconds != 600 {
		t.Fatalf("stored lease_seconds = %d, want 600", tk.LeaseSeconds)
	}
	// A lease at the type's length keeps that length.
	b.Enqueue(t, "work")
	o2 := b.LeaseOne(t, "w.2")
	b.Clock.Advance(30 * time.Second)
	if hb, err = b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.2", o2)}); err != nil {
		t.Fatal(err)
	}
	if want := b.Clock.Now().Add(60 * time.Second); !hb.LeaseExpiresAt.Equal(want) {
		t.Fatalf("type-length lease: expiry %v, want %v", hb.LeaseExpiresAt, want)
	}
}

func testStrictExpiry(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work")
	b.Enqueue(t, "work")
	b.Enqueue(t, "work")
	o1 := b.LeaseOne(t, "w.1")
	o2 := b.LeaseOne(t, "w.1")
	o3 := b.LeaseOne(t, "w.1")
	// One microsecond before expiry: still honoured.
	b.Clock.Set(o1.LeaseExpiresAt.Add(-time.Microsecond))
	if _, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o1), ExtendSeconds: 1}); err != nil {
		t.Fatalf("heartbeat just before expiry refused: %v", err)
	}
	// At expiry: refused, for every call.
	b.Clock.Set(o2.LeaseExpiresAt)
	_, err := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", o2)})
	WantCode(t, err, host.CodeLeaseExpired)
	_, err = b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o2), Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	_, err = b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o3), Error: "x", Retryable: true})
	WantCode(t, err, host.CodeLeaseExpired)
	if tk := b.Task(t, o2.Task.ID); tk.State != host.StateLeased || tk.Attempts != 0 {
		t.Fatalf("refused call changed the task: %+v", tk)
	}
}

func testComplete(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	if _, _, err := b.Engine.Accept(b.Ctx, Call("w.1", o)); err != nil {
		t.Fatal(err)
	}
	_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{Summary: "done, trust me"}})
	WantCode(t, err, host.CodeNotLocatable)
	// An artifact without its type is that mistake, named, even when it
	// is all the success gives (not "not locatable": an artifact was given).
	_, err = b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{
		Artifacts: []host.Artifact{{URL: "s3://bucket/key"}}}})
	WantCode(t, err, host.CodeBadRequest)
	if !strings.Contains(host.ErrorDetail(err), "artifacts[0].type") {
		t.Fatalf("an untyped artifact: %v", err)
	}
	cr, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{
		Summary: "ok", Checksum: "sha256:00", Metadata: json.RawMessage(`{"tokens": 1500}`),
		Artifacts: []host.Artifact{{Type: "s3", URL: "s3://bucket/key"}}}})
	if err != nil {
		t.Fatal(err)
	}
	tk := b.Task(t, res.TaskID)
	if tk.State != host.StateSucceeded || tk.Result == nil || len(tk.Result.Artifacts) != 1 || tk.CompletedAt == nil || string(tk.Result.Metadata) != `{"tokens":1500}` {
		t.Fatalf("task after complete: %+v", tk)
	}
	if obs := b.Open(t, "agent.kee"); len(obs) != 0 {
		t.Fatalf("obligations left open after success: %+v", obs)
	}
	if obs := b.Open(t, "w.1"); len(obs) != 0 {
		t.Fatalf("worker obligations left open after success: %+v", obs)
	}
	chk, err := b.Engine.CheckTerminator(b.Ctx, b.Agent, res.ReceiptID)
	if err != nil || !chk.HasTerminator || chk.TerminatorID != cr.ReceiptID {
		t.Fatalf("check terminator = %+v %v", chk, err)
	}
	_, err = b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "late"})
	WantCode(t, err, host.CodeLeaseExpired)
	b.Verify(t)
}

func testCompleteIdempotent(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	a := b.Complete(t, "w.1", o)
	c := b.Complete(t, "w.1", o)
	if !c.Duplicate || c.ReceiptID != a.ReceiptID {
		t.Fatalf("repeat complete = %+v, first %+v", c, a)
	}
	if n := len(b.Receipts(t, o.Task.ID)); n != 2 {
		t.Fatalf("repeat complete wrote receipts: %d", n)
	}
	// The completion of a lease id that names its task carries no dedupe
	// key: the repeat above found it among the task's receipts, and so does
	// the store, by task, lease and type only.
	other := b.Enqueue(t, "work")
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		rc, err := r.GetReceipt(b.Ctx, "acme", a.ReceiptID)
		if err != nil || rc.DedupeKey != "" || rc.LeaseID != o.LeaseID {
			t.Errorf("completion receipt = %+v, %v; want lease %s and no dedupe key", rc, err, o.LeaseID)
		}
		if got, err := r.GetLeaseReceipt(b.Ctx, "acme", o.Task.ID, o.LeaseID, host.ReceiptCompleted); err != nil || got == nil || got.ID != a.ReceiptID {
			t.Errorf("GetLeaseReceipt = %+v, %v; want %s", got, err, a.ReceiptID)
		}
		for _, c := range []struct {
			tenant, task, lease string
			typ                 host.ReceiptType
		}{
			{"other", o.Task.ID, o.LeaseID, host.ReceiptCompleted},
			{"acme", other.TaskID, o.LeaseID, host.ReceiptCompleted},
			{"acme", o.Task.ID, host.NewLeaseID(o.Task.ID), host.ReceiptCompleted},
			{"acme", o.Task.ID, o.LeaseID, host.ReceiptFailed},
			{"acme", o.Task.ID, "", host.ReceiptCompleted},
			{"acme", "", o.LeaseID, host.ReceiptCompleted},
		} {
			if got, err := r.GetLeaseReceipt(b.Ctx, c.tenant, c.task, c.lease, c.typ); err != nil || got != nil {
				t.Errorf("GetLeaseReceipt(%q, %q, %q, %s) = %+v, %v; want none", c.tenant, c.task, c.lease, c.typ, got, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func testFailRetry(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work", func(r *engine.EnqueueRequest) { mr := 2; r.MaxRetries = &mr })
	for attempt := 1; attempt <= 3; attempt++ {
		o := b.LeaseOne(t, "w.1")
		if o.Attempt != attempt {
			t.Fatalf("offer attempt %d, want %d", o.Attempt, attempt)
		}
		if _, _, err := b.Engine.Accept(b.Ctx, Call("w.1", o)); err != nil {
			t.Fatal(err)
		}
		fr, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: fmt.Sprintf("boom %d", attempt), Retryable: true})
		if err != nil {
			t.Fatal(err)
		}
		tk := b.Task(t, res.TaskID)
		if tk.Attempts != attempt {
			t.Fatalf("attempts %d after failure %d", tk.Attempts, attempt)
		}
		if attempt < 3 {
			if !fr.WillRetry || fr.Status != "failed" || fr.RetryScheduledAt == nil || tk.State != host.StateScheduled {
				t.Fatalf("failure %d: %+v task %+v", attempt, fr, tk)
			}
			// Backoff: not leasable before the scheduled time (≥ 270 s with 10% jitter of 300 s).
			if fr.RetryScheduledAt.Before(b.Clock.Now().Add(269 * time.Second)) {
				t.Fatalf("retry too soon: %v", fr.RetryScheduledAt)
			}
			b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.1"}, "retried task leased before its backoff")
			b.Clock.Set(*fr.RetryScheduledAt)
			// Retrying discharges the worker's obligation and keeps the recipient's.
			if obs := b.Open(t, "agent.kee"); len(obs) != 1 || obs[0].Type != host.ReceiptAssigned {
				t.Fatalf("open obligations after retry: %+v", obs)
			}
		} else {
			if fr.WillRetry || fr.Status != "dead_letter" || tk.State != host.StateDeadLetter || tk.DeadReason != host.ReasonMaxRetriesExceeded {
				t.Fatalf("exhausted: %+v task %+v", fr, tk)
			}
		}
	}
	types := b.ReceiptTypes(t, res.TaskID)
	want := []host.ReceiptType{host.ReceiptAssigned,
		host.ReceiptAccepted, host.ReceiptRetryScheduled,
		host.ReceiptAccepted, host.ReceiptRetryScheduled,
		host.ReceiptAccepted, host.ReceiptFailed, host.ReceiptEscalated}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("receipts %v\nwant %v", types, want)
	}
	if obs := b.Open(t, "agent.kee"); len(obs) != 0 {
		t.Fatalf("dead letter left obligations open: %+v", obs)
	}
	dl, _, err := b.Engine.DeadLetters(b.Ctx, "acme", "", 10)
	if err != nil || len(dl) != 1 || dl[0].ID != res.TaskID {
		t.Fatalf("dead letters = %v %v", dl, err)
	}
	b.Verify(t)
}

func testFailFatal(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	fr, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "bad input file", Retryable: false})
	if err != nil {
		t.Fatal(err)
	}
	if fr.Status != "dead_letter" || fr.WillRetry {
		t.Fatalf("fatal failure = %+v", fr)
	}
	if tk := b.Task(t, res.TaskID); tk.DeadReason != host.ReasonFatalError || tk.Attempts != 1 {
		t.Fatalf("task %+v", tk)
	}
	again, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "bad input file"})
	if err != nil || !again.Duplicate || again.ReceiptID != fr.ReceiptID || again.Status != "dead_letter" {
		t.Fatalf("repeat fail = %+v %v", again, err)
	}
}

// testRelease: a worker gives its leased task back without using an
// attempt; a repeat is a no-op for the lease's own worker. A lease the
// caller cannot hold — another tenant's, another worker's (live or
// released), one named with another task, or one a later lease replaced —
// is 404, in an unknown lease's words.
func testRelease(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	if _, _, err := b.Engine.Accept(b.Ctx, Call("w.1", o)); err != nil {
		t.Fatal(err)
	}
	// Another tenant's worker releasing this live lease, and anyone
	// releasing a lease id that never existed: 404, the same words, and the
	// lease is untouched (issue 37).
	foreign := Call("w.1", o)
	foreign.Tenant = "other-tenant"
	_, errF := b.Engine.Release(b.Ctx, foreign, "not mine")
	WantCode(t, errF, host.CodeNotFound)
	unknown := Call("w.1", o)
	unknown.LeaseID = "lease-never"
	_, errU := b.Engine.Release(b.Ctx, unknown, "")
	WantCode(t, errU, host.CodeNotFound)
	if strings.ReplaceAll(errF.Error(), o.LeaseID, "X") != strings.ReplaceAll(errU.Error(), "lease-never", "X") {
		t.Fatalf("a foreign lease and an unknown one answer differently: %v / %v", errF, errU)
	}
	if tk := b.Task(t, o.Task.ID); tk.State != host.StateLeased || tk.LeaseID != o.LeaseID {
		t.Fatalf("another tenant's release changed the task: %+v", tk)
	}
	// Another worker of the tenant, naming the live lease with or without
	// its task, or the lease's own worker naming another task: the same
	// 404 and words, and the lease is untouched.
	other, wrongTask := Call("w.2", o), Call("w.1", o)
	wrongTask.TaskID = "task-other"
	withTask := Call("w.2", o)
	withTask.TaskID = o.Task.ID
	wantUnknown := func(what string, c engine.WorkerCall) {
		t.Helper()
		_, err := b.Engine.Release(b.Ctx, c, "not mine")
		WantCode(t, err, host.CodeNotFound)
		if got := strings.ReplaceAll(err.Error(), o.LeaseID, "X"); got != strings.ReplaceAll(errU.Error(), "lease-never", "X") {
			t.Fatalf("release of %s answers %v, an unknown lease %v", what, err, errU)
		}
	}
	wantUnknown("another worker's live lease", other)
	wantUnknown("another worker's live lease, with its task", withTask)
	wantUnknown("its own live lease, with another task", wrongTask)
	// Nor does a heartbeat tell another worker that the lease is live.
	_, errH := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: other})
	WantCode(t, errH, host.CodeLeaseExpired)
	_, errHU := b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: unknown})
	if strings.ReplaceAll(errH.Error(), o.LeaseID, "X") != strings.ReplaceAll(errHU.Error(), "lease-never", "X") {
		t.Fatalf("a heartbeat of another worker's live lease answers %v, of an unknown one %v", errH, errHU)
	}
	if tk := b.Task(t, o.Task.ID); tk.State != host.StateLeased || tk.LeaseID != o.LeaseID || tk.WorkerID != "w.1" {
		t.Fatalf("a refused release changed the task: %+v", tk)
	}
	tk, err := b.Engine.Release(b.Ctx, Call("w.1", o), "shutting down")
	if err != nil || tk.State != host.StateQueued || tk.Attempts != 0 {
		t.Fatalf("release: %+v %v", tk, err)
	}
	if _, err := b.Engine.Release(b.Ctx, Call("w.1", o), "again"); err != nil {
		t.Fatalf("second release must be a no-op: %v", err)
	}
	// Once released, still the lease's own worker's alone: another worker
	// of the tenant is told of it what an unknown lease tells, and an
	// admin tool's call (no worker) gets the no-op.
	wantUnknown("another worker's released lease", other)
	wantUnknown("another worker's released lease, with its task", withTask)
	admin := Call("", o)
	if _, err := b.Engine.Release(b.Ctx, admin, "again"); err != nil {
		t.Fatalf("an admin tool's release of a released lease must be a no-op: %v", err)
	}
	if obs := b.Open(t, "w.1"); len(obs) != 0 {
		t.Fatalf("release left the worker's obligation open")
	}
	o2 := b.LeaseOne(t, "w.2")
	if o2.Task.ID != res.TaskID || o2.Attempt != 1 || o2.LeaseID == o.LeaseID {
		t.Fatalf("re-lease after release: %+v", o2)
	}
	// The first lease, replaced by a later one of its task, is no longer
	// known: 404 (the documented cost of keeping only a task's last lease).
	_, err = b.Engine.Release(b.Ctx, Call("w.1", o), "late")
	WantCode(t, err, host.CodeNotFound)

	// A lease that expired, before and after the sweep: a no-op for its
	// worker, an unknown lease for another.
	b.Clock.Set(o2.LeaseExpiresAt)
	for _, swept := range []bool{false, true} {
		if swept {
			if n, err := b.Engine.Sweep(b.Ctx); err != nil || n != 1 {
				t.Fatalf("sweep = %d %v", n, err)
			}
		}
		_, err = b.Engine.Release(b.Ctx, Call("w.1", o2), "not mine")
		WantCode(t, err, host.CodeNotFound)
		if got := strings.ReplaceAll(err.Error(), o2.LeaseID, "X"); got != strings.ReplaceAll(errU.Error(), "lease-never", "X") {
			t.Fatalf("release of another worker's expired lease (swept %v) answers %v, an unknown lease %v", swept, err, errU)
		}
		if _, err := b.Engine.Release(b.Ctx, Call("w.2", o2), "expired"); err != nil {
			t.Fatalf("release of its own expired lease (swept %v) must be a no-op: %v", swept, err)
		}
	}
}

func testCancel(t *testing.T, b *Bundle) {
	q := b.Enqueue(t, "work")
	tk, err := b.Engine.Cancel(b.Ctx, b.Agent, q.TaskID, "no longer needed")
	if err != nil || tk.State != host.StateCanceled {
		t.Fatalf("cancel queued: %+v %v", tk, err)
	}
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, q.TaskID, ""); err != nil {
		t.Fatalf("second cancel: %v", err)
	}
	l := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	tk, err = b.Engine.Cancel(b.Ctx, b.Agent, l.TaskID, "")
	if err != nil || tk.State != host.StateLeased || !tk.CancelRequested {
		t.Fatalf("cancel leased: %+v %v", tk, err)
	}
	fr, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "stopped", Retryable: true})
	if err != nil || fr.Status != "canceled" {
		t.Fatalf("worker stop after cancel: %+v %v", fr, err)
	}
	if tk := b.Task(t, l.TaskID); tk.State != host.StateCanceled {
		t.Fatalf("task %s", tk.State)
	}
	if obs := b.Open(t, "agent.kee"); len(obs) != 0 {
		t.Fatalf("cancel left obligations: %+v", obs)
	}
	other := engine.Actor{Tenant: "acme", Principal: "agent.other", Role: engine.RoleAgent}
	s := b.Enqueue(t, "work")
	_, err = b.Engine.Cancel(b.Ctx, other, s.TaskID, "")
	WantCode(t, err, host.CodeNotFound)
	if tk, err := b.Engine.Cancel(b.Ctx, b.Agent, s.TaskID, ""); err != nil || tk.State != host.StateCanceled {
		t.Fatalf("cancel queued by its creator: %+v %v", tk, err)
	}
	done := b.Enqueue(t, "work")
	if o := b.LeaseOne(t, "w.1"); o.Task.ID != done.TaskID {
		t.Fatalf("leased %s, want %s", o.Task.ID, done.TaskID)
	} else {
		b.Complete(t, "w.1", o)
	}
	// Canceling a finished task is a conflict and changes nothing.
	_, err = b.Engine.Cancel(b.Ctx, b.Agent, done.TaskID, "")
	WantCode(t, err, host.CodeConflict)
	if tk := b.Task(t, done.TaskID); tk.State != host.StateSucceeded {
		t.Fatalf("cancel of a finished task left it %s", tk.State)
	}
}

func testSweep(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	if _, _, err := b.Engine.Accept(b.Ctx, Call("w.1", o)); err != nil {
		t.Fatal(err)
	}
	b.Clock.Set(o.LeaseExpiresAt.Add(-time.Microsecond))
	if n, err := b.Engine.Sweep(b.Ctx); err != nil || n != 0 {
		t.Fatalf("sweep before expiry handled %d (%v)", n, err)
	}
	b.Clock.Set(o.LeaseExpiresAt)
	if n, err := b.Engine.Sweep(b.Ctx); err != nil || n != 1 {
		t.Fatalf("sweep at expiry handled %d (%v)", n, err)
	}
	tk := b.Task(t, res.TaskID)
	if tk.State != host.StateScheduled || tk.Attempts != 0 || tk.LeaseExpiries != 1 || !tk.AvailableAt.Equal(o.LeaseExpiresAt.Add(30*time.Second)) {
		t.Fatalf("after expiry: %+v", tk)
	}
	rs := b.Receipts(t, res.TaskID)
	last := rs[len(rs)-1]
	var body map[string]any
	_ = json.Unmarshal(last.Body, &body)
	if last.Type != host.ReceiptEscalated || body["escalation_reason"] != host.ReasonLeaseExpired {
		t.Fatalf("no lease_expired escalation: %s %s", last.Type, last.Body)
	}
	if obs := b.Open(t, "w.1"); len(obs) != 0 {
		t.Fatalf("expiry left the worker's obligation open")
	}
	b.NoOffers(t, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.2"}, "leased before the requeue delay")
	b.Clock.Advance(30 * time.Second)
	o2 := b.LeaseOne(t, "w.2")
	if o2.Attempt != 1 {
		t.Fatalf("expiry used an attempt: %d", o2.Attempt)
	}
	// The late worker is refused.
	_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	b.Verify(t)
}

func testSweepCap(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work") // max_lease_expiries 3
	for i := 0; i < 3; i++ {
		o := b.LeaseOne(t, "w.1")
		b.Clock.Set(o.LeaseExpiresAt)
		if _, err := b.Engine.Sweep(b.Ctx); err != nil {
			t.Fatal(err)
		}
		b.Clock.Advance(31 * time.Second)
	}
	tk := b.Task(t, res.TaskID)
	if tk.State != host.StateDeadLetter || tk.DeadReason != host.ReasonMaxLeaseExpiries || tk.Attempts != 0 {
		t.Fatalf("task that keeps expiring: %+v", tk)
	}
	if obs := b.Open(t, "agent.kee"); len(obs) != 0 {
		t.Fatalf("dead letter left obligations: %+v", obs)
	}
}

func testFencing(t *testing.T, b *Bundle) {
	b.Enqueue(t, "work")
	old := b.LeaseOne(t, "w.1")
	b.Clock.Set(old.LeaseExpiresAt)
	if _, err := b.Engine.Sweep(b.Ctx); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(30 * time.Second)
	cur := b.LeaseOne(t, "w.2")
	// The old worker's calls must never touch the new attempt.
	_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", old), Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	_, err = b.Engine.Heartbeat(b.Ctx, engine.HeartbeatRequest{WorkerCall: Call("w.1", old)})
	WantCode(t, err, host.CodeLeaseExpired)
	// A worker using another's lease id is refused too.
	_, err = b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", cur), Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	// A fenced update at the store level writes nothing.
	tk := b.Task(t, cur.Task.ID)
	err = b.Store.Update(b.Ctx, func(tx store.Tx) error {
		tk.State = host.StateSucceeded
		return tx.UpdateTask(b.Ctx, tk, store.Fence{State: host.StateLeased, LeaseID: old.LeaseID})
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale fence: %v", err)
	}
	b.Complete(t, "w.2", cur)
}

func testRedrive(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	if _, err := b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "fatal"}); err != nil {
		t.Fatal(err)
	}
	_, err := b.Engine.Redrive(b.Ctx, b.Admin, "T-nope")
	WantCode(t, err, host.CodeNotFound)
	tk, err := b.Engine.Redrive(b.Ctx, b.Admin, res.TaskID)
	if err != nil || tk.State != host.StateQueued || tk.Attempts != 0 || tk.AssignReceipt == res.ReceiptID {
		t.Fatalf("redrive: %+v %v", tk, err)
	}
	if obs := b.Open(t, "agent.kee"); len(obs) != 1 || obs[0].ReceiptID != tk.AssignReceipt {
		t.Fatalf("redrive must open a new assignment: %+v", obs)
	}
	_, err = b.Engine.Redrive(b.Ctx, b.Admin, res.TaskID)
	WantCode(t, err, host.CodeConflict)
	b.Complete(t, "w.1", b.LeaseOne(t, "w.1"))
	b.Verify(t)
}

func testChain(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	_, acc, err := b.Engine.Accept(b.Ctx, Call("w.1", o))
	if err != nil {
		t.Fatal(err)
	}
	cr := b.Complete(t, "w.1", o)
	chain, err := b.Engine.Chain(b.Ctx, b.Agent, cr.ReceiptID)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, l := range chain {
		ids[l.ID] = l.Depth
	}
	if len(chain) != 3 || ids[cr.ReceiptID] != 0 || ids[res.ReceiptID] != 1 || ids[acc] != 1 {
		t.Fatalf("chain = %+v", ids)
	}
	for _, l := range chain {
		if l.ID == acc && l.TerminatedBy != cr.ReceiptID {
			t.Fatalf("accepted receipt's terminator %q", l.TerminatedBy)
		}
	}
	rc, term, err := b.Engine.GetReceipt(b.Ctx, b.Agent, res.ReceiptID)
	if err != nil || term != cr.ReceiptID || rc.Type != host.ReceiptAssigned || rc.Hash == "" {
		t.Fatalf("get receipt: %+v %q %v", rc, term, err)
	}
	stranger := engine.Actor{Tenant: "acme", Principal: "agent.stranger", Role: engine.RoleAgent}
	_, _, err = b.Engine.GetReceipt(b.Ctx, stranger, res.ReceiptID)
	WantCode(t, err, host.CodeNotFound)
}

func testAppendReceipt(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	big := make([]byte, host.MaxReceiptBody+10)
	for i := range big {
		big[i] = ' '
	}
	copy(big, `{"x":1}`)
	_, _, err := b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptProgress, Body: big})
	WantCode(t, err, host.CodeTooLarge)
	if host.ErrorDetail(err) == "" || !contains(host.ErrorDetail(err), host.ContractsNotChat) {
		t.Fatalf("size error detail %q lacks the seed's message", host.ErrorDetail(err))
	}
	many := make([]string, 11)
	for i := range many {
		many[i] = fmt.Sprintf("R-%d", i)
	}
	_, _, err = b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptProgress, Parents: many})
	WantCode(t, err, host.CodeTooLarge)
	_, _, err = b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptEscalated, Body: []byte(`{}`)})
	WantCode(t, err, host.CodeInvalidReceipt) // terminal types need parents
	_, _, err = b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptCompleted, Parents: []string{res.ReceiptID}})
	WantCode(t, err, host.CodeForbidden)
	_, _, err = b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptProgress, Parents: []string{"R-missing"}})
	WantCode(t, err, host.CodeInvalidReceipt)
	r1, dup, err := b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptProgress, TaskID: res.TaskID,
		Parents: []string{res.ReceiptID}, Body: []byte(`{"note": "half way"}`), DedupeKey: "d1"})
	if err != nil || dup || r1.From != "agent.kee" || string(r1.Body) != `{"note":"half way"}` {
		t.Fatalf("append: %+v %v %v", r1, dup, err)
	}
	r2, dup, err := b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptProgress, DedupeKey: "d1"})
	if err != nil || !dup || r2.ID != r1.ID {
		t.Fatalf("dedupe: %+v %v %v", r2, dup, err)
	}
	if obs := b.Open(t, "agent.kee"); len(obs) != 1 {
		t.Fatalf("progress receipt terminated an obligation: %+v", obs)
	}
	b.Verify(t)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func testTenants(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	other := engine.Actor{Tenant: "globex", Principal: "agent.kee", Role: engine.RoleAdmin}
	_, err := b.Engine.GetTask(b.Ctx, other, res.TaskID)
	WantCode(t, err, host.CodeNotFound)
	_, err = b.Engine.Enqueue(b.Ctx, other, engine.EnqueueRequest{TaskType: "work"})
	WantCode(t, err, host.CodeUnknownTaskType)
	b.NoOffers(t, engine.LeaseRequest{Tenant: "globex", WorkerID: "w.1"}, "another tenant's worker got our task")
	o := b.LeaseOne(t, "w.1")
	_, err = b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: "globex", WorkerID: "w.1", LeaseID: o.LeaseID}, Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	_, _, err = b.Engine.GetReceipt(b.Ctx, other, res.ReceiptID)
	WantCode(t, err, host.CodeNotFound)
}

func testGroupCommit(t *testing.T, b *Bundle) {
	// Many concurrent updates, every third one failing: the failures undo only
	// themselves and the rest commit.
	var wg sync.WaitGroup
	errs := make([]error, 60)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Store.Update(b.Ctx, func(tx store.Tx) error {
				tt := host.NewTaskType(fmt.Sprintf("gc-%d", i))
				tt.Tenant = "acme"
				if err := tx.PutTaskType(b.Ctx, &tt); err != nil {
					return err
				}
				if i%3 == 0 {
					return host.Errorf(host.CodeConflict, "planned failure %d", i)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		_, gerr := b.Engine.GetTaskType(b.Ctx, "acme", fmt.Sprintf("gc-%d", i))
		if i%3 == 0 {
			WantCode(t, err, host.CodeConflict)
			WantCode(t, gerr, host.CodeNotFound)
		} else if err != nil || gerr != nil {
			t.Fatalf("update %d: %v / %v", i, err, gerr)
		}
	}
	// A panic inside an update is an error, not a crash, and writes nothing.
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		tt := host.NewTaskType("panicky")
		tt.Tenant = "acme"
		_ = tx.PutTaskType(b.Ctx, &tt)
		panic("boom")
	})
	WantCode(t, err, host.CodeInternal)
	_, err = b.Engine.GetTaskType(b.Ctx, "acme", "panicky")
	WantCode(t, err, host.CodeNotFound)
	// A rolled-back receipt leaves no gap in the chain.
	res := b.Enqueue(t, "work")
	before := b.Verify(t).Receipts
	rolledBack := host.NewID(host.PrefixReceipt)
	errRollBack := errors.New("roll it back")
	err = b.Store.Update(b.Ctx, func(tx store.Tx) error {
		r := &host.Receipt{ID: rolledBack, Tenant: "acme", Type: host.ReceiptProgress, From: "x", To: "y", Parents: []string{}, Body: []byte(`{}`), CreatedAt: b.Clock.Now()}
		if err := tx.AppendReceipt(b.Ctx, r); err != nil {
			return err
		}
		return errRollBack
	})
	if !errors.Is(err, errRollBack) {
		t.Fatalf("rolled-back update returned %v, want its own error", err)
	}
	_, _, err = b.Engine.GetReceipt(b.Ctx, b.Admin, rolledBack)
	WantCode(t, err, host.CodeNotFound)
	if after := b.Verify(t).Receipts; after != before {
		t.Fatalf("ledger holds %d receipts after a rolled-back append, want %d", after, before)
	}
	o := b.LeaseOne(t, "w.1")
	if o.Task.ID != res.TaskID {
		t.Fatalf("leased %s, want %s", o.Task.ID, res.TaskID)
	}
	b.Complete(t, "w.1", o)
	b.Verify(t)
}

func testKeys(t *testing.T, b *Bundle) {
	now := b.Clock.Now()
	k := store.Key{ID: "K-1", Hash: "h1", Prefix: "agw_abc", Role: "agent", Tenant: "acme", Principal: "agent.kee", CreatedAt: now}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.PutKey(b.Ctx, k) }); err != nil {
		t.Fatal(err)
	}
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.PutKey(b.Ctx, k) })
	WantCode(t, err, host.CodeConflict)
	var got *store.Key
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		got, err = r.GetKeyByHash(b.Ctx, "h1")
		return err
	}); err != nil || got.Principal != "agent.kee" || got.RevokedAt != nil || !got.CreatedAt.Equal(now) {
		t.Fatalf("get key: %+v %v", got, err)
	}
	if err := b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.RevokeKey(b.Ctx, "K-1", now) }); err != nil {
		t.Fatal(err)
	}
	err = b.Store.Update(b.Ctx, func(tx store.Tx) error { return tx.RevokeKey(b.Ctx, "K-none", now) })
	WantCode(t, err, host.CodeNotFound)
	var keys []store.Key
	_ = b.Store.View(b.Ctx, func(r store.Reader) error { var err error; keys, err = r.ListKeys(b.Ctx); return err })
	if len(keys) != 1 || keys[0].RevokedAt == nil {
		t.Fatalf("keys %+v", keys)
	}
	types, err := b.Engine.ListTaskTypes(b.Ctx, "acme")
	if err != nil || len(types) != 2 || types[0].Name != "other" || types[1].LeaseSeconds != 60 {
		t.Fatalf("task types %+v %v", types, err)
	}
	if _, err := b.Engine.Lease(b.Ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: "w.cap", Capabilities: []string{"python"}}); err != nil {
		t.Fatal(err)
	}
	b.Enqueue(t, "work")
	b.LeaseOne(t, "w.cap")
	ws, err := b.Engine.Workers(b.Ctx, "acme")
	if err != nil || len(ws) != 1 || ws[0].ID != "w.cap" || len(ws[0].InFlight) != 1 || string(ws[0].Capabilities) != `["python"]` {
		t.Fatalf("workers %+v %v", ws, err)
	}
	qs, err := b.Engine.Stats(b.Ctx, "acme")
	if err != nil || qs.ByState[host.StateLeased] != 1 || qs.ByType["work"] != 1 {
		t.Fatalf("stats %+v %v", qs, err)
	}
}

func testListPaging(t *testing.T, b *Bundle) {
	var ids []string
	for i := 0; i < 7; i++ {
		ids = append(ids, b.Enqueue(t, "work").TaskID)
	}
	var got []string
	cur := ""
	for {
		ts, next, err := b.Engine.ListTasks(b.Ctx, b.Agent, store.TaskFilter{Cursor: cur, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			got = append(got, tk.ID)
		}
		if next == "" {
			break
		}
		cur = next
	}
	if !reflect.DeepEqual(got, ids) {
		t.Fatalf("paging got %v want %v", got, ids)
	}
	_, _, err := b.Engine.ListTasks(b.Ctx, b.Agent, store.TaskFilter{Cursor: "zz"})
	WantCode(t, err, host.CodeBadRequest)
	ts, _, err := b.Engine.ListTasks(b.Ctx, engine.Actor{Tenant: "acme", Principal: "agent.x", Role: engine.RoleAgent}, store.TaskFilter{})
	if err != nil || len(ts) != 0 {
		t.Fatalf("another agent listed our tasks: %d %v", len(ts), err)
	}
}

func testVersionFence(t *testing.T, b *Bundle) {
	res := b.Enqueue(t, "work")
	var read *host.Task
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		read, err = r.GetTask(b.Ctx, "acme", res.TaskID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if read.Version != 1 {
		t.Fatalf("a new task has version %d, want 1", read.Version)
	}
	// Another write moves the version on; an update fenced on the old one is refused.
	if _, err := b.Engine.Cancel(b.Ctx, b.Agent, res.TaskID, ""); err != nil {
		t.Fatal(err)
	}
	stale := *read
	stale.Priority = 9
	err := b.Store.Update(b.Ctx, func(tx store.Tx) error {
		return tx.UpdateTask(b.Ctx, &stale, store.Fence{State: host.StateCanceled, Version: read.Version})
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("update fenced on a stale version: %v", err)
	}
	cur := b.Task(t, res.TaskID)
	if cur.Priority == 9 || cur.Version != 2 {
		t.Fatalf("after a refused update: priority %d version %d", cur.Priority, cur.Version)
	}
	err = b.Store.Update(b.Ctx, func(tx store.Tx) error {
		cur.Priority = 9
		return tx.UpdateTask(b.Ctx, cur, store.Fence{State: host.StateCanceled, Version: 2})
	})
	if err != nil || cur.Version != 3 || b.Task(t, res.TaskID).Priority != 9 {
		t.Fatalf("update fenced on the current version: %v, version %d", err, cur.Version)
	}
}

func testCompleteAfterConcurrentWrite(t *testing.T, b *Bundle) {
	// A heartbeat and an accept race a completion: whichever order the writer
	// runs them in, the completion answers the accepted obligation when it
	// exists and no write is lost.
	for i := 0; i < 20; i++ {
		res := b.Enqueue(t, "work")
		o := b.LeaseOne(t, "w.1")
		var wg sync.WaitGroup
		var accErr, cErr error
		wg.Add(2)
		go func() { defer wg.Done(); _, _, accErr = b.Engine.Accept(b.Ctx, Call("w.1", o)) }()
		go func() {
			defer wg.Done()
			_, cErr = b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer})
		}()
		wg.Wait()
		if cErr != nil {
			t.Fatalf("complete: %v", cErr)
		}
		if accErr != nil && !host.IsCode(accErr, host.CodeLeaseExpired) {
			t.Fatalf("accept: %v", accErr)
		}
		if obs := b.Open(t, "w.1"); len(obs) != 0 {
			t.Fatalf("run %d: accepted obligation left open after completion: %+v", i, obs)
		}
		if obs := b.Open(t, "agent.kee"); len(obs) != 0 {
			t.Fatalf("run %d: assignment left open: %+v", i, obs)
		}
		_ = res
	}
	b.Verify(t)
}

func testDedupeNamespaces(t *testing.T, b *Bundle) {
	// A principal's dedupe key that looks like the engine's own cannot block
	// or fake a worker's outcome.
	res := b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	for _, key := range []string{"complete:" + o.LeaseID, "fail:" + o.LeaseID} {
		if _, _, err := b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptProgress, TaskID: res.TaskID, DedupeKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	// After expiry a complete is refused, not answered with the agent's receipt.
	b.Clock.Set(o.LeaseExpiresAt)
	_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	_, err = b.Engine.Fail(b.Ctx, engine.FailRequest{WorkerCall: Call("w.1", o), Error: "x"})
	WantCode(t, err, host.CodeLeaseExpired)
	if _, err := b.Engine.Sweep(b.Ctx); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(31 * time.Second)
	o2 := b.LeaseOne(t, "w.1")
	for _, key := range []string{"complete:" + o2.LeaseID, "fail:" + o2.LeaseID} {
		if _, _, err := b.Engine.AppendReceipt(b.Ctx, b.Agent, engine.AppendRequest{Type: host.ReceiptProgress, TaskID: res.TaskID, DedupeKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	cr := b.Complete(t, "w.1", o2)
	if cr.Duplicate || b.Task(t, res.TaskID).State != host.StateSucceeded {
		t.Fatalf("completion blocked or faked by an agent's dedupe key: %+v", cr)
	}
	// A repeated complete by another worker is not answered with this one's outcome.
	_, err = b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.2", o2), Result: Pointer})
	WantCode(t, err, host.CodeLeaseExpired)
	// Workers may append receipts only to tasks they hold.
	other := b.Enqueue(t, "other")
	_, _, err = b.Engine.AppendReceipt(b.Ctx, engine.Actor{Tenant: "acme", Principal: "w.9", Role: engine.RoleWorker},
		engine.AppendRequest{Type: host.ReceiptProgress, TaskID: other.TaskID})
	WantCode(t, err, host.CodeNotFound)
	huge := host.NewTaskType("huge")
	huge.Tenant, huge.RequeueDelaySeconds = "acme", 10_000_000_000
	_, err = b.Engine.PutTaskType(b.Ctx, huge)
	WantCode(t, err, host.CodeBadRequest)
}

func testHostileInput(t *testing.T, b *Bundle) {
	// Successes that only look locatable are refused.
	b.Enqueue(t, "work")
	o := b.LeaseOne(t, "w.1")
	// (An artifact without its type is that mistake, 400 naming it:
	// testComplete.)
	for _, res := range []host.Result{
		{Artifacts: []host.Artifact{{Type: "s3"}}},
		{DeliveryProof: json.RawMessage(`{}`)},
		{DeliveryProof: json.RawMessage(`"x"`)},
		{Pointer: "   "},
	} {
		_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: res})
		WantCode(t, err, host.CodeNotLocatable)
	}
	for _, res := range []host.Result{
		{Artifacts: []host.Artifact{{}}},
		{Artifacts: []host.Artifact{{Type: " ", URL: "s3://b/k"}}},
	} {
		_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: res})
		WantCode(t, err, host.CodeBadRequest)
	}
	_, err := b.Engine.Complete(b.Ctx, engine.CompleteRequest{WorkerCall: Call("w.1", o), Result: host.Result{Pointer: "x:y", Checksum: "garbage"}})
	WantCode(t, err, host.CodeBadRequest)
	// Another worker cannot release a live lease: it is told there is no
	// such lease.
	_, err = b.Engine.Release(b.Ctx, Call("w.2", o), "")
	WantCode(t, err, host.CodeNotFound)
	if tk := b.Task(t, o.Task.ID); tk.State != host.StateLeased || tk.WorkerID != "w.1" {
		t.Fatalf("a foreign release changed the task: %+v", tk)
	}
	// Deeply nested params are refused before the schema validator sees them.
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage(deep)})
	WantCode(t, err, host.CodeInvalidParams)
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Params: json.RawMessage("{\"p\":\"a\xff\xfe\"}")})
	WantCode(t, err, host.CodeInvalidParams)
	_, err = b.Engine.Enqueue(b.Ctx, b.Agent, engine.EnqueueRequest{TaskType: "work", Recipient: "x\x00y"})
	WantCode(t, err, host.CodeBadRequest)
	rec := host.NewTaskType("rec")
	rec.Tenant = "acme"
	rec.ParamsSchema = json.RawMessage(strings.Repeat(`{"not":`, 100) + "{}" + strings.Repeat("}", 100))
	_, err = b.Engine.PutTaskType(b.Ctx, rec)
	WantCode(t, err, host.CodeBadRequest)
	rec.ParamsSchema = nil
	rec.Policy = &host.PluginRef{}
	_, err = b.Engine.PutTaskType(b.Ctx, rec)
	WantCode(t, err, host.CodeBadRequest)
}
