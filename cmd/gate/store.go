package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host/postgres"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

// openStore opens the gate's store. An empty dbURL is the embedded default:
// SQLite at <dataDir>/gate.db. "sqlite:PATH" (or "sqlite://PATH") opens another
// SQLite file. "postgres://…" and "postgresql://…" open the PostgreSQL driver
// (host/postgres), which several gate hosts can share.
func openStore(dataDir, dbURL string) (store.Store, error) {
	switch {
	case dbURL == "":
		return openSQLite(filepath.Join(dataDir, "gate.db"))
	case strings.HasPrefix(dbURL, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dbURL, "sqlite:"), "//")
		if path == "" {
			return nil, fmt.Errorf("--db %q names no file", dbURL)
		}
		return openSQLite(path)
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		// Several gate hosts may share the database (see docs/postgres.md).
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := postgres.Open(ctx, dbURL, postgres.Options{})
		if err != nil {
			return nil, fmt.Errorf("--db %s: %w", redactURL(dbURL), err)
		}
		return st, nil
	default:
		return nil, fmt.Errorf("--db %q: unknown database URL; use sqlite:PATH or postgres://…", redactURL(dbURL))
	}
}

func openSQLite(path string) (store.Store, error) {
	st, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		return nil, err
	}
	return st, nil
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
