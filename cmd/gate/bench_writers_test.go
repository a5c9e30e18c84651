package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchReportsTheStoreWriters: gate bench reads the store's writer
// series from a real gate's /metrics with the admin key, sees them move
// with the gate's writes, and says how busy the writers were; with a key
// that may not read /metrics it reports nothing rather than failing.
func TestBenchReportsTheStoreWriters(t *testing.T) {
	url, admin := benchTarget(t, filepath.Join(t.TempDir(), "cache"))
	c := newBenchClient(url, 2)
	before, ok := scrapeWriters(c, admin)
	if !ok || before.writers != 1 {
		t.Fatalf("writer series before: %+v, found %v; want one writer", before, ok)
	}
	start := time.Now()
	if _, err := c.do("PUT", "/v1/admin/task-types/bench", admin, []byte(`{}`), nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		body := `{"role":"agent","principal":"bench.w` + string(rune('a'+i)) + `"}`
		if _, err := c.do("POST", "/v1/admin/keys", admin, []byte(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	after, ok := scrapeWriters(c, admin)
	if !ok || after.batches <= before.batches || after.updates < before.updates+4 || after.busySeconds <= before.busySeconds {
		t.Fatalf("writer series after four writes: %+v (found %v), before %+v", after, ok, before)
	}
	line := writersLine(before, after, time.Since(start))
	if !strings.HasPrefix(line, "store writers 1: busy ") || !strings.Contains(line, "% of the run") {
		t.Fatalf("writers line = %q", line)
	}
	var agent struct {
		APIKey string `json:"api_key"`
	}
	if _, err := c.do("POST", "/v1/admin/keys", admin, []byte(`{"role":"agent","principal":"bench.nosy"}`), &agent); err != nil {
		t.Fatal(err)
	}
	if w, ok := scrapeWriters(c, agent.APIKey); ok {
		t.Fatalf("an agent key read the writer series: %+v", w)
	}
}

// TestBenchWindowLine: the producing window's line gives the rates over
// the window and the completions' share of enqueues and completions.
func TestBenchWindowLine(t *testing.T) {
	w := benchWindow{elapsed: 10 * time.Second, enqueued: 20300, completed: 5930, leaseCalls: 420}
	want := "while producing (10.00s): enqueued 2030/s, completed 593/s, lease calls 42/s; completions 22.6% of enqueues and completions"
	if got := w.line(); got != want {
		t.Fatalf("line = %q\nwant   %q", got, want)
	}
	if got := (benchWindow{elapsed: time.Second}).line(); !strings.HasSuffix(got, "completions 0.0% of enqueues and completions") {
		t.Fatalf("empty window line = %q", got)
	}
}
