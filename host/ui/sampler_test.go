package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

func at(base time.Time, sec int, queued, succeeded int64, oldest time.Duration) sample {
	return sample{at: base.Add(time.Duration(sec) * time.Second), oldest: oldest,
		byState: map[host.TaskState]int64{host.StateQueued: queued, host.StateSucceeded: succeeded}}
}

func TestRatesComeFromTheLastFiveMinutesOfSamples(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if r := computeRates([]sample{at(base, 0, 1, 0, 0)}); r.Known {
		t.Fatalf("one sample gave rates %+v", r)
	}
	ss := []sample{
		at(base, 0, 0, 0, 0),       // outside the 5-minute window of the last sample
		at(base, 300, 100, 0, 0),   // window start: 100 tasks
		at(base, 360, 130, 30, 0),  // …
		at(base, 420, 100, 120, 0), // a minute later 220 tasks, 120 finished
	}
	r := computeRates(ss)
	if !r.Known || r.Over != 2*time.Minute {
		t.Fatalf("rates %+v, want known over 2m", r)
	}
	if r.Enqueued != 60 || r.Finished != 60 {
		t.Fatalf("enqueued %.1f/min finished %.1f/min, want 60 and 60", r.Enqueued, r.Finished)
	}
}

func TestRingKeepsOneHour(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var r ring
	for i := 0; i <= 7200; i += 10 {
		r.add(at(base, i, int64(i), 0, 0), window)
	}
	if first, last := r.buf[0].at, r.buf[len(r.buf)-1].at; last.Sub(first) != window || len(r.buf) != 361 {
		t.Fatalf("ring holds %d samples from %v to %v, want 361 spanning an hour", len(r.buf), first, last)
	}
}

func TestPlotScalesToTheWindowAndTheHighestValue(t *testing.T) {
	now := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	ss := []sample{at(now, -3600, 0, 0, 0), at(now, -1800, 50, 0, 0), at(now, 0, 100, 0, 0)}
	p := plot("Backlog", ss, now, func(s sample) float64 { return float64(s.byState[host.StateQueued]) }, count)
	pts := strings.Fields(p.Points)
	if len(pts) != 3 || pts[0] != "0.0,120.0" || pts[1] != "300.0,62.0" || pts[2] != "600.0,4.0" {
		t.Fatalf("points %q", p.Points)
	}
	if p.Max != "100" || p.Last != "100" || len(p.Dots) != 1 || p.Empty {
		t.Fatalf("plot %+v", p)
	}
	if e := plot("Backlog", nil, now, func(sample) float64 { return 0 }, count); !e.Empty {
		t.Fatal("no samples did not give an empty plot")
	}
}
