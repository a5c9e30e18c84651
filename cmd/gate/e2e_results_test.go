package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// completeOne leases one offer for worker, checks that it is taskID, and
// completes it with body; it returns the completion's answer.
func (g *gateProc) completeOne(t *testing.T, key, worker, taskID string, body map[string]any) map[string]any {
	t.Helper()
	o := g.lease(t, key, worker, nil)
	if len(o) != 1 || o[0].Task.ID != taskID {
		t.Fatalf("lease for %s: %+v", taskID, o)
	}
	r := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", key, body)
	want(t, r, 200, "")
	return r.JSON(t)
}

// fetchContent fetches a task's result and returns its bytes, checking the
// checksum the gate reports.
func (g *gateProc) fetchContent(t *testing.T, key, taskID string) []byte {
	t.Helper()
	r := call(t, "GET", g.URL+"/v1/tasks/"+taskID+"/result", key, nil)
	want(t, r, 200, "")
	var out struct {
		Content       []byte `json:"content_base64"`
		ChecksumValid *bool  `json:"checksum_valid"`
	}
	r.Into(t, &out)
	if out.ChecksumValid == nil || !*out.ChecksumValid {
		t.Fatalf("result of %s: checksum not valid: %.300s", taskID, r.Body)
	}
	return out.Content
}

// TestE2EResultsStayWithTheirTenant: results stored by the file channel are
// owned per tenant and task. A worker of one tenant cannot complete with a
// pointer to another tenant's stored result, and archiving one tenant's
// result leaves another tenant's equal result in place.
func TestE2EResultsStayWithTheirTenant(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	for _, tenant := range []string{"acme", "globex"} {
		g.putType(t, "report", map[string]any{"default_result_channel": "inline"}, tenant)
	}
	agentA, workerA := g.newKey(t, "agent", "agent.a", "acme"), g.newKey(t, "worker", "report.a", "acme")
	agentB, workerB := g.newKey(t, "agent", "agent.b", "globex"), g.newKey(t, "worker", "report.b", "globex")

	// The same 200 KiB result in both tenants: over the inline limit, so the
	// gate routes it to the file channel.
	payload := bytes.Repeat([]byte("same result, two tenants\n"), 200<<10/25)
	body := map[string]any{"result_base64": base64.StdEncoding.EncodeToString(payload)}
	taskA := g.enqueue(t, agentA, "report", nil)
	ptrA, _ := g.completeOne(t, workerA, "report.a", taskA, body)["result_pointer"].(string)
	taskB := g.enqueue(t, agentB, "report", nil)
	ptrB, _ := g.completeOne(t, workerB, "report.b", taskB, body)["result_pointer"].(string)
	if !strings.HasPrefix(ptrA, "file:") || !strings.HasPrefix(ptrB, "file:") || ptrA == ptrB {
		t.Fatalf("equal results of two tenants must be two objects: %q and %q", ptrA, ptrB)
	}

	// A worker of tenant B completes with tenant A's pointer: refused, and
	// the task stays leased (nothing recorded).
	stolen := g.enqueue(t, agentB, "report", nil)
	o := g.lease(t, workerB, "report.b", nil)
	if len(o) != 1 || o[0].Task.ID != stolen {
		t.Fatalf("lease: %+v", o)
	}
	for _, forged := range []map[string]any{
		{"result_pointer": ptrA},
		{"result_pointer": ptrA, "result_channel": "file"},
		{"result_pointer": ptrA, "result_channel": "s3"}, // the pointer's own prefix still names the file channel
		{"result_pointer": "file:" + stolen + "/" + strings.Repeat("a", 64)},
		// The http channel is not configured here: a pointer into it would
		// still be read with the gate's credentials once it is.
		{"result_pointer": "http:http://127.0.0.1:1/results/" + taskA + "/obj"},
		{"result_pointer": "http:results/" + taskA, "result_channel": "http"},
		// A channel's name whatever its case.
		{"result_pointer": "FILE:" + strings.TrimPrefix(ptrA, "file:")},
		{"result_pointer": "File:" + strings.TrimPrefix(ptrA, "file:")},
	} {
		want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB, forged), 422, "foreign_pointer")
	}
	// A pointer with whitespace around it, or a control character in it,
	// is no channel's: refused as bad input naming result_pointer.
	for _, bad := range []string{" " + ptrA, ptrA + " ", "\t" + ptrA, ptrA + "\n"} {
		r := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB, map[string]any{"result_pointer": bad})
		want(t, r, 400, "bad_request")
		if !strings.Contains(string(r.Body), "result_pointer") {
			t.Fatalf("complete with %q: %s", bad, r.Body)
		}
	}
	// An inline pointer is its content: one the channel cannot read would
	// be a success nobody can fetch.
	for _, bad := range []string{"inline:@@@notbase64", "inline:eyJmb3JnZWQiOiB0cnVlfQ"} {
		want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB, map[string]any{"result_pointer": bad}), 400, "bad_request")
	}
	want(t, call(t, "POST", g.URL+"/worker/complete", workerB,
		map[string]any{"task_id": stolen, "run_id": o[0].LeaseID, "result_pointer": ptrA}), 422, "foreign_pointer")
	if st := call(t, "GET", g.URL+"/v1/tasks/"+stolen, agentB, nil).JSON(t)["status"]; st != "leased" {
		t.Fatalf("a refused completion changed the task: %v", st)
	}
	// Pointers of channels the gate does not manage are the worker's to give.
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB,
		map[string]any{"result_pointer": "s3://bucket/out.json", "result_channel": "s3"}), 200, "")

	// Archiving tenant A's result removes only A's object.
	if got := g.fetchContent(t, agentA, taskA); !bytes.Equal(got, payload) {
		t.Fatal("tenant A's result differs")
	}
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+taskA+"/archive", agentA, nil), 200, "")
	if got := g.fetchContent(t, agentB, taskB); !bytes.Equal(got, payload) {
		t.Fatal("tenant B's result differs after tenant A archived an equal one")
	}
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+taskA+"/result", agentA, nil), 404, "not_found")
	// And tenant B's agent cannot see tenant A's task at all.
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+taskA+"/result", agentB, nil), 404, "not_found")
}

