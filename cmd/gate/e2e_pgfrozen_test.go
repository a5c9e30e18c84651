package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store/faultnet"
)

// frozenBound is how long the frozen-database test lets one call take
// before it counts it as a hang: well past the gate's store timeout, well
// short of the HTTP server's 90 s write timeout, so a hang fails the test
// instead of holding it.
const frozenBound = 40 * time.Second

// frozenClient is the client of calls made while the database is frozen.
var frozenClient = &http.Client{Timeout: frozenBound}

// timedCall is one call's answer and how long it took; err is the client's
// (a timeout: the gate did not answer within frozenBound).
type timedCall struct {
	name string
	r    resp
	took time.Duration
	err  error
}

func frozenCall(name, method, url, key string, body any) timedCall {
	start := time.Now()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return timedCall{name: name, err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return timedCall{name: name, err: err}
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := frozenClient.Do(req)
	if err != nil {
		return timedCall{name: name, took: time.Since(start), err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return timedCall{name: name, r: resp{Status: res.StatusCode, Body: b, Header: res.Header}, took: time.Since(start), err: err}
}

// mcpFrozenCall calls an MCP tool and returns its answer as the HTTP door's
// would be: a tool error's {"error","detail"} with the status of its code.
func mcpFrozenCall(c *client.Client, name string, args map[string]any) timedCall {
	start := time.Now()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), frozenBound)
	defer cancel()
	res, err := c.CallTool(ctx, req)
	tc := timedCall{name: "mcp " + name, took: time.Since(start), err: err}
	if err != nil {
		return tc
	}
	tc.r.Status = 200
	if res.IsError && len(res.Content) > 0 {
		if text, ok := res.Content[0].(mcp.TextContent); ok {
			tc.r.Body = []byte(text.Text)
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(tc.r.Body, &e) == nil {
				tc.r.Status = host.HTTPStatus(e.Error)
			}
		}
	}
	tc.r.Header = http.Header{"Retry-After": {"(mcp)"}}
	return tc
}

// TestE2EPostgresFrozen puts a TCP proxy between the gate and PostgreSQL
// and freezes it: no byte moves either way, no socket closes (a network
// partition, a stopped server). Every call that needs the database must
// answer 503 database_unavailable, with Retry-After, within the gate's store
// timeout (--db-timeout, default 15 s) and a little more: an MCP tool call,
// a lease call, a long-poll lease call, a heartbeat and a read, all at once,
// several enqueues among them so one rides in each writer's stuck batch and
// the others wait behind; an enqueue the writer had not started says it
// was not made, one it had says its outcome is unknown. Before the fix
// every HTTP call of these hung until the client gave up (40 s), while
// /readyz answered 503 within its own 5 s. Once the proxy thaws, the gate
// serves as before: /readyz is 200 again, an enqueue said not to be made
// is not there, each enqueue answered 503 is there at most once (its
// idempotency key is sent again), every task acknowledged before the
// freeze is leased and completed, the lease granted before the freeze
// completes, and the ledger verifies.
func TestE2EPostgresFrozen(t *testing.T) {
	t.Parallel()
	direct := postgresSchema(t)
	db, proxy := faultnet.Through(t, direct)
	const timeout = 15 * time.Second // the default --db-timeout
	g := startGate(t, t.TempDir(), "--db", db)
	agent := g.newKey(t, "agent", "frozen.agent", "")
	worker := g.newKey(t, "worker", "frozen.w1", "")
	g.putType(t, "frozen", map[string]any{}, "")

	// Acknowledged before the freeze: four queued tasks and a lease.
	var acked []string
	for i := range 4 {
		acked = append(acked, g.enqueue(t, agent, "frozen", map[string]any{"n": i}))
	}
	held := g.lease(t, worker, "frozen.w1", map[string]any{"lease_seconds": 600})
	if len(held) != 1 {
		t.Fatalf("leased %d tasks before the freeze, want 1", len(held))
	}

	// An agent's MCP session over streamable HTTP, opened before the freeze.
	mc := httpMCPClient(t, g.URL+"/mcp", agent, "frozen-test")

	proxy.Freeze()
	frozenAt := time.Now()
	calls := []func() timedCall{
		func() timedCall {
			return mcpFrozenCall(mc, "queue_task", map[string]any{"task_type": "frozen", "params": map[string]any{"mcp": true}})
		},
		func() timedCall {
			return frozenCall("lease", "POST", g.URL+"/v1/leases", worker, map[string]any{"worker_id": "frozen.w1"})
		},
		func() timedCall {
			return frozenCall("long-poll lease", "POST", g.URL+"/v1/leases", worker,
				map[string]any{"worker_id": "frozen.w1", "wait_seconds": 30})
		},
		func() timedCall {
			return frozenCall("heartbeat", "POST", g.URL+"/v1/leases/"+held[0].LeaseID+"/heartbeat", worker, map[string]any{})
		},
		func() timedCall {
			return frozenCall("read", "GET", g.URL+"/v1/tasks/"+acked[0], agent, nil)
		},
	}
	for i := range 6 {
		calls = append(calls, func() timedCall {
			return frozenCall(fmt.Sprintf("enqueue %d", i), "POST", g.URL+"/v1/tasks", agent,
				map[string]any{"task_type": "frozen", "params": map[string]any{"frozen": i}, "idempotency_key": fmt.Sprintf("frozen-%d", i)})
		})
	}
	out := make([]timedCall, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c()
		}()
	}
	// /readyz answered 503 within its 5 s before the fix already.
	ready := frozenCall("readyz", "GET", g.URL+"/readyz", "", nil)
	wg.Wait()
	out = append(out, ready)
	slack := 10 * time.Second
	for _, c := range out {
		t.Logf("while frozen: %s answered %d in %v: %s", c.name, c.r.Status, c.took.Round(time.Millisecond), strings.TrimSpace(string(c.r.Body)))
	}
	for _, c := range out {
		switch {
		case c.err != nil:
			t.Errorf("while frozen: %s got no answer after %v: %v", c.name, c.took.Round(time.Millisecond), c.err)
		case c.r.Status != 503 || !strings.Contains(string(c.r.Body), `"error":"database_unavailable"`):
			t.Errorf("while frozen: %s answered %d %s, want 503 database_unavailable", c.name, c.r.Status, c.r.Body)
		case c.r.Header.Get("Retry-After") == "":
			t.Errorf("while frozen: %s answered 503 without Retry-After", c.name)
		case c.took > timeout+slack:
			t.Errorf("while frozen: %s answered after %v, want within the store timeout %v (+%v)", c.name, c.took, timeout, slack)
		}
	}
	if t.Failed() {
		proxy.Thaw()
		t.FailNow()
	}
	t.Logf("every call answered within %v of the freeze", time.Since(frozenAt).Round(time.Millisecond))

	// An update the writer had not started when its caller gave up says it
	// was not made; one it had started says its outcome is unknown.
	notMade := map[int]bool{}
	for i, c := range out[len(out)-7 : len(out)-1] {
		d, _ := c.r.JSON(t)["detail"].(string)
		switch {
		case strings.Contains(d, "was not made"):
			notMade[i] = true
		case strings.Contains(d, "outcome is unknown"):
		default:
			t.Errorf("while frozen: %s answered %q, which says neither that it was not made nor that its outcome is unknown", c.name, d)
		}
	}

	proxy.Thaw()
	waitFor(t, frozenBound, "/readyz did not answer 200 again after the thaw", func() bool {
		return call(t, "GET", g.URL+"/readyz", "", nil).Status == 200
	})
	thawed := time.Now()
	// An enqueue said not to be made is not there, even now that the
	// writers run again.
	var list struct {
		Tasks []struct {
			Params map[string]any `json:"params"`
		} `json:"tasks"`
	}
	r := call(t, "GET", g.URL+"/v1/tasks?limit=100", agent, nil)
	want(t, r, 200, "")
	r.Into(t, &list)
	for _, tk := range list.Tasks {
		if n, ok := tk.Params["frozen"].(float64); ok && notMade[int(n)] {
			t.Errorf("enqueue %d answered 503 \"was not made\" while frozen, and its task is there after the thaw", int(n))
		}
	}
	// Each enqueue answered 503 is there at most once: sent again with its
	// key, it is queued now (201) or was already (200, only if its outcome
	// was unknown).
	for i := range 6 {
		r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "frozen", "params": map[string]any{"frozen": i},
			"idempotency_key": fmt.Sprintf("frozen-%d", i)})
		if r.Status != 201 && (r.Status != 200 || notMade[i]) {
			t.Fatalf("enqueue %d again after the thaw: %d %s", i, r.Status, r.Body)
		}
		acked = append(acked, r.JSON(t)["task_id"].(string))
	}
	t.Logf("while frozen, %d of 6 enqueues were not made, the others' outcome unknown", len(notMade))
	acked = append(acked, g.enqueue(t, agent, "frozen", map[string]any{"after": true}))
	// The lease granted before the freeze is still held and completes.
	want(t, call(t, "POST", g.URL+"/v1/leases/"+held[0].LeaseID+"/complete", worker, map[string]any{"result": map[string]any{"ok": true}}), 200, "")
	// Every other task is leased and completed (with any whose outcome
	// was unknown and that did commit: the MCP call's).
	done := map[string]bool{held[0].Task.ID: true}
	left := func() int {
		n := 0
		for _, id := range acked {
			if !done[id] {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(frozenBound); left() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after the thaw, %d of %d acknowledged tasks were not completed within %v", left(), len(acked), frozenBound)
		}
		for _, o := range g.lease(t, worker, "frozen.w1", map[string]any{"max_tasks": 20, "wait_seconds": 1}) {
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o.LeaseID+"/complete", worker, map[string]any{"result": map[string]any{"ok": true}}), 200, "")
			done[o.Task.ID] = true
		}
	}
	for _, id := range acked {
		if !done[id] {
			t.Errorf("acknowledged task %s was not leased after the thaw", id)
		}
		r := call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil)
		want(t, r, 200, "")
		if s := r.JSON(t)["status"]; s != "succeeded" {
			t.Errorf("acknowledged task %s is %v, want succeeded", id, s)
		}
	}
	t.Logf("after the thaw: %d tasks enqueued, leased and completed in %v", len(acked), time.Since(thawed).Round(time.Millisecond))
	if out, errOut, code := gateCLI(t, "ledger", "verify", "--db", direct); code != 0 || !strings.Contains(out, "intact") {
		t.Fatalf("ledger verify: %d %s %s", code, out, errOut)
	}
}
