package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/postgres"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

// benchTasksEnv sets how many tasks BenchmarkDashboardPages stores before
// timing the pages (e.g. 1000000). Unset, the benchmark skips: seeding a
// million tasks takes minutes. benchDirEnv, when set, keeps the seeded
// database in that folder and reuses it on the next run.
//
// benchPostgresEnv, when set to a PostgreSQL URL, runs the benchmark on
// PostgreSQL instead, in schema ag_uibench_<n>, which is kept for the next
// run when benchDirEnv is also set and dropped otherwise.
const (
	benchTasksEnv    = "ASYNCGATE_BENCH_UI_TASKS"
	benchDirEnv      = "ASYNCGATE_BENCH_UI_DIR"
	benchPostgresEnv = "ASYNCGATE_BENCH_UI_POSTGRES"
)

// benchGate is a gate with many stored tasks and a signed-in session.
type benchGate struct {
	h        http.Handler
	cookie   *http.Cookie
	progress string // a task with receipts and progress reports
	lastSeq  string // a cursor near the end of the task list
}

// BenchmarkDashboardPages measures the server time of each dashboard page
// over a SQLite store holding $ASYNCGATE_BENCH_UI_TASKS tasks. The goal is
// under 100 ms a page with 1,000,000 tasks.
//
//	ASYNCGATE_BENCH_UI_TASKS=1000000 go test -run '^$' -bench DashboardPages -benchtime 20x ./host/ui
func BenchmarkDashboardPages(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv(benchTasksEnv))
	if n <= 0 {
		b.Skip("set " + benchTasksEnv + "=1000000 to store that many tasks and time the dashboard's pages")
	}
	g := openBenchGate(b, n)
	pages := []struct{ name, path string }{
		{"queues", "/ui/"},
		{"queues_fragment", "/ui/fragments/queues"},
		{"tasks", "/ui/tasks"},
		{"tasks_queued", "/ui/tasks?state=queued"},
		{"tasks_dead", "/ui/tasks?state=dead_letter"},
		{"tasks_type", "/ui/tasks?type=t3"},
		{"tasks_rare_type", "/ui/tasks?type=rare"},
		{"tasks_rare_state_type", "/ui/tasks?state=leased&type=t1"},
		{"tasks_recipient", "/ui/tasks?recipient=agent.other"},
		{"tasks_last_page", "/ui/tasks?cursor=" + g.lastSeq},
		{"task", "/ui/tasks/" + g.progress},
		{"task_progress_fragment", "/ui/tasks/" + g.progress + "/progress"},
		{"dead_letters", "/ui/dead-letters"},
		{"workers", "/ui/workers"},
		{"obligations", "/ui/obligations?principal=agent.bench"},
		{"ledger", "/ui/ledger"},
		{"plugins", "/ui/plugins"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest("GET", p.path, nil)
				req.AddCookie(g.cookie)
				rec := httptest.NewRecorder()
				g.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", p.path, rec.Code, rec.Body.String())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
		})
	}
}

func openBenchGate(b *testing.B, n int) *benchGate {
	b.Helper()
	ctx := context.Background()
	dir := os.Getenv(benchDirEnv)
	keep := dir != ""
	if dir == "" {
		dir = b.TempDir()
	}
	var st store.Store
	var seeded bool
	if pg := os.Getenv(benchPostgresEnv); pg != "" {
		schema := fmt.Sprintf("ag_uibench_%d", n)
		ps, err := postgres.Open(ctx, pg, postgres.Options{Schema: schema})
		if err != nil {
			b.Fatal(err)
		}
		if !keep {
			b.Cleanup(func() { dropSchema(b, pg, schema) })
		}
		st = ps
		qs, err := eng0Stats(ctx, ps)
		if err != nil {
			b.Fatal(err)
		}
		seeded = qs >= int64(n)
	} else {
		path := filepath.Join(dir, fmt.Sprintf("ui-bench-%d.db", n))
		_, statErr := os.Stat(path)
		seeded = statErr == nil
		ss, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		st = ss
	}
	eng, err := engine.New(engine.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	srv, stopDash := serveGate(b, eng, 0)
	b.Cleanup(func() { stop(); stopDash(); _ = srv.Shutdown(sctx); eng.Close(); st.Close() })
	if !seeded {
		start := time.Now()
		seedTasks(b, st, n)
		b.Logf("stored %d tasks in %v", n, time.Since(start).Round(time.Second))
		if pg := os.Getenv(benchPostgresEnv); pg != "" {
			// What autovacuum does after a bulk load: without statistics the
			// planner takes a million rows for a handful.
			analyze(b, pg, fmt.Sprintf("ag_uibench_%d", n))
		}
	}
	// Fresh each run: a key, and a task with receipts, progress and an obligation.
	ck, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "root"})
	if err != nil {
		b.Fatal(err)
	}
	g := &benchGate{h: srv.Handler(), lastSeq: strconv.Itoa(n - 20)}
	g.progress = progressedTask(b, eng)
	g.cookie = signInRecorder(b, g.h, ck.APIKey)
	return g
}

