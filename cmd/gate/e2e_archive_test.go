package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestE2EArchiveOwedResult: through the real binary, on SQLite and
// PostgreSQL, a result the file channel stored is not archived while a task
// that waits on it has not finished: POST /v1/tasks/{id}/archive, and MCP's
// archive_task_result, answer 409 conflict naming the waiter, and the
// waiter's worker still reads the payload through its lease. Once the waiter
// finished, the archive goes through; the task then shows no pointer (its
// payload was purged), a read of its result says 404 not_found with when
// it was archived (not "no such result"), and a task queued after it is
// refused with 409 conflict, as nothing could hand it that payload.
func TestE2EArchiveOwedResult(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			g := startGateOnStore(t, driver)
			g.putType(t, "arch", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.alice", "")
			worker := g.newKey(t, "worker", "arch.1", "")

			a := g.enqueue(t, agent, "arch", map[string]any{"d": 1})
			r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "arch", "params": map[string]any{"w": 1}, "after": []string{a}})
			want(t, r, 201, "")
			w := r.JSON(t)["task_id"].(string)
			big := strings.Repeat("z", 20000)
			ptr, _ := g.completeOne(t, worker, "arch.1", a, map[string]any{"result": big})["result_pointer"].(string)
			if !strings.HasPrefix(ptr, "file:") {
				t.Fatalf("result stored at %q, want the file channel", ptr)
			}

			// W waits (queued now) on A: the archive is refused, writes
			// nothing, and the payload stays.
			r = call(t, "POST", g.URL+"/v1/tasks/"+a+"/archive", agent, nil)
			want(t, r, 409, "conflict")
			if !strings.Contains(string(r.Body), w) {
				t.Fatalf("refusal does not name the waiter %s: %s", w, r.Body)
			}
			mc := httpMCPClient(t, g.URL+"/mcp", agent, "archiver")
			out, isErr := callTool(t, mc, "archive_task_result", map[string]any{"task_id": a})
			if !isErr || out["error"] != "conflict" || !strings.Contains(toJSON(out), w) {
				t.Fatalf("archive_task_result with a waiter: %v (error %v)", out, isErr)
			}
			got := call(t, "GET", g.URL+"/v1/tasks/"+a, agent, nil)
			want(t, got, 200, "")
			if res, _ := got.JSON(t)["result"].(map[string]any); res["archived_at"] != nil || res["result_pointer"] != ptr {
				t.Fatalf("a refused archive wrote: %s", got.Body)
			}

			// The waiter's worker reads its input through its lease.
			o := g.lease(t, worker, "arch.1", nil)
			if len(o) != 1 || o[0].Task.ID != w {
				t.Fatalf("lease of the waiter: %+v", o)
			}
			r = call(t, "GET", g.URL+"/v1/tasks/"+a+"/result?lease_id="+o[0].LeaseID, worker, nil)
			want(t, r, 200, "")
			if !strings.Contains(string(r.Body), big[:100]) {
				t.Fatalf("the waiter's read: %.300s", r.Body)
			}
			// Still leased: still refused.
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+a+"/archive", agent, nil), 409, "conflict")
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, map[string]any{"result": "done"}), 200, "")

			// Nobody waits any more: archived.
			r = call(t, "POST", g.URL+"/v1/tasks/"+a+"/archive", agent, nil)
			want(t, r, 200, "")
			archivedAt, _ := r.JSON(t)["archived_at"].(string)
			if archivedAt == "" {
				t.Fatalf("archive answer: %s", r.Body)
			}
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+a+"/archive", agent, nil), 200, "") // twice: a no-op

			// The task's result no longer presents the gone payload.
			got = call(t, "GET", g.URL+"/v1/tasks/"+a, agent, nil)
			want(t, got, 200, "")
			res, _ := got.JSON(t)["result"].(map[string]any)
			if res["result_pointer"] != nil || res["purged_at"] == nil || res["archived_at"] == nil || res["result_checksum"] == nil {
				t.Fatalf("archived result reads %v, want no pointer, purged_at, archived_at and the checksum", res)
			}
			// Its read says it was archived, and when.
			r = call(t, "GET", g.URL+"/v1/tasks/"+a+"/result", agent, nil)
			want(t, r, 404, "not_found")
			if body := string(r.Body); !strings.Contains(body, "archived") || strings.Contains(body, "no such result") {
				t.Fatalf("read of an archived result: %s", body)
			}
			out, isErr = callTool(t, mc, "fetch_task_result", map[string]any{"task_id": a})
			if !isErr || out["error"] != "not_found" || !strings.Contains(toJSON(out), "archived") {
				t.Fatalf("fetch_task_result of an archived result: %v", out)
			}

			// Nothing may wait on it now: the payload is gone.
			r = call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "arch", "params": map[string]any{"w": 2}, "after": []string{a}})
			want(t, r, 409, "conflict")
			if !strings.Contains(string(r.Body), "archived") {
				t.Fatalf("enqueue after an archived result: %s", r.Body)
			}

			// An inline result (it lives in its pointer) archives as before,
			// waiter or not, and stays readable.
			b := g.enqueue(t, agent, "arch", map[string]any{"d": 2})
			r = call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "arch", "params": map[string]any{"w": 3}, "after": []string{b}})
			want(t, r, 201, "")
			iptr, _ := g.completeOne(t, worker, "arch.1", b, map[string]any{"result": "small"})["result_pointer"].(string)
			if !strings.HasPrefix(iptr, "inline:") {
				t.Fatalf("small result stored at %q, want inline", iptr)
			}
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+b+"/archive", agent, nil), 200, "")
			r = call(t, "GET", g.URL+"/v1/tasks/"+b+"/result", agent, nil)
			want(t, r, 200, "")
			want(t, call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "arch", "after": []string{b}}), 201, "")
			for range 2 { // drain the two waiters of b
				o := g.lease(t, worker, "arch.1", nil)
				if len(o) != 1 {
					t.Fatalf("lease of b's waiters: %+v", o)
				}
				want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, map[string]any{"result": "ok"}), 200, "")
			}

			// A workflow whose final step's stored result is archived: the
			// workflow's copy of it no longer presents the pointer either.
			r = call(t, "POST", g.URL+"/v1/workflows", agent, map[string]any{"name": "wf",
				"steps": []map[string]any{{"name": "only", "task_type": "arch"}}})
			want(t, r, 201, "")
			wf := r.JSON(t)["workflow_id"].(string)
			o = g.lease(t, worker, "arch.1", nil)
			if len(o) != 1 {
				t.Fatalf("lease of the workflow's step: %+v", o)
			}
			step := o[0].Task.ID
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, map[string]any{"result": big}), 200, "")
			got = call(t, "GET", g.URL+"/v1/workflows/"+wf, agent, nil)
			want(t, got, 200, "")
			if res, _ := got.JSON(t)["result"].(map[string]any); !strings.HasPrefix(toJSON(res["result_pointer"]), `"file:`) {
				t.Fatalf("workflow before the archive: %s", got.Body)
			}
			want(t, call(t, "POST", g.URL+"/v1/tasks/"+step+"/archive", agent, nil), 200, "")
			got = call(t, "GET", g.URL+"/v1/workflows/"+wf, agent, nil)
			want(t, got, 200, "")
			if res, _ := got.JSON(t)["result"].(map[string]any); res["result_pointer"] != nil || res["purged_at"] == nil || res["archived_at"] == nil {
				t.Fatalf("workflow after its final step's result was archived: %s", got.Body)
			}
			r = call(t, "GET", g.URL+"/v1/tasks/"+step+"/result", agent, nil)
			want(t, r, 404, "not_found")
			if !strings.Contains(string(r.Body), "archived at") {
				t.Fatalf("read of the archived final step: %s", r.Body)
			}
		})
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
