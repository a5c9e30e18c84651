package sqlite_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/sqlite"
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