// TestE2ECompleteRepeatWithPayload: repeating a completion that carried an
// inline payload answers the first outcome with duplicate: true, on the
// canonical route and on the seeds' /worker/complete.
func TestE2ECompleteRepeatWithPayload(t *testing.T) {
	contract(t)
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.putType(t, "echo", map[string]any{"default_result_channel": "inline"}, "")
	agent, worker := g.newKey(t, "agent", "agent.r", ""), g.newKey(t, "worker", "echo.1", "")
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 64<<10)) // goes to the file channel
	for _, body := range []map[string]any{
		{"result": map[string]any{"answer": 42}},
		{"result_base64": base64.StdEncoding.EncodeToString([]byte("raw bytes"))},
		{"result_base64": big},
	} {
		id := g.enqueue(t, agent, "echo", nil)
		o := g.lease(t, worker, "echo.1", nil)
		if len(o) != 1 || o[0].Task.ID != id {
			t.Fatalf("lease: %+v", o)
		}
		first := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, body)
		want(t, first, 200, "")
		again := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, body)
		want(t, again, 200, "")
		f, a := first.JSON(t), again.JSON(t)
		if f["duplicate"] != false || a["duplicate"] != true || a["receipt_id"] != f["receipt_id"] || a["result_pointer"] != f["result_pointer"] {
			t.Fatalf("repeat of %v:\nfirst %s\nagain %s", body, first.Body, again.Body)
		}

		// The seeds' route, with task_id and run_id in the body.
		id = g.enqueue(t, agent, "echo", nil)
		o = g.lease(t, worker, "echo.1", nil)
		if len(o) != 1 || o[0].Task.ID != id {
			t.Fatalf("lease: %+v", o)
		}
		env := map[string]any{"task_id": id, "run_id": o[0].LeaseID}
		for k, v := range body {
			env[k] = v
		}
		first = call(t, "POST", g.URL+"/worker/complete", worker, env)
		want(t, first, 200, "")
		again = call(t, "POST", g.URL+"/worker/complete", worker, env)
		want(t, again, 200, "")
		f, a = first.JSON(t), again.JSON(t)
		if a["duplicate"] != true || a["notification_id"] != f["notification_id"] {
			t.Fatalf("seed repeat of %v:\nfirst %s\nagain %s", body, first.Body, again.Body)
		}
	}
}

