package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
