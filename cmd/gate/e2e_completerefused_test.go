package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// storedFiles lists the files the file channel holds under the data folder
// dir (<dir>/results/<shard>/<task>/<sha256>).
func storedFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(dir, "results"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == filepath.Join(dir, "results") && errors.Is(err, fs.ErrNotExist) {
				return nil // nothing stored yet
			}
			return err
		}
		if !d.IsDir() && !strings.HasPrefix(d.Name(), ".") { // not the folder's marker of its database
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// jsonObject decodes b as a JSON object (nil when it is none).
func jsonObject(b []byte) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// TestE2ERefusedCompletionStoresNothing: a completion with a large payload
// (over the inline channel, so the file channel would store it) that the
// gate refuses for its other fields leaves no file behind, on the canonical
// route, in a batch and through the MCP door; fields that conflict with the
// payload are refused with a code, not dropped: a result_checksum that is
// not the payload's sha256 (checksum_mismatch) or of another algorithm, a
// result_pointer beside a result, an artifact without a type; a field over
// its limit is named. The task stays leased through all of it and then
// completes with the checksum the payload has. On SQLite and PostgreSQL.
func TestE2ERefusedCompletionStoresNothing(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			contract(t)
			dir := t.TempDir()
			g := startGate(t, dir, sc.args(t)...)
			g.putType(t, "comp", map[string]any{"default_result_channel": "file"}, "")
			agent, worker := g.newKey(t, "agent", "agent.c", ""), g.newKey(t, "worker", "comp.1", "")
			type refusal struct {
				body   map[string]any
				status int
				code   string
				says   string
			}
			// The refusals, with payloads of size bytes (the type's
			// channel is the file channel, whatever their size).
			refusals := func(size int) []refusal {
				big := strings.Repeat("q", size)
				payload := func(i int) map[string]any { return map[string]any{"b": big, "i": i} } // each a file of its own
				b64 := base64.StdEncoding.EncodeToString([]byte(big))
				return []refusal{
					{map[string]any{"result": payload(1), "metadata": []int{1}}, 400, "bad_request", "metadata"},
					{map[string]any{"result": payload(2), "summary": strings.Repeat("s", 8193)}, 413, "too_large", "summary is 8193 bytes"},
					{map[string]any{"result": payload(3), "result_checksum": "sha256:deadbeef"}, 422, "checksum_mismatch", "result_checksum"},
					{map[string]any{"result": payload(4), "result_checksum": "sha256:" + strings.Repeat("0", 64)}, 422, "checksum_mismatch", "result_checksum"},
					{map[string]any{"result": payload(5), "result_checksum": "md5:abc"}, 400, "bad_request", "md5"},
					{map[string]any{"result_base64": b64, "result_checksum": "crc32:abc"}, 400, "bad_request", "crc32"},
					{map[string]any{"result": payload(6), "result_pointer": "s3://x"}, 400, "bad_request", "result_pointer"},
					{map[string]any{"result_base64": b64, "result_pointer": "s3://x"}, 400, "bad_request", "result_pointer"},
					{map[string]any{"result": payload(7), "artifacts": []any{map[string]any{"url": "x"}}}, 400, "bad_request", "artifacts[0].type"},
					{map[string]any{"result_pointer": "s3://x", "artifacts": []any{map[string]any{"url": "x"}}}, 400, "bad_request", "artifacts[0].type"},
					{map[string]any{"result_pointer": "s3://x", "artifacts": []any{map[string]any{"type": "s3", "url": "s3://x"}, map[string]any{"type": "", "url": "x"}}}, 400, "bad_request", "artifacts[1].type"},
					{map[string]any{"result_pointer": "s3://x/" + strings.Repeat("p", 8192)}, 413, "too_large", "result_pointer is"},
					{map[string]any{"result_pointer": "s3://x", "result_checksum": "sha256:" + strings.Repeat("a", 200)}, 413, "too_large", "result_checksum is"},
				}
			}
			// Each refusal on a task of its own, so that one taken by
			// mistake does not hide the next.
			fresh := func() (string, string) {
				t.Helper()
				r := call(t, "POST", g.URL+"/v1/tasks", agent, map[string]any{"task_type": "comp", "max_retries": 0})
				want(t, r, 201, "")
				id := r.JSON(t)["task_id"].(string)
				o := g.lease(t, worker, "comp.1", nil)
				if len(o) != 1 || o[0].Task.ID != id {
					t.Fatalf("lease: %+v", o)
				}
				return id, o[0].LeaseID
			}
			cases := refusals(300000)
			for i, c := range cases {
				id, lease := fresh()
				r := call(t, "POST", g.URL+"/v1/leases/"+lease+"/complete", worker, c.body)
				if e, _ := jsonObject(r.Body)["error"].(string); r.Status != c.status || e != c.code || !strings.Contains(string(r.Body), c.says) {
					t.Errorf("case %d: answered %d %s, want %d %s saying %q", i, r.Status, r.Body, c.status, c.code, c.says)
				}
				if f := storedFiles(t, dir); slices.ContainsFunc(f, func(p string) bool { return strings.Contains(p, id) }) {
					t.Errorf("case %d: answered %d %s, yet the file channel holds %v", i, r.Status, r.Body, f)
				}
				if st := call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil).JSON(t)["status"]; st != "leased" {
					t.Errorf("case %d: the task is %v", i, st)
				}
			}
			if t.Failed() {
				t.FailNow()
			}

			// The batch answers each entry as its single call (smaller
			// payloads: a batch body is at most 1 MiB). The document refuses
			// such a body as a whole; the batch answers it entry by entry
			// (200), so the contract check is off from here on.
			contractTests.Delete(t)
			_, lease := fresh()
			var entries []map[string]any
			cases = refusals(20000)
			for _, c := range cases {
				entries = append(entries, map[string]any{"lease_id": lease, "complete": c.body})
			}
			a := batchCall(t, g.URL+"/v1/leases/batch", worker, map[string]any{"entries": entries})
			if a.Succeeded != 0 || a.Failed != len(cases) {
				t.Fatalf("batch: %+v", a)
			}
			for i, e := range a.Results {
				if e.HTTPStatus != cases[i].status || e.Error != cases[i].code {
					t.Fatalf("batch entry %d: %+v, want %d %s", i, e, cases[i].status, cases[i].code)
				}
			}
			if f := storedFiles(t, dir); len(f) != 0 {
				t.Fatalf("refused batch entries left files: %v", f)
			}

			// The MCP door refuses the same, with the same codes.
			id, lease := fresh()
			big := strings.Repeat("q", 300000)
			payload := func(i int) map[string]any { return map[string]any{"b": big, "i": i} }
			c := stdioClient(t, "mcp", "--url", g.URL, "--key", worker)
			for i, args := range []map[string]any{
				{"result": payload(8), "metadata": map[string]any{"ok": true}, "result_checksum": "sha256:deadbeef"},
				{"result": payload(9), "result_checksum": "md5:abc"},
				{"result": payload(10), "result_pointer": "s3://x"},
				{"result": payload(11), "summary": strings.Repeat("s", 8193)},
				{"result_pointer": "s3://x", "artifacts": []any{map[string]any{"type": "", "url": "x"}}},
			} {
				args["task_id"], args["run_id"] = id, lease
				out, isErr := callTool(t, c, "worker_complete_task", args)
				if !isErr || (out["error"] != "checksum_mismatch" && out["error"] != "bad_request" && out["error"] != "too_large") {
					t.Fatalf("MCP case %d: %v", i, out)
				}
				if f := storedFiles(t, dir); len(f) != 0 {
					t.Fatalf("MCP case %d: refused %v, yet the file channel holds %v", i, out, f)
				}
			}
			if st := call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil).JSON(t)["status"]; st != "leased" {
				t.Fatalf("refused completions changed the task: %v", st)
			}

			// The payload's own checksum is taken (any case of its hex).
			body := []byte(big + "!") // bytes, not JSON: fetched back as content_base64
			sum := sha256.Sum256(body)
			r := call(t, "POST", g.URL+"/v1/leases/"+lease+"/complete", worker, map[string]any{
				"result_base64": base64.StdEncoding.EncodeToString(body), "result_checksum": "sha256:" + strings.ToUpper(hex.EncodeToString(sum[:]))})
			want(t, r, 200, "")
			if got := r.JSON(t)["result_checksum"]; got != "sha256:"+hex.EncodeToString(sum[:]) {
				t.Fatalf("recorded checksum %v", got)
			}
			if f := storedFiles(t, dir); len(f) != 1 || !strings.Contains(f[0], id) {
				t.Fatalf("after the completion the file channel holds %v", f)
			}
			if got := g.fetchContent(t, agent, id); string(got) != string(body) {
				t.Fatalf("fetched %d bytes, want %d", len(got), len(body))
			}
		})
	}
}
