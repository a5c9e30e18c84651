package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/asyncgate/asyncgate/host/store"
)

// resultsMarker is the file in the results folder that names the database
// whose results it holds.
const resultsMarker = ".asyncgate-database"

// sharedStore is a store several gate hosts share (PostgreSQL): it has an
// identity, and remembers whether a results folder was claimed for it.
type sharedStore interface {
	DatabaseID(ctx context.Context) (id string, claimed bool, err error)
	ClaimResultsFolder(ctx context.Context) (bool, error)
}

// checkResultsFolder makes sure that, on a database several hosts share,
// this host's results folder is the one every host uses: results over the
// inline limit live there, and a result one host stored must be fetchable
// through any other. The first host writes a marker with the database's id
// into its folder and records the claim in the database; a host whose folder
// has no marker after that, or another database's marker, is refused. On
// SQLite (one host) there is nothing to check.
func checkResultsFolder(ctx context.Context, st store.Store, dir string, log *slog.Logger) error {
	ss, ok := st.(sharedStore)
	if !ok {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("results folder: %w", err)
	}
	id, claimed, err := ss.DatabaseID(ctx)
	if err != nil {
		return err
	}
	marker := filepath.Join(dir, resultsMarker)
	b, err := os.ReadFile(marker)
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(b)); got != id {
			return fmt.Errorf("results folder %s holds the results of another database (%s names %q, this database is %q): give every gate host of this database the same --results-dir", dir, marker, got, id)
		}
		if !claimed {
			_, err := ss.ClaimResultsFolder(ctx)
			return err
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("results folder: %w", err)
	}
	if claimed {
		return fmt.Errorf("results folder %s is not the one the other gate hosts of this database use (it has no %s marker): "+
			"results stored there would be out of their reach. Give every host the same shared --results-dir (results_dir); "+
			"if this is that folder and it was emptied on purpose, write %q into %s", dir, resultsMarker, id, marker)
	}
	// Link a complete file into place: exactly one host creates the marker
	// of a folder, and none ever reads a half-written one.
	tmp, err := os.CreateTemp(dir, resultsMarker+".tmp-*")
	if err != nil {
		return fmt.Errorf("results folder marker: %w", err)
	}
	_, werr := tmp.WriteString(id + "\n")
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("results folder marker: %w", err)
	}
	err = os.Link(tmp.Name(), marker)
	os.Remove(tmp.Name())
	if errors.Is(err, fs.ErrExist) {
		return checkResultsFolder(ctx, st, dir, log) // another host of this folder was first
	}
	if err != nil {
		return fmt.Errorf("results folder marker: %w", err)
	}
	won, err := ss.ClaimResultsFolder(ctx)
	if err != nil {
		return err
	}
	if !won {
		// Another host claimed its own folder at the same moment.
		_ = os.Remove(marker)
		return fmt.Errorf("results folder %s: another gate host of this database claimed a different results folder just now; give every host the same --results-dir", dir)
	}
	log.Info("results folder claimed for this database", "folder", dir, "database_id", id)
	return nil
}
