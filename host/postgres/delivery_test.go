package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpsink"
	"github.com/asyncgate/asyncgate/host/store"
)

// TestOutboxSharedByHosts: three gate hosts on one database write receipts
// and run outbox dispatchers against one receiving HTTP server. Every
// receipt arrives, each task's in ledger order, although the hosts claim
// from one outbox at once.
func TestOutboxSharedByHosts(t *testing.T) {
	requirePostgres(t)
	schema := newSchema(t)
	var mu sync.Mutex
	order := map[string][]string{}
	seen := map[string]bool{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var it httpsink.Item
		if json.NewDecoder(r.Body).Decode(&it) != nil {
			http.Error(w, "bad", 400)
			return
		}
		mu.Lock()
		if !seen[it.DedupeKey] {
			seen[it.DedupeKey] = true
			order[it.TaskID] = append(order[it.TaskID], it.DedupeKey)
		}
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer ts.Close()
	sink, err := httpsink.New(httpsink.Config{URL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var engs []*engine.Engine
	var stores []*Store
	for i := 0; i < 3; i++ {
		st := openIn(t, schema, Options{})
		eng, err := engine.New(engine.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ExpiryJitter: -1,
			Delivery: engine.DeliveryConfig{OutboxConfig: engine.OutboxConfig{Sink: sink, Workers: 4, Batch: 7, Idle: 10 * time.Millisecond},
				Retention: engine.RetentionConfig{Interval: -1}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(eng.Close)
		engs, stores = append(engs, eng), append(stores, st)
	}
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	if _, err := engs[0].PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	for _, e := range engs {
		e.Start()
	}
	agent := engine.Actor{Tenant: "acme", Principal: "agent.a", Role: engine.RoleAgent}
	var wg sync.WaitGroup
	for h, e := range engs {
		wg.Add(1)
		go func(h int, e *engine.Engine) {
			defer wg.Done()
			w := fmt.Sprintf("w.%d", h)
			for i := 0; i < 10; i++ {
				if _, err := e.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "work"}); err != nil {
					t.Error(err)
					return
				}
				offers, err := e.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: w, MaxTasks: 1})
				if err != nil || len(offers) != 1 {
					continue
				}
				call := engine.WorkerCall{Tenant: "acme", WorkerID: w, LeaseID: offers[0].LeaseID}
				if _, _, err := e.Accept(ctx, call); err != nil {
					t.Error(err)
					return
				}
				if _, err := e.Complete(ctx, engine.CompleteRequest{WorkerCall: call, Result: host.Result{Pointer: "s3://b/k"}}); err != nil {
					t.Error(err)
					return
				}
			}
		}(h, e)
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := engs[0].OutboxStatus(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if s.Pending == 0 && s.Dead == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox not drained: %+v", s.OutboxStats)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := map[string][]string{}
	_ = stores[0].View(ctx, func(r store.Reader) error {
		rs, err := r.ScanReceipts(ctx, 0, 100000)
		for _, rc := range rs {
			want[rc.TaskID] = append(want[rc.TaskID], "receipt:"+rc.ID)
		}
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	if len(want) < 25 {
		t.Fatalf("only %d tasks ran", len(want))
	}
	for task, keys := range want {
		if fmt.Sprint(order[task]) != fmt.Sprint(keys) {
			t.Fatalf("task %s: arrived %v, ledger order %v", task, order[task], keys)
		}
	}
}