// seedTasks stores n tasks straight through the store, 20,000 a
// transaction: 70% succeeded, 25% queued, 5% dead letters and canceled,
// 200 leased to 20 workers, over types t0–t4, and 10 of type "rare".
func seedTasks(b *testing.B, st store.Store, n int) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	base := now.Add(-time.Duration(n) * time.Millisecond)
	const chunk = 20000
	leased := 0
	for from := 0; from < n; from += chunk {
		err := st.Update(ctx, func(tx store.Tx) error {
			for i := from; i < from+chunk && i < n; i++ {
				at := base.Add(time.Duration(i) * time.Millisecond)
				t := &host.Task{ID: host.NewID(host.PrefixTask), Tenant: "default", Type: "t" + strconv.Itoa(i%5),
					CreatedBy: "agent.bench", Recipient: "agent.bench", Priority: 5, MaxRetries: 3,
					Params:    json.RawMessage(`{"i":` + strconv.Itoa(i) + `,"path":"/data/in/` + strconv.Itoa(i) + `.csv"}`),
					CreatedAt: at, UpdatedAt: at, AvailableAt: at}
				switch r := i % 100; {
				case i%(n/10) == 7:
					t.Type, t.State = "rare", host.StateQueued
				case r < 70:
					t.State, t.CompletedAt = host.StateSucceeded, &at
				case r < 95:
					t.State = host.StateQueued
				case r < 98:
					t.State, t.DeadReason, t.LastError = host.StateDeadLetter, "max_retries_exceeded", "boom"
				default:
					t.State = host.StateCanceled
				}
				if i%97 == 0 {
					t.Recipient = "agent.other"
				}
				if t.State == host.StateQueued && leased < 200 && i%100 == 71 {
					exp := now.Add(time.Hour)
					w := fmt.Sprintf("t%d.w%d", i%5, leased%20)
					t.State, t.LeaseID, t.WorkerID, t.LeasedAt, t.LeaseExpiresAt = host.StateLeased, host.NewID(host.PrefixLease), w, &at, &exp
					leased++
					if err := tx.UpsertWorker(ctx, store.Worker{Tenant: "default", ID: w, FirstSeen: at, LastSeen: now}); err != nil {
						return err
					}
				}
				if err := tx.InsertTask(ctx, t); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// progressedTask runs one task through the engine: queued, leased, ten
// progress reports. It has receipts and an open obligation.
func progressedTask(b *testing.B, eng *engine.Engine) string {
	b.Helper()
	ctx := context.Background()
	tt := host.NewTaskType("bench.progress")
	tt.Tenant = "default"
	if _, err := eng.PutTaskType(ctx, tt); err != nil {
		b.Fatal(err)
	}
	agent := engine.Actor{Tenant: "default", Principal: "agent.bench", Role: engine.RoleAgent}
	res, err := eng.Enqueue(ctx, agent, engine.EnqueueRequest{TaskType: tt.Name, Params: json.RawMessage(`{"big":true}`)})
	if err != nil {
		b.Fatal(err)
	}
	offers, err := eng.Lease(ctx, engine.LeaseRequest{Tenant: "default", WorkerID: "bench.progress.w1", Types: []string{tt.Name}, MaxTasks: 1})
	if err != nil || len(offers) != 1 {
		b.Fatalf("lease: %v %d", err, len(offers))
	}
	for p := 10.0; p <= 100; p += 10 {
		pct := p
		if _, err := eng.Heartbeat(ctx, engine.HeartbeatRequest{WorkerCall: engine.WorkerCall{Tenant: "default", WorkerID: "bench.progress.w1", LeaseID: offers[0].LeaseID},
			ProgressPercent: &pct, ProgressMessage: "step " + strconv.Itoa(int(p))}); err != nil {
			b.Fatal(err)
		}
	}
	return res.TaskID
}

// signInRecorder signs in through the sign-in form and returns the session cookie.
func signInRecorder(b *testing.B, h http.Handler, key string) *http.Cookie {
	b.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/login", nil))
	tok := csrfOf(b, rec.Body.String())
	var login *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == "asyncgate_login" {
			login = c
		}
	}
	req := httptest.NewRequest("POST", "/ui/login", strings.NewReader(url.Values{"csrf": {tok}, "key": {key}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(login)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	for _, c := range rec.Result().Cookies() {
		if c.Name == "asyncgate_session" {
			return c
		}
	}
	b.Fatalf("sign-in failed: %d %s", rec.Code, rec.Body.String())
	return nil
}

// eng0Stats counts the tasks already stored (from the maintained counters).
func eng0Stats(ctx context.Context, st store.Store) (int64, error) {
	var n int64
	err := st.View(ctx, func(r store.Reader) error {
		qs, err := r.QueueStats(ctx, "default")
		for _, v := range qs.ByState {
			n += v
		}
		return err
	})
	return n, err
}

func dropSchema(b *testing.B, url, schema string) {
	pgExec(b, url, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
}

func analyze(b *testing.B, url, schema string) {
	pgExec(b, url, `ANALYZE `+pgx.Identifier{schema, "tasks"}.Sanitize())
	pgExec(b, url, `ANALYZE `+pgx.Identifier{schema, "task_list"}.Sanitize())
}

func pgExec(b *testing.B, url, sql string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Errorf("%s: %v", sql, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		b.Errorf("%s: %v", sql, err)
	}
}
