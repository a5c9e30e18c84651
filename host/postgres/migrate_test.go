package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// A schema a newer gate migrated past this gate's last migration is refused
// at open, with a message naming both versions, rather than served by code
// that does not know its tables.
func TestOpenRefusesANewerSchema(t *testing.T) {
	schema := newSchema(t)
	openIn(t, schema, Options{}).Close()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+` (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	st, err := Open(ctx, testURL(), Options{Schema: schema})
	if err == nil {
		st.Close()
		t.Fatal("a schema at version 9999 was opened")
	}
	if !strings.Contains(err.Error(), "version 9999") || !strings.Contains(err.Error(), "newer gate") {
		t.Fatalf("refusal %q does not name the versions", err)
	}
}

// A database from before migration 0020, where a receipt dedupe key was
// unique in its tenant, migrates to keys per issuer (issue 37): the key its
// receipt used still answers its issuer's repeat, and another principal
// using it writes a receipt of its own instead of a conflict or the first
// issuer's receipt.
func TestMigrationDedupeKeysPerIssuer(t *testing.T) {
	schema := newSchema(t)
	st, err := Open(context.Background(), testURL(), Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	old := storetest.DedupeBeforeMigration(t, b)
	b.Engine.Close()
	st.Close()
	// Wind the schema back to before 0020.
	execIn(t, schema, `DROP INDEX receipts_dedupe`, `CREATE UNIQUE INDEX receipts_dedupe ON receipts (tenant, dedupe_key) WHERE dedupe_key <> ''`,
		`DELETE FROM schema_migrations WHERE version = 20`)

	storetest.CheckDedupeAfterMigration(t, storetest.Setup(t, func(testing.TB) storetest.Store { return openIn(t, schema, Options{}) }), old)
}

// Migration 0023 on a schema made before it: the leases already granted get
// fencing tokens 1, 2, … per resource in grant order, and the next grant of
// each resource continues above them. The counter outlives the lease rows
// and a restart: deleting every lease does not make a token go backwards.
func TestMigrationFencingTokens(t *testing.T) {
	schema := newSchema(t)
	storetest.MigrationFencingTokens(t, func(t *testing.T) store.Store { return openIn(t, schema, Options{}) },
		func(stmts ...string) { execIn(t, schema, stmts...) })
}

// Migration 0035 on a database made before it: its tasks can be waited on,
// and settle their waiters.
func TestMigrationDependencies(t *testing.T) {
	schema := newSchema(t)
	storetest.MigrationDependencies(t, func(t *testing.T) store.Store { return openIn(t, schema, Options{}) },
		func(stmts ...string) { execIn(t, schema, stmts...) })
}

// Migration 0053 on a schema made before it: a dead letter's edges settled
// then are found by its redrive.
func TestMigrationDeadLetterEdges(t *testing.T) {
	schema := newSchema(t)
	storetest.MigrationDeadLetterEdges(t, func(t *testing.T) store.Store { return openIn(t, schema, Options{}) },
		func(stmts ...string) { execIn(t, schema, stmts...) },
		`DROP INDEX task_dependencies_dead`, `DELETE FROM schema_migrations WHERE version = 53`)
}

// Migration 0040 on a schema made before it: tasks waited on are marked,
// and settle their waiters.
func TestMigrationWaitersMarker(t *testing.T) {
	schema := newSchema(t)
	storetest.MigrationWaitersMarker(t, func(t *testing.T) store.Store { return openIn(t, schema, Options{}) },
		func(stmts ...string) { execIn(t, schema, stmts...) },
		`DROP FUNCTION settle_waiters`, `ALTER TABLE tasks DROP COLUMN has_waiters`, `DELETE FROM schema_migrations WHERE version = 40`)
}

// Migration 0031 on a schema made before it: tasks_unarchived is gone, and
// retention still finds the finished tasks written before the migration,
// of a type (one range of tasks_finished per state) and orphaned (a type
// no longer registered), oldest first.
func TestMigrationDropsTasksUnarchived(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	st := openIn(t, schema, Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	// Finished oldest first: t0 (succeeded), t1 (dead_letter), t2 (canceled),
	// t3 (succeeded, finished after the cut-off).
	states := []host.TaskState{host.StateSucceeded, host.StateDeadLetter, host.StateCanceled, host.StateSucceeded}
	if err := st.Update(ctx, func(tx store.Tx) error {
		for i, s := range states {
			done := base.Add(time.Duration(i) * time.Minute)
			if i == 3 {
				done = time.Now().Add(time.Hour)
			}
			if err := tx.InsertTask(ctx, &host.Task{ID: fmt.Sprintf("task_%d", i), Tenant: "acme", Type: "gone", CreatedBy: "agent.a",
				Recipient: "agent.a", State: s, Params: json.RawMessage(`{}`), CreatedAt: base, UpdatedAt: done, AvailableAt: base,
				CompletedAt: &done}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// Wind the schema back to before 0031.
	execIn(t, schema, `CREATE INDEX tasks_unarchived ON tasks (completed_at) WHERE state IN ('succeeded', 'canceled', 'dead_letter')`,
		`DELETE FROM schema_migrations WHERE version = 31`)

	st = openIn(t, schema, Options{})
	var n int
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'tasks_unarchived'`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("tasks_unarchived is still there after the migration")
	}
	due := []host.TaskState{host.StateSucceeded, host.StateCanceled, host.StateDeadLetter}
	for _, q := range []store.RetentionQuery{
		{Tenant: "acme", Type: "gone", States: due, Before: time.Now(), Limit: 10},
		{Orphans: true, States: due, Before: time.Now(), Limit: 10},
	} {
		var got []string
		if err := st.View(ctx, func(r store.Reader) error {
			ts, err := r.RetentionDue(ctx, q)
			for _, tk := range ts {
				got = append(got, tk.ID)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if want := []string{"task_0", "task_1", "task_2"}; !slices.Equal(got, want) {
			t.Fatalf("RetentionDue(orphans %v) after the migration: %v, want %v", q.Orphans, got, want)
		}
		q.Limit = 2
		got = got[:0]
		if err := st.View(ctx, func(r store.Reader) error {
			ts, err := r.RetentionDue(ctx, q)
			for _, tk := range ts {
				got = append(got, tk.ID)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if want := []string{"task_0", "task_1"}; !slices.Equal(got, want) {
			t.Fatalf("RetentionDue(orphans %v, limit 2): %v, want %v", q.Orphans, got, want)
		}
	}
}

// TestMigrationDropsTasksState: 0046 drops (tenant, state, seq) from a
// database that has it, and the tasks it held list by state, in seq order
// and paged, from tasks_state_type_seq.
func TestMigrationDropsTasksState(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	st := openIn(t, schema, Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	types := []string{"b", "a", "c", "a", "b"}
	if err := st.Update(ctx, func(tx store.Tx) error {
		for i, ty := range types {
			if err := tx.InsertTask(ctx, &host.Task{ID: fmt.Sprintf("task_%d", i), Tenant: "acme", Type: ty, CreatedBy: "agent.a",
				Recipient: "agent.a", State: host.StateQueued, Params: json.RawMessage(`{}`), CreatedAt: base, UpdatedAt: base, AvailableAt: base}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// Wind the schema back to before 0046.
	execIn(t, schema, `CREATE INDEX tasks_state ON tasks (tenant, state, seq)`, `DELETE FROM schema_migrations WHERE version = 46`)

	st = openIn(t, schema, Options{})
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'tasks_state'`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("tasks_state is still there after the migration")
	}
	var got []string
	cursor := ""
	for {
		var ts []*host.Task
		if err := st.View(ctx, func(r store.Reader) error {
			var err error
			ts, cursor, err = r.ListTasks(ctx, store.TaskFilter{Tenant: "acme", States: []host.TaskState{host.StateQueued}, Cursor: cursor, Limit: 2})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, tk := range ts {
			got = append(got, tk.ID)
		}
		if cursor == "" {
			break
		}
	}
	if want := []string{"task_0", "task_1", "task_2", "task_3", "task_4"}; !slices.Equal(got, want) {
		t.Fatalf("queued tasks after the migration: %v, want %v", got, want)
	}
}

// TestMigrationLeaseIDOldForm: 0048 narrows tasks_lease_id to lease ids of
// the older form (no '.'); a task leased before it, under such an id, is
// still found by it, and a lease id that carries its task is found through
// the id index.
func TestMigrationLeaseIDOldForm(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	st := openIn(t, schema, Options{})
	now := time.Now().Truncate(time.Microsecond)
	exp := now.Add(time.Hour)
	oldLease := host.NewID(host.PrefixLease)
	leased := func(id, lease string) *host.Task {
		return &host.Task{ID: id, Tenant: "acme", Type: "work", CreatedBy: "agent.a", Recipient: "agent.a",
			State: host.StateLeased, Params: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now, AvailableAt: now,
			LeaseID: lease, WorkerID: "w.1", LeasedAt: &now, LeaseExpiresAt: &exp, LeaseSeconds: 3600}
	}
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.InsertTask(ctx, leased("T-OLD", oldLease)) }); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// Wind the schema back to before 0048.
	execIn(t, schema, `DROP INDEX tasks_lease_id`, `CREATE INDEX tasks_lease_id ON tasks (lease_id) WHERE lease_id <> ''`,
		`DELETE FROM schema_migrations WHERE version = 48`)

	st = openIn(t, schema, Options{})
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var def string
	if err := conn.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'tasks_lease_id'`, schema).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "strpos") {
		t.Fatalf("tasks_lease_id after the migration: %s", def)
	}
	newLease := host.NewLeaseID("T-NEW")
	if err := st.Update(ctx, func(tx store.Tx) error { return tx.InsertTask(ctx, leased("T-NEW", newLease)) }); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{oldLease, "T-OLD"}, {newLease, "T-NEW"}} {
		if err := st.Update(ctx, func(tx store.Tx) error {
			tk, err := tx.GetTaskByLease(ctx, c[0])
			if err != nil {
				return err
			}
			if tk.ID != c[1] {
				t.Errorf("GetTaskByLease(%s) = %s, want %s", c[0], tk.ID, c[1])
			}
			return nil
		}); err != nil {
			t.Fatalf("GetTaskByLease(%s) after the migration: %v", c[0], err)
		}
	}
}

// TestMigrationDropsTasksReady: 0049 drops the untyped ready index from a
// database that has it; a claim naming no type then takes the queued tasks
// of every type, highest priority first and oldest first within one, and
// the stats still find the oldest ready task.
func TestMigrationDropsTasksReady(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	st := openIn(t, schema, Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	// task_3 is not available yet.
	tasks := []struct {
		ty   string
		prio int
		at   time.Time
	}{{"b", 5, base}, {"a", 5, base.Add(time.Minute)}, {"c", 9, base.Add(2 * time.Minute)}, {"a", 9, later}, {"b", 1, base}}
	if err := st.Update(ctx, func(tx store.Tx) error {
		for i, c := range tasks {
			if err := tx.InsertTask(ctx, &host.Task{ID: fmt.Sprintf("task_%d", i), Tenant: "acme", Type: c.ty, CreatedBy: "agent.a",
				Recipient: "agent.a", State: host.StateQueued, Priority: c.prio, Params: json.RawMessage(`{}`), CreatedAt: base, UpdatedAt: base,
				AvailableAt: c.at}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	// Wind the schema back to before 0049.
	execIn(t, schema, `CREATE INDEX tasks_ready ON tasks (tenant, priority DESC, seq) WHERE state = 'queued'`,
		`DELETE FROM schema_migrations WHERE version = 49`)

	st = openIn(t, schema, Options{})
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'tasks_ready'`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("tasks_ready is still there after the migration")
	}
	var qs store.QueueStats
	if err := st.View(ctx, func(r store.Reader) error {
		var err error
		qs, err = r.QueueStats(ctx, "acme")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if age := qs.OldestReadyAge; age < time.Hour-time.Minute || age > time.Hour+time.Minute {
		t.Fatalf("oldest ready after the migration is %v old, want about an hour", age)
	}
	var got []string
	if err := st.Update(ctx, func(tx store.Tx) error {
		ts, err := tx.ClaimTasks(ctx, store.ClaimQuery{Tenant: "acme", Now: time.Now(), Limit: 3, Grant: func(t *host.Task) {
			now := time.Now()
			t.State, t.LeaseID, t.WorkerID, t.LeasedAt, t.LeaseExpiresAt = host.StateLeased, host.NewLeaseID(t.ID), "w.1", &now, new(now.Add(time.Minute))
		}})
		for _, tk := range ts {
			got = append(got, tk.ID)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"task_2", "task_0", "task_1"}; !slices.Equal(got, want) {
		t.Fatalf("an untyped claim after the migration: %v, want %v", got, want)
	}
}

// Migration 0051 on a schema whose retention archived workflows' final
// steps before it: those workflows are archived, outcome kept.
func TestMigrationWorkflowRetention(t *testing.T) {
	schema := newSchema(t)
	storetest.MigrationWorkflowRetention(t, func(t *testing.T) store.Store { return openIn(t, schema, Options{}) },
		func(stmts ...string) { execIn(t, schema, stmts...) },
		`ALTER TABLE workflows DROP COLUMN outcome`, `ALTER TABLE workflows DROP COLUMN archived_at`, `DELETE FROM schema_migrations WHERE version = 51`)
}

// Pending settlements (migration 0055) outlive the store: a cascade cut
// at its budget, the store closed before the drainer ran and opened again,
// is settled by the next started engine.
func TestCascadeResumesAfterReopen(t *testing.T) {
	schema := newSchema(t)
	storetest.CascadeAfterReopen(t, func(t *testing.T) store.Store { return openIn(t, schema, Options{}) })
}
