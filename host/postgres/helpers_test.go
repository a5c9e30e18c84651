package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultTestURL is the database the tests use unless ASYNCGATE_TEST_POSTGRES says otherwise.
const DefaultTestURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func testURL() string {
	if u := os.Getenv("ASYNCGATE_TEST_POSTGRES"); u != "" {
		return u
	}
	return DefaultTestURL
}

var (
	reachOnce sync.Once
	reachErr  error
)

// requirePostgres skips the test when no server answers, except in CI (CI set),
// where a missing database is a failure, never a silent skip.
func requirePostgres(t testing.TB) {
	t.Helper()
	reachOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testURL())
		if err != nil {
			reachErr = err
			return
		}
		reachErr = conn.Ping(ctx)
		conn.Close(ctx)
	})
	if reachErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s is unreachable (CI is set, so this fails; run scripts/ensure-postgres.sh): %v", testURL(), reachErr)
		}
		t.Skipf("PostgreSQL at %s is unreachable; set ASYNCGATE_TEST_POSTGRES or run scripts/ensure-postgres.sh: %v", testURL(), reachErr)
	}
}

// newSchema returns a fresh schema name that is dropped with everything in it
// when the test ends.
func newSchema(t testing.TB) string {
	t.Helper()
	requirePostgres(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "ag_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testURL())
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// openIn opens a store on schema; it is closed when the test ends (before the
// schema is dropped, as cleanups run last-in first-out).
func openIn(t testing.TB, schema string, opts Options) *Store {
	t.Helper()
	opts.Schema = schema
	st, err := Open(context.Background(), testURL(), opts)
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openTest opens a store on a fresh schema of its own.
func openTest(t testing.TB) *Store {
	t.Helper()
	return openIn(t, newSchema(t), Options{})
}
