package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// TestE2EDoorRefusesPathsAndQueriesThatAreNotText: a path parameter or a
// query value whose escapes decode to bytes that are not UTF-8, or to a
// control character, is a 400 bad_request saying so on SQLite and
// PostgreSQL alike, before any store call (PostgreSQL refused the bytes with
// its own error, SQLite looked them up and answered 200). A query that does
// not decode (%zz, a semicolon) is the same JSON 400, not ignored.
func TestE2EDoorRefusesPathsAndQueriesThatAreNotText(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.a", "")
			id := g.enqueue(t, agent, "job", map[string]any{})
			for _, c := range []struct{ path, key, says string }{
				{"/v1/tasks?task_type=%FF", agent, "UTF-8"},
				{"/v1/tasks?recipient_ai=%FF", agent, "UTF-8"},
				{"/v1/tasks/%FF%FE", agent, "UTF-8"},
				{"/v1/tasks/%ff%fe/timeline", agent, "UTF-8"},
				{"/v1/receipts/%FF", agent, "UTF-8"},
				{"/v1/receipts?task_id=%FF", agent, "UTF-8"},
				{"/v1/inbox?task_id=%FF", agent, "UTF-8"},
				{"/v1/admin/resource-leases?holder=%FF", g.Admin, "UTF-8"},
				{"/v1/admin/task-types/%C3", g.Admin, "UTF-8"},
				{"/v1/tasks?task_type=job%0A", agent, "control character %0A"},
				{"/v1/tasks/" + id + "%09", agent, "control character %09"},
				{"/v1/admin/task-types/j%1Bob", g.Admin, "control character %1B"},
				{"/v1/tasks?task_type=%zz", agent, "does not decode"},
				{"/v1/tasks?limit=1;task_type=job", agent, "semicolon"},
			} {
				r := rawGet(t, g.URL, c.path, c.key)
				want(t, r, 400, "bad_request")
				if d, _ := r.JSON(t)["detail"].(string); !strings.Contains(d, c.says) {
					t.Errorf("GET %s: detail %q, want it to say %q", c.path, d, c.says)
				}
			}
			// Text that is UTF-8 still reads: é is a task type no task has.
			for _, p := range []string{"/v1/tasks?task_type=%C3%A9", "/v1/tasks?task_type=job"} {
				r := call(t, "GET", g.URL+p, agent, nil)
				want(t, r, 200, "")
				if n := len(r.JSON(t)["tasks"].([]any)); (n == 1) != strings.HasSuffix(p, "job") {
					t.Errorf("GET %s: %d tasks", p, n)
				}
			}
			want(t, call(t, "GET", g.URL+"/v1/tasks/%C3%A9", agent, nil), 404, "not_found")

			// Two Authorization headers are refused, whichever is valid:
			// a proxy checking one and the gate acting on the other would
			// disagree on who calls.
			other := g.newKey(t, "agent", "agent.b", "")
			for _, pair := range [][2]string{{agent, other}, {agent, "Bearer nope"}, {"Bearer nope", agent}} {
				req, err := http.NewRequest("GET", g.URL+"/v1/tasks/"+id, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Add("Authorization", "Bearer "+strings.TrimPrefix(pair[0], "Bearer "))
				req.Header.Add("Authorization", "Bearer "+strings.TrimPrefix(pair[1], "Bearer "))
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 400 || !strings.Contains(string(body), "2 Authorization headers") {
					t.Errorf("two Authorization headers: %d %s", res.StatusCode, body)
				}
			}
		})
	}
}

