package main

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/store/faultnet"
)

// TestE2EMetricsThroughADatabaseOutage: while PostgreSQL does not answer
// (a frozen connection), GET /metrics with a key the gate resolved before
// still answers 200 within a few seconds: the process and HTTP series and
// asyncgate_scrape_error 1, and nothing the store backs (the key was taken
// on the cache's word, not the store's). A key it never saw is refused
// with 503 database_unavailable.
func TestE2EMetricsThroughADatabaseOutage(t *testing.T) {
	t.Parallel()
	db, proxy := faultnet.Through(t, postgresSchema(t))
	g := startGate(t, t.TempDir(), "--db", db)
	unseen := g.newKey(t, "admin", "ops.unseen", "")
	if r := call(t, "GET", g.URL+"/metrics", g.Admin, nil); r.Status != 200 || !strings.Contains(string(r.Body), "asyncgate_scrape_error 0") {
		t.Fatalf("/metrics before the outage: %d %.300s", r.Status, r.Body)
	}
	proxy.Freeze()
	defer proxy.Thaw()
	time.Sleep(6 * time.Second) // past the key cache's 5 s
	start := time.Now()
	r := call(t, "GET", g.URL+"/metrics", g.Admin, nil)
	took := time.Since(start)
	body := string(r.Body)
	if r.Status != 200 || took > 4*time.Second || !strings.Contains(body, "asyncgate_scrape_error 1") ||
		!strings.Contains(body, "go_goroutines") || !strings.Contains(body, "asyncgate_http_request_duration_seconds") {
		t.Fatalf("/metrics while the database does not answer: %d after %v: %.600s", r.Status, took, body)
	}
	// A key the store did not confirm reads nothing the store backs (the
	// gauges are not even tried: they would wait out their 5 s).
	for _, storeBacked := range []string{"asyncgate_tasks_by_state", "asyncgate_task_queue_depth", "asyncgate_workers_active"} {
		if strings.Contains(body, storeBacked) {
			t.Fatalf("/metrics on a key the store did not confirm serves %s: %.600s", storeBacked, body)
		}
	}
	if r := call(t, "GET", g.URL+"/metrics", unseen, nil); r.Status != 503 || !strings.Contains(string(r.Body), "database_unavailable") {
		t.Fatalf("/metrics with a key never resolved, while the database does not answer: %d %s", r.Status, r.Body)
	}
}
