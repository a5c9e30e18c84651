package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/postgres"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

const gateTenant = "bench"

var (
	gateAgent  = engine.Actor{Tenant: gateTenant, Principal: "agent.bench", Role: engine.RoleAgent}
	gateParams = json.RawMessage(`{"n":1}`)
	gateResult = host.Result{Channel: "inline", Pointer: "inline:b2s="}
	quiet      = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// gateHosts is one gate deployment in this process: an engine per store
// (host), all on the same database.
type gateHosts struct {
	engs []*engine.Engine
	sts  []store.Store
}

func (g *gateHosts) close() {
	for _, e := range g.engs {
		e.Close()
	}
	for _, s := range g.sts {
		_ = s.Close()
	}
}

func startGate(ctx context.Context, sts []store.Store) (*gateHosts, error) {
	g := &gateHosts{sts: sts}
	for _, st := range sts {
		e, err := engine.New(engine.Config{Store: st, Logger: quiet, ExpiryJitter: -1})
		if err != nil {
			g.close()
			return nil, err
		}
		e.Start()
		g.engs = append(g.engs, e)
	}
	tt := host.NewTaskType("bench")
	tt.Tenant = gateTenant
	if _, err := g.engs[0].PutTaskType(ctx, tt); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

// openGateSQLite opens the gate's embedded store on a fresh file; its
// defaults are WAL with synchronous=FULL.
func openGateSQLite(ctx context.Context, o options) (*gateHosts, func(), error) {
	dir, err := os.MkdirTemp(o.scratchDir, "gate-sqlite-")
	if err != nil {
		return nil, nil, err
	}
	st, err := sqlite.Open(filepath.Join(dir, "gate.db"), sqlite.Options{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	g, err := startGate(ctx, []store.Store{st})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return g, func() { g.close(); os.RemoveAll(dir) }, nil
}

// openGatePG opens hosts stores on a fresh database.
func openGatePG(ctx context.Context, o options, hosts int) (*gateHosts, func(), error) {
	dbURL, drop, err := freshDatabase(ctx, o.pgURL)
	if err != nil {
		return nil, nil, err
	}
	var sts []store.Store
	for i := 0; i < hosts; i++ {
		st, err := postgres.Open(ctx, dbURL, postgres.Options{Writers: o.pgWriters})
		if err != nil {
			for _, s := range sts {
				_ = s.Close()
			}
			drop()
			return nil, nil, err
		}
		sts = append(sts, st)
	}
	g, err := startGate(ctx, sts)
	if err != nil {
		drop()
		return nil, nil, err
	}
	return g, func() { g.close(); drop() }, nil
}

func gateSQLiteBurn(ctx context.Context, o options) (result, error) {
	g, done, err := openGateSQLite(ctx, o)
	if err != nil {
		return result{}, err
	}
	defer done()
	return gateBurn(ctx, o, g)
}

func gateSQLiteSteady(ctx context.Context, o options) (result, error) {
	g, done, err := openGateSQLite(ctx, o)
	if err != nil {
		return result{}, err
	}
	defer done()
	return gateSteady(ctx, o, g)
}

func gatePGBurn(hosts int) side {
	return func(ctx context.Context, o options) (result, error) {
		g, done, err := openGatePG(ctx, o, hosts)
		if err != nil {
			return result{}, err
		}
		defer done()
		return gateBurn(ctx, o, g)
	}
}

func gatePGSteady(hosts int) side {
	return func(ctx context.Context, o options) (result, error) {
		g, done, err := openGatePG(ctx, o, hosts)
		if err != nil {
			return result{}, err
		}
		defer done()
		return gateSteady(ctx, o, g)
	}
}

// gateFill enqueues n tasks through 64 concurrent callers (so group commit
// batches them), spread over the hosts.
func gateFill(ctx context.Context, g *gateHosts, n int) error {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var first atomic.Value
	for p := 0; p < 64; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := g.engs[p%len(g.engs)]
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				if _, err := e.Enqueue(ctx, gateAgent, engine.EnqueueRequest{TaskType: "bench", Params: gateParams}); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	return ctx.Err()
}

// gateWorker leases batches of o.batch (long-polling 50 ms) and completes each
// batch's tasks concurrently, as the worker SDK does with its concurrency,
// until stop is closed. It counts completions and records enqueue→lease.
func gateWorker(ctx context.Context, o options, e *engine.Engine, id string, stop <-chan struct{}, completed *atomic.Int64, lat *latencies) error {
	var samples []time.Duration
	defer func() {
		if lat != nil {
			lat.addAll(samples)
		}
	}()
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		offers, err := e.Lease(ctx, engine.LeaseRequest{Tenant: gateTenant, WorkerID: id, Types: []string{"bench"}, MaxTasks: o.batch, Wait: 50 * time.Millisecond})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		var inner sync.WaitGroup
		var failed atomic.Value
		for _, of := range offers {
			if lat != nil && of.Task != nil {
				samples = append(samples, now.Sub(of.Task.AvailableAt))
			}
			inner.Add(1)
			go func() {
				defer inner.Done()
				_, err := e.Complete(ctx, engine.CompleteRequest{WorkerCall: engine.WorkerCall{Tenant: gateTenant, WorkerID: id, LeaseID: of.LeaseID}, Result: gateResult})
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				completed.Add(1)
			}()
		}
		inner.Wait()
		if err, _ := failed.Load().(error); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// gateBurn queues o.burn tasks, then times o.workers workers completing them.
func gateBurn(ctx context.Context, o options, g *gateHosts) (result, error) {
	fctx, fcancel := context.WithTimeout(ctx, o.timeout)
	err := gateFill(fctx, g, o.burn)
	fcancel()
	if err != nil {
		return result{}, fmt.Errorf("fill: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var completed, lastAt atomic.Int64
	stop := make(chan struct{})
	errc := make(chan error, o.workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < o.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- gateWorker(ctx, o, g.engs[w%len(g.engs)], fmt.Sprintf("bench.w%d", w), stop, &completed, nil)
		}()
	}
	// Watch for the last completion; bounded by the run's timeout.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for completed.Load() < int64(o.burn) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		lastAt.Store(int64(time.Since(start)))
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return result{}, err
		}
	}
	return burnResult(ctx, o, completed.Load(), time.Duration(lastAt.Load()))
}

// gateSteady runs o.producers producers enqueueing one task per call and
// o.workers workers for o.duration, and counts completions in that window.
func gateSteady(ctx context.Context, o options, g *gateHosts) (result, error) {
	// A call that hangs past the window is cut off after -timeout.
	ctx, cancel := context.WithTimeout(ctx, o.duration+o.timeout)
	defer cancel()
	var completed atomic.Int64
	stop := make(chan struct{})
	var lat latencies
	errc := make(chan error, o.workers+o.producers)
	var wg sync.WaitGroup
	for w := 0; w < o.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- gateWorker(ctx, o, g.engs[w%len(g.engs)], fmt.Sprintf("bench.w%d", w), stop, &completed, &lat)
		}()
	}
	for p := 0; p < o.producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := g.engs[p%len(g.engs)]
			for {
				select {
				case <-stop:
					errc <- nil
					return
				default:
				}
				if _, err := e.Enqueue(ctx, gateAgent, engine.EnqueueRequest{TaskType: "bench", Params: gateParams}); err != nil {
					if ctx.Err() != nil {
						err = nil
					}
					errc <- err
					return
				}
			}
		}()
	}
	el := window(ctx, o.duration)
	n := completed.Load()
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return result{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	if n == 0 {
		return result{}, errors.New("no task completed in the window")
	}
	return result{rate: float64(n) / el.Seconds(), p99: lat.p99(), done: n}, nil
}
