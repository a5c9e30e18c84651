package postgres

import (
	"io"
	"log/slog"
	"testing"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

func depBenchEngine(b *testing.B) *engine.Engine {
	eng, _ := depBenchStore(b)
	return eng
}

func depBenchStore(b *testing.B) (*engine.Engine, *Store) {
	b.Helper()
	storetest.GCAsGate(b)
	st := openIn(b, newSchema(b), Options{Writers: benchWriters})
	eng, err := engine.New(engine.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(eng.Close)
	return eng, st
}

// BenchmarkFanIn is host/sqlite's BenchmarkFanIn on PostgreSQL (one host).
//
//	go test ./host/postgres -run '^$' -bench FanIn -benchtime 30x
func BenchmarkFanIn(b *testing.B) {
	storetest.FanIn(b, depBenchEngine(b), 1000)
}

// BenchmarkFanInWorkflow is BenchmarkFanIn with the graph submitted as one
// workflow of 999 children and their merge (1,000 steps, the most a
// workflow may have): the same latency, beside the submission's
// (storetest.FanInWorkflow).
//
//	go test ./host/postgres -run '^$' -bench 'FanIn' -benchtime 30x
func BenchmarkFanInWorkflow(b *testing.B) {
	storetest.FanInWorkflow(b, depBenchEngine(b), 999)
}

// BenchmarkDependencyCost is host/sqlite's BenchmarkDependencyCost on
// PostgreSQL (one host).
//
//	go test ./host/postgres -run '^$' -bench DependencyCost -benchtime 10000x
func BenchmarkDependencyCost(b *testing.B) {
	for _, after := range []bool{false, true} {
		name := "plain"
		if after {
			name = "after"
		}
		b.Run(name, func(b *testing.B) {
			eng, st := depBenchStore(b)
			storetest.DependencyCycles(b, eng, 8, after)
			// The writer's round trips and statements a cycle, and the
			// batches run again in strict mode (a deferred write fenced out
			// that no one request could be blamed for).
			b.ReportMetric(float64(st.WriterTrips())/float64(b.N), "trips/cycle")
			b.ReportMetric(float64(st.WriterStatements())/float64(b.N), "stmts/cycle")
			b.ReportMetric(float64(st.StrictReruns()), "strict_reruns")
			// Requests run after their batch: set aside for a failed guess
			// or lost fence, or given way for a row held elsewhere.
			b.ReportMetric(float64(st.SetAside()), "set_aside")
			b.ReportMetric(float64(st.LockReorders()), "gave_way")
		})
	}
}

// BenchmarkEnqueueBesideABacklog: enqueues of a type whose workers keep up,
// beside another type's backlog in the same tenant
// (storetest.EnqueueBesideABacklog).
func BenchmarkEnqueueBesideABacklog(b *testing.B) {
	eng, _ := depBenchStore(b)
	storetest.EnqueueBesideABacklog(b, eng)
}

// BenchmarkCascadeCancel measures the cancel of a root with 20,020
// waiters, with the settle budget and without (storetest.CascadeCancel).
//
//	go test ./host/postgres -run '^$' -bench CascadeCancel -benchtime 1x
func BenchmarkCascadeCancel(b *testing.B) {
	storetest.CascadeCancel(b, func(t testing.TB) storetest.Store { return openTest(t) })
}
