package main

import (
	"fmt"
	"strings"
	"testing"
)

// batchResult is one entry's answer of POST /v1/leases/batch or
// POST /v1/tasks/batch as the tests read it.
type batchResult struct {
	ID         string         `json:"id"`
	LeaseID    string         `json:"lease_id"`
	OK         bool           `json:"ok"`
	HTTPStatus int            `json:"http_status"`
	Error      string         `json:"error"`
	Detail     string         `json:"detail"`
	Complete   map[string]any `json:"complete"`
	Fail       map[string]any `json:"fail"`
	Heartbeat  map[string]any `json:"heartbeat"`
	Task       map[string]any `json:"task"`
}

type batchAnswer struct {
	Results   []batchResult `json:"results"`
	Succeeded int           `json:"succeeded"`
	Failed    int           `json:"failed"`
}

func batchCall(t *testing.T, url, key string, body any) batchAnswer {
	t.Helper()
	r := call(t, "POST", url, key, body)
	want(t, r, 200, "")
	var a batchAnswer
	r.Into(t, &a)
	return a
}

// TestE2EBatchOutcomes (issue 40 item 3): one POST /v1/leases/batch
// completes, fails and heartbeats several leases, each entry answered on its
// own with the code its single call gives: another tenant's lease is refused
// as its single call refuses it, an unknown one is lease_expired, a lease of another worker of the same tenant is
// refused as the single call refuses it and stays with its holder, a body
// naming another worker is forbidden, an entry without a verb is a
// bad_request — and none of these touches the entries beside it. A call
// over the limit, empty, with an unknown field, with a repeated entry id or
// from an agent is refused whole. On SQLite and PostgreSQL.
func TestE2EBatchOutcomes(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			g.putType(t, "job", map[string]any{}, "tb")
			agentA := g.newKey(t, "agent", "agent.a", "ta")
			workerA, workerA2 := g.newKey(t, "worker", "job.a", "ta"), g.newKey(t, "worker", "job.a2", "ta")
			workerB := g.newKey(t, "worker", "job.b", "tb")
			for range 4 {
				g.enqueue(t, agentA, "job", nil)
			}
			mine := g.lease(t, workerA, "job.a", map[string]any{"max_tasks": 3})
			theirs := g.lease(t, workerA2, "job.a2", map[string]any{"max_tasks": 1})
			if len(mine) != 3 || len(theirs) != 1 {
				t.Fatalf("leases: %d and %d", len(mine), len(theirs))
			}
			url := g.URL + "/v1/leases/batch"

			// Another tenant's worker: every entry refused as its single
			// call is (the single calls first, refused: nothing changes).
			entries := []map[string]any{
				{"lease_id": mine[0].LeaseID, "complete": map[string]any{"result": "stolen"}},
				{"lease_id": mine[1].LeaseID, "fail": map[string]any{"error_message": "x"}},
				{"lease_id": mine[2].LeaseID, "heartbeat": map[string]any{}},
			}
			var singles []resp
			for _, e := range entries {
				for verb, body := range e {
					if verb != "lease_id" {
						singles = append(singles, call(t, "POST", g.URL+"/v1/leases/"+e["lease_id"].(string)+"/"+verb, workerB, body))
					}
				}
			}
			a := batchCall(t, url, workerB, map[string]any{"entries": entries})
			if a.Succeeded != 0 || a.Failed != 3 {
				t.Fatalf("foreign tenant batch: %+v", a)
			}
			for i, r := range a.Results {
				if s := singles[i]; s.Status < 400 || r.OK || r.HTTPStatus != s.Status || r.Error != s.JSON(t)["error"] || r.Detail == "" || r.LeaseID != mine[i].LeaseID {
					t.Fatalf("foreign tenant entry: %+v; its single call: %d %s", r, s.Status, s.Body)
				}
			}
			for _, o := range mine {
				if st := call(t, "GET", g.URL+"/v1/tasks/"+o.Task.ID, agentA, nil).JSON(t)["status"]; st != "leased" {
					t.Fatalf("task %s is %v after another tenant's batch", o.Task.ID, st)
				}
			}

			// The single call's answer for the other worker's lease, for
			// comparison (refused: nothing changes).
			single := call(t, "POST", g.URL+"/v1/leases/"+theirs[0].LeaseID+"/complete", workerA, map[string]any{"result": "x"})
			if single.Status < 400 {
				t.Fatalf("completing another worker's lease answered %d", single.Status)
			}
			singleCode := single.JSON(t)["error"]

			unknown := "lease-01M8GME6G9P78S4Y21S82KRJ2A"
			a = batchCall(t, url, workerA, map[string]any{"worker_id": "job.a", "entries": []map[string]any{
				{"id": "done", "lease_id": mine[0].LeaseID, "complete": map[string]any{"result": map[string]any{"n": 1}}},
				{"id": "theirs", "lease_id": theirs[0].LeaseID, "complete": map[string]any{"result": "x"}},
				{"id": "failed", "lease_id": mine[1].LeaseID, "fail": map[string]any{"error_message": "boom", "retryable": false}},
				{"id": "unknown", "lease_id": unknown, "heartbeat": map[string]any{}},
				{"id": "beat", "lease_id": mine[2].LeaseID, "heartbeat": map[string]any{"progress_message": "half"}},
				{"id": "noverb", "lease_id": mine[2].LeaseID},
				{"id": "two", "lease_id": mine[2].LeaseID, "heartbeat": map[string]any{}, "fail": map[string]any{}},
				{"id": "other", "lease_id": mine[2].LeaseID, "heartbeat": map[string]any{"worker_id": "job.a2"}},
				{"id": "again", "lease_id": mine[0].LeaseID, "complete": map[string]any{"result": map[string]any{"n": 1}}},
			}})
			if len(a.Results) != 9 || a.Succeeded != 4 || a.Failed != 5 {
				t.Fatalf("batch: %+v", a)
			}
			by := map[string]batchResult{}
			for i, r := range a.Results {
				if i > 0 && r.ID == a.Results[i-1].ID {
					t.Fatalf("results repeat %q", r.ID)
				}
				by[r.ID] = r
			}
			if r := by["done"]; !r.OK || r.HTTPStatus != 200 || r.Complete["status"] != "completed" || r.Complete["task_id"] != mine[0].Task.ID || r.Complete["duplicate"] != false {
				t.Fatalf("done: %+v", r)
			}
			if r := by["again"]; !r.OK || r.Complete["duplicate"] != true || r.Complete["receipt_id"] != by["done"].Complete["receipt_id"] {
				t.Fatalf("again (the same completion twice, in order): %+v / %+v", r, by["done"])
			}
			if r := by["theirs"]; r.OK || r.Error != singleCode || r.HTTPStatus != single.Status || r.Complete != nil {
				t.Fatalf("theirs: %+v, the single call answered %d %v", r, single.Status, singleCode)
			}
			if r := by["failed"]; !r.OK || r.Fail["will_retry"] != false || r.Fail["task_id"] != mine[1].Task.ID {
				t.Fatalf("failed: %+v", r)
			}
			if r := by["unknown"]; r.OK || r.Error != "lease_expired" || r.HTTPStatus != 409 || r.LeaseID != unknown {
				t.Fatalf("unknown: %+v", r)
			}
			if r := by["beat"]; !r.OK || r.Heartbeat["status"] != "ok" || r.Heartbeat["lease_expires_at"] == nil {
				t.Fatalf("beat: %+v", r)
			}
			for _, id := range []string{"noverb", "two"} {
				if r := by[id]; r.OK || r.Error != "bad_request" || r.HTTPStatus != 400 {
					t.Fatalf("%s: %+v", id, r)
				}
			}
			if r := by["other"]; r.OK || r.Error != "forbidden" || r.HTTPStatus != 403 {
				t.Fatalf("other: %+v", r)
			}
			for _, c := range []struct{ id, status string }{
				{mine[0].Task.ID, "succeeded"}, {mine[1].Task.ID, "dead_letter"}, {mine[2].Task.ID, "leased"}, {theirs[0].Task.ID, "leased"},
			} {
				task := call(t, "GET", g.URL+"/v1/tasks/"+c.id, agentA, nil).JSON(t)
				if task["status"] != c.status {
					t.Fatalf("task %s is %v, want %s", c.id, task["status"], c.status)
				}
			}
			// The other worker's lease is still its own.
			want(t, call(t, "POST", g.URL+"/v1/leases/"+theirs[0].LeaseID+"/complete", workerA2, map[string]any{"result": "mine"}), 200, "")

			// Refused whole.
			var many []map[string]any
			for range 101 {
				many = append(many, map[string]any{"lease_id": mine[2].LeaseID, "heartbeat": map[string]any{}})
			}
			for _, bad := range []any{
				map[string]any{"entries": many},
				map[string]any{"entries": []any{}},
				map[string]any{},
				map[string]any{"entries": []map[string]any{{"lease_id": mine[2].LeaseID, "heartbeat": map[string]any{}, "extra": 1}}},
				map[string]any{"entries": []map[string]any{{"id": "x", "lease_id": mine[2].LeaseID, "heartbeat": map[string]any{}}, {"id": "x", "lease_id": mine[2].LeaseID, "heartbeat": map[string]any{}}}},
				`{"entries": [`,
			} {
				want(t, call(t, "POST", url, workerA, bad), 400, "bad_request")
			}
			want(t, call(t, "POST", url, agentA, map[string]any{"entries": many[:1]}), 403, "forbidden")
			want(t, call(t, "POST", url, "", map[string]any{"entries": many[:1]}), 401, "unauthorized")
			if task := call(t, "GET", g.URL+"/v1/tasks/"+mine[2].Task.ID, agentA, nil).JSON(t); task["status"] != "leased" || task["progress_message"] != "half" {
				t.Fatalf("after refused calls: %v", task)
			}
		})
	}
}

