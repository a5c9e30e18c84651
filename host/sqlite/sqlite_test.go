package sqlite_test

import (
	"testing"

	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/sqlite/sqlitetest"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// openTemp opens a fresh store: a copy of the database the migrations made
// once in this process (sqlitetest), so each of the suite's hundreds of
// cases does not migrate a file of its own.
func openTemp(t testing.TB) store.Store {
	t.Helper()
	return sqlitetest.Open(t, sqlite.Options{})
}

func TestConformance(t *testing.T) { storetest.Run(t, openTemp) }

// TestFaults fails each write path at each step through a fault-injecting
// wrapper and checks nothing diverges (storetest.RunFaults).
func TestFaults(t *testing.T) { storetest.RunFaults(t, openTemp) }
