package worker

import (
	"fmt"
	"io"
	"os"
)

// HoldSpoolUntilStdinCloses locks the spool at path as a Runner does, says
// "locked" on stdout and holds the lock until stdin closes: the other
// process of the spool lock tests. It returns the exit code.
func HoldSpoolUntilStdinCloses(path string) int {
	sp := &spool{path: path}
	if err := sp.lock(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	sp.unlock()
	return 0
}

// DefaultSpoolPath exposes defaultSpoolPath to the tests.
var DefaultSpoolPath = defaultSpoolPath
