package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host/postgres"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

// openMode says whether a command may create a new gate.
type openMode int

const (
	// openExisting is gate mcp's, a gate of its own on an existing data
	// folder or database: a missing one is an error, never a new gate; an
	// older schema is migrated, as serve migrates it.
	openExisting openMode = iota
	// openOrCreate is serve's: a first start on a data folder that does not
	// exist or is empty creates the gate there.
	openOrCreate
	// openAsIs is for the commands that look at or tend an existing gate
	// (keys, ledger verify, outbox): openExisting that also leaves the
	// schema as it found it, refusing one that lacks this gate's
	// migrations (store.OlderSchemaError). A check with a newer binary, of
	// a backup or beside the hosts that serve the database, never moves it
	// past the gate that serves it.
	openAsIs
)

// newFolderEntries are what a data folder may already hold when a first start
// creates a gate in it: the operator's drop-in plugins, a compilation cache,
// and a new file system's lost+found. Anything else without a gate.db
// (admin.key, results, other files) means the folder is not new and its
// database is missing, or it was never a gate's folder.
var newFolderEntries = map[string]bool{"plugins": true, "wasm-cache": true, "lost+found": true}

// openStore opens the gate's store. An empty dbURL is the embedded default:
// SQLite at <dataDir>/gate.db. "sqlite:PATH" (or "sqlite://PATH") opens another
// SQLite file. "postgres://…" and "postgresql://…" open the PostgreSQL driver
// (host/postgres), which several gate hosts can share. It reports whether it
// created a new SQLite database; only mode openOrCreate ever does.
func openStore(ctx context.Context, dataDir, dbURL string, mode openMode) (store.Store, bool, error) {
	return openStoreWith(ctx, dataDir, dbURL, mode, postgres.Options{})
}

// maxDBWriters caps --db-writers: each writer holds a connection and a
// ledger chain of its own.
const maxDBWriters = 16

// isPostgresURL reports whether dbURL names a PostgreSQL database.
func isPostgresURL(dbURL string) bool {
	return strings.HasPrefix(dbURL, "postgres://") || strings.HasPrefix(dbURL, "postgresql://")
}

// openStoreWith is openStore with the PostgreSQL store's options.
func openStoreWith(ctx context.Context, dataDir, dbURL string, mode openMode, pgOpts postgres.Options) (store.Store, bool, error) {
	asIs := mode == openAsIs
	if asIs {
		mode = openExisting
		pgOpts.NoMigrate = true
	}
	switch {
	case dbURL == "":
		path := filepath.Join(dataDir, "gate.db")
		if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return openSQLite(path, openExisting, asIs)
		}
		if err := checkNewDataFolder(dataDir, mode); err != nil {
			return nil, false, err
		}
		return openSQLite(path, mode, asIs)
	case strings.HasPrefix(dbURL, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dbURL, "sqlite:"), "//")
		if path == "" {
			return nil, false, fmt.Errorf("--db %q names no file", dbURL)
		}
		if _, err := os.Stat(path); mode != openExisting && errors.Is(err, fs.ErrNotExist) {
			// A new database file: the data folder beside it (results, the
			// admin key) must be new too, as for gate.db, or a mistyped
			// path would start an empty gate over another gate's results.
			if err := checkNewDataFolder(dataDir, mode); err != nil {
				return nil, false, fmt.Errorf("--db %s does not exist: %w", dbURL, err)
			}
		}
		return openSQLite(path, mode, asIs)
	case isPostgresURL(dbURL):
		// Several gate hosts may share the database (see docs/postgres.md).
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := postgres.Open(ctx, dbURL, pgOpts)
		if err != nil {
			return nil, false, fmt.Errorf("--db %s: %w", redactURL(dbURL), err)
		}
		return st, false, nil
	default:
		return nil, false, fmt.Errorf("--db %q: unknown database URL; use sqlite:PATH or postgres://…", redactURL(dbURL))
	}
}

// checkNewDataFolder decides whether a gate may be created in dir, which has
// no gate.db: only serve creates, and only in a folder that does not exist yet
// or holds nothing of a gate's.
func checkNewDataFolder(dir string, mode openMode) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && mode == openExisting:
		return fmt.Errorf("data folder %s does not exist: there is no gate there (a gate is created by its first `gate serve --data %s`)", dir, dir)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("data folder: %w", err)
	case mode == openExisting:
		return fmt.Errorf("data folder %s holds no gate database (gate.db): check --data (a gate is created by its first `gate serve`)", dir)
	}
	for _, e := range ents {
		if !newFolderEntries[e.Name()] {
			return fmt.Errorf("data folder %s holds %s but no gate database (gate.db): refusing to create a new gate over it; if the gate's database was lost, restore gate.db from a backup, else give an empty or new folder to --data", dir, e.Name())
		}
	}
	return nil
}

func openSQLite(path string, mode openMode, asIs bool) (store.Store, bool, error) {
	created := false
	if mode == openOrCreate {
		_, err := os.Stat(path)
		created = errors.Is(err, fs.ErrNotExist)
	}
	st, err := sqlite.Open(path, sqlite.Options{MustExist: mode == openExisting, NoMigrate: asIs})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("database %s does not exist: check --data or --db (a gate is created by its first `gate serve`)", path)
	case errors.Is(err, sqlite.ErrNotGateDatabase):
		return nil, false, fmt.Errorf("refusing to use %s: %w", path, err)
	case err != nil:
		return nil, false, err
	}
	return st, created, nil
}

// redactURL hides a password in a database URL before it is printed.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return u
	}
	cred := rest[:at]
	if user, _, has := strings.Cut(cred, ":"); has {
		return scheme + "://" + user + ":***@" + rest[at+1:]
	}
	return u
}
