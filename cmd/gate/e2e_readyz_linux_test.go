//go:build linux

package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
)

// setFileSizeLimit sets RLIMIT_FSIZE of process pid (prlimit(2)): past that
// offset every write to a regular file fails with EFBIG, as on a full disk.
func setFileSizeLimit(t *testing.T, pid int, limit uint64) {
	t.Helper()
	var old syscall.Rlimit
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_FSIZE, 0, uintptr(unsafe.Pointer(&old)), 0, 0); e != 0 {
		t.Fatalf("prlimit: %v", e)
	}
	lim := syscall.Rlimit{Cur: min(limit, old.Max), Max: old.Max}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_FSIZE, uintptr(unsafe.Pointer(&lim)), 0, 0, 0); e != 0 {
		t.Fatalf("prlimit: %v", e)
	}
}

// TestE2EReadyzWhenWritesFail: /readyz answers 503 when the store cannot
// commit a write (issue 17 item 4), though reads still work, and 200 again
// once writes do.
func TestE2EReadyzWhenWritesFail(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	want(t, call(t, "GET", g.URL+"/readyz", "", nil), 200, "")
	setFileSizeLimit(t, g.cmd.Process.Pid, 1) // no file of the gate can grow or be written past byte 1
	var last resp
	waitFor(t, 30*time.Second, "/readyz still answers 200 while no write can commit", func() bool {
		last = call(t, "GET", g.URL+"/readyz", "", nil)
		return last.Status != 200
	})
	want(t, last, 503, "database_unavailable")
	// The probe agrees with a real write, and reads still work.
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/probe", g.Admin, map[string]any{}), 503, "database_unavailable")
	want(t, call(t, "GET", g.URL+"/v1/tasks", g.Admin, nil), 200, "")

	setFileSizeLimit(t, g.cmd.Process.Pid, ^uint64(0))
	waitFor(t, 30*time.Second, "/readyz did not recover after writes work again", func() bool {
		last = call(t, "GET", g.URL+"/readyz", "", nil)
		return last.Status == 200
	})
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/probe", g.Admin, map[string]any{}), 200, "")
}

// TestE2EOperatorDoorsBothStores runs the operator's doors on each store
// (issue 38 item 1: /readyz answered 503 on every PostgreSQL host, its read
// probe naming a tenant with a NUL byte PostgreSQL refuses). On SQLite and on
// PostgreSQL alike: /healthz answers 200 with the version; /readyz answers
// 200 naming the driver; /metrics wants an admin key and carries the store's
// series; /v1/admin/stats counts what was queued. Then the store stops
// answering (SQLite: no file of the gate can be written; PostgreSQL: the
// gate's schema is renamed away, so no table of it is found): /readyz turns
// 503 database_unavailable with a detail naming the store's error, while
// /healthz stays 200 (the process runs); once the store answers again,
// /readyz is 200 again.
func TestE2EOperatorDoorsBothStores(t *testing.T) {
	t.Parallel()
	cases := []struct {
		driver string
		start  func(t *testing.T) (g *gateProc, down, up func())
		why    string // in /readyz's detail while the store is down
	}{{
		driver: "sqlite",
		start: func(t *testing.T) (*gateProc, func(), func()) {
			g := startGate(t, t.TempDir())
			pid := g.cmd.Process.Pid
			return g, func() { setFileSizeLimit(t, pid, 1) }, func() { setFileSizeLimit(t, pid, ^uint64(0)) }
		},
		why: "sqlite",
	}, {
		driver: "postgres",
		start: func(t *testing.T) (*gateProc, func(), func()) {
			db := postgresSchema(t)
			g := startGate(t, t.TempDir(), "--db", db)
			schema := db[strings.LastIndex(db, "search_path=")+len("search_path="):]
			base := strings.TrimRight(strings.TrimSuffix(db, "search_path="+schema), "?&")
			rename := func(from, to string) func() {
				return func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					c, err := pgx.Connect(ctx, base)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close(ctx)
					if _, err := c.Exec(ctx, "ALTER SCHEMA "+from+" RENAME TO "+to); err != nil {
						t.Fatal(err)
					}
				}
			}
			away := schema + "_away"
			t.Cleanup(func() { // the schema's own cleanup drops it under its name
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if c, err := pgx.Connect(ctx, base); err == nil {
					_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+away+" CASCADE")
					c.Close(ctx)
				}
			})
			return g, rename(schema, away), rename(away, schema)
		},
		why: "does not exist",
	}}
	for _, tc := range cases {
		t.Run(tc.driver, func(t *testing.T) {
			t.Parallel()
			g, down, up := tc.start(t)

			r := call(t, "GET", g.URL+"/healthz", "", nil)
			want(t, r, 200, "")
			if h := r.JSON(t); h["status"] != "ok" || h["version"] == "" || h["version"] == nil {
				t.Fatalf("/healthz %s", r.Body)
			}
			r = call(t, "GET", g.URL+"/readyz", "", nil)
			want(t, r, 200, "")
			if h := r.JSON(t); h["status"] != "ready" || h["database"] != tc.driver {
				t.Fatalf("/readyz %s, want status ready and database %s", r.Body, tc.driver)
			}

			agent := g.newKey(t, "agent", "doors", "")
			g.putType(t, "doors", map[string]any{}, "")
			for range 2 {
				g.enqueue(t, agent, "doors", map[string]any{})
			}
			want(t, call(t, "GET", g.URL+"/v1/admin/stats", agent, nil), 403, "forbidden")
			r = call(t, "GET", g.URL+"/v1/admin/stats", g.Admin, nil)
			want(t, r, 200, "")
			var st struct {
				Tenant  string           `json:"tenant"`
				ByState map[string]int64 `json:"by_state"`
				ByType  map[string]int64 `json:"by_type"`
			}
			r.Into(t, &st)
			if st.Tenant != "default" || st.ByState["queued"] != 2 || st.ByType["doors"] != 2 {
				t.Fatalf("/v1/admin/stats %s, want 2 queued tasks of type doors in tenant default", r.Body)
			}
			// Every counted state shows, 0 included.
			for _, s := range []string{"waiting", "scheduled", "leased", "succeeded", "canceled", "dead_letter"} {
				if n, ok := st.ByState[s]; !ok || n != 0 {
					t.Errorf("/v1/admin/stats by_state[%s] = %d (present %v), want 0", s, n, ok)
				}
			}

			want(t, call(t, "GET", g.URL+"/metrics", "", nil), 401, "unauthorized")
			want(t, call(t, "GET", g.URL+"/metrics", agent, nil), 403, "forbidden")
			r = call(t, "GET", g.URL+"/metrics", g.Admin, nil)
			want(t, r, 200, "")
			for _, m := range []string{`asyncgate_tasks_queued_total`, `asyncgate_task_queue_depth`, `asyncgate_store_writers `,
				`asyncgate_store_batches_total`, `asyncgate_receipts_total`, `asyncgate_http_request_duration_seconds`,
				`asyncgate_tasks_by_state{state="leased"} 0`, `asyncgate_tasks_by_state{state="queued"} 2`} {
				if !strings.Contains(string(r.Body), m) {
					t.Errorf("/metrics lacks %s", m)
				}
			}
			// The store's writers (two by default on PostgreSQL) and the
			// enqueue budget, which holds nothing without a backlog.
			writers := map[string]string{"sqlite": "1", "postgres": "2"}[tc.driver]
			for _, m := range []string{"asyncgate_store_writers " + writers + "\n", "asyncgate_store_enqueues_held_total 0\n",
				"asyncgate_store_enqueue_holds_expired_total 0\n", "asyncgate_store_enqueues_waiting 0\n"} {
				if !strings.Contains(string(r.Body), m) {
					t.Errorf("/metrics lacks %q", m)
				}
			}

			down()
			var last resp
			waitFor(t, 30*time.Second, "/readyz still answers 200 while the store is down", func() bool {
				last = call(t, "GET", g.URL+"/readyz", "", nil)
				return last.Status != 200
			})
			want(t, last, 503, "database_unavailable")
			if d, _ := last.JSON(t)["detail"].(string); !strings.Contains(d, tc.why) {
				t.Fatalf("/readyz detail %q does not name the store's error (%q)", d, tc.why)
			}
			want(t, call(t, "GET", g.URL+"/healthz", "", nil), 200, "")

			up()
			waitFor(t, 30*time.Second, "/readyz did not answer 200 again once the store did", func() bool {
				last = call(t, "GET", g.URL+"/readyz", "", nil)
				return last.Status == 200
			})
			g.enqueue(t, agent, "doors", map[string]any{})
		})
	}
}

