package sqlite_test

import (
	"fmt"
	"testing"

	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// BenchmarkResourceLeasePairs measures uncontended acquire+release pairs
// in-process on SQLite (every commit durable): N holders, each on a resource
// of its own, run pairs concurrently (storetest.ResourceLeasePairs). It
// reports pairs/s and the p99 acquire latency.
func BenchmarkResourceLeasePairs(b *testing.B) {
	for _, holders := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("holders=%d", holders), func(b *testing.B) {
			eng, _ := benchEngine(b)
			storetest.ResourceLeasePairs(b, eng, holders)
		})
	}
}
