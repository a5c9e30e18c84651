package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// ledgerReceiver is a real HTTP server playing the external ledger for an
// e2e gate: it records dedupe keys and can refuse memory items.
type ledgerReceiver struct {
	*httptest.Server
	refuseMemory atomic.Bool
	mu           sync.Mutex
	keys         map[string]int
	auth         string
}

func newLedgerReceiver(t *testing.T) *ledgerReceiver {
	r := &ledgerReceiver{keys: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var it struct {
			Key  string `json:"dedupe_key"`
			Kind string `json:"kind"`
		}
		if json.NewDecoder(req.Body).Decode(&it) != nil || it.Key == "" {
			http.Error(w, "bad", 400)
			return
		}
		if it.Kind == "memory" && r.refuseMemory.Load() {
			http.Error(w, "memory items are refused today", http.StatusUnprocessableEntity)
			return
		}
		r.mu.Lock()
		r.keys[it.Key]++
		r.auth = req.Header.Get("Authorization")
		r.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *ledgerReceiver) has(k string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys[k] > 0
}

func waitDelivery(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2EDelivery runs the real gate with a delivery.sink in its config
// file: a task's outcome appears in the agent's session bootstrap and every
// receipt reaches the external ledger with the configured credentials; a
// memory item the ledger refuses lands on the dead list, `gate outbox
// status` shows it, `gate outbox retry` requeues it, and a restarted gate
// delivers it.
func TestE2EDelivery(t *testing.T) {
	t.Parallel()
	rcv := newLedgerReceiver(t)
	rcv.refuseMemory.Store(true)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "gate.json")
	conf := `{"delivery":{"retention_sweep_seconds":-1,"sink":{"url":"` + rcv.URL + `/ingest","headers":{"Authorization":"Bearer ledger-secret"},"timeout_seconds":5}}}`
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGate(t, data, "--config", cfg)
	g.putType(t, "report", map[string]any{}, "")
	agent := g.newKey(t, "agent", "agent.a", "")
	worker := g.newKey(t, "worker", "report.w1", "")
	id := g.enqueue(t, agent, "report", map[string]any{})
	offers := g.lease(t, worker, "report.w1", nil)
	if len(offers) != 1 {
		t.Fatalf("offers %v", offers)
	}
	want(t, call(t, "POST", g.URL+"/v1/leases/"+offers[0].LeaseID+"/complete", worker,
		map[string]any{"worker_id": "report.w1", "result_pointer": "s3://reports/1.pdf", "summary": "12 pages"}), 200, "")

	var bs struct {
		Inbox []struct {
			ID     string `json:"inbox_id"`
			Kind   string `json:"kind"`
			TaskID string `json:"task_id"`
		} `json:"inbox"`
	}
	call(t, "GET", g.URL+"/v1/session/bootstrap", agent, nil).Into(t, &bs)
	if len(bs.Inbox) != 1 || bs.Inbox[0].TaskID != id || bs.Inbox[0].Kind != "completed" {
		t.Fatalf("bootstrap %+v", bs)
	}
	var rl struct {
		Receipts []struct {
			ID string `json:"receipt_id"`
		} `json:"receipts"`
	}
	call(t, "GET", g.URL+"/v1/receipts?task_id="+id, agent, nil).Into(t, &rl)
	if len(rl.Receipts) != 2 {
		t.Fatalf("receipts %+v", rl)
	}
	waitDelivery(t, "every receipt at the ledger", func() bool {
		return rcv.has("receipt:"+rl.Receipts[0].ID) && rcv.has("receipt:"+rl.Receipts[1].ID)
	})
	rcv.mu.Lock()
	auth := rcv.auth
	rcv.mu.Unlock()
	if auth != "Bearer ledger-secret" {
		t.Fatalf("the ledger saw Authorization %q", auth)
	}
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+id+"/store-in-memory", agent, map[string]any{"domain": "reports"}), 200, "")
	waitDelivery(t, "the refused memory item on the dead list", func() bool {
		var s struct {
			Dead int `json:"dead"`
		}
		call(t, "GET", g.URL+"/v1/admin/outbox", g.Admin, nil).Into(t, &s)
		return s.Dead == 1
	})
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+id+"/store-in-memory", agent, map[string]any{"nope": 1}), 400, "bad_request")
	g.Stop(syscall.SIGTERM)

	out, errOut, code := gateCLI(t, "outbox", "status", "--data", data)
	if code != 0 || !strings.Contains(out, "pending 0, dead 1") || !strings.Contains(out, "memory:"+id) || !strings.Contains(out, "422") {
		t.Fatalf("outbox status: %d %s %s", code, out, errOut)
	}
	if _, _, code := gateCLI(t, "outbox", "status", "--data", data, "surplus"); code != 2 {
		t.Fatalf("outbox status with an argument: exit %d, want 2", code)
	}
	out, errOut, code = gateCLI(t, "outbox", "retry", "--data", data)
	if code != 0 || !strings.Contains(out, "1 dead entries back to pending") {
		t.Fatalf("outbox retry: %d %s %s", code, out, errOut)
	}
	rcv.refuseMemory.Store(false)
	g = startGate(t, data, "--config", cfg)
	waitDelivery(t, "the retried memory item at the ledger", func() bool { return rcv.has("memory:" + id) })
	g.Stop(syscall.SIGTERM)
	if out, _, code := gateCLI(t, "ledger", "verify", "--data", data); code != 0 {
		t.Fatalf("ledger verify: %d %s", code, out)
	}
}
