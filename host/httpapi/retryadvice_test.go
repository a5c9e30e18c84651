package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/host/store"
)

// unknownOutcomes is a store whose updates, while lost is set, answer as
// one given up in its batch does: the outcome unknown
// (store.UpdateAbandoned).
type unknownOutcomes struct {
	store.Store
	lost atomic.Bool
}

func (s *unknownOutcomes) Update(ctx context.Context, fn func(store.Tx) error) error {
	if s.lost.Load() {
		return store.UpdateAbandoned(ctx, "sqlite", true)
	}
	return s.Store.Update(ctx, fn)
}

// TestOutcomeUnknownAdvice: a 503 whose outcome is unknown says what makes
// the call safe to repeat: the lease id for a lease verb, the idempotency
// key for an enqueue that has one, and never an idempotency key a call
// does not have.
func TestOutcomeUnknownAdvice(t *testing.T) {
	ctx := context.Background()
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := &unknownOutcomes{Store: sq}
	log := slog.New(slog.DiscardHandler)
	eng, err := engine.New(engine.Config{Store: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Engine: eng, Logger: log, BodyLimit: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); eng.Close(); sq.Close() })
	b := &testBundle{st: sq, eng: eng, srv: srv, ts: ts}
	for _, k := range []struct {
		dst        *string
		role, name string
	}{{&b.admin, engine.RoleAdmin, "root"}, {&b.agent, engine.RoleAgent, "agent.a"}, {&b.worker, engine.RoleWorker, "echo.w1"}} {
		ck, err := auth.CreateKey(ctx, sq, auth.NewKeyRequest{Role: k.role, Principal: k.name})
		if err != nil {
			t.Fatal(err)
		}
		*k.dst = ck.APIKey
	}
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	if code, m := b.do(t, "POST", "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`); code != 201 {
		t.Fatalf("enqueue: %d %v", code, m)
	}
	code, m := b.do(t, "POST", "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`)
	if code != 200 {
		t.Fatalf("lease: %d %v", code, m)
	}
	id := m["leases"].([]any)[0].(map[string]any)["lease_id"].(string)

	st.lost.Store(true)
	for _, c := range []struct {
		name, path, key, body string
		entry                 bool // the answer is a batch's first result
		want                  string
	}{
		{"heartbeat", "/v1/leases/" + id + "/heartbeat", b.worker, `{"worker_id":"echo.w1","progress_percent":5}`, false, "same lease id"},
		{"complete", "/v1/leases/" + id + "/complete", b.worker, `{"worker_id":"echo.w1","result_pointer":"s3://x"}`, false, "same lease id"},
		{"fail", "/v1/leases/" + id + "/fail", b.worker, `{"worker_id":"echo.w1","error_message":"x"}`, false, "same lease id"},
		{"batch fail", "/v1/leases/batch", b.worker, `{"worker_id":"echo.w1","entries":[{"lease_id":"` + id + `","fail":{"error_message":"x"}}]}`, true, "same lease id"},
		{"enqueue with a key", "/v1/tasks", b.agent, `{"task_type":"echo","params":{},"idempotency_key":"k1"}`, false, "same idempotency_key"},
		{"enqueue without a key", "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`, false, "has no idempotency_key"},
		{"batch enqueue", "/v1/tasks/batch", b.agent, `{"tasks":[{"task_type":"echo","params":{},"idempotency_key":"k2"},{"task_type":"echo","params":{}}]}`, true, "same idempotency_key"},
	} {
		code, m := b.do(t, http.MethodPost, c.path, c.key, c.body)
		if c.entry {
			if code != 200 {
				t.Fatalf("%s: %d %v", c.name, code, m)
			}
			code, m = 503, m["results"].([]any)[0].(map[string]any)
		}
		d, _ := m["detail"].(string)
		if code != 503 || m["error"] != "database_unavailable" || !strings.Contains(d, "outcome is unknown") || !strings.Contains(d, c.want) || !strings.Contains(d, "call. ") {
			t.Fatalf("%s: %d %v, want 503 database_unavailable saying %q", c.name, code, m, c.want)
		}
		if c.want == "same lease id" && strings.Contains(d, "idempotency") {
			t.Fatalf("%s: %q advises an idempotency key the call does not have", c.name, d)
		}
	}
}

// TestRequestDeadlineSaysOutcomeUnknown: a request whose own deadline passed
// before the store answered (a raw context deadline in the chain, not the
// store's named bound) is database_unavailable saying the outcome of a
// change is unknown: the update may have been sent, so "timed out" alone
// would leave the caller guessing whether to retry.
func TestRequestDeadlineSaysOutcomeUnknown(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, fmt.Errorf("enqueue: %w", context.DeadlineExceeded)} {
		code, detail := classify(err)
		if code != "database_unavailable" || !strings.Contains(detail, "outcome is unknown") {
			t.Errorf("%v: %s %q", err, code, detail)
		}
	}
}
