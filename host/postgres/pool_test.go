package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// TestMain drops the schemas the pool made once every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	dropPooledSchemas()
	os.Exit(code)
}

// schemaPool lends the conformance suites migrated schemas and takes them
// back emptied. Creating and migrating a schema, then dropping it, costs
// the server about half a second (catalog work, not commits), and the three
// suites open some 700 stores; emptying a used schema back to what the
// migrations left in it costs a few milliseconds. A schema is lent to one
// test at a time and given back only after its store has closed.
var schemaPool struct {
	sync.Mutex
	template string   // migrated once, never lent: the rows a fresh schema holds
	reset    string   // the script that empties a lent schema back to the template's rows
	free     []string // emptied, ready to lend
	made     []string // every schema the pool made, the template included
}

// pooledSchema returns a migrated schema holding what the migrations leave
// in a new one and nothing else, lent to t until it ends; a store opened on
// it must close before then (openIn's cleanup runs first).
func pooledSchema(t testing.TB) string {
	t.Helper()
	requirePostgres(t)
	schema, err := borrowSchema()
	if err != nil {
		t.Fatalf("pooled schema: %v", err)
	}
	t.Cleanup(func() {
		if err := giveBackSchema(schema); err != nil {
			t.Errorf("pooled schema %s: %v", schema, err)
		}
	})
	return schema
}

// openPooled opens a store on a pooled schema.
func openPooled(t testing.TB, opts Options) *Store {
	t.Helper()
	return openIn(t, pooledSchema(t), opts)
}

func borrowSchema() (string, error) {
	schemaPool.Lock()
	if schemaPool.template == "" {
		tmpl, err := migratedSchema(poolName())
		if err == nil {
			schemaPool.reset, err = resetScript(tmpl)
		}
		if err != nil {
			schemaPool.Unlock()
			return "", err
		}
		schemaPool.template = tmpl
	}
	if n := len(schemaPool.free); n > 0 {
		s := schemaPool.free[n-1]
		schemaPool.free = schemaPool.free[:n-1]
		schemaPool.Unlock()
		return s, nil
	}
	schema := poolName()
	schemaPool.Unlock()
	return migratedSchema(schema)
}

// poolName returns a new schema name, recorded to be dropped when the tests
// end. Called with schemaPool held.
func poolName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "ag_test_pool_" + hex.EncodeToString(b[:])
	schemaPool.made = append(schemaPool.made, schema)
	return schema
}

// migratedSchema creates schema and applies the migrations to it, as Open
// does, without starting a store (whose writers could write rows of their
// own) on it.
func migratedSchema(schema string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		return "", err
	}
	if err := createSchema(ctx, cfg.ConnConfig, schema); err != nil {
		return "", err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	return schema, (&Store{pool: pool}).migrate(ctx)
}

// resetScript builds the statements that bring a schema made like tmpl back
// to tmpl's contents: every table emptied, the template's rows (the
// migrations' own: the ledger's head, the migrations applied, …) copied in,
// every sequence set where the template's stands, and a new database
// identity, as migration 0006 draws one for each new schema.
func resetScript(tmpl string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	q := pgx.Identifier{tmpl}.Sanitize()
	var sb strings.Builder
	tables, err := names(ctx, conn, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename`, tmpl)
	if err != nil {
		return "", err
	}
	identity := false
	for _, tb := range tables {
		id := pgx.Identifier{tb}.Sanitize()
		fmt.Fprintf(&sb, "DELETE FROM %s;\n", id)
		var rows bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+q+`.`+id+`)`).Scan(&rows); err != nil {
			return "", err
		}
		if rows {
			fmt.Fprintf(&sb, "INSERT INTO %s SELECT * FROM %s.%s;\n", id, q, id)
		}
		identity = identity || tb == "gate_identity"
	}
	if !identity {
		return "", fmt.Errorf("the template has no gate_identity table: the reset script is out of step with the migrations")
	}
	sb.WriteString("UPDATE gate_identity SET database_id = md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text);\n")
	seqs, err := names(ctx, conn, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'S' ORDER BY c.relname`, tmpl)
	if err != nil {
		return "", err
	}
	for _, sq := range seqs {
		var last int64
		var called bool
		if err := conn.QueryRow(ctx, `SELECT last_value, is_called FROM `+q+`.`+pgx.Identifier{sq}.Sanitize()).Scan(&last, &called); err != nil {
			return "", err
		}
		fmt.Fprintf(&sb, "SELECT setval('%s', %d, %t);\n", pgx.Identifier{sq}.Sanitize(), last, called)
	}
	return sb.String(), nil
}

