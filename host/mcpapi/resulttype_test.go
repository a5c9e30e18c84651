package mcpapi_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestTaskMethodsResultTypeByProtocol: on protocol 2026-07-28 the answers
// the gate gives itself to the task methods — tasks/get, tasks/result,
// tasks/list and tasks/cancel, of a task and of a workflow, and tools/call
// as a task — carry what mcp-go's decoration puts on its own answers for
// that version: resultType "complete" and the server's identity in _meta
// (serverInfo), beside the result's own _meta; no cache hints, which mcp-go
// adds to list and read results of tools, prompts and resources only. On
// 2025-11-25 they carry neither, as before.
func TestTaskMethodsResultTypeByProtocol(t *testing.T) {
	b := setup(t, mcpapi.Config{Version: "9.9.9-test", TaskResultWait: 300 * time.Millisecond})
	for _, version := range []string{mcp.LATEST_PROTOCOL_VERSION, mcp.ProtocolVersion20251125} {
		t.Run(version, func(t *testing.T) {
			c := b.connectAt(t, b.agent, version)
			modern := mcp.IsModernProtocol(version)
			// rpc sends raw requests: a 2026-07-28 one carries its version
			// and capabilities in _meta, as mcp-go's client stamps them.
			params := func(p map[string]any) map[string]any {
				if modern {
					p["_meta"] = map[string]any{mcp.MetaKeyProtocolVersion: version, mcp.MetaKeyClientCapabilities: map[string]any{}}
				}
				return p
			}
			answer := func(method string, p map[string]any, out any) map[string]json.RawMessage {
				t.Helper()
				raw, e := rpc(t, c, method, params(p))
				if e != nil {
					t.Fatalf("%s %v on %s: %d %s", method, p, version, e.Code, e.Message)
				}
				var got struct {
					ResultType *string                    `json:"resultType"`
					Meta       map[string]json.RawMessage `json:"_meta"`
					TTL        *int64                     `json:"ttlMs"`
					Scope      *string                    `json:"cacheScope"`
				}
				if err := json.Unmarshal(raw, &got); err != nil {
					t.Fatalf("%s on %s: %v in %s", method, version, err, raw)
				}
				if out != nil {
					if err := json.Unmarshal(raw, out); err != nil {
						t.Fatalf("%s on %s: %v in %s", method, version, err, raw)
					}
				}
				info, hasInfo := got.Meta[mcp.MetaKeyServerInfo]
				var impl mcp.Implementation
				switch {
				case got.TTL != nil || got.Scope != nil:
					t.Errorf("%s on %s: cache hints on a task method's answer: %s", method, version, raw)
				case !modern && (got.ResultType != nil || hasInfo):
					t.Errorf("%s on %s: resultType or serverInfo on an older protocol's answer: %s", method, version, raw)
				case modern && (got.ResultType == nil || *got.ResultType != string(mcp.ResultTypeComplete)):
					t.Errorf("%s on %s: resultType not complete: %s", method, version, raw)
				case modern && (json.Unmarshal(info, &impl) != nil || impl.Name != "asyncgate" || impl.Version != "9.9.9-test"):
					t.Errorf("%s on %s: _meta serverInfo not the gate's: %s", method, version, raw)
				}
				return got.Meta
			}

			var ct createTask
			meta := answer("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"n": 1}, "task": map[string]any{}}, &ct)
			if ct.Task.TaskId == "" || meta["io.modelcontextprotocol/model-immediate-response"] == nil {
				t.Fatalf("tools/call as a task on %s: %+v", version, ct)
			}
			id := ct.Task.TaskId
			var got mcp.Task
			answer("tasks/get", map[string]any{"taskId": id}, &got)
			if got.TaskId != id || got.Status != mcp.TaskStatusWorking {
				t.Errorf("tasks/get on %s: %+v", version, got)
			}
			var list struct {
				Tasks []mcp.Task `json:"tasks"`
			}
			answer("tasks/list", map[string]any{}, &list)
			if len(list.Tasks) == 0 {
				t.Errorf("tasks/list on %s: no tasks", version)
			}
			complete(t, b, id, map[string]any{"n": 1})
			var tr struct {
				StructuredContent mcpapi.TaskTypeCallResult `json:"structuredContent"`
			}
			meta = answer("tasks/result", map[string]any{"taskId": id}, &tr)
			var related struct {
				TaskID string `json:"taskId"`
			}
			if tr.StructuredContent.Status != "succeeded" || json.Unmarshal(meta["io.modelcontextprotocol/related-task"], &related) != nil || related.TaskID != id {
				t.Errorf("tasks/result on %s: %+v, _meta %v", version, tr, meta)
			}

			answer("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{}, "task": map[string]any{}}, &ct)
			got = mcp.Task{}
			answer("tasks/cancel", map[string]any{"taskId": ct.Task.TaskId}, &got)
			if got.Status != mcp.TaskStatusCancelled {
				t.Errorf("tasks/cancel on %s: %+v", version, got)
			}

			wf := map[string]any{"name": "one", "steps": []map[string]any{{"name": "a", "task_type": "echo"}}}
			answer("tools/call", map[string]any{"name": "submit_workflow", "arguments": wf, "task": map[string]any{}}, &ct)
			got = mcp.Task{}
			answer("tasks/get", map[string]any{"taskId": ct.Task.TaskId}, &got)
			if got.TaskId != ct.Task.TaskId || got.Status != mcp.TaskStatusWorking {
				t.Errorf("tasks/get of a workflow on %s: %+v", version, got)
			}
			got = mcp.Task{}
			answer("tasks/cancel", map[string]any{"taskId": ct.Task.TaskId}, &got)
			if got.Status != mcp.TaskStatusCancelled {
				t.Errorf("tasks/cancel of a workflow on %s: %+v", version, got)
			}
		})
	}
}
