package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
)

// samples returns /metrics as key sees it: each sample's value by its
// series (name and labels as written).
func samples(t *testing.T, b *testBundle, key string) map[string]float64 {
	t.Helper()
	code, raw := b.raw(t, http.MethodGet, "/metrics", key, "")
	if code != 200 {
		t.Fatalf("/metrics = %d %s", code, raw)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestStoreWriterMetrics: /metrics reports the store's writers to the
// gate's operators, and the counters follow the writes: each enqueue is one
// more update, carried by at least one more batch, and the writer's busy
// time grows. An admin of another tenant does not see them (they are
// gate-wide).
func TestStoreWriterMetrics(t *testing.T) {
	b := setup(t)
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	before := samples(t, b, b.admin)
	if before["asyncgate_store_writers"] != 1 {
		t.Fatalf("asyncgate_store_writers = %v, want 1 (SQLite has one writer)", before["asyncgate_store_writers"])
	}
	const n = 5
	for i := 0; i < n; i++ {
		if c, m := b.do(t, http.MethodPost, "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`); c != 201 {
			t.Fatalf("enqueue = %d %v", c, m)
		}
	}
	after := samples(t, b, b.admin)
	batches := after["asyncgate_store_batches_total"] - before["asyncgate_store_batches_total"]
	updates := after["asyncgate_store_batched_updates_total"] - before["asyncgate_store_batched_updates_total"]
	if updates < n || batches < 1 || batches > updates {
		t.Fatalf("after %d enqueues: %v more batches carrying %v more updates; want at least %d updates in 1 to that many batches", n, batches, updates, n)
	}
	// Enqueues with no backlog are never held; the budget's series are
	// there all the same.
	for _, series := range []string{"asyncgate_store_enqueues_held_total", "asyncgate_store_enqueue_hold_seconds_total",
		"asyncgate_store_enqueue_holds_expired_total", "asyncgate_store_enqueues_waiting"} {
		if v, ok := after[series]; !ok || v != 0 {
			t.Fatalf("%s = %v (present %v), want 0 with no backlog", series, v, ok)
		}
	}
	if after["asyncgate_store_writer_busy_seconds_total"] <= before["asyncgate_store_writer_busy_seconds_total"] {
		t.Fatalf("writer busy seconds did not grow: %v → %v", before["asyncgate_store_writer_busy_seconds_total"], after["asyncgate_store_writer_busy_seconds_total"])
	}
	other, err := auth.CreateKey(context.Background(), b.st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "ops.acme", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for series := range samples(t, b, other.APIKey) {
		if strings.HasPrefix(series, "asyncgate_store_") {
			t.Fatalf("a tenant admin sees the gate-wide series %s", series)
		}
	}
}
