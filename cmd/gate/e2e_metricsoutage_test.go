package main

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/store/faultnet"
)

// TestE2EMetricsThroughADatabaseOutage: while PostgreSQL does not answer
// (a frozen connection), GET /metrics with a key the gate resolved before
// still answers 200 within a scrape's usual 10 s: the process and HTTP
// series, asyncgate_scrape_error 1 for the store's gauges. A key it never
// saw is refused with 503 database_unavailable.
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
	if r.Status != 200 || took > 10*time.Second || !strings.Contains(body, "asyncgate_scrape_error 1") ||
		!strings.Contains(body, "go_goroutines") || !strings.Contains(body, "asyncgate_http_request_duration_seconds") {
		t.Fatalf("/metrics while the database does not answer: %d after %v: %.600s", r.Status, took, body)
	}
	if r := call(t, "GET", g.URL+"/metrics", unseen, nil); r.Status != 503 || !strings.Contains(string(r.Body), "database_unavailable") {
		t.Fatalf("/metrics with a key never resolved, while the database does not answer: %d %s", r.Status, r.Body)
	}
}
