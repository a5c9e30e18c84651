package httpsink_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpsink"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

// BenchmarkOutboxDelivery measures how fast the outbox drains to a local
// HTTP sink: b.N receipt-sized entries, three per task (a task's receipts
// go out in order, one per round), delivered over real HTTP from a durable
// SQLite store. Reported as entries/s.
//
//	go test -run '^$' -bench OutboxDelivery -benchtime 5000x ./host/httpsink
func BenchmarkOutboxDelivery(b *testing.B) {
	for _, workers := range []int{8, 32} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { benchDelivery(b, workers) })
	}
}

func benchDelivery(b *testing.B, workers int) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var got atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer ts.Close()
	sink, err := httpsink.New(httpsink.Config{URL: ts.URL})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	now := host.SystemClock{}.Now()
	body := []byte(`{"receipt_id":"R-01M8BJPSMR7NXSP6RNHW0F7YSM","tenant":"acme","receipt_type":"task.completed","from":"w.1","to":"agent.a","task_id":"T-x","parents":["R-a","R-b"],"body":{"summary":"done","result_pointer":"s3://b/k"},"seq":1,"hash":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
	for done := 0; done < b.N; {
		n := min(b.N-done, 3000)
		es := make([]store.OutboxEntry, n)
		for i := range es {
			k := done + i
			es[i] = store.OutboxEntry{Tenant: "acme", TaskID: fmt.Sprintf("T-%d", k/3), Kind: "receipt", Key: fmt.Sprintf("receipt:%d", k), Body: body, NextAt: now, CreatedAt: now}
		}
		if err := st.Update(ctx, func(tx store.Tx) error { return tx.InsertOutbox(ctx, es) }); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	eng, err := engine.New(engine.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Delivery: engine.DeliveryConfig{OutboxConfig: engine.OutboxConfig{Sink: sink, Workers: workers, Batch: 500}, Retention: engine.RetentionConfig{Interval: -1}}})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	b.ResetTimer()
	start := time.Now()
	for got.Load() < int64(b.N) {
		if _, err := eng.OutboxRound(ctx); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "entries/s")
}

// BenchmarkReceiptRateWithOutbox measures the gate's receipt rate in
// process with the outbox on (each receipt also queues its outbox entry):
// full task cycles (enqueue, lease, accept, complete: three receipts) from
// parallel callers on a durable SQLite store. Compare receipts/s with
// BenchmarkOutboxDelivery's entries/s.
//
//	go test -run '^$' -bench ReceiptRateWithOutbox -benchtime 2000x ./host/httpsink
func BenchmarkReceiptRateWithOutbox(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("outbox=%v", on), func(b *testing.B) { benchReceiptRate(b, on) })
	}
}

func benchReceiptRate(b *testing.B, outbox bool) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	eng, err := engine.New(engine.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ExpiryJitter: -1,
		Delivery: engine.DeliveryConfig{Outbox: outbox, Retention: engine.RetentionConfig{Interval: -1}}})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		b.Fatal(err)
	}
	var worker atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		w := fmt.Sprintf("w.%d", worker.Add(1))
		for pb.Next() {
			if _, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: "work"}); err != nil {
				b.Error(err)
				return
			}
			offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "acme", WorkerID: w, MaxTasks: 1})
			if err != nil || len(offers) != 1 {
				continue // another caller took it; the cycle count stays honest below
			}
			call := engine.WorkerCall{Tenant: "acme", WorkerID: w, LeaseID: offers[0].LeaseID}
			if _, _, err := eng.Accept(ctx, call); err != nil {
				b.Error(err)
				return
			}
			if _, err := eng.Complete(ctx, engine.CompleteRequest{WorkerCall: call, Result: host.Result{Pointer: "s3://b/k"}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	el := time.Since(start)
	b.StopTimer()
	var n int64
	_ = st.View(ctx, func(r store.Reader) error {
		rs, err := r.ScanReceipts(ctx, 0, 1<<30)
		n = int64(len(rs))
		return err
	})
	b.ReportMetric(float64(n)/el.Seconds(), "receipts/s")
}
