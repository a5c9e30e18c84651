package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestE2ECrashRecovery SIGKILLs the gate under load, restarts it on the same
// data folder and checks that every acknowledged task and receipt survived,
// the ledger verifies, and leases interrupted by the crash expire and are
// leased again.
func TestE2ECrashRecovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := startGate(t, dir)
	g.putType(t, "crash", map[string]any{"lease_seconds": 2, "requeue_delay_seconds": 0}, "")
	agent := g.newKey(t, "agent", "agent.crash", "")
	worker := g.newKey(t, "worker", "crash.w1", "")

	var (
		acked    syncList // task ids whose enqueue was acknowledged
		receipts syncList // receipt ids of acknowledged calls
		finished syncList // task ids whose completion was acknowledged
		held     syncList // task ids accepted but deliberately never completed
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := tryCall("POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "crash", "params": map[string]any{"p": p, "i": i}})
				if err != nil || r.Status != 201 {
					continue // the gate may be gone: not acknowledged
				}
				var ack struct{ TaskID, ReceiptID string }
				ack.TaskID, ack.ReceiptID = jsonField(r.Body, "task_id"), jsonField(r.Body, "receipt_id")
				acked.add(ack.TaskID)
				receipts.add(ack.ReceiptID)
			}
		}(p)
	}
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			n := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := tryCall("POST", g.URL+"/v1/leases", worker, map[string]any{"worker_id": "crash.w1", "max_tasks": 8, "wait_seconds": 1})
				if err != nil || r.Status != 200 {
					continue
				}
				var out struct {
					Leases []offer `json:"leases"`
				}
				if json.Unmarshal(r.Body, &out) != nil {
					continue
				}
				for _, o := range out.Leases {
					n++
					r, err := tryCall("POST", g.URL+"/v1/leases/"+o.LeaseID+"/accept", worker, nil)
					if err != nil || r.Status != 200 {
						continue
					}
					receipts.add(jsonField(r.Body, "receipt_id"))
					if n%5 == 0 {
						held.add(o.Task.ID) // accepted, never completed: the crash interrupts it
						continue
					}
					r, err = tryCall("POST", g.URL+"/v1/leases/"+o.LeaseID+"/complete", worker, map[string]any{"result_pointer": "crash:" + o.Task.ID})
					if err != nil || r.Status != 200 {
						continue
					}
					receipts.add(jsonField(r.Body, "receipt_id"))
					finished.add(o.Task.ID)
				}
			}
		}(w)
	}
	// Let load build up, then kill the gate without warning.
	deadline := time.Now().Add(60 * time.Second)
	for len(finished.all()) < 200 || len(held.all()) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("load did not build up: %d finished, %d held", len(finished.all()), len(held.all()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	g.Stop(syscall.SIGKILL)
	close(stop)
	wg.Wait()

	// The killed folder verifies before and after the restart.
	if out, errOut, code := gateCLI(t, "ledger", "verify", "--data", dir); code != 0 {
		t.Fatalf("ledger verify after SIGKILL: %d %s %s", code, out, errOut)
	}
	g2 := startGate(t, dir)
	for _, id := range acked.all() {
		r := call(t, "GET", g2.URL+"/v1/tasks/"+id, g2.Admin, nil)
		if r.Status != 200 {
			t.Fatalf("acknowledged task %s lost: %d %s", id, r.Status, r.Body)
		}
	}
	for _, id := range finished.all() {
		r := call(t, "GET", g2.URL+"/v1/tasks/"+id, g2.Admin, nil)
		if s := jsonField(r.Body, "status"); s != "succeeded" {
			t.Fatalf("acknowledged completion of %s lost: status %s", id, s)
		}
	}
	for _, id := range receipts.all() {
		if r := call(t, "GET", g2.URL+"/v1/receipts/"+id, g2.Admin, nil); r.Status != 200 {
			t.Fatalf("acknowledged receipt %s lost: %d %s", id, r.Status, r.Body)
		}
	}

	// Interrupted leases expire (2 s) and every task gets done after all.
	w2 := g2.newKey(t, "worker", "crash.w2", "")
	done := map[string]bool{}
	for _, id := range finished.all() {
		done[id] = true
	}
	// Lease and complete until nothing is offered, then look at what is
	// left (one read per task not yet seen done); interrupted leases come
	// back once they expire. A batch is completed by eight calls at a time,
	// well inside the 2 s lease; one that expires anyway on a busy machine
	// is offered again in a later round.
	deadline = time.Now().Add(2 * time.Minute)
	for {
		offers := g2.lease(t, w2, "crash.w2", map[string]any{"max_tasks": 50, "wait_seconds": 1})
		if len(offers) > 0 {
			completed, err := completeAll(g2.URL, w2, offers)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range completed {
				done[id] = true
			}
			continue
		}
		remaining := 0
		for _, id := range acked.all() {
			if done[id] {
				continue
			}
			// A completion may have committed while its answer was lost in the crash.
			if s := jsonField(call(t, "GET", g2.URL+"/v1/tasks/"+id, g2.Admin, nil).Body, "status"); s == "succeeded" {
				done[id] = true
				continue
			}
			remaining++
		}
		if remaining == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acknowledged tasks never completed after the restart", remaining)
		}
	}
	// Held tasks expired with an escalation receipt and no attempt used.
	for _, id := range held.all() {
		r := call(t, "GET", g2.URL+"/v1/tasks/"+id, g2.Admin, nil)
		var task struct {
			Status        string `json:"status"`
			Attempts      int    `json:"attempts"`
			LeaseExpiries int    `json:"lease_expiries"`
		}
		r.Into(t, &task)
		if task.Status != "succeeded" || task.Attempts != 0 || task.LeaseExpiries < 1 {
			t.Fatalf("held task %s: %+v", id, task)
		}
		r = call(t, "GET", g2.URL+"/v1/receipts?task_id="+id, g2.Admin, nil)
		if !strings.Contains(string(r.Body), `"escalation_reason":"lease_expired"`) {
			t.Fatalf("held task %s has no lease_expired escalation: %s", id, r.Body)
		}
	}
	if err := g2.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	if out, errOut, code := gateCLI(t, "ledger", "verify", "--data", dir); code != 0 || !strings.Contains(out, "intact") {
		t.Fatalf("ledger verify after recovery: %d %s %s", code, out, errOut)
	}
	t.Logf("crash test: %d tasks acknowledged, %d completions and %d receipts acknowledged before SIGKILL, %d leases interrupted",
		len(acked.all()), len(finished.all()), len(receipts.all()), len(held.all()))
}

