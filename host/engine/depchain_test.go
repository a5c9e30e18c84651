package engine

import (
	"context"
	"runtime/debug"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// A cancel at the head of a long chain of waiters settles the whole chain
// in its transaction without growing the stack with the chain: with the
// stack bounded to 1 MB, a recursion of 3 KB or more per link overflows
// (a fatal error, not a test failure) long before 800 links. The settle
// budget is off, so the whole chain is the cancel's transaction's.
func TestDependencyChainCancelUsesNoStack(t *testing.T) {
	ctx := context.Background()
	eng := workEngine(t, Config{MaxDependencyDepth: 1000, SettleBudget: -1})
	agent := Actor{Tenant: "acme", Principal: "agent.kee", Role: RoleAgent}
	const links = 800
	ids := make([]string, 0, links+1)
	for i := 0; i <= links; i++ {
		req := EnqueueRequest{TaskType: "work"}
		if i > 0 {
			req.After = []string{ids[i-1]}
		}
		res, err := eng.Enqueue(ctx, agent, req)
		if err != nil {
			t.Fatalf("enqueue link %d: %v", i, err)
		}
		ids = append(ids, res.TaskID)
	}
	old := debug.SetMaxStack(1 << 20)
	_, err := eng.Cancel(ctx, agent, ids[0], "stop the chain")
	debug.SetMaxStack(old)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, links / 2, links} {
		tk, err := eng.GetTask(ctx, agent, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != host.StateCanceled {
			t.Fatalf("link %d of the chain is %s after its head was canceled, want canceled", i, tk.State)
		}
	}
}
