package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	msqlite "modernc.org/sqlite"
)

// ErrNotGateDatabase marks a file Open refuses because it is not an AsyncGate
// database: empty (0 bytes), not SQLite at all, or an SQLite database
// without the gate's tables. Open never writes to such a file.
var ErrNotGateDatabase = errors.New("not an AsyncGate database")

// sqliteNotADB is SQLite's SQLITE_NOTADB result code.
const sqliteNotADB = 26

// checkFile looks at path before Open touches it. It reports whether the
// file exists; a missing file is an error wrapping fs.ErrNotExist when
// mustExist is set, and an empty file is always refused: SQLite would take
// it for a new database and the gate would start afresh where a gate's data
// was expected.
func checkFile(path string, mustExist bool) (bool, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if mustExist {
			return false, fmt.Errorf("sqlite: %s does not exist: %w", path, fs.ErrNotExist)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("sqlite: %w", err)
	case !fi.Mode().IsRegular():
		return true, fmt.Errorf("sqlite: %s is not a regular file: %w", path, ErrNotGateDatabase)
	case fi.Size() == 0:
		if wal, err := os.Stat(path + "-wal"); err == nil && wal.Size() > 0 {
			return true, nil // the content is still in the write-ahead log; SQLite recovers it
		}
		return true, fmt.Errorf("sqlite: %s is empty (0 bytes): %w (if the gate's first start was interrupted, remove the file; if it held a gate, restore it from a backup)", path, ErrNotGateDatabase)
	}
	return true, nil
}

// checkGateSchema opens an existing database read-only and refuses it unless
// it holds the gate's tables, before Open switches it to WAL mode or
// migrates anything into it.
func checkGateSchema(path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	defer db.Close()
	var n int
	err = db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('schema_migrations', 'receipts')`).Scan(&n)
	var se *msqlite.Error
	switch {
	case errors.As(err, &se) && se.Code()&0xff == sqliteNotADB:
		return fmt.Errorf("sqlite: %s is not an SQLite database: %w", path, ErrNotGateDatabase)
	case err != nil:
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	case n != 2:
		return fmt.Errorf("sqlite: %s is an SQLite database without the gate's tables: %w", path, ErrNotGateDatabase)
	}
	return nil
}
