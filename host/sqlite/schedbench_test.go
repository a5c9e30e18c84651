package sqlite_test

import (
	"testing"

	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// BenchmarkScheduleLeases measures lease calls in task cycles with and
// without 10,000 every-minute schedules firing, in one run
// (storetest.ScheduleLeases; each phase 65 s, ASYNCGATE_BENCH_PHASE).
//
//	go test ./host/sqlite -run '^$' -bench ScheduleLeases -benchtime 1x -timeout 30m
func BenchmarkScheduleLeases(b *testing.B) {
	eng, _ := benchEngine(b)
	storetest.ScheduleLeases(b, eng, 10_000, 4)
}
