package sqlite_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// A database a newer gate migrated past this gate's last migration is
// refused at open, with a message naming both versions, rather than served
// by code that does not know its tables.
func TestOpenRefusesANewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	tamper(t, path, `INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)`)
	st, err = sqlite.Open(path, sqlite.Options{})
	if err == nil {
		st.Close()
		t.Fatal("a database at schema version 9999 was opened")
	}
	if !strings.Contains(err.Error(), "version 9999") || !strings.Contains(err.Error(), "newer gate") {
		t.Fatalf("refusal %q does not name the versions", err)
	}
}

// A data folder from before migration 0020, where a receipt dedupe key was
// unique in its tenant, migrates to keys per issuer (issue 37): the key its
// receipt used still answers its issuer's repeat, and another principal
// using it writes a receipt of its own instead of a conflict or the first
// issuer's receipt.
func TestMigrationDedupeKeysPerIssuer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := storetest.Setup(t, func(testing.TB) storetest.Store { return st })
	old := storetest.DedupeBeforeMigration(t, b)
	b.Engine.Close()
	st.Close()
	// Wind the folder back to the schema before 0020.
	tamper(t, path, `DROP INDEX receipts_dedupe`, `CREATE UNIQUE INDEX receipts_dedupe ON receipts (tenant, dedupe_key) WHERE dedupe_key <> ''`,
		`DELETE FROM schema_migrations WHERE version = 20`)

	st, err = sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storetest.CheckDedupeAfterMigration(t, storetest.Setup(t, func(testing.TB) storetest.Store { return st }), old)
}

// Migration 0023 on a data folder made before it: the leases already granted
// get fencing tokens 1, 2, … per resource in grant order, and the next grant
// of each resource continues above them. The counter outlives the lease rows
// and a restart: deleting every lease does not make a token go backwards.
func TestMigrationFencingTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	storetest.MigrationFencingTokens(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, func(stmts ...string) { tamper(t, path, stmts...) })
}

// Migration 0040 on a data folder made before it: tasks waited on are
// marked, and settle their waiters.
func TestMigrationWaitersMarker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	storetest.MigrationWaitersMarker(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, func(stmts ...string) { tamper(t, path, stmts...) },
		`ALTER TABLE tasks DROP COLUMN has_waiters`, `DELETE FROM schema_migrations WHERE version = 40`)
}

// Migration 0035 on a data folder made before it: its tasks can be waited
// on, and settle their waiters.
func TestMigrationDependencies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	storetest.MigrationDependencies(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, func(stmts ...string) { tamper(t, path, stmts...) })
}

// Migration 0049 on a data folder made before it: a dead letter's edges
// settled then are found by its redrive.
func TestMigrationDeadLetterEdges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	storetest.MigrationDeadLetterEdges(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, func(stmts ...string) { tamper(t, path, stmts...) },
		`DROP INDEX task_dependencies_dead`, `DELETE FROM schema_migrations WHERE version = 49`)
}

// Migration 0048 on a data folder whose retention archived workflows'
// final steps before it: those workflows are archived, outcome kept.
func TestMigrationWorkflowRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	storetest.MigrationWorkflowRetention(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, func(stmts ...string) { tamper(t, path, stmts...) },
		`ALTER TABLE workflows DROP COLUMN outcome`, `ALTER TABLE workflows DROP COLUMN archived_at`, `DELETE FROM schema_migrations WHERE version = 48`)
}

// Pending settlements (migration 0055) outlive the store: a cascade cut
// at its budget, the store closed before the drainer ran and opened again,
// is settled by the next started engine.
func TestCascadeResumesAfterReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gate.db")
	storetest.CascadeAfterReopen(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}