// jsonField returns a top-level string field of a JSON object, or "".
func jsonField(b []byte, name string) string {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}

// completeAll completes offers, eight calls at a time, and returns the ids
// of the tasks completed. A lease that expired first (409 lease_expired) is
// skipped: its task is offered again. Any other answer is an error.
func completeAll(url, key string, offers []offer) ([]string, error) {
	var (
		mu        sync.Mutex
		completed []string
		firstErr  error
		wg        sync.WaitGroup
	)
	sem := make(chan struct{}, 8)
	for _, o := range offers {
		wg.Add(1)
		sem <- struct{}{}
		go func(o offer) {
			defer func() { <-sem; wg.Done() }()
			r, err := tryCall("POST", url+"/v1/leases/"+o.LeaseID+"/complete", key, map[string]any{"result_pointer": "crash:" + o.Task.ID})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				firstErr = cmp.Or(firstErr, fmt.Errorf("complete %s: %w", o.Task.ID, err))
			case r.Status == 200:
				completed = append(completed, o.Task.ID)
			case r.Status == 409 && jsonField(r.Body, "error") == "lease_expired":
			default:
				firstErr = cmp.Or(firstErr, fmt.Errorf("complete %s after the restart: %d %s", o.Task.ID, r.Status, r.Body))
			}
		}(o)
	}
	wg.Wait()
	return completed, firstErr
}
