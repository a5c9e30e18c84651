package plugin

import (
	"sync"
	"time"
)

// bucketBounds are the upper bounds, in microseconds, of the latency
// histogram's buckets; the last bucket is open.
var bucketBounds = func() []float64 {
	var b []float64
	for v := 5.0; v < 20e6; v *= 2 {
		b = append(b, v)
	}
	return b
}()

// stats counts one plugin's calls across its versions.
type stats struct {
	mu         sync.Mutex
	calls      uint64
	failures   uint64
	faults     uint64 // failures that discarded an instance
	coldStarts uint64
	sumMicros  float64
	hist       []uint64
	lastError  string
	lastErrAt  time.Time
	refused    string // why the newest version on disk was refused, if it was
	// refusedCode is refused's machine code (a Refusal* constant).
	refusedCode string
}

func newStats() *stats { return &stats{hist: make([]uint64, len(bucketBounds)+1)} }

func (s *stats) observe(d time.Duration, failed, fault bool, msg string) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	for i < len(bucketBounds) && us > bucketBounds[i] {
		i++
	}
	s.mu.Lock()
	s.calls++
	s.sumMicros += us
	s.hist[i]++
	if failed {
		s.failures++
		s.lastError, s.lastErrAt = msg, time.Now()
	}
	if fault {
		s.faults++
	}
	s.mu.Unlock()
}

func (s *stats) coldStart() {
	s.mu.Lock()
	s.coldStarts++
	s.mu.Unlock()
}

// setRefused records why the newest version was refused (code and text),
// or that no refusal stands (both empty).
func (s *stats) setRefused(code, msg string) {
	s.mu.Lock()
	s.refused, s.refusedCode = msg, code
	if msg != "" {
		s.lastError, s.lastErrAt = msg, time.Now()
	}
	s.mu.Unlock()
}

// quantile estimates the q-quantile in microseconds from the histogram,
// interpolating linearly inside the bucket.
func (s *stats) quantile(q float64) float64 {
	if s.calls == 0 {
		return 0
	}
	rank := q * float64(s.calls)
	var seen float64
	for i, n := range s.hist {
		if n == 0 {
			continue
		}
		if seen+float64(n) >= rank {
			lo := 0.0
			if i > 0 {
				lo = bucketBounds[i-1]
			}
			hi := lo * 2
			if i < len(bucketBounds) {
				hi = bucketBounds[i]
			}
			return lo + (hi-lo)*(rank-seen)/float64(n)
		}
		seen += float64(n)
	}
	return bucketBounds[len(bucketBounds)-1]
}

// Stats is a snapshot of one plugin's call metrics.
type Stats struct {
	Calls         uint64    `json:"calls"`
	Failures      uint64    `json:"failures"`
	Faults        uint64    `json:"faults"` // failures that cost an instance (trap, timeout, panic, garbage)
	ColdStarts    uint64    `json:"cold_starts"`
	LatencyP50US  float64   `json:"latency_p50_us"`
	LatencyP99US  float64   `json:"latency_p99_us"`
	LatencyMeanUS float64   `json:"latency_mean_us"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorAt   time.Time `json:"last_error_at,omitzero"`
}

// refusal returns the standing refusal's code and text (empty: none).
func (s *stats) refusal() (code, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusedCode, s.refused
}

func (s *stats) snapshot() (st Stats, refusedCode, refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{
		Calls: s.calls, Failures: s.failures, Faults: s.faults, ColdStarts: s.coldStarts,
		LatencyP50US: s.quantile(0.5), LatencyP99US: s.quantile(0.99),
		LastError: s.lastError, LastErrorAt: s.lastErrAt,
	}
	if s.calls > 0 {
		out.LatencyMeanUS = s.sumMicros / float64(s.calls)
	}
	return out, s.refusedCode, s.refused
}
