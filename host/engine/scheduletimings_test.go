package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestTimingCacheBounded: the cache of compiled cron expressions is filled
// by whatever a caller sends (before the rest of the request is checked), so
// a hostile caller sending ever new valid expressions must not grow it
// without bound.
func TestTimingCacheBounded(t *testing.T) {
	n := 0
	for d := 1; d <= 28 && n < 3*maxCachedTimings; d++ {
		for h := 0; h < 24 && n < 3*maxCachedTimings; h++ {
			for m := 0; m < 60 && n < 3*maxCachedTimings; m++ {
				if _, err := compileTiming(fmt.Sprintf("%d %d %d * *", m, h, d), "", 0, time.Time{}); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	cached := 0
	timings.Range(func(any, any) bool { cached++; return true })
	if cached > maxCachedTimings {
		t.Fatalf("%d distinct expressions left %d compiled ones cached, the bound is %d", n, cached, maxCachedTimings)
	}
}
