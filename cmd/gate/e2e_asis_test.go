package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestE2ECommandsLeaveAnOlderSchemaAlone: `gate keys`, `gate ledger verify`
// and `gate outbox` on a database a gate of this version has not migrated
// yet (its last migration taken back) exit 1 naming both versions and write
// nothing — they used to migrate it silently, after which the older gate
// serving it refuses to start. Once the migration is there again they work.
// Both stores.
func TestE2ECommandsLeaveAnOlderSchemaAlone(t *testing.T) {
	t.Parallel()
	type db struct {
		exec    func(t *testing.T, q string) // a statement on the gate's database
		version func(t *testing.T) int       // its newest applied migration
		flags   []string                     // the commands' --data or --db
	}
	stores := map[string]func(t *testing.T) db{
		"sqlite": func(t *testing.T) db {
			dir := t.TempDir()
			g := startGate(t, dir)
			if err := g.Stop(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			conn, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "gate.db")+"?_pragma=busy_timeout(10000)")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return db{
				exec: func(t *testing.T, q string) {
					if _, err := conn.Exec(q); err != nil {
						t.Fatal(err)
					}
				},
				version: func(t *testing.T) (v int) {
					if err := conn.QueryRow(`SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
						t.Fatal(err)
					}
					return v
				},
				flags: []string{"--data", dir},
			}
		},
		"postgres": func(t *testing.T) db {
			url := postgresSchema(t)
			g := startGate(t, t.TempDir(), "--db", url, "--results-dir", t.TempDir())
			if err := g.Stop(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			t.Cleanup(cancel)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close(context.Background()) })
			return db{
				exec: func(t *testing.T, q string) {
					if _, err := conn.Exec(ctx, q); err != nil {
						t.Fatal(err)
					}
				},
				version: func(t *testing.T) (v int) {
					if err := conn.QueryRow(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
						t.Fatal(err)
					}
					return v
				},
				flags: []string{"--db", url},
			}
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			newest := d.version(t)
			// The last migration taken back in the ledger of migrations
			// only: what the commands would apply is its row.
			d.exec(t, `CREATE TABLE asis_saved AS SELECT * FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)`)
			d.exec(t, `DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM asis_saved)`)
			older := d.version(t)
			if older >= newest {
				t.Fatalf("schema at %d after taking back %d", older, newest)
			}
			cmds := [][]string{
				{"ledger", "verify"},
				{"keys", "list"},
				{"keys", "create", "--role", "agent", "--principal", "asis.agent"},
				{"outbox", "status"},
			}
			for _, c := range cmds {
				args := append(append([]string{}, c[:2]...), d.flags...)
				args = append(args, c[2:]...)
				out, errOut, code := gateCLI(t, args...)
				if code != 1 || !strings.Contains(errOut, "older than this gate's") || strings.Contains(out, "agw_") {
					t.Fatalf("gate %s on a schema a version behind: exit %d, stdout %q, stderr %q; want exit 1 naming the versions", strings.Join(c, " "), code, out, errOut)
				}
				if v := d.version(t); v != older {
					t.Fatalf("gate %s moved the schema from %d to %d", strings.Join(c, " "), older, v)
				}
			}
			d.exec(t, `INSERT INTO schema_migrations SELECT * FROM asis_saved`)
			d.exec(t, `DROP TABLE asis_saved`)
			for _, c := range cmds {
				args := append(append([]string{}, c[:2]...), d.flags...)
				args = append(args, c[2:]...)
				if out, errOut, code := gateCLI(t, args...); code != 0 {
					t.Fatalf("gate %s on this version's schema: exit %d %q %q", strings.Join(c, " "), code, out, errOut)
				}
			}
		})
	}
}
