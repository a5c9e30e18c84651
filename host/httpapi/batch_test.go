package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestBatchOutcomesRunConcurrently completes and heartbeats 60 leases in one
// POST /v1/leases/batch (run under -race: the entries share the request),
// each answered in its entry's order, with a repeated completion of one
// lease answered as its duplicate because entries on one lease keep their
// order; a worker key acting as another worker is refused per entry.
func TestBatchOutcomesRunConcurrently(t *testing.T) {
	b := setup(t)
	if code, m := b.do(t, "PUT", "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	const n = 60
	for i := range n {
		if code, body := b.do(t, "POST", "/v1/tasks", b.agent, fmt.Sprintf(`{"task_type":"echo","params":{"i":%d}}`, i)); code != 201 {
			t.Fatalf("enqueue: %d %v", code, body)
		}
	}
	var leases []string
	for len(leases) < n {
		code, raw := b.raw(t, "POST", "/v1/leases", b.worker, fmt.Sprintf(`{"max_tasks":%d}`, min(100, n-len(leases))))
		if code != 200 {
			t.Fatalf("lease: %d %s", code, raw)
		}
		var lr struct {
			Leases []struct {
				LeaseID string `json:"lease_id"`
			} `json:"leases"`
		}
		if err := json.Unmarshal(raw, &lr); err != nil {
			t.Fatal(err)
		}
		for _, l := range lr.Leases {
			leases = append(leases, l.LeaseID)
		}
	}
	var entries []string
	for i, l := range leases {
		switch {
		case i%3 == 0:
			entries = append(entries, fmt.Sprintf(`{"id":"h%d","lease_id":%q,"heartbeat":{"progress_message":"p"}}`, i, l))
		default:
			entries = append(entries, fmt.Sprintf(`{"id":"c%d","lease_id":%q,"complete":{"result_pointer":"s3://b/%d"}}`, i, l, i))
		}
	}
	entries = append(entries,
		fmt.Sprintf(`{"id":"again","lease_id":%q,"complete":{"result_pointer":"s3://b/1"}}`, leases[1]),
		fmt.Sprintf(`{"id":"as-other","lease_id":%q,"heartbeat":{"worker_id":"echo.w2"}}`, leases[0]))
	code, raw := b.raw(t, "POST", "/v1/leases/batch", b.worker, `{"entries":[`+strings.Join(entries, ",")+`]}`)
	if code != 200 {
		t.Fatalf("batch: %d %s", code, raw)
	}
	var out struct {
		Results []struct {
			ID        string         `json:"id"`
			OK        bool           `json:"ok"`
			Error     string         `json:"error"`
			Complete  map[string]any `json:"complete"`
			Heartbeat map[string]any `json:"heartbeat"`
		} `json:"results"`
		Succeeded, Failed int
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != n+2 || out.Succeeded != n+1 || out.Failed != 1 {
		t.Fatalf("%d results, %d succeeded, %d failed: %.2000s", len(out.Results), out.Succeeded, out.Failed, raw)
	}
	for i, r := range out.Results[:n] {
		want := fmt.Sprintf("c%d", i)
		if i%3 == 0 {
			want = fmt.Sprintf("h%d", i)
		}
		if r.ID != want || !r.OK || (i%3 == 0) != (r.Heartbeat != nil) || (i%3 != 0) != (r.Complete != nil) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if r := out.Results[n]; !r.OK || r.Complete["duplicate"] != true || r.Complete["receipt_id"] != out.Results[1].Complete["receipt_id"] {
		t.Fatalf("again: %+v, first %+v", r, out.Results[1])
	}
	if r := out.Results[n+1]; r.OK || r.Error != "forbidden" {
		t.Fatalf("as another worker: %+v", r)
	}
}

// TestBatchEntryLeaseIDJudgedAsThePath: a batch entry's lease_id is judged
// as the single call judges the lease id in its path: one with a control
// character, or not UTF-8, is 400 bad_request (not 409 lease_expired with
// the id echoed in the detail), and one longer than any lease id is 400.
// The other entries are answered as usual.
func TestBatchEntryLeaseIDJudgedAsThePath(t *testing.T) {
	b := setup(t)
	code, raw := b.raw(t, "POST", "/v1/leases/batch", b.worker, `{"entries":[`+
		`{"lease_id":"a\u001bb","heartbeat":{}},`+
		`{"lease_id":"a\nb","heartbeat":{}},`+
		`{"lease_id":"`+strings.Repeat("L", 5000)+`","heartbeat":{}},`+
		`{"lease_id":"lease-01M8GME6G9P78S4Y21S82KRJ2A","heartbeat":{}}]}`)
	if code != 200 {
		t.Fatalf("batch: %d %s", code, raw)
	}
	var out struct {
		Results []struct {
			HTTPStatus int    `json:"http_status"`
			Error      string `json:"error"`
			Detail     string `json:"detail"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Results) != 4 {
		t.Fatalf("%v: %.2000s", err, raw)
	}
	for i, want := range []string{"control character %1B", "control character %0A", "5000 bytes long"} {
		r := out.Results[i]
		if r.HTTPStatus != 400 || r.Error != "bad_request" || !strings.Contains(r.Detail, want) || strings.Contains(r.Detail, "LLLL") {
			t.Errorf("entry %d: %+v, want 400 bad_request saying %q", i, r, want)
		}
	}
	if r := out.Results[3]; r.HTTPStatus != 409 || r.Error != "lease_expired" {
		t.Errorf("entry 3 (a well-formed unknown lease): %+v, want 409 lease_expired", r)
	}
}