// TestE2EBatchEnqueue (issue 39 item 4): POST /v1/tasks/batch queues many
// tasks in one call, each with its own idempotency key and answer (201 new,
// 200 duplicate, or the refusal POST /v1/tasks gives), one refusal leaving
// the others queued. Keys stay the producer's: another agent's same key is a
// task of its own. 1,000 tasks fit one call; 1,001 are refused whole, as is
// a worker's call. On SQLite and PostgreSQL.
func TestE2EBatchEnqueue(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			g.putType(t, "bulk", map[string]any{}, "ta")
			agentA, agentA2 := g.newKey(t, "agent", "agent.a", "ta"), g.newKey(t, "agent", "agent.a2", "ta")
			workerA := g.newKey(t, "worker", "job.a", "ta")
			url := g.URL + "/v1/tasks/batch"

			first := call(t, "POST", g.URL+"/v1/tasks", agentA, map[string]any{"task_type": "job", "params": map[string]any{"n": 0}, "idempotency_key": "k0"})
			want(t, first, 201, "")
			a := batchCall(t, url, agentA, map[string]any{"tasks": []map[string]any{
				{"task_type": "job", "params": map[string]any{"n": 1}, "idempotency_key": "k1"},
				{"task_type": "nope", "params": map[string]any{}, "idempotency_key": "k2"},
				{"task_type": "job", "params": map[string]any{"n": 0}, "idempotency_key": "k0"},
				{"task_type": "job", "params": map[string]any{"n": 3}, "idempotency_key": "k1"},
				{"task_type": "job", "params": map[string]any{"n": 1}, "idempotency_key": "k1"},
				{"task_type": "job", "params": map[string]any{"n": 5}},
				{"task_type": "job", "params": map[string]any{"n": 6}, "priority": 99},
			}})
			if len(a.Results) != 7 || a.Succeeded != 4 || a.Failed != 3 {
				t.Fatalf("batch: %+v", a)
			}
			r := a.Results
			if !r[0].OK || r[0].HTTPStatus != 201 || r[0].Task["is_duplicate"] != false || r[0].Task["task_id"] == nil {
				t.Fatalf("new task: %+v", r[0])
			}
			if r[1].OK || r[1].HTTPStatus != 404 && r[1].HTTPStatus != 400 || r[1].Error == "" || r[1].Task != nil {
				t.Fatalf("unknown task type: %+v", r[1])
			}
			single := call(t, "POST", g.URL+"/v1/tasks", agentA, map[string]any{"task_type": "nope", "params": map[string]any{}, "idempotency_key": "k2"})
			if single.Status != r[1].HTTPStatus || single.JSON(t)["error"] != r[1].Error {
				t.Fatalf("unknown task type: batch %+v, single %d %s", r[1], single.Status, single.Body)
			}
			if !r[2].OK || r[2].HTTPStatus != 200 || r[2].Task["is_duplicate"] != true || r[2].Task["task_id"] != first.JSON(t)["task_id"] {
				t.Fatalf("duplicate of an earlier call: %+v", r[2])
			}
			if r[3].OK || r[3].Error != "idempotency_conflict" || r[3].HTTPStatus != 409 {
				t.Fatalf("same key, other task, in the same batch after the first: %+v", r[3])
			}
			if !r[4].OK || r[4].HTTPStatus != 200 || r[4].Task["task_id"] != r[0].Task["task_id"] {
				t.Fatalf("same key, same task, in the same batch: %+v", r[4])
			}
			if !r[5].OK || r[5].HTTPStatus != 201 {
				t.Fatalf("no key: %+v", r[5])
			}
			if r[6].OK || r[6].Error != "bad_request" || r[6].HTTPStatus != 400 {
				t.Fatalf("bad priority: %+v", r[6])
			}

			// Another producer's k1 is its own task.
			b := batchCall(t, url, agentA2, map[string]any{"tasks": []map[string]any{{"task_type": "job", "params": map[string]any{"n": 1}, "idempotency_key": "k1"}}})
			if !b.Results[0].OK || b.Results[0].HTTPStatus != 201 || b.Results[0].Task["task_id"] == r[0].Task["task_id"] {
				t.Fatalf("another agent's k1: %+v", b.Results[0])
			}

			// 1,000 tasks in one call.
			var tasks []map[string]any
			for i := range 1000 {
				tasks = append(tasks, map[string]any{"task_type": "bulk", "params": map[string]any{"i": i}, "idempotency_key": fmt.Sprintf("bulk-%d", i)})
			}
			big := batchCall(t, url, agentA, map[string]any{"tasks": tasks})
			ids := map[string]bool{}
			for _, r := range big.Results {
				if !r.OK || r.HTTPStatus != 201 {
					t.Fatalf("bulk entry: %+v", r)
				}
				ids[r.Task["task_id"].(string)] = true
			}
			if big.Succeeded != 1000 || len(ids) != 1000 {
				t.Fatalf("bulk: %d succeeded, %d distinct ids", big.Succeeded, len(ids))
			}
			n := 0
			for cursor := ""; ; {
				var page struct {
					Tasks  []map[string]any `json:"tasks"`
					Cursor string           `json:"cursor"`
				}
				call(t, "GET", g.URL+"/v1/tasks?task_type=bulk&limit=500&cursor="+cursor, agentA, nil).Into(t, &page)
				for _, task := range page.Tasks {
					if !ids[task["task_id"].(string)] {
						t.Fatalf("listed a task the batch did not answer: %v", task)
					}
					n++
				}
				if cursor = page.Cursor; cursor == "" {
					break
				}
			}
			if n != 1000 {
				t.Fatalf("listed %d bulk tasks", n)
			}

			// Refused whole.
			tasks = append(tasks, map[string]any{"task_type": "bulk", "params": map[string]any{}})
			want(t, call(t, "POST", url, agentA, map[string]any{"tasks": tasks}), 400, "bad_request")
			want(t, call(t, "POST", url, agentA, map[string]any{"tasks": []any{}}), 400, "bad_request")
			want(t, call(t, "POST", url, agentA, map[string]any{"tasks": []map[string]any{{"task_type": "job", "params": map[string]any{}, "extra": 1}}}), 400, "bad_request")
			want(t, call(t, "POST", url, workerA, map[string]any{"tasks": tasks[:1]}), 403, "forbidden")
			if strings.Contains(string(call(t, "GET", g.URL+"/v1/tasks?task_type=job", agentA, nil).Body), `"n":6`) {
				t.Fatal("a refused entry was queued")
			}
		})
	}
}
