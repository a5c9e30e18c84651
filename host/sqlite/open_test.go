package sqlite_test

import (
	"bytes"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncgate/asyncgate/host/sqlite"
)

// TestOpenRefusesWhatIsNotAGate: Open never takes an empty file, another
// program's database or a non-database for a new gate, and leaves them as
// they were; MustExist never creates.
func TestOpenRefusesWhatIsNotAGate(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o600)
	if _, err := sqlite.Open(empty, sqlite.Options{}); !errors.Is(err, sqlite.ErrNotGateDatabase) {
		t.Fatalf("zero-length file: %v", err)
	}
	if fi, _ := os.Stat(empty); fi.Size() != 0 {
		t.Fatalf("the empty file was written: %d bytes", fi.Size())
	}

	foreign := filepath.Join(dir, "foreign.db")
	db, err := sql.Open("sqlite", "file:"+foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, _ := os.ReadFile(foreign)
	if _, err := sqlite.Open(foreign, sqlite.Options{}); !errors.Is(err, sqlite.ErrNotGateDatabase) {
		t.Fatalf("another program's database: %v", err)
	}
	if after, _ := os.ReadFile(foreign); !bytes.Equal(before, after) {
		t.Fatal("another program's database was changed")
	}

	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, bytes.Repeat([]byte("not a database\n"), 100), 0o600)
	if _, err := sqlite.Open(text, sqlite.Options{}); !errors.Is(err, sqlite.ErrNotGateDatabase) {
		t.Fatalf("a text file: %v", err)
	}

	missing := filepath.Join(dir, "typo", "gate.db")
	if _, err := sqlite.Open(missing, sqlite.Options{MustExist: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("MustExist on a missing file: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Fatal("MustExist created the folder")
	}

	// A gate's own database opens again, with or without MustExist.
	path := filepath.Join(dir, "gate.db")
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = sqlite.Open(path, sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatalf("reopening a gate database: %v", err)
	}
	st.Close()
}
