package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/asyncgate/asyncgate/host/private"
)

// ensurePrivateDir creates dir (0700, with any missing parents) when it does
// not exist, then refuses it when a user other than the gate's can write it
// (private.Check). With entries it also checks everything beneath dir: a
// folder whose files the gate runs (compiled plugins, drop-ins) must hold
// only files and folders no other user could have written (private.Entry,
// the rule the plugin registry also applies to each drop-in it reads).
func ensurePrivateDir(dir, what string, entries bool) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s %s is not a folder", what, dir)
	}
	if err := private.Check(fi); err != nil {
		return fmt.Errorf("%s %s: %w; the gate refuses a folder others can write (chmod go-w, or give the gate a folder of its own)", what, dir, err)
	}
	if !entries {
		return nil
	}
	// Another gate sharing the cache may rename or remove an entry while
	// this walk runs: an entry gone meanwhile is no entry to check.
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if p == dir {
			return nil
		}
		fi, err := d.Info() // as WalkDir found it: a link is not followed
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := private.Entry(fi); err != nil {
			return fmt.Errorf("%s %s: %s: %w; remove it (the wasm cache is rebuilt), or chmod -R go-w the folder", what, dir, p, err)
		}
		return nil
	})
}
