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

// A given recipient_ai names a principal, in the form every principal that
// may read a task has (a key's, a local session's): an outcome owed to any
// other name is owed to no one, and a workflow's address is the gate's to
// give in any spelling of its prefix.
func TestEnqueueRecipientIsAPrincipal(t *testing.T) {
	ctx := context.Background()
	eng := workEngine(t, Config{})
	actor := Actor{Tenant: "acme", Principal: "agent.a", Role: RoleAgent}
	for _, to := range []string{"a b", "!!!", "x/y", "../..", "Workflow/WF-x", "WORKFLOW/wf-x", "agent.b\u200b"} {
		res, err := eng.Enqueue(ctx, actor, EnqueueRequest{TaskType: "work", Recipient: to})
		if !host.IsCode(err, host.CodeBadRequest) {
			t.Errorf("recipient_ai %q: %+v, %v; want %s", to, res, err, host.CodeBadRequest)
		}
	}
	if _, err := eng.Enqueue(ctx, actor, EnqueueRequest{TaskType: "work", Recipient: "agent.b@team:1"}); err != nil {
		t.Fatalf("a principal name: %v", err)
	}
}
