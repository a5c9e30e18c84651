package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// FanInWorkflow is FanIn with the graph submitted as one workflow: children
// steps and a merge step after all of them (its final step), in one call and
// one transaction. The clock runs as in FanIn, from the last child's
// completion to the merge's offer; it also reports the submission's p50 and
// p99 (children+1 tasks, their edges and receipts written together), and
// checks that each workflow ended succeeded with the merge's completion.
func FanInWorkflow(b *testing.B, eng *engine.Engine, children int) {
	var submits []time.Duration
	var ids []string
	fanIn(b, eng, children, func(ctx context.Context) string {
		steps := make([]engine.WorkflowStepRequest, 0, children+1)
		after := make([]string, children)
		for i := range children {
			after[i] = fmt.Sprintf("part-%d", i)
			steps = append(steps, engine.WorkflowStepRequest{Name: after[i], TaskType: "fanin.part", Params: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		}
		steps = append(steps, engine.WorkflowStepRequest{Name: "merge", TaskType: "fanin.merge", After: after})
		t0 := time.Now()
		res, err := eng.SubmitWorkflow(ctx, benchAgent, engine.WorkflowRequest{Name: "fan-in", Steps: steps})
		if err != nil {
			b.Fatalf("submit: %v", err)
		}
		submits = append(submits, time.Since(t0))
		ids = append(ids, res.WorkflowID)
		return res.Steps["merge"]
	})
	for _, id := range ids {
		v, err := eng.GetWorkflow(context.Background(), benchAgent, id)
		if err != nil || v.State != host.WorkflowSucceeded {
			b.Fatalf("workflow %s after its merge completed: %v %v", id, v, err)
		}
	}
	sort.Slice(submits, func(i, j int) bool { return submits[i] < submits[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(submits[len(submits)/2]), "p50_submit_ms")
	b.ReportMetric(ms(submits[(len(submits)*99)/100]), "p99_submit_ms")
}