// TestE2EEveryRouteRefusesQueryItDoesNotDeclare: every operation in the
// OpenAPI document refuses a query parameter it does not declare with a 400
// bad_request naming it, and a declared one given twice unless it is a
// list, on SQLite and PostgreSQL: the document is the one list of what a
// route takes. GET /v1/tasks?stauts= no longer answers every state, nor
// /v1/admin/stats?tennant= the default tenant's figures; the lists still
// take status= repeated, and ?tenant= naming the key's own tenant still
// passes outside /v1/admin. A caller without a key is told 401 first.
func TestE2EEveryRouteRefusesQueryItDoesNotDeclare(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "")
			agent := g.newKey(t, "agent", "agent.a", "")
			worker := g.newKey(t, "worker", "job.w1", "")
			done := g.enqueue(t, agent, "job", map[string]any{})
			queued := g.enqueue(t, agent, "job", map[string]any{})
			offers := g.lease(t, worker, "job.w1", map[string]any{"task_types": []string{"job"}, "max_tasks": 1})
			if len(offers) != 1 || offers[0].Task.ID != done {
				t.Fatalf("offers %+v", offers)
			}
			want(t, call(t, "POST", g.URL+"/v1/leases/"+offers[0].LeaseID+"/complete", worker,
				map[string]any{"result": "done"}), 200, "")

			// Every documented operation, by the admin (the query is checked
			// before the role): nothing runs, whatever the method.
			ops := openapi.Operations()
			if len(ops) < 50 {
				t.Fatalf("only %d operations", len(ops))
			}
			path := func(p string) string {
				segs := strings.Split(p, "/")
				for i, s := range segs {
					if strings.HasPrefix(s, "{") {
						segs[i] = "x"
					}
				}
				return strings.Join(segs, "/")
			}
			for _, o := range ops {
				method, p, _ := strings.Cut(o, " ")
				r := call(t, method, g.URL+path(p)+"?bogus_param=1", g.Admin, nil)
				if r.Status != 400 || !strings.Contains(string(r.Body), `\"bogus_param\"`) || !strings.Contains(string(r.Body), `"error":"bad_request"`) {
					t.Errorf("%s?bogus_param=1 = %d %s, want 400 bad_request naming it", o, r.Status, r.Body)
				}
				params, _ := openapi.QueryOf(method, p)
				for _, q := range params {
					v := "1"
					if q.Name == "tenant" {
						v = "default"
					}
					r := call(t, method, g.URL+path(p)+"?"+q.Name+"="+v+"&"+q.Name+"="+v, g.Admin, nil)
					if q.List {
						if r.Status == 400 && strings.Contains(string(r.Body), "times") {
							t.Errorf("%s?%s= twice = %d %s, want it taken (a list)", o, q.Name, r.Status, r.Body)
						}
						continue
					}
					if r.Status != 400 || !strings.Contains(string(r.Body), fmt.Sprintf(`query parameter \"%s\" is given 2 times`, q.Name)) {
						t.Errorf("%s?%s= twice = %d %s, want 400 bad_request", o, q.Name, r.Status, r.Body)
					}
				}
			}

			// The probe's cases.
			for _, c := range []struct{ path, key, names string }{
				{"/v1/tasks?stauts=succeeded", agent, "stauts"},
				{"/v1/admin/stats?tennant=acme", g.Admin, "tennant"},
				{"/v1/admin/outbox?cursor=garbage", g.Admin, "cursor"},
				{"/v1/admin/outbox?tenant=acme", g.Admin, "tenant"}, // gate-wide: no tenant to name
				{"/v1/workflows?bogus=1", agent, "bogus"},
				{"/v1/schedules?bogus=1", agent, "bogus"},
				{"/v1/obligations/open?recipient=agent.a", agent, "recipient"},
				{"/v1/receipts?task_id=" + done + "&bogus=1", agent, "bogus"},
				{"/v1/tasks/" + done + "/progress?bogus=1", agent, "bogus"},
				{"/v1/tasks/" + done + "?Limit=1", agent, "Limit"},
				{"/healthz?x=1", "", "x"},
				{"/openapi.json?tenant=default", "", "tenant"}, // no key: no tenant of its own
			} {
				r := call(t, "GET", g.URL+c.path, c.key, nil)
				want(t, r, 400, "bad_request")
				if d := r.JSON(t)["detail"].(string); !strings.Contains(d, `"`+c.names+`"`) {
					t.Errorf("GET %s: detail %q does not name %q", c.path, d, c.names)
				}
			}
			r := call(t, "GET", g.URL+"/v1/tasks?limit=1&limit=5", agent, nil)
			want(t, r, 400, "bad_request")
			r = call(t, "POST", g.URL+"/v1/tasks?dry_run=1", agent, map[string]any{"task_type": "job"})
			want(t, r, 400, "bad_request")
			want(t, call(t, "GET", g.URL+"/v1/tasks?bogus=1", "", nil), 401, "unauthorized")

			// What the routes declare still works.
			ids := func(path string) []string {
				r := call(t, "GET", g.URL+path, agent, nil)
				want(t, r, 200, "")
				var out []string
				for _, it := range r.JSON(t)["tasks"].([]any) {
					out = append(out, it.(map[string]any)["task_id"].(string))
				}
				return out
			}
			if got := ids("/v1/tasks?status=succeeded"); len(got) != 1 || got[0] != done {
				t.Errorf("status=succeeded: %v, want [%s]", got, done)
			}
			if got := ids("/v1/tasks?status=succeeded&status=queued&task_type=job&task_type=nope&tenant=default"); len(got) != 2 {
				t.Errorf("status= repeated: %v, want %s and %s", got, done, queued)
			}
			if got := ids("/v1/tasks?status=queued,succeeded&limit=1"); len(got) != 1 {
				t.Errorf("limit=1: %v", got)
			}
			want(t, call(t, "GET", g.URL+"/v1/workflows?status=running&status=succeeded", agent, nil), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/inbox?tenant=default", agent, nil), 200, "") // undeclared there: the key's own
			want(t, call(t, "GET", g.URL+"/v1/workflows?tenant=default", agent, nil), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/workflows?tenant=acme", agent, nil), 400, "bad_request")
			want(t, call(t, "GET", g.URL+"/v1/admin/stats?tenant=default", g.Admin, nil), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/admin/outbox?limit=5", g.Admin, nil), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/admin/plugins?tenant=default", g.Admin, nil), 200, "")
			want(t, call(t, "GET", g.URL+"/healthz", "", nil), 200, "")
		})
	}
}

// TestE2EMalformedURLAnswers: what answers a request whose URL the gate
// cannot read. A malformed escape in the query is the gate's own JSON 400.
// A malformed escape in the path (/v1/tasks/%zz) and a request line over
// the header limit are refused by Go's net/http before any handler runs,
// as text/plain 400 and 431: docs/http.md says so, and this test notices
// if that changes.
func TestE2EMalformedURLAnswers(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	r := rawGet(t, g.URL, "/v1/tasks?task_type=%zz", g.Admin)
	want(t, r, 400, "bad_request")
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("query %%zz: Content-Type %q", ct)
	}
	for _, c := range []struct {
		path   string
		status int
	}{{"/v1/tasks/%zz", 400}, {"/%", 400}, {"/v1/tasks/" + strings.Repeat("a", 70<<10), 431}} {
		r := rawGet(t, g.URL, c.path, g.Admin)
		if r.Status != c.status || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") {
			t.Errorf("GET %.40s = %d %s %q; docs/http.md says net/http answers %d text/plain", c.path, r.Status, r.Header.Get("Content-Type"), r.Body, c.status)
		}
	}
}

// rawGet sends GET path as written (no client-side parsing or escaping)
// over a new connection.
func rawGet(t *testing.T, base, path, key string) resp {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
	if key != "" {
		req += "Authorization: Bearer " + key + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %.60s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{Status: res.StatusCode, Body: b, Header: res.Header}
}
