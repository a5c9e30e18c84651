package main

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/asyncgate/asyncgate/host"
)

// defaultMemoryLimitMiB is the gate's soft memory limit unless configured:
// enough for its caches, plugin instances and a full set of result streams,
// low enough that the collector works before a burst of large results
// makes the process big.
const defaultMemoryLimitMiB = 768

// maxMemoryLimitMiB is the largest memory limit (16 TiB), as in the config
// schema: mib<<20 of a larger one could overflow into a tiny or negative
// limit, and the collector would run without pause.
const maxMemoryLimitMiB = 1 << 24

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
	if mib > maxMemoryLimitMiB {
		log.Warn("memory limit capped", "mib", mib, "cap_mib", maxMemoryLimitMiB)
		mib = maxMemoryLimitMiB
	}
	debug.SetMemoryLimit(mib << 20)
	log.Debug("memory limit set", "mib", mib)
}

// defaultGCPercent is the gate's GOGC unless configured (host.GCPercent).
const defaultGCPercent = host.GCPercent

// setGCPercent applies the configured GOGC (host.SetGCPercent), unless the
// GOGC environment variable already set one (the runtime read it). 0 keeps
// the runtime's.
func setGCPercent(pct int, log *slog.Logger) {
	if changed, _ := host.SetGCPercent(pct); changed {
		log.Debug("collector target set", "gogc", pct)
	} else if v := os.Getenv("GOGC"); v != "" {
		log.Info("collector target from GOGC", "gogc", v)
	}
}
