package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestE2ENULRefusedAlikeLoneSurrogatesRead: a NUL character in a request —
// a body's field, a task's params, a path, a query, a tool's arguments — is
// refused with 400 bad_request on both stores alike, before either store
// sees it (PostgreSQL refused NUL in text where SQLite stored or looked it
// up), and nothing is written; a lone UTF-16 surrogate is read as U+FFFD
// in a raw value too, so a task's params come back as JSON any reader
// takes.
func TestE2ENULRefusedAlikeLoneSurrogatesRead(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			agent := g.newKey(t, "agent", "agent.a", "ta")
			worker := g.newKey(t, "worker", "job.a", "ta")
			id := g.enqueue(t, agent, "job", nil)
			refused := func(r resp, what string) {
				t.Helper()
				want(t, r, 400, "bad_request")
				if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, what) {
					t.Fatalf("refusal %q does not say %q", d, what)
				}
			}
			for _, body := range []string{
				`{"task_type":"job","idempotency_key":"k\u0000"}`,
				`{"task_type":"j\u0000ob"}`,
				`{"task_type":"job","params":{"a":["x","\u0000"]}}`,
			} {
				refused(call(t, "POST", g.URL+"/v1/tasks", agent, body), "NUL character")
			}
			// A lone surrogate is read as U+FFFD everywhere, raw values
			// included, so what is handed back is JSON any reader takes.
			lone := call(t, "POST", g.URL+"/v1/tasks", agent, `{"task_type":"job","params":{"a":"\ud800","b":"\ud83d\ude00"}}`)
			want(t, lone, 201, "")
			loneID, _ := lone.JSON(t)["task_id"].(string)
			got := call(t, "GET", g.URL+"/v1/tasks/"+loneID, agent, nil)
			want(t, got, 200, "")
			if strings.Contains(string(got.Body), `\ud800`) {
				t.Fatalf("a lone surrogate came back as sent: %s", got.Body)
			}
			if p, _ := got.JSON(t)["params"].(map[string]any); p["a"] != "\uFFFD" || p["b"] != "\U0001F600" {
				t.Fatalf("params read back %v, want a U+FFFD and the pair's character", p)
			}
			refused(call(t, "GET", g.URL+"/v1/tasks/T-%00", agent, nil), "NUL character")
			refused(call(t, "GET", g.URL+"/v1/tasks?task_type=%00", agent, nil), "NUL character")
			o := g.lease(t, worker, "job.a", nil)
			if len(o) != 1 || o[0].Task.ID != id {
				t.Fatalf("lease: %+v", o)
			}
			refused(call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/heartbeat", worker, `{"progress_message":"half\u0000way"}`), "NUL character")

			c := stdioClient(t, "mcp", "--url", g.URL, "--key", agent)
			req := mcp.CallToolRequest{}
			req.Params.Name = "queue_task"
			req.Params.Arguments = map[string]any{"task_type": "job", "idempotency_key": "k\x00"}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if res, err := c.CallTool(ctx, req); err == nil || !strings.Contains(err.Error(), "bad_request") || !strings.Contains(err.Error(), "NUL character") {
				t.Fatalf("MCP queue_task with a NUL in its key: %+v, %v; want a bad_request error", res, err)
			}
			// Nothing was queued by the refused calls: the tasks are the one
			// queued first and the one with the lone surrogate.
			list := call(t, "GET", g.URL+"/v1/tasks?limit=10", agent, nil)
			want(t, list, 200, "")
			if ts, _ := list.JSON(t)["tasks"].([]any); len(ts) != 2 {
				t.Fatalf("tasks after the refusals: %d, want 2", len(ts))
			}
		})
	}
}
