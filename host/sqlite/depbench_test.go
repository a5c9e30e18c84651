package sqlite_test

import (
	"testing"

	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// BenchmarkFanIn measures, per round, a fan-out of 1,000 children and
// their fan-in: the time from the last child's completion call to the
// merge's offer in a long-polling worker's hands (storetest.FanIn).
//
//	go test ./host/sqlite -run '^$' -bench FanIn -benchtime 30x
func BenchmarkFanIn(b *testing.B) {
	eng, _ := benchEngine(b)
	storetest.FanIn(b, eng, 1000)
}

// BenchmarkDependencyCost runs plain task cycles and cycles of tasks queued
// in pairs, the second after the first, in one run, so their rates compare
// (storetest.DependencyCycles).
//
//	go test ./host/sqlite -run '^$' -bench DependencyCost -benchtime 20000x
func BenchmarkDependencyCost(b *testing.B) {
	for _, after := range []bool{false, true} {
		name := "plain"
		if after {
			name = "after"
		}
		b.Run(name, func(b *testing.B) {
			eng, _ := benchEngine(b)
			storetest.DependencyCycles(b, eng, 8, after)
		})
	}
}
