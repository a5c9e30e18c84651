package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning memory when idle (issue 38 item 5). The gate collects rarely
// (GOGC 400, host.GCPercent), and Go's scavenger keeps free heap up to about
// the heap goal, five times the live heap: after a start (plugins compiled,
// their garbage dead) or a burst, an idle gate would hold hundreds of MB it
// no longer uses for minutes. idleRelease watches how much the gate
// allocates; once it is idle and holds more reclaimable heap than
// releaseMinBytes, it collects and returns the free memory to the OS
// (debug.FreeOSMemory), and drops the pages of its executable it no longer
// uses (dropExecutablePages). Under load it does nothing: a busy gate allocates
// far more than idleAllocBytes per tick, so throughput keeps the collector's
// own pacing.
const (
	releaseTick = 2 * time.Second
	// idleAllocBytes is what a gate may allocate in a tick and still be
	// idle (an idle gate allocates well under 1 MiB a tick: sweeps,
	// metrics; one HTTP request is ~10-50 KiB).
	idleAllocBytes = 4 << 20
	// releaseMinBytes is how much reclaimable heap (dead objects and free
	// pages not yet returned) makes a release worth a collection.
	releaseMinBytes = 16 << 20
)

// releaseNudge is signalled when a plugin's wazero runtime closed (a
// plugin went dormant or left the interpreter): its machine code and module
// are garbage the collector has not seen yet, so the heap metrics do not
// count them as reclaimable; the next idle ticks release regardless.
var releaseNudge = make(chan struct{}, 1)

// nudgeRelease signals releaseNudge without blocking.
func nudgeRelease() {
	select {
	case releaseNudge <- struct{}{}:
	default:
	}
}

// idleRelease runs until ctx ends; see the comment above.
func idleRelease(ctx context.Context, log *slog.Logger) {
	samples := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	read := func() (allocs, reclaimable uint64) {
		metrics.Read(samples)
		allocs = samples[0].Value.Uint64()
		objects, live, free := samples[1].Value.Uint64(), samples[2].Value.Uint64(), samples[3].Value.Uint64()
		if objects > live {
			reclaimable = objects - live
		}
		return allocs, reclaimable + free
	}
	last, _ := read()
	t := time.NewTicker(releaseTick)
	defer t.Stop()
	// forced counts idle ticks that release whatever the metrics say: two,
	// since wazero frees a module's machine code in a finalizer, and what
	// only that code referenced goes at the collection after it.
	forced := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-releaseNudge:
			forced = 2
			continue
		case <-t.C:
		}
		allocs, reclaimable := read()
		busy := allocs-last > idleAllocBytes
		last = allocs
		if busy || (reclaimable < releaseMinBytes && forced == 0) {
			continue
		}
		if forced > 0 {
			forced--
		}
		start := time.Now()
		debug.FreeOSMemory()
		dropExecutablePages()
		last, _ = read()
		log.Debug("idle: memory returned to the OS", "reclaimable_mib", reclaimable>>20, "took", time.Since(start).Round(time.Millisecond))
	}
}
