package engine

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestReceiptBodiesEncodeAsTheirMaps checks that the structs the hot paths
// build receipt bodies from (completedBody, assignedBody) encode byte for
// byte as the maps they replaced: a receipt's body is hashed into the ledger
// and read by clients, so its bytes are its contract.
func TestReceiptBodiesEncodeAsTheirMaps(t *testing.T) {
	at := time.Date(2026, 11, 30, 7, 30, 1, 123456000, time.UTC)
	tasks := []*host.Task{
		{LeaseID: "l_1.x", WorkerID: "w<1>&", Attempts: 0, LeaseExpiresAt: &at},
		{LeaseID: "", WorkerID: "wörker", Attempts: 3},
	}
	results := []host.Result{
		{Channel: "inline", Pointer: "inline:b2s="},
		{Channel: "file", Pointer: "file:a b\u2028", Checksum: "sha256:00", Summary: "done <ok> & \"quoted\"",
			Artifacts:     []host.Artifact{{Type: "url", URL: "https://x/y?a=1&b=2"}, {Type: "ref", Ref: json.RawMessage(` {"k" : [1, 2]} `)}},
			DeliveryProof: json.RawMessage(`{"proof": "x"}`), Metadata: json.RawMessage(`{"m": {"n": null}}`)},
		{Pointer: "p", Metadata: json.RawMessage(`{}`)},
	}
	for _, tk := range tasks {
		for _, res := range results {
			r, _ := completeTask(&host.Task{LeaseID: tk.LeaseID, WorkerID: tk.WorkerID, Attempts: tk.Attempts, LeaseExpiresAt: tk.LeaseExpiresAt}, res, at)
			m := map[string]any{
				"lease_id": tk.LeaseID, "worker_id": tk.WorkerID, "attempt": tk.Attempts + 1,
				"result_channel": res.Channel, "result_pointer": res.Pointer, "result_checksum": res.Checksum,
				"summary": res.Summary, "lease_expires_at": tk.LeaseExpiresAt,
			}
			if len(res.Artifacts) > 0 {
				m["artifacts"] = res.Artifacts
			}
			if len(res.DeliveryProof) > 0 {
				m["delivery_proof"] = res.DeliveryProof
			}
			if len(res.Metadata) > 0 {
				m["metadata"] = res.Metadata
			}
			if want := mustJSON(m); !bytes.Equal(r.Body, want) {
				t.Errorf("task.completed body\n got %s\nwant %s", r.Body, want)
			}
		}
	}
	for _, after := range [][]string{nil, {}, {"t_1", "t_2"}} {
		rule := host.DependencyRule("")
		if len(after) > 0 {
			rule = host.RuleAnySucceeded
		}
		b := assignedBody{After: after, AfterRule: rule, AvailableAt: at, Priority: 7, QueuedBy: "agent.<a>", TaskSummary: "s & t", TaskType: "ty"}
		m := map[string]any{"task_type": "ty", "priority": 7, "queued_by": "agent.<a>", "task_summary": "s & t", "available_at": at}
		if len(after) > 0 {
			m["after"], m["after_rule"] = after, rule
		}
		if got, want := mustJSON(b), mustJSON(m); !bytes.Equal(got, want) {
			t.Errorf("task.assigned body\n got %s\nwant %s", got, want)
		}
	}
}
