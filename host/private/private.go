// Package private holds the gate's rule for files and folders only the
// gate's user may write: the data folder, and the two folders of code the
// gate runs (the plugins folder and the wasm compilation cache). `gate
// serve` applies it at start and the plugin registry to every drop-in it
// reads while running, so the two can never disagree.
package private

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Entry is the rule for what a folder of code the gate runs may hold:
// regular files and folders only (no symlink, FIFO, socket or device),
// none of them writable by another user (Check). fi must come from Lstat
// (or a walk, which does not follow links).
func Entry(fi fs.FileInfo) error {
	switch t := fi.Mode().Type(); {
	case t&fs.ModeSymlink != 0:
		return errors.New("it is a symbolic link, not a file")
	case !fi.Mode().IsRegular() && !fi.IsDir():
		return fmt.Errorf("it is neither a file nor a folder (%v)", t)
	}
	return Check(fi)
}

// errNotFile is File's answer for a folder.
var errNotFile = errors.New("it is a folder, not a file")

// ReadFile reads a file holding code the gate runs, refusing it unless it
// is a regular file (a symlink is refused, not followed) that passes
// Check. The file is checked as opened, so it cannot be swapped for a
// link between the check and the read.
func ReadFile(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := file(fi); err != nil {
		return nil, err
	}
	f, err := openNoFollow(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := file(fi); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

func file(fi fs.FileInfo) error {
	if fi.IsDir() {
		return errNotFile
	}
	return Entry(fi)
}
