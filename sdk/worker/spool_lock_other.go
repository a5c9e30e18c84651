//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package worker

import "os"

// tryLock is a no-op where flock is not available: give every worker
// process its own WorkerID or SpoolPath there.
func tryLock(*os.File) error { return nil }
