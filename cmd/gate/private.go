package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ensurePrivateDir creates dir (0700, with any missing parents) when it does
// not exist, then refuses it when a user other than the gate's can write it
// (checkPrivate). With entries it also checks everything beneath dir: a
// folder whose files the gate runs (compiled plugins) must not hold one
// another user could have written.
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
	if err := checkPrivate(dir, fi); err != nil {
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
		if !d.Type().IsRegular() && !d.IsDir() {
			return fmt.Errorf("%s %s: %s is neither a file nor a folder; remove it", what, dir, p)
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := checkPrivate(p, fi); err != nil {
			return fmt.Errorf("%s %s: %s: %w; remove the folder (it is rebuilt) or chmod -R go-w it", what, dir, p, err)
		}
		return nil
	})
}
