package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestLeaseCallRefusesARunIDThatDiffersFromThePath(t *testing.T) {
	b := setup(t)
	if code, m := b.do(t, http.MethodPut, "/v1/admin/task-types/echo", b.admin, `{}`); code != 200 {
		t.Fatalf("PUT task type = %d %v", code, m)
	}
	if code, m := b.do(t, http.MethodPost, "/v1/tasks", b.agent, `{"task_type":"echo","params":{}}`); code != 201 {
		t.Fatalf("enqueue = %d %v", code, m)
	}
	code, m := b.do(t, http.MethodPost, "/v1/leases", b.worker, `{"worker_id":"echo.w1"}`)
	if code != 200 {
		t.Fatalf("lease = %d %v", code, m)
	}
	lease := m["leases"].([]any)[0].(map[string]any)["lease_id"].(string)
	for _, call := range []struct{ path, body string }{
		{"heartbeat", `{"run_id":"lease-other"}`},
		{"complete", `{"run_id":"lease-other","result_pointer":"s3://b/x"}`},
		{"fail", `{"run_id":"lease-other","error_message":"x"}`},
	} {
		code, m := b.do(t, http.MethodPost, "/v1/leases/"+lease+"/"+call.path, b.worker, call.body)
		d, _ := m["detail"].(string)
		if code != 400 || m["error"] != "bad_request" || !strings.Contains(d, "lease-other") || !strings.Contains(d, lease) {
			t.Errorf("%s with another run_id = %d %v, want 400 bad_request naming both", call.path, code, m)
		}
	}
	// The same run_id, or none, is accepted.
	if code, m := b.do(t, http.MethodPost, "/v1/leases/"+lease+"/heartbeat", b.worker, `{"run_id":"`+lease+`"}`); code != 200 {
		t.Fatalf("heartbeat with its own run_id = %d %v", code, m)
	}
	if code, m := b.do(t, http.MethodPost, "/v1/leases/"+lease+"/complete", b.worker, `{"result_pointer":"s3://b/x"}`); code != 200 {
		t.Fatalf("complete without run_id = %d %v", code, m)
	}
}
