package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// TestAttemptsTimelineAgainstTheGate reads, with the typed methods, how a
// task went, on each store: a task failed with a retryable error by one
// worker and, once its retry was due, completed by another has two attempts
// in order (the failure with its error and when it was offered again, then
// the success, each with its worker, lease and duration), and a timeline
// numbered from 1 in time order with its assign receipt, both lease grants,
// the retry's receipt and the completion, and nothing else. An unknown task, and the task
// read by another agent, are ErrNotFound.
func TestAttemptsTimelineAgainstTheGate(t *testing.T) {
	for _, driver := range stores {
		t.Run(driver, func(t *testing.T) {
			testAttemptsTimeline(t, startGateOn(t, driver))
		})
	}
}

func testAttemptsTimeline(t *testing.T, g *gate) {
	ctx := context.Background()
	admin := client.New(g.URL, g.Admin)
	// A retry 200 ms after a failure, so the test can lease it again.
	if _, err := admin.Do(ctx, "PUT", "/v1/admin/task-types/tl.work", map[string]any{"default_max_retries": 3,
		"policy": map[string]any{"name": "backoff", "config": map[string]any{"base_seconds": 0.2, "max_seconds": 0.2, "jitter": 0}}}, nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(g.URL, g.key(t, "agent", "producer.tl"))
	other := client.New(g.URL, g.key(t, "agent", "producer.other"))
	w1 := client.New(g.URL, g.key(t, "worker", "tl.w1"))
	w2 := client.New(g.URL, g.key(t, "worker", "tl.w2"))

	ack, err := c.Enqueue(ctx, "tl.work", map[string]int{"n": 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	type offer struct {
		LeaseID string `json:"lease_id"`
		Task    struct {
			TaskID string `json:"task_id"`
		} `json:"task"`
	}
	// lease leases the task for workerID, trying for up to 30 s (the retry
	// is offered once its backoff has passed).
	lease := func(w *client.Client, workerID string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var out struct {
				Leases []offer `json:"leases"`
			}
			if _, err := w.Do(ctx, "POST", "/v1/leases", map[string]any{"worker_id": workerID, "task_types": []string{"tl.work"}}, &out); err != nil {
				t.Fatalf("lease for %s: %v", workerID, err)
			}
			if len(out.Leases) == 1 && out.Leases[0].Task.TaskID == ack.TaskID {
				return out.Leases[0].LeaseID
			}
			if len(out.Leases) != 0 {
				t.Fatalf("lease for %s: %+v, want task %s", workerID, out.Leases, ack.TaskID)
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s was not offered to %s within 30 s", ack.TaskID, workerID)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The first worker fails it, retryably: a retry is scheduled.
	lease1 := lease(w1, "tl.w1")
	var failed struct {
		WillRetry        bool       `json:"will_retry"`
		RetryScheduledAt *time.Time `json:"retry_scheduled_at"`
		ReceiptID        string     `json:"receipt_id"`
	}
	if _, err := w1.Do(ctx, "POST", "/v1/leases/"+lease1+"/fail", map[string]any{"error_message": "upstream said no", "retryable": true,
		"metadata": map[string]int{"http_status": 502}}, &failed); err != nil || !failed.WillRetry || failed.RetryScheduledAt == nil || failed.ReceiptID == "" {
		t.Fatalf("fail: %+v %v, want a retry scheduled", failed, err)
	}
	// The second worker leases the retry and completes it.
	lease2 := lease(w2, "tl.w2")
	var completed struct {
		ReceiptID string `json:"receipt_id"`
	}
	if _, err := w2.Do(ctx, "POST", "/v1/leases/"+lease2+"/complete", map[string]any{"result": map[string]int{"n": 1}, "summary": "done"}, &completed); err != nil {
		t.Fatal(err)
	}

	at, err := c.Attempts(ctx, ack.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if at.TaskID != ack.TaskID || at.Status != client.StateSucceeded || at.ServerTime.IsZero() || len(at.Attempts) != 2 {
		t.Fatalf("attempts: %+v, want two of the succeeded task %s", at, ack.TaskID)
	}
	a0, a1 := at.Attempts[0], at.Attempts[1]
	if a0.TaskID != ack.TaskID || a0.Attempt != 1 || a0.Lease != 1 || a0.LeaseID != lease1 || a0.WorkerID != "tl.w1" || a0.Outcome != client.AttemptFailed ||
		a0.ErrorMessage != "upstream said no" || !a0.Retryable || a0.RetryAt == nil || !a0.RetryAt.Equal(*failed.RetryScheduledAt) ||
		!strings.Contains(string(a0.ErrorMetadata), `"http_status":502`) || a0.ReceiptID != failed.ReceiptID {
		t.Fatalf("the failed attempt: %+v, want tl.w1's lease %s failed with its error and retry time %v", a0, lease1, failed.RetryScheduledAt)
	}
	if a1.TaskID != ack.TaskID || a1.Attempt != 2 || a1.Lease != 2 || a1.LeaseID != lease2 || a1.WorkerID != "tl.w2" || a1.Outcome != client.AttemptSucceeded ||
		a1.ErrorMessage != "" || a1.RetryAt != nil || a1.ReceiptID == "" {
		t.Fatalf("the succeeded attempt: %+v, want tl.w2's lease %s succeeded", a1, lease2)
	}
	for i, a := range at.Attempts {
		if a.LeasedAt.IsZero() || a.EndedAt == nil || a.EndedAt.Before(a.LeasedAt) || a.DurationMS < 0 || a.LeaseExpiresAt == nil {
			t.Fatalf("attempt %d: %+v, want its grant, end, expiry and a duration ≥ 0", i, a)
		}
	}
	if !a1.LeasedAt.After(*a0.EndedAt) && !a1.LeasedAt.Equal(*a0.EndedAt) {
		t.Fatalf("the retry was leased at %v, before the failure ended at %v", a1.LeasedAt, *a0.EndedAt)
	}

	tl, err := c.Timeline(ctx, ack.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if tl.TaskID != ack.TaskID || tl.Status != client.StateSucceeded || tl.Truncated || len(tl.Events) == 0 {
		t.Fatalf("timeline: %+v", tl)
	}
	var types []string
	for i, ev := range tl.Events {
		if ev.EventID != i+1 || ev.Time.IsZero() || i > 0 && ev.Time.Before(tl.Events[i-1].Time) {
			t.Fatalf("event %d: %+v, want number %d at or after %v", i, ev, i+1, tl.Events[max(i-1, 0)].Time)
		}
		if strings.HasPrefix(ev.Type, "task.") && (ev.ReceiptID == "" || len(ev.Details) == 0) {
			t.Fatalf("receipt event %+v has no receipt id or body", ev)
		}
		types = append(types, ev.Type)
	}
	// The story, event by event: nothing was accepted or reported, so
	// nothing else comes between.
	wantEvents := []struct {
		typ, receipt, lease, worker string
	}{
		{"task.assigned", ack.ReceiptID, "", ""},
		{client.EventLeaseGranted, "", lease1, "tl.w1"},
		{"task.retry_scheduled", failed.ReceiptID, lease1, "tl.w1"},
		{client.EventLeaseGranted, "", lease2, "tl.w2"},
		{"task.completed", completed.ReceiptID, lease2, "tl.w2"},
	}
	if len(tl.Events) != len(wantEvents) {
		t.Fatalf("timeline %s, want %d events", strings.Join(types, " "), len(wantEvents))
	}
	for i, w := range wantEvents {
		if ev := tl.Events[i]; ev.Type != w.typ || ev.ReceiptID != w.receipt || ev.LeaseID != w.lease || ev.WorkerID != w.worker {
			t.Fatalf("event %d: %+v, want %s with receipt %q lease %q worker %q (timeline %s)", i+1, ev, w.typ, w.receipt, w.lease, w.worker, strings.Join(types, " "))
		}
	}
	if d := string(tl.Events[2].Details); !strings.Contains(d, "upstream said no") {
		t.Fatalf("the retry's receipt body %s lacks the error", d)
	}

	// An unknown task, and this one read by another agent, are not found.
	if _, err := c.Attempts(ctx, "T-01M8GME6G9P78S4Y21S82KRJ2A"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("attempts of an unknown task: %v, want not found", err)
	}
	if _, err := c.Timeline(ctx, "T-01M8GME6G9P78S4Y21S82KRJ2A"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("timeline of an unknown task: %v, want not found", err)
	}
	if got, err := other.Attempts(ctx, ack.TaskID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another agent reads the attempts: %+v %v, want not found", got, err)
	}
	if got, err := other.Timeline(ctx, ack.TaskID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another agent reads the timeline: %+v %v, want not found", got, err)
	}
}