// pgExec runs statements on the database at url (with its search_path).
func pgExec(t *testing.T, url string, sql ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range sql {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestE2EReadyzTurnsWithTheFirstRefusedCommit: the first /readyz after an
// enqueue the database refused answers 503 (issue 38 item 4: on a full disk
// enqueues failed 0.3-0.6 s after it filled and /readyz turned only 1.8-4.4 s
// after: its probe's small write still fit, or its outcome of up to a second
// earlier still answered).
// SQLite: no file of the gate can be written (RLIMIT_FSIZE 1). PostgreSQL:
// an insert into tasks fails as on a full disk (SQLSTATE 53100), while the
// probe's own commit still succeeds, so only the refused enqueue can tell.
// Once writes work again, /readyz is 200 again and enqueues succeed.
func TestE2EReadyzTurnsWithTheFirstRefusedCommit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		driver string
		start  func(t *testing.T) (g *gateProc, refuse, allow func())
	}{{
		driver: "sqlite",
		start: func(t *testing.T) (*gateProc, func(), func()) {
			g := startGate(t, t.TempDir())
			pid := g.cmd.Process.Pid
			return g, func() { setFileSizeLimit(t, pid, 1) }, func() { setFileSizeLimit(t, pid, ^uint64(0)) }
		},
	}, {
		driver: "postgres",
		start: func(t *testing.T) (*gateProc, func(), func()) {
			db := postgresSchema(t)
			g := startGate(t, t.TempDir(), "--db", db)
			return g, func() {
					pgExec(t, db, `CREATE FUNCTION refuse_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
						RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$`,
						`CREATE TRIGGER refuse_insert BEFORE INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION refuse_insert()`)
				}, func() {
					pgExec(t, db, `DROP TRIGGER refuse_insert ON tasks`)
				}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.driver, func(t *testing.T) {
			t.Parallel()
			g, refuse, allow := tc.start(t)
			agent := g.newKey(t, "agent", "full", "")
			g.putType(t, "full", map[string]any{}, "")
			g.enqueue(t, agent, "full", map[string]any{})
			want(t, call(t, "GET", g.URL+"/readyz", "", nil), 200, "")

			refuse()
			want(t, call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "full"}), 503, "database_unavailable")
			r := call(t, "GET", g.URL+"/readyz", "", nil)
			want(t, r, 503, "database_unavailable")
			t.Logf("/readyz after the refused enqueue: %s", r.Body)

			allow()
			waitFor(t, 30*time.Second, "/readyz did not answer 200 again once writes worked", func() bool {
				return call(t, "GET", g.URL+"/readyz", "", nil).Status == 200
			})
			g.enqueue(t, agent, "full", map[string]any{})
		})
	}
}