func names(ctx context.Context, conn *pgx.Conn, query, schema string) ([]string, error) {
	rows, err := conn.Query(ctx, query, schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// giveBackSchema empties schema back to the template's rows and returns it
// to the pool; a schema that cannot be emptied (a lock held past its test)
// is dropped instead.
func giveBackSchema(schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	schemaPool.Lock()
	reset := schemaPool.reset
	schemaPool.Unlock()
	script := "BEGIN;\nSET LOCAL lock_timeout = '5s';\nSET LOCAL search_path = " + pgx.Identifier{schema}.Sanitize() + ";\n" + reset + "COMMIT;\n"
	// The simple protocol runs a multi-statement script.
	if _, err := conn.PgConn().Exec(ctx, script).ReadAll(); err != nil {
		_, _ = conn.Exec(context.Background(), `ROLLBACK`)
		_, derr := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		return fmt.Errorf("empty it for the next test: %w (dropped: %v)", err, derr)
	}
	schemaPool.Lock()
	schemaPool.free = append(schemaPool.free, schema)
	schemaPool.Unlock()
	return nil
}

// dropPooledSchemas drops every schema the pool made.
func dropPooledSchemas() {
	schemaPool.Lock()
	defer schemaPool.Unlock()
	if len(schemaPool.made) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		fmt.Fprintf(os.Stderr, "drop pooled schemas: %v\n", err)
		return
	}
	defer conn.Close(context.Background())
	for _, s := range schemaPool.made {
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`); err != nil {
			fmt.Fprintf(os.Stderr, "drop pooled schema %s: %v\n", s, err)
		}
	}
	schemaPool.made, schemaPool.free = nil, nil
}

// TestPooledSchemaIsLikeANewOne uses a pooled schema (tasks, receipts, an
// inbox item, a checkpoint), gives it back, and finds in it exactly the
// rows and sequence positions of a schema the migrations just made, but a
// database identity of its own.
func TestPooledSchemaIsLikeANewOne(t *testing.T) {
	requirePostgres(t)
	schema, err := borrowSchema()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("use", func(t *testing.T) {
		st := openIn(t, schema, Options{})
		b := storetest.Setup(t, func(testing.TB) store.Store { return st })
		for range 3 {
			b.Enqueue(t, "work")
		}
		b.Complete(t, "w.pool", b.LeaseOne(t, "w.pool"))
		if err := st.Checkpoint(b.Ctx); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var used int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "tasks"}.Sanitize()).Scan(&used); err != nil || used != 3 {
		t.Fatalf("tasks before the give-back: %d, %v (want 3)", used, err)
	}
	if err := giveBackSchema(schema); err != nil {
		t.Fatal(err)
	}
	schemaPool.Lock()
	tmpl := schemaPool.template
	schemaPool.Unlock()
	tables, err := names(ctx, conn, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename`, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		a, b := pgx.Identifier{schema, tb}.Sanitize(), pgx.Identifier{tmpl, tb}.Sanitize()
		var only int
		q := fmt.Sprintf(`SELECT count(*) FROM ((TABLE %s EXCEPT ALL TABLE %s) UNION ALL (TABLE %s EXCEPT ALL TABLE %s)) d`, a, b, b, a)
		if err := conn.QueryRow(ctx, q).Scan(&only); err != nil {
			t.Fatal(err)
		}
		switch {
		case tb == "gate_identity" && only != 2:
			t.Errorf("gate_identity: %d rows differ from the template's, want 2 (an identity of its own)", only)
		case tb != "gate_identity" && only != 0:
			t.Errorf("%s: %d rows differ from the template's", tb, only)
		}
	}
	seqs, err := names(ctx, conn, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'S' ORDER BY c.relname`, tmpl)
	if err != nil || len(seqs) == 0 {
		t.Fatalf("sequences: %v, %v", seqs, err)
	}
	for _, sq := range seqs {
		var got, want string
		for s, v := range map[string]*string{schema: &got, tmpl: &want} {
			if err := conn.QueryRow(ctx, `SELECT last_value || '/' || is_called FROM `+pgx.Identifier{s, sq}.Sanitize()).Scan(v); err != nil {
				t.Fatal(err)
			}
		}
		if got != want {
			t.Errorf("sequence %s at %s, the template's at %s", sq, got, want)
		}
	}
}
