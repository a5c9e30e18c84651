package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/sqlite"
)

// TestPingFindsALostDatabase: a database file removed, or replaced by
// another, while the gate runs still takes writes through the open
// descriptor, which the next start would not find: Ping (what /readyz asks)
// answers database_unavailable instead of ready.
func TestPingFindsALostDatabase(t *testing.T) {
	ctx := context.Background()
	for _, replace := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "gate.db")
		st, err := sqlite.Open(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Ping(ctx); err != nil {
			st.Close()
			t.Fatalf("ping of the open database: %v", err)
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(path + suffix); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		if replace {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		err = st.Ping(ctx)
		st.Close()
		if !host.IsCode(err, host.CodeDatabaseUnavailable) {
			t.Fatalf("ping after the file was removed (replaced: %v): %v, want database_unavailable", replace, err)
		}
	}
}