// TestE2EHTTPChannelStaysUnderBase: the http channel, configured with a
// credential header, sends it only to URLs under its endpoint. A receiver
// whose Location points elsewhere on the same host gets no pointer recorded,
// and a result URL that redirects out of the base is not followed.
func TestE2EHTTPChannelStaysUnderBase(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stored := map[string][]byte{}
	var outside []string // credentialed requests outside /results/
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(r.URL.Path, "/results") && r.Header.Get("X-Api-Key") != "" {
			outside = append(outside, r.Method+" "+r.URL.Path)
		}
		switch {
		case r.Method == "POST" && r.URL.Path == "/results":
			b, _ := io.ReadAll(r.Body)
			id := r.Header.Get("X-Asyncgate-Task-Id")
			stored["/results/"+id] = b
			switch string(b) {
			case `"elsewhere"`:
				w.Header().Set("Location", "/admin/keys")
			default:
				w.Header().Set("Location", "/results/"+id)
			}
			w.WriteHeader(201)
		case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/results/"):
			b := stored[r.URL.Path]
			if string(b) == `"bounce"` {
				http.Redirect(w, r, "/admin/keys", http.StatusFound)
				return
			}
			w.Write(b)
		default:
			w.Write([]byte(`{"admin":"secrets"}`))
		}
	}))
	defer sink.Close()
	// The config file sits beside the data folder: a first start refuses a
	// folder that holds anything but a gate.
	dir, cfg := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "gate.json")
	conf := `{"http_channel": {"endpoint": "` + sink.URL + `/results", "headers": {"X-Api-Key": "operator-secret"}}}`
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGate(t, dir, "--config", cfg)
	g.putType(t, "push", map[string]any{"default_result_channel": "http"}, "")
	agent, worker := g.newKey(t, "agent", "agent.p", ""), g.newKey(t, "worker", "push.1", "")

	// Delivered under the base: fetched back.
	ok := g.enqueue(t, agent, "push", nil)
	g.completeOne(t, worker, "push.1", ok, map[string]any{"result": "fine"})
	if r := call(t, "GET", g.URL+"/v1/tasks/"+ok+"/result", agent, nil); r.Status != 200 || r.JSON(t)["content"] != "fine" {
		t.Fatalf("result under the base: %d %s", r.Status, r.Body)
	}
	// The receiver names a Location outside the base: no pointer to it is recorded.
	id := g.enqueue(t, agent, "push", nil)
	o := g.lease(t, worker, "push.1", nil)
	r := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, map[string]any{"result": "elsewhere"})
	if r.Status < 400 || strings.Contains(string(r.Body), "/admin/keys\"") {
		t.Fatalf("a Location outside the base was accepted: %d %s", r.Status, r.Body)
	}
	if st := call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil).JSON(t)["status"]; st != "leased" {
		t.Fatalf("task %s is %v after a refused delivery", id, st)
	}
	// The stored result redirects out of the base: the gate does not follow.
	id = g.enqueue(t, agent, "push", nil)
	g.completeOne(t, worker, "push.1", id, map[string]any{"result": "bounce"})
	r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/result", agent, nil)
	if r.Status < 400 || strings.Contains(string(r.Body), "secrets") {
		t.Fatalf("a redirect out of the base was followed: %d %s", r.Status, r.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outside) > 0 {
		t.Fatalf("the operator's header left the base: %v", outside)
	}
}

