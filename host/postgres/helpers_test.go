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
		// Every test of the package hangs on this one answer: under CI, a
		// server slow to answer once (the machine busy) is asked again for
		// up to 30 s before the whole package fails.
		bound := 5 * time.Second
		if os.Getenv("CI") != "" {
			bound = 30 * time.Second
		}
		deadline := time.Now().Add(bound)
		for {
			reachErr = reach()
			if reachErr == nil || time.Now().After(deadline) {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	if reachErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s is unreachable (CI is set, so this fails; run scripts/ensure-postgres.sh): %v", testURL(), reachErr)
		}
		t.Skipf("PostgreSQL at %s is unreachable; set ASYNCGATE_TEST_POSTGRES or run scripts/ensure-postgres.sh: %v", testURL(), reachErr)
	}
}

// reach connects to the test server once and pings it.
func reach() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
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
