package engine

import (
	"context"
	"testing"
)

// A task's current progress is its running lease's: a lease that ends
// without success (here a release, then a retryable failure) clears it, so a later lease's worker is never shown
// as the writer of an earlier worker's words; the progress list keeps
// every report.
func TestProgressIsTheRunningLeases(t *testing.T) {
	ctx := context.Background()
	eng := workEngine(t, Config{})
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	res, err := eng.Enqueue(ctx, agent, EnqueueRequest{TaskType: "work"})
	if err != nil {
		t.Fatal(err)
	}
	half := 50.0
	for i, end := range []func(c WorkerCall) error{
		func(c WorkerCall) error { _, err := eng.Release(ctx, c, "shutting down"); return err },
		func(c WorkerCall) error {
			_, err := eng.Fail(ctx, FailRequest{WorkerCall: c, Error: "try again", Retryable: true})
			return err
		},
	} {
		offers, err := eng.Lease(ctx, LeaseRequest{Tenant: "acme", WorkerID: "w.1", Types: []string{"work"}})
		if err != nil || len(offers) != 1 {
			t.Fatal(offers, err)
		}
		c := WorkerCall{Tenant: "acme", WorkerID: "w.1", LeaseID: offers[0].LeaseID}
		if _, err := eng.Heartbeat(ctx, HeartbeatRequest{WorkerCall: c, ProgressPercent: &half, ProgressMessage: "approve deleting prod?"}); err != nil {
			t.Fatal(err)
		}
		if tk, _ := eng.GetTask(ctx, agent, res.TaskID); tk.ProgressMessage != "approve deleting prod?" || tk.ProgressPercent == nil {
			t.Fatalf("%d: progress while leased: %q %v", i, tk.ProgressMessage, tk.ProgressPercent)
		}
		if err := end(c); err != nil {
			t.Fatal(err)
		}
		tk, list, err := eng.Progress(ctx, agent, res.TaskID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if tk.ProgressMessage != "" || tk.ProgressPercent != nil {
			t.Errorf("%d: after the lease ended the task still shows its progress: %q %v", i, tk.ProgressMessage, tk.ProgressPercent)
		}
		if len(list) != i+1 || list[0].Message != "approve deleting prod?" || list[0].LeaseID != c.LeaseID {
			t.Errorf("%d: the progress list: %+v", i, list)
		}
	}
}
