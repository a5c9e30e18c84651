package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

func openTemp(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestConformance(t *testing.T) { storetest.Run(t, openTemp) }

// TestFaults fails each write path at each step through a fault-injecting
// wrapper and checks nothing diverges (storetest.RunFaults).
func TestFaults(t *testing.T) { storetest.RunFaults(t, openTemp) }
