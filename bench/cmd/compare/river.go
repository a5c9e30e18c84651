package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // database/sql driver "sqlite" for River's SQLite driver
)

// benchArgs and benchWorker are River's own benchmark job: it does nothing.
type benchArgs struct {
	Num int `json:"num"`
}

func (benchArgs) Kind() string { return "benchmark" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	lat *latencies
}

// Work records enqueue→work (the job's created_at to now) and returns.
func (w *benchWorker) Work(_ context.Context, j *river.Job[benchArgs]) error {
	if w.lat != nil {
		w.lat.add(time.Since(j.CreatedAt))
	}
	return nil
}

// River's own benchmark (cmd/river/riverbench) inserts in batches of 5,000.
const riverInsertBatch = 5_000

// riverClients makes one client per driver, tuned as River's benchmark
// tunes its client: FetchCooldown 2 ms, FetchPollInterval 20 ms and
// MaxWorkers 2,000 on the default queue (all -river-max-workers split
// across the clients).
func riverClients[TTx any](drivers []riverdriver.Driver[TTx], o options, lat *latencies) ([]*river.Client[TTx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{lat: lat})
	var clients []*river.Client[TTx]
	for _, d := range drivers {
		c, err := river.NewClient(d, &river.Config{
			FetchCooldown:     2 * time.Millisecond,
			FetchPollInterval: 20 * time.Millisecond,
			Logger:            quiet,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: max(o.riverMax/len(drivers), 1)}},
			Workers:           workers,
		})
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	return clients, nil
}

// riverCounter counts completed jobs through subscriptions, as River's
// benchmark does (so a job counts once the completer has recorded it).
type riverCounter struct {
	completed atomic.Int64
	lastAt    atomic.Int64 // nanoseconds since start of the last completion
	failed    atomic.Int64
	cancels   []func()
	wg        sync.WaitGroup
}

func countRiver[TTx any](clients []*river.Client[TTx], start *time.Time, stop <-chan struct{}) *riverCounter {
	rc := &riverCounter{}
	for _, c := range clients {
		ch, cancel := c.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: 100_000,
			Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
		})
		rc.cancels = append(rc.cancels, cancel)
		rc.wg.Add(1)
		go func() {
			defer rc.wg.Done()
			for {
				select {
				case <-stop:
					return
				case ev, ok := <-ch:
					if !ok {
						return
					}
					if ev.Kind != river.EventKindJobCompleted {
						rc.failed.Add(1)
						continue
					}
					rc.completed.Add(1)
					rc.lastAt.Store(int64(time.Since(*start)))
				}
			}
		}()
	}
	return rc
}

func (rc *riverCounter) close() {
	for _, c := range rc.cancels {
		c()
	}
	rc.wg.Wait()
}

func stopClients[TTx any](clients []*river.Client[TTx]) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range clients {
		if err := c.Stop(ctx); err != nil {
			_ = c.StopAndCancel(ctx)
		}
	}
}

