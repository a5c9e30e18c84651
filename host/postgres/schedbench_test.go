package postgres

import (
	"testing"

	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// BenchmarkScheduleLeases is host/sqlite's BenchmarkScheduleLeases on
// PostgreSQL (one host).
//
//	go test ./host/postgres -run '^$' -bench ScheduleLeases -benchtime 1x -timeout 30m
func BenchmarkScheduleLeases(b *testing.B) {
	storetest.ScheduleLeases(b, depBenchEngine(b), 10_000, 4)
}
