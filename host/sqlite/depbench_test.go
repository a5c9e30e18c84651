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

// BenchmarkFanInWorkflow is BenchmarkFanIn with the graph submitted as one
// workflow of 999 children and their merge (1,000 steps, the most a
// workflow may have): the same latency, beside the submission's
// (storetest.FanInWorkflow).
//
//	go test ./host/sqlite -run '^$' -bench 'FanIn' -benchtime 30x
func BenchmarkFanInWorkflow(b *testing.B) {
	eng, _ := benchEngine(b)
	storetest.FanInWorkflow(b, eng, 999)
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
			eng, st := benchEngine(b)
			storetest.DependencyCycles(b, eng, 8, after)
			// The writer's batches and its busy time a cycle: what a
			// dependency costs the one writer, less swayed by the load
			// than the rate.
			ws := st.WriterStats()
			b.ReportMetric(float64(ws.Batches)/float64(b.N), "batches/cycle")
			b.ReportMetric(float64(ws.Busy.Microseconds())/float64(b.N), "busy_us/cycle")
		})
	}
}

// BenchmarkCascadeCancel measures the cancel of a root with 20,020
// waiters, with the settle budget and without (storetest.CascadeCancel).
//
//	go test ./host/sqlite -run '^$' -bench CascadeCancel -benchtime 1x
func BenchmarkCascadeCancel(b *testing.B) { storetest.CascadeCancel(b, openTemp) }
