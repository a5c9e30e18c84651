// Package sqlitetest opens SQLite stores for tests. Every store starts as a
// copy of one database the embedded migrations made in this test process:
// under -race, migrating a new file costs about 300 ms, and the conformance
// suite opens hundreds of stores.
package sqlitetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host/sqlite"
)

var (
	once     sync.Once
	template []byte // a database file fresh from the migrations, checkpointed
	tmplErr  error
)

// migrated returns the bytes of a database file the migrations made: Open
// on a new file, Close (which checkpoints the write-ahead log into the file
// and removes it), then the file's bytes.
func migrated() ([]byte, error) {
	once.Do(func() {
		dir, err := os.MkdirTemp("", "asyncgate-sqlitetest-")
		if err != nil {
			tmplErr = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "gate.db")
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			tmplErr = err
			return
		}
		if err := st.Close(); err != nil {
			tmplErr = err
			return
		}
		if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
			tmplErr = fmt.Errorf("sqlitetest: the template's write-ahead log was not checkpointed (%d bytes)", fi.Size())
			return
		}
		template, tmplErr = os.ReadFile(path)
	})
	return template, tmplErr
}

// Path writes a fresh, migrated, empty gate database into a temporary
// folder of t's and returns its path, for tests that open it themselves.
func Path(t testing.TB) string {
	t.Helper()
	b, err := migrated()
	if err != nil {
		t.Fatalf("sqlitetest: migrate a template database: %v", err)
	}
	path := filepath.Join(t.TempDir(), "gate.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Open opens a fresh, empty store (a copy of the migrated template) in a
// temporary folder of t's, closed when the test ends.
func Open(t testing.TB, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(Path(t), opts)
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
