package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/postgres"
)

// TestDBWritersFlagReachesTheStore: --db-writers (and db_writers in the
// config, ASYNCGATE_DB_WRITERS) sets how many writers the PostgreSQL store
// runs; out of range, or with SQLite, it is refused with a clear error.
func TestDBWritersFlagReachesTheStore(t *testing.T) {
	db := postgresSchema(t)
	cfg, err := parseServeFlags([]string{"--db", db, "--db-writers", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DBWriters != 3 {
		t.Fatalf("db_writers %d, want 3", cfg.DBWriters)
	}
	st, _, err := openStoreWith(context.Background(), t.TempDir(), cfg.DB, openOrCreate, postgres.Options{Writers: cfg.DBWriters})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pg, ok := st.(*postgres.Store)
	if !ok {
		t.Fatalf("store %T, want PostgreSQL", st)
	}
	if pg.Writers() != 3 {
		t.Fatalf("the store runs %d writers, want 3", pg.Writers())
	}
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--db", db, "--db-writers", "17"}, want: "--db-writers: must be"},
		{args: []string{"--db", db, "--db-writers", "-1"}, want: "--db-writers: must be"},
		{args: []string{"--db-writers", "2"}, want: "needs PostgreSQL"},
		{args: []string{"--db", "sqlite:/tmp/x.db", "--db-writers", "4"}, want: "needs PostgreSQL"},
		{env: "17", want: "ASYNCGATE_DB_WRITERS"},
	} {
		if c.env != "" {
			t.Setenv("ASYNCGATE_DB_WRITERS", c.env)
		}
		_, err := parseServeFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %s: error %v, want one saying %q", c.args, c.env, err, c.want)
		}
	}
}
