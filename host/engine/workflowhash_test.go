package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// A workflow submitted before steps took delay_seconds, not_before and
// resource_intents keeps its request hash: a retransmission of it under
// its idempotency key after an upgrade is a duplicate, not a conflict.
func TestWorkflowHashOfOlderRequestsUnchanged(t *testing.T) {
	retries := 2
	req := WorkflowRequest{Name: "consult then synthesize", FinalStep: "s", IdempotencyKey: "k",
		Steps: []WorkflowStepRequest{
			{Name: "a", TaskType: "ai.chat", Params: json.RawMessage(`{ "b": 1, "a": [1, 2] }`), Priority: 7, MaxRetries: &retries, Summary: "consult"},
			{Name: "s", TaskType: "ai.chat", After: []string{"a"}, AfterRule: host.RuleAllFinished},
		}}
	got, err := workflowHash(req)
	if err != nil {
		t.Fatal(err)
	}
	if want := "5d669c53400619a2600a49d74469c333346c50f4a9e7eee6804d521d508fa456"; got != want {
		t.Fatalf("workflowHash = %s, want %s (the hash such a request had before)", got, want)
	}
	// The new fields count when given.
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, mod := range []func(s *WorkflowStepRequest){
		func(s *WorkflowStepRequest) { s.DelaySeconds = 1 },
		func(s *WorkflowStepRequest) { s.NotBefore = &at },
		func(s *WorkflowStepRequest) {
			s.ResourceIntents = []host.ResourceIntent{{Resource: "REPO:r", Predicate: "READS"}}
		},
	} {
		r := req
		r.Steps = append([]WorkflowStepRequest(nil), req.Steps...)
		mod(&r.Steps[1])
		if h, err := workflowHash(r); err != nil || h == got {
			t.Fatalf("a step's start did not change the hash: %s, %v", h, err)
		}
	}
}