// TestE2EMultiHostResults: on PostgreSQL every gate host reaches every result.
// Two hosts share one results folder: a result over the inline limit stored
// through one is fetched and archived through the other. A host started with
// a folder of its own is refused before it listens, with a message naming
// the shared folder it needs.
func TestE2EMultiHostResults(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t)
	results := t.TempDir()
	a := startGate(t, t.TempDir(), "--db", db, "--results-dir", results)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.key"), []byte(a.Admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startGate(t, dir, "--db", db, "--results-dir", results)

	a.putType(t, "big", map[string]any{"default_result_channel": "inline"}, "")
	agent, worker := a.newKey(t, "agent", "agent.mh", ""), a.newKey(t, "worker", "big.1", "")
	payload := bytes.Repeat([]byte("a result over the inline limit\n"), 4<<10)
	id := a.enqueue(t, agent, "big", nil)
	ptr, _ := a.completeOne(t, worker, "big.1", id, map[string]any{"result_base64": base64.StdEncoding.EncodeToString(payload)})["result_pointer"].(string)
	if !strings.HasPrefix(ptr, "file:") {
		t.Fatalf("pointer %q: the result was meant for the file channel", ptr)
	}
	if got := b.fetchContent(t, agent, id); !bytes.Equal(got, payload) {
		t.Fatal("the other host fetched different bytes")
	}
	want(t, call(t, "POST", b.URL+"/v1/tasks/"+id+"/archive", agent, nil), 200, "")
	want(t, call(t, "GET", a.URL+"/v1/tasks/"+id+"/result", agent, nil), 404, "not_found")

	// A third host with a results folder of its own: refused at start.
	own := t.TempDir()
	if err := os.WriteFile(filepath.Join(own, "admin.key"), []byte(a.Admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gateBin, "serve", "--data", own, "--db", db, "--listen", "127.0.0.1:0", "--wasm-cache", wasmCache)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil || err == nil {
		t.Fatalf("a host with its own results folder started (or hung): %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "not the one the other gate hosts of this database use") || !strings.Contains(string(out), "--results-dir") {
		t.Fatalf("refusal does not say why:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(own, "results", resultsMarker)); err == nil {
		t.Fatal("the refused host marked its folder")
	}
	// A folder marked for another database is refused too.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, resultsMarker), []byte("another-database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = exec.CommandContext(ctx, gateBin, "serve", "--data", own, "--db", db, "--results-dir", other, "--listen", "127.0.0.1:0", "--wasm-cache", wasmCache)
	out, err = cmd.CombinedOutput()
	if ctx.Err() != nil || err == nil || !strings.Contains(string(out), "holds the results of another database") {
		t.Fatalf("a folder of another database was accepted: %v\n%s", err, out)
	}
}

// TestE2EStreamedResult: a file-channel result over 1 MiB is streamed from
// the results folder as content_base64 with checksum_valid after it, and a
// file altered on disk is reported as checksum_valid: false.
func TestE2EStreamedResult(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := startGate(t, dir, "--body-limit", "8388608")
	g.putType(t, "big", map[string]any{"default_result_channel": "file"}, "")
	agent, worker := g.newKey(t, "agent", "agent.s", ""), g.newKey(t, "worker", "big.1", "")
	payload := bytes.Repeat([]byte("streamed, never held whole\n"), (3<<20)/27)
	id := g.enqueue(t, agent, "big", nil)
	ptr, _ := g.completeOne(t, worker, "big.1", id, map[string]any{"result_base64": base64.StdEncoding.EncodeToString(payload)})["result_pointer"].(string)
	if got := g.fetchContent(t, agent, id); !bytes.Equal(got, payload) {
		t.Fatalf("streamed result differs: %d bytes, want %d", len(got), len(payload))
	}
	// Alter the stored file: the stream still arrives, flagged.
	task, sum, _ := strings.Cut(strings.TrimPrefix(ptr, "file:"), "/")
	path := filepath.Join(dir, "results", task[len(task)-2:], task, sum)
	if err := os.WriteFile(path, append(payload[:len(payload)-1], '!'), 0o644); err != nil {
		t.Fatal(err)
	}
	r := call(t, "GET", g.URL+"/v1/tasks/"+id+"/result", agent, nil)
	want(t, r, 200, "")
	if m := r.JSON(t); m["checksum_valid"] != false || m["content_base64"] == nil {
		t.Fatalf("altered result: checksum_valid %v", m["checksum_valid"])
	}
	// Streamed, the verdict can only follow the content it was computed over.
	if c, v := bytes.Index(r.Body, []byte(`"content_base64"`)), bytes.Index(r.Body, []byte(`"checksum_valid"`)); c < 0 || v < c {
		t.Fatalf("the result was not streamed (checksum_valid at %d, content at %d)", v, c)
	}
}

// TestE2EWorkerPointerIntoALaterChannel: a worker's pointer naming a channel
// the gate did not have at completion is the worker's own location. A
// drop-in channel of that name installed afterwards must not read it with
// the gate's grants: the result names the pointer as the worker's, and
// fetching it answers where it is. A payload the gate stored stays
// readable. Both stores.
func TestE2EWorkerPointerIntoALaterChannel(t *testing.T) {
	t.Parallel()
	wasm, err := os.ReadFile("../../plugins/dist/inline.wasm")
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			dir := t.TempDir()
			g := startGate(t, dir, sc.args(t)...)
			g.putType(t, "report", map[string]any{"default_result_channel": "inline"}, "acme")
			agent, worker := g.newKey(t, "agent", "agent.a", "acme"), g.newKey(t, "worker", "report.w", "acme")

			given := g.enqueue(t, agent, "report", nil)
			g.completeOne(t, worker, "report.w", given, map[string]any{"result_channel": "vault", "result_pointer": "inline:c2VjcmV0"})
			stored := g.enqueue(t, agent, "report", nil)
			g.completeOne(t, worker, "report.w", stored, map[string]any{"result_base64": base64.StdEncoding.EncodeToString([]byte("ours"))})

			// The channel "vault" arrives: the inline channel's code under
			// another name, which reads any inline: pointer it is given.
			var man map[string]any
			raw, err := os.ReadFile("../../plugins/dist/inline.manifest.json")
			if err == nil {
				err = json.Unmarshal(raw, &man)
			}
			if err != nil {
				t.Fatal(err)
			}
			man["name"] = "vault"
			raw, _ = json.Marshal(man)
			pdir := filepath.Join(dir, "plugins")
			for name, b := range map[string][]byte{"vault.wasm": wasm, "vault.manifest.json": raw} {
				if err := os.WriteFile(filepath.Join(pdir, name+".tmp"), b, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(pdir, name+".tmp"), filepath.Join(pdir, name)); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(2 * time.Minute)
			for {
				var out struct {
					Plugins []struct{ Name, State string }
				}
				call(t, "GET", g.URL+"/v1/admin/plugins", g.Admin, nil).Into(t, &out)
				ready := false
				for _, p := range out.Plugins {
					ready = ready || p.Name == "vault" && p.State == "ready"
				}
				if ready {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the vault channel never loaded: %+v\n%s", out, g.Log())
				}
				time.Sleep(100 * time.Millisecond)
			}

			task := call(t, "GET", g.URL+"/v1/tasks/"+given, agent, nil).JSON(t)
			if res, _ := task["result"].(map[string]any); res["result_pointer_from_worker"] != true {
				t.Fatalf("the worker's pointer is not marked as the worker's: %v", task["result"])
			}
			r := call(t, "GET", g.URL+"/v1/tasks/"+given+"/result", agent, nil)
			want(t, r, 409, "conflict")
			if !strings.Contains(string(r.Body), "the worker gave") {
				t.Fatalf("fetching the worker's pointer: %s", r.Body)
			}
			if got := g.fetchContent(t, agent, stored); string(got) != "ours" {
				t.Fatalf("the stored result reads %q", got)
			}
			if res, _ := call(t, "GET", g.URL+"/v1/tasks/"+stored, agent, nil).JSON(t)["result"].(map[string]any); res["result_pointer_from_worker"] != nil {
				t.Fatalf("a payload the gate stored is marked as the worker's: %v", res)
			}
		})
	}
}

