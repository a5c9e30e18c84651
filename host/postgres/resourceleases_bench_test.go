package postgres

import (
	"fmt"
	"testing"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// BenchmarkResourceLeasePairs measures uncontended acquire+release pairs
// in-process on PostgreSQL (one host, every commit durable): N holders, each
// on a resource of its own, run pairs concurrently
// (storetest.ResourceLeasePairs, as host/sqlite's benchmark of the same
// name). It reports pairs/s and the p99 acquire latency.
//
//	go test ./host/postgres -run '^$' -bench ResourceLeasePairs -benchtime 2000x
func BenchmarkResourceLeasePairs(b *testing.B) {
	for _, holders := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("holders=%d", holders), func(b *testing.B) {
			storetest.GCAsGate(b)
			st := openIn(b, newSchema(b), Options{Writers: benchWriters})
			eng, err := engine.New(engine.Config{Store: st})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(eng.Close)
			storetest.ResourceLeasePairs(b, eng, holders)
		})
	}
}