func migrateRiver[TTx any](ctx context.Context, d riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New(d, nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// riverBurn inserts o.burn jobs with InsertMany before starting the clients,
// then times the clients working them down (River's `bench -n` mode).
func riverBurn[TTx any](ctx context.Context, o options, drivers []riverdriver.Driver[TTx]) (result, error) {
	if err := migrateRiver(ctx, drivers[0]); err != nil {
		return result{}, fmt.Errorf("migrate: %w", err)
	}
	clients, err := riverClients(drivers, o, nil)
	if err != nil {
		return result{}, err
	}
	ictx, icancel := context.WithTimeout(ctx, o.timeout)
	defer icancel()
	params := make([]river.InsertManyParams, 0, riverInsertBatch)
	for n := 0; n < o.burn; {
		params = params[:0]
		for ; len(params) < riverInsertBatch && n < o.burn; n++ {
			params = append(params, river.InsertManyParams{Args: benchArgs{Num: n}})
		}
		if _, err := clients[0].InsertMany(ictx, params); err != nil {
			return result{}, fmt.Errorf("insert: %w", err)
		}
	}
	icancel()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	stop := make(chan struct{})
	start := time.Now()
	rc := countRiver(clients, &start, stop)
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			close(stop)
			rc.close()
			stopClients(clients)
			return result{}, err
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for rc.completed.Load()+rc.failed.Load() < int64(o.burn) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	close(stop)
	rc.close()
	stopClients(clients)
	n := rc.completed.Load()
	if f := rc.failed.Load(); f > 0 {
		return result{}, fmt.Errorf("%d jobs failed or were cancelled", f)
	}
	return burnResult(ctx, o, n, time.Duration(rc.lastAt.Load()))
}

// riverSteady runs o.producers producers inserting one job per call (spread
// over the clients) for o.duration and counts jobs worked in that window.
func riverSteady[TTx any](ctx context.Context, o options, drivers []riverdriver.Driver[TTx]) (result, error) {
	// A call that hangs past the window is cut off after -timeout.
	ctx, cancel := context.WithTimeout(ctx, o.duration+o.timeout)
	defer cancel()
	if err := migrateRiver(ctx, drivers[0]); err != nil {
		return result{}, fmt.Errorf("migrate: %w", err)
	}
	var lat latencies
	clients, err := riverClients(drivers, o, &lat)
	if err != nil {
		return result{}, err
	}
	stop := make(chan struct{})
	start := time.Now()
	rc := countRiver(clients, &start, stop)
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			close(stop)
			rc.close()
			stopClients(clients)
			return result{}, err
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, o.producers)
	for p := 0; p < o.producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[p%len(clients)]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Insert(ctx, benchArgs{Num: i}, nil); err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
					return
				}
			}
		}()
	}
	el := window(ctx, o.duration)
	n := rc.completed.Load()
	close(stop)
	wg.Wait()
	rc.close()
	stopClients(clients)
	close(errc)
	for err := range errc {
		return result{}, err
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	if f := rc.failed.Load(); f > 0 {
		return result{}, fmt.Errorf("%d jobs failed or were cancelled", f)
	}
	if n == 0 {
		return result{}, errors.New("no job worked in the window")
	}
	return result{rate: float64(n) / el.Seconds(), p99: lat.p99(), done: n}, nil
}

// openRiverSQLite opens a fresh SQLite file in WAL mode with
// synchronous=FULL and one connection, as River's CLI opens SQLite.
func openRiverSQLite(o options) ([]riverdriver.Driver[*sql.Tx], func(), error) {
	dir, err := os.MkdirTemp(o.scratchDir, "river-sqlite-")
	if err != nil {
		return nil, nil, err
	}
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(dir, "river.sqlite3")))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	var syncMode int
	if err := db.QueryRow("PRAGMA synchronous").Scan(&syncMode); err != nil || syncMode != 2 {
		db.Close()
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("River SQLite: synchronous is %d, not FULL (2): %v", syncMode, err)
	}
	return []riverdriver.Driver[*sql.Tx]{riversqlite.New(db)}, func() { db.Close(); os.RemoveAll(dir) }, nil
}

// openRiverPG opens clients pools (one per River client, as separate hosts
// would have) on a fresh database.
func openRiverPG(ctx context.Context, o options, clients int) ([]riverdriver.Driver[pgx.Tx], func(), error) {
	dbURL, drop, err := freshDatabase(ctx, o.pgURL)
	if err != nil {
		return nil, nil, err
	}
	var pools []*pgxpool.Pool
	closeAll := func() {
		for _, p := range pools {
			p.Close()
		}
		drop()
	}
	var drivers []riverdriver.Driver[pgx.Tx]
	for i := 0; i < clients; i++ {
		p, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		pools = append(pools, p)
		drivers = append(drivers, riverpgxv5.New(p))
	}
	return drivers, closeAll, nil
}

func riverSQLiteBurn(ctx context.Context, o options) (result, error) {
	d, done, err := openRiverSQLite(o)
	if err != nil {
		return result{}, err
	}
	defer done()
	return riverBurn(ctx, o, d)
}

func riverSQLiteSteady(ctx context.Context, o options) (result, error) {
	d, done, err := openRiverSQLite(o)
	if err != nil {
		return result{}, err
	}
	defer done()
	return riverSteady(ctx, o, d)
}

func riverPGBurn(clients int) side {
	return func(ctx context.Context, o options) (result, error) {
		d, done, err := openRiverPG(ctx, o, clients)
		if err != nil {
			return result{}, err
		}
		defer done()
		return riverBurn(ctx, o, d)
	}
}

func riverPGSteady(clients int) side {
	return func(ctx context.Context, o options) (result, error) {
		d, done, err := openRiverPG(ctx, o, clients)
		if err != nil {
			return result{}, err
		}
		defer done()
		return riverSteady(ctx, o, d)
	}
}
