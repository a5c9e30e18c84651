package engine

import (
	"context"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// An enqueue without recipient_ai addresses the task to its caller; a
// caller named like a workflow (a local `gate mcp --principal`, the one
// door that does not hold names to host.PrincipalPattern) must not address
// a task to a workflow that way: its end would end that workflow.
func TestEnqueueDefaultRecipientIsNoWorkflow(t *testing.T) {
	ctx := context.Background()
	eng := workEngine(t, Config{})
	actor := Actor{Tenant: "acme", Principal: host.WorkflowFinalRecipient("wf_victim"), Role: RoleAgent}
	res, err := eng.Enqueue(ctx, actor, EnqueueRequest{TaskType: "work"})
	if !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("an enqueue addressed by default to %s: %+v, %v; want %s", actor.Principal, res, err, host.CodeBadRequest)
	}
}

// A local session whose principal is the gate's own name (`gate mcp
// --principal asyncgate`) addresses no task to the gate by default: the
// gate issues receipts under that name and owes nothing to itself.
func TestEnqueueDefaultRecipientIsNotTheGate(t *testing.T) {
	ctx := context.Background()
	eng := workEngine(t, Config{})
	for _, p := range []string{GatePrincipal, "ASYNCGATE"} {
		actor := Actor{Tenant: "acme", Principal: p, Role: RoleAgent}
		res, err := eng.Enqueue(ctx, actor, EnqueueRequest{TaskType: "work"})
		if !host.IsCode(err, host.CodeBadRequest) {
			t.Fatalf("an enqueue addressed by default to %s: %+v, %v; want %s", p, res, err, host.CodeBadRequest)
		}
	}
	if _, err := eng.Enqueue(ctx, Actor{Tenant: "acme", Principal: GatePrincipal, Role: RoleAgent},
		EnqueueRequest{TaskType: "work", Recipient: "agent.b"}); err != nil {
		t.Fatalf("naming another recipient: %v", err)
	}
}
