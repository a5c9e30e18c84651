package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// defaultMemoryLimitMiB is the gate's soft memory limit unless configured:
// enough for its caches, plugin instances and a full set of result streams,
// low enough that the collector works before a burst of large results
// makes the process big.
const defaultMemoryLimitMiB = 768

// setMemoryLimit applies the configured soft memory limit, unless the
// GOMEMLIMIT environment variable already set one (the runtime read it).
func setMemoryLimit(mib int64, log *slog.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "limit", v)
		return
	}
	if mib <= 0 {
		return
	}
	debug.SetMemoryLimit(mib << 20)
	log.Debug("memory limit set", "mib", mib)
}