// TestE2EFanInReadsItsDependenciesResults: the worker of a task that waited
// on another reads that one's result under its lease, even when the gate
// stored it in the file channel (a pointer the worker could not read
// itself); nothing else opens to it: a task its task does not wait on, the
// same read without the lease, under another worker's lease, or after the
// lease ended. Both stores.
func TestE2EFanInReadsItsDependenciesResults(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "consult", map[string]any{}, "acme")
			g.putType(t, "synthesize", map[string]any{}, "acme")
			agent := g.newKey(t, "agent", "agent.a", "acme")
			consultant, synth := g.newKey(t, "worker", "consult.w", "acme"), g.newKey(t, "worker", "synth.w", "acme")

			big := strings.Repeat("a long answer ", 300<<10/14)
			dep := g.enqueue(t, agent, "consult", nil)
			ptr, _ := g.completeOne(t, consultant, "consult.w", dep, map[string]any{"result": map[string]any{"text": big}})["result_pointer"].(string)
			if !strings.HasPrefix(ptr, "file:") {
				t.Fatalf("a 300 KiB result went to %q, want the file channel", ptr)
			}
			other := g.enqueue(t, agent, "consult", nil)
			g.completeOne(t, consultant, "consult.w", other, map[string]any{"result": map[string]any{"text": "not yours"}})

			r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "synthesize", "after": []string{dep}})
			want(t, r, 201, "")
			o := g.lease(t, synth, "synth.w", nil)
			if len(o) != 1 {
				t.Fatalf("the waiter was not offered: %+v", o)
			}
			lease := o[0].LeaseID

			want(t, call(t, "GET", g.URL+"/v1/tasks/"+dep+"/result", synth, nil), 404, "not_found")
			r = call(t, "GET", g.URL+"/v1/tasks/"+dep+"/result?lease_id="+lease, synth, nil)
			want(t, r, 200, "")
			var got struct {
				Content       struct{ Text string } `json:"content"`
				ChecksumValid *bool                 `json:"checksum_valid"`
			}
			r.Into(t, &got)
			if got.Content.Text != big || got.ChecksumValid == nil || !*got.ChecksumValid {
				t.Fatalf("the dependency's result under the lease: %d bytes of text, checksum_valid %v", len(got.Content.Text), got.ChecksumValid)
			}
			want(t, call(t, "GET", g.URL+"/v1/tasks/"+other+"/result?lease_id="+lease, synth, nil), 404, "not_found")
			want(t, call(t, "GET", g.URL+"/v1/tasks/"+dep+"/result?lease_id="+lease, consultant, nil), 409, "lease_expired")
			want(t, call(t, "GET", g.URL+"/v1/tasks/"+dep+"/result?lease_id="+lease, agent, nil), 403, "forbidden")
			want(t, call(t, "GET", g.URL+"/v1/tasks/"+dep+"/result?lease_id=", synth, nil), 400, "bad_request")

			want(t, call(t, "POST", g.URL+"/v1/leases/"+lease+"/complete", synth, map[string]any{"result": "done"}), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/tasks/"+dep+"/result?lease_id="+lease, synth, nil), 409, "lease_expired")
		})
	}
}
