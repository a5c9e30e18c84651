package host

import (
	"os"
	"runtime/debug"
)

// GCPercent is the collector's target (GOGC) a gate runs with unless told
// otherwise. The runtime's default, 100, starts a collection each time the
// heap doubles its live part, with a floor of 4 MiB. A gate's live heap is
// small and its garbage (request bodies, JSON, rows) is made fast, so at 100
// it collects many times a second under load, and the collector's workers
// and assists take CPU from the store's single writer, which bounds
// throughput: the in-process SQLite pipeline ran 20% faster at 200 or more
// (RATIONALE.md, "The collector's target"). 400 collects a quarter as often;
// the gate's soft memory limit still bounds the heap, and makes the collector
// work harder as the process nears it.
const GCPercent = 400

// SetGCPercent sets the collector's target to pct, unless the GOGC
// environment variable set one (the runtime read it at start) or pct is 0.
// It reports whether it changed the target and returns the previous one.
func SetGCPercent(pct int) (changed bool, prev int) {
	if os.Getenv("GOGC") != "" || pct <= 0 {
		return false, 0
	}
	return true, debug.SetGCPercent(pct)
}
