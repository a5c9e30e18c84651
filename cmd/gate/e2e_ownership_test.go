package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/asyncgate/asyncgate/host/mail/mailtest"
	"github.com/asyncgate/asyncgate/worker/ai/aitest"
)

// storeCase is one store an e2e check runs on: extra serve flags, and a way
// to run one SQL statement on the gate's database while it is stopped.
type storeCase struct {
	name string
	args func(t *testing.T) []string
	exec func(t *testing.T, dir string, extra []string, q string, params ...any)
}

// bothStores are SQLite (the default) and PostgreSQL (a fresh schema).
func bothStores() []storeCase {
	return []storeCase{
		{name: "sqlite", args: func(*testing.T) []string { return nil },
			exec: func(t *testing.T, dir string, _ []string, q string, params ...any) {
				t.Helper()
				db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "gate.db")+"?_pragma=busy_timeout(10000)")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if _, err := db.Exec(q, params...); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "postgres", args: func(t *testing.T) []string { return []string{"--db", postgresSchema(t)} },
			exec: func(t *testing.T, _ string, extra []string, q string, params ...any) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c, err := pgx.Connect(ctx, extra[1])
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(ctx)
				q = strings.ReplaceAll(q, "?", "$1")
				if _, err := c.Exec(ctx, q, params...); err != nil {
					t.Fatal(err)
				}
			}},
	}
}

// mailOnlyGate starts a gate with a mail section (SMTP, POP3) but no
// mail.channel, which the docs allow: send_email and fetch_task_email work,
// the email channel plugin is not loaded.
func mailOnlyGate(t *testing.T, dir string, extra ...string) (*gateProc, *mailtest.Server, []string) {
	t.Helper()
	mp := mailtest.Start(t)
	cfg := filepath.Join(t.TempDir(), "gate.json")
	conf := map[string]any{
		"delivery": map[string]any{"retention_sweep_seconds": -1},
		"mail": map[string]any{
			"smtp":               map[string]any{"host": "127.0.0.1", "port": mp.SMTPPort},
			"pop3":               map[string]any{"host": "127.0.0.1", "port": mp.POP3Port, "username": mailtest.User, "password": mailtest.Password},
			"from":               "gate@asyncgate.example.com",
			"allowed_recipients": []string{"*@example.com"},
			"timeout_seconds":    5,
		},
	}
	b, _ := json.Marshal(conf)
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--config", cfg}, extra...)
	return startGate(t, dir, args...), mp, args
}

// TestE2EEmailPointerStaysWithItsTask (issue 37 item 5): on a gate with mail
// but no mail.channel, tenant A's agent sends an email (its copy lands in the
// gate's mailbox). A worker of tenant B may not complete with
// email:<A's message id> (422 foreign_pointer, nothing recorded: this gate
// has a mailbox; on a gate without mail TestE2ESeedShapes records a
// worker's own email pointer as given), and a
// pointer to A's mail already stored on B's task (written before this rule)
// reads back as not_found: fetch_task_email returns only the message the
// gate sent for that very task. On SQLite and PostgreSQL.
func TestE2EEmailPointerStaysWithItsTask(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "data")
			extra := sc.args(t)
			g, mp, args := mailOnlyGate(t, dir, extra...)
			g.putType(t, "plain", map[string]any{"default_result_channel": "inline"}, "ta")
			g.putType(t, "plain", map[string]any{"default_result_channel": "inline"}, "tb")
			agentA := g.newKey(t, "agent", "agent.a", "ta")
			agentB, workerB := g.newKey(t, "agent", "agent.b", "tb"), g.newKey(t, "worker", "plain.b", "tb")

			taskA := g.enqueue(t, agentA, "plain", nil)
			r := call(t, "POST", g.URL+"/v1/email", agentA, map[string]any{"to": "a@example.com", "subject": "A's secret", "body": "tenant A only", "task_id": taskA})
			want(t, r, 202, "")
			msgA, _ := r.JSON(t)["message_id"].(string)
			waitDelivery(t, "email.sent", func() bool { return has(g.taskReceiptTypes(t, agentA, taskA), "email.sent") })
			if _, found := mp.Find(t, msgA); !found {
				t.Fatal("A's email is not at the mail server")
			}

			// B's worker names A's message: refused, the task keeps its lease.
			taskB := g.enqueue(t, agentB, "plain", nil)
			o := g.lease(t, workerB, "plain.b", nil)
			if len(o) != 1 || o[0].Task.ID != taskB {
				t.Fatalf("lease: %+v", o)
			}
			for _, body := range []map[string]any{
				{"result_pointer": "email:" + msgA},
				{"result_pointer": "email:" + msgA, "result_channel": "email"},
				{"result_pointer": "s3://bucket/x", "result_channel": "email"},
				// A channel's name whatever its case.
				{"result_pointer": "EMAIL:" + msgA},
				{"result_pointer": "FILE:" + taskA + "/" + strings.Repeat("a", 64)},
			} {
				want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB, body), 422, "foreign_pointer")
			}
			// Whitespace around a pointer is no channel's: bad input, on
			// a completion and in a batch.
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB,
				map[string]any{"result_pointer": " email:" + msgA}), 400, "bad_request")
			r = call(t, "POST", g.URL+"/v1/leases/batch", workerB, map[string]any{"entries": []map[string]any{
				{"id": "upper", "lease_id": o[0].LeaseID, "complete": map[string]any{"result_pointer": "Email:" + msgA}},
				{"id": "space", "lease_id": o[0].LeaseID, "complete": map[string]any{"result_pointer": "email:" + msgA + " "}}}})
			want(t, r, 200, "")
			var batch struct {
				Results []struct {
					ID, Error string
					OK        bool
				}
			}
			r.Into(t, &batch)
			if len(batch.Results) != 2 || batch.Results[0].OK || batch.Results[0].Error != "foreign_pointer" ||
				batch.Results[1].OK || batch.Results[1].Error != "bad_request" {
				t.Fatalf("batch completions with a pointer to A's mail: %s", r.Body)
			}
			if st := call(t, "GET", g.URL+"/v1/tasks/"+taskB, agentB, nil).JSON(t)["status"]; st != "leased" {
				t.Fatalf("task B is %v after refused completions", st)
			}
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerB, map[string]any{"result": "ok"}), 200, "")
			want(t, call(t, "GET", g.URL+"/v1/tasks/"+taskB+"/email", agentB, nil), 409, "not_email_channel")

			// A pointer to A's mail recorded on B's task before the rule
			// existed (written into the store while the gate is stopped).
			g.Stop(syscall.SIGTERM)
			res, _ := json.Marshal(map[string]any{"result_channel": "email", "result_pointer": "email:" + msgA})
			sc.exec(t, dir, extra, "UPDATE tasks SET result = ? WHERE id = '"+taskB+"'", string(res))
			g = startGate(t, dir, args...)
			r = call(t, "GET", g.URL+"/v1/tasks/"+taskB+"/email", agentB, nil)
			want(t, r, 404, "not_found")
			if strings.Contains(string(r.Body), "tenant A only") || strings.Contains(string(r.Body), "secret") {
				t.Fatalf("B read A's mail: %s", r.Body)
			}
		})
	}
}

// TestE2EReleaseForeignLease (issue 37 item 8d): a worker of tenant B that
// releases tenant A's live lease gets 404 not_found with the same words as
// for a lease that never existed, and A's lease is untouched (A still
// heartbeats and completes it). A's own second release stays a 200 no-op.
// On SQLite and PostgreSQL.
func TestE2EReleaseForeignLease(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g := startGate(t, t.TempDir(), sc.args(t)...)
			g.putType(t, "job", map[string]any{}, "ta")
			g.putType(t, "job", map[string]any{}, "tb")
			agentA, workerA := g.newKey(t, "agent", "agent.a", "ta"), g.newKey(t, "worker", "job.a", "ta")
			workerB := g.newKey(t, "worker", "job.b", "tb")
			id := g.enqueue(t, agentA, "job", nil)
			o := g.lease(t, workerA, "job.a", nil)
			if len(o) != 1 || o[0].Task.ID != id {
				t.Fatalf("lease: %+v", o)
			}
			foreign := call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/release", workerB, map[string]any{"reason": "not mine"})
			want(t, foreign, 404, "not_found")
			unknownID := "lease-01M8GME6G9P78S4Y21S82KRJ2A"
			unknown := call(t, "POST", g.URL+"/v1/leases/"+unknownID+"/release", workerB, nil)
			want(t, unknown, 404, "not_found")
			if a, b := strings.ReplaceAll(string(foreign.Body), o[0].LeaseID, "X"), strings.ReplaceAll(string(unknown.Body), unknownID, "X"); a != b {
				t.Fatalf("a foreign lease and an unknown one answer differently:\n%s\n%s", a, b)
			}
			if st := call(t, "GET", g.URL+"/v1/tasks/"+id, agentA, nil).JSON(t)["status"]; st != "leased" {
				t.Fatalf("task is %v after another tenant's release", st)
			}
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/heartbeat", workerA, nil), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/release", workerA, nil), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/release", workerA, nil), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/release", workerB, nil), 404, "not_found")
		})
	}
}

// TestE2EPrivateDataFolder (issue 37 item 8b): in a data folder an operator
// created 0755, everything the gate creates — gate.db and its -wal and -shm,
// admin.key, the plugins and results folders, a result the file channel
// stored — is its user's only (files 0600, folders 0700). On SQLite and
// PostgreSQL (whose data folder holds admin.key and the results).
func TestE2EPrivateDataFolder(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
				t.Fatal(err)
			}
			g := startGate(t, dir, append(sc.args(t), "--results-dir", filepath.Join(dir, "results"))...)
			g.putType(t, "big", map[string]any{"default_result_channel": "inline"}, "")
			agent, worker := g.newKey(t, "agent", "agent.p", ""), g.newKey(t, "worker", "big.1", "")
			id := g.enqueue(t, agent, "big", map[string]any{"secret": "params"})
			ptr, _ := g.completeOne(t, worker, "big.1", id, map[string]any{"result": strings.Repeat("x", 200<<10)})["result_pointer"].(string)
			if !strings.HasPrefix(ptr, "file:") {
				t.Fatalf("pointer %q: the result was meant for the file channel", ptr)
			}
			g.Stop(syscall.SIGTERM) // gate.db-wal and -shm exist while it runs; checked below if left
			seen := map[string]bool{}
			err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || p == dir {
					return err
				}
				fi, err := d.Info()
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				seen[strings.SplitN(rel, string(filepath.Separator), 2)[0]] = true
				if m := fi.Mode().Perm(); m&0o077 != 0 {
					t.Errorf("%s is %v: others can read it", rel, fi.Mode())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wantSeen := []string{"admin.key", "plugins", "results"}
			if sc.name == "sqlite" {
				wantSeen = append(wantSeen, "gate.db")
			}
			for _, n := range wantSeen {
				if !seen[n] {
					t.Errorf("the data folder has no %s (it has %v)", n, seen)
				}
			}
			stored := false
			for n := range seen {
				stored = stored || n == "results"
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "results")); len(ents) == 0 || !stored {
				t.Errorf("no stored result under results/ to check")
			}
		})
	}
}

// TestE2ERefusesFoldersOthersCanWrite (issue 37 items 8b and 8c): the gate
// refuses, before it listens, a data folder its group or others can write
// (a sticky /tmp-like one included) or that another user owns, and a wasm
// compilation cache or plugins folder (code it runs) with such a folder or
// entry anywhere in it, or a symlink.
func TestE2ERefusesFoldersOthersCanWrite(t *testing.T) {
	t.Parallel()
	ensureGate(t)
	serve := func(data string, extra ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, gateBin, append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0"}, extra...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gate serve: %v", err)
		}
		return string(out), code
	}
	mkdir := func(mode os.FileMode) string {
		d := filepath.Join(t.TempDir(), "d")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, mode := range []os.FileMode{0o775, 0o757, 0o777 | os.ModeSticky} {
		out, code := serve(mkdir(mode))
		if code == 0 || !strings.Contains(out, "data folder") || !strings.Contains(out, "writable by its group or by others") {
			t.Errorf("data folder %v: exit %d\n%s", mode, code, out)
		}
	}
	if os.Geteuid() == 0 {
		d := mkdir(0o700)
		if err := os.Chown(d, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if out, code := serve(d); code == 0 || !strings.Contains(out, "belongs to user 4242") {
			t.Errorf("data folder of another user: exit %d\n%s", code, out)
		}
	}
	// A compilation cache others can write, or holding an entry they can.
	cache := mkdir(0o777)
	if out, code := serve(mkdir(0o700), "--wasm-cache", cache); code == 0 || !strings.Contains(out, "wasm cache") {
		t.Errorf("cache folder 0777: exit %d\n%s", code, out)
	}
	cache = mkdir(0o700)
	sub := filepath.Join(cache, "wazero-v1.12.0-amd64-linux")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(sub, "0123abcd")
	if err := os.WriteFile(entry, []byte("patched"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(entry, 0o666); err != nil {
		t.Fatal(err)
	}
	if out, code := serve(mkdir(0o700), "--wasm-cache", cache); code == 0 || !strings.Contains(out, "wasm cache") || !strings.Contains(out, "0123abcd") {
		t.Errorf("cache entry 0666: exit %d\n%s", code, out)
	}
	// A plugins folder holding a symlink (the rule the registry also
	// applies to each drop-in while the gate runs: host/private).
	data := mkdir(0o700)
	if err := os.Mkdir(filepath.Join(data, "plugins"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(entry, filepath.Join(data, "plugins", "pol.wasm")); err != nil {
		t.Fatal(err)
	}
	if out, code := serve(data); code == 0 || !strings.Contains(out, "plugins folder") || !strings.Contains(out, "pol.wasm: it is a symbolic link") {
		t.Errorf("plugins folder with a symlink: exit %d\n%s", code, out)
	}
}

// uiClient is a browser without JavaScript: a cookie jar, redirects not
// followed.
type uiClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newUIClient(t *testing.T, base string) *uiClient {
	jar, _ := cookiejar.New(nil)
	return &uiClient{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var uiCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (u *uiClient) do(method, path string, form url.Values) (int, http.Header, string) {
	u.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := u.c.Do(req)
	if err != nil {
		u.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// signIn posts the key to the sign-in form and returns the status.
func (u *uiClient) signIn(key string) (int, http.Header) {
	u.t.Helper()
	_, _, page := u.do("GET", "/ui/login", nil)
	m := uiCSRF.FindStringSubmatch(page)
	if m == nil {
		u.t.Fatalf("no CSRF token on the sign-in page:\n%s", page)
	}
	st, h, _ := u.do("POST", "/ui/login", url.Values{"csrf": {m[1]}, "key": {key}})
	return st, h
}

// signedIn reports whether the client's session still opens pages.
func (u *uiClient) signedIn() bool {
	u.t.Helper()
	st, _, _ := u.do("GET", "/ui/", nil)
	return st == 200
}

// TestE2EDashboardSessionsPerKey (issue 37 item 8a): a tenant admin signing
// in over and over holds at most 16 sessions (its oldest end, the
// operator's does not), and past 20 sign-ins at once it is throttled: 429
// with Retry-After on the sign-in page, no session made.
func TestE2EDashboardSessionsPerKey(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	acme := g.newKey(t, "admin", "acme-ops", "acme")
	op := newUIClient(t, g.URL)
	if st, _ := op.signIn(g.Admin); st != 303 || !op.signedIn() {
		t.Fatalf("operator sign-in: %d", st)
	}
	var mine []*uiClient
	for i := 0; i < 20; i++ {
		u := newUIClient(t, g.URL)
		if st, _ := u.signIn(acme); st != 303 {
			t.Fatalf("sign-in %d: %d", i+1, st)
		}
		mine = append(mine, u)
	}
	if !op.signedIn() {
		t.Fatal("a tenant admin's sign-ins signed the operator out")
	}
	live := 0
	for i, u := range mine {
		if u.signedIn() {
			live++
		} else if i >= 4 {
			t.Errorf("session %d of 20 ended; only the 4 oldest should", i+1)
		}
	}
	if live != 16 {
		t.Fatalf("the key holds %d live sessions, want 16", live)
	}
	u := newUIClient(t, g.URL)
	st, h := u.signIn(acme)
	if st != 429 || h.Get("Retry-After") == "" || u.signedIn() {
		t.Fatalf("sign-in 21 at once: %d, Retry-After %q", st, h.Get("Retry-After"))
	}
	if !mine[19].signedIn() || !op.signedIn() {
		t.Fatal("a throttled sign-in ended a session")
	}
}

// TestE2ETenantAdminLedgerPage (issue 37 item 8f): after an operator's
// verification, a tenant admin's /ui/ledger (and its polled fragment) says
// the whole ledger verified OK, and shows no gate-wide count, no chain or
// checkpoint count and no head hash; the operator's shows them.
func TestE2ETenantAdminLedgerPage(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.putType(t, "job", map[string]any{}, "")
	agent := g.newKey(t, "agent", "agent.l", "")
	for i := 0; i < 3; i++ {
		g.enqueue(t, agent, "job", nil)
	}
	acme := g.newKey(t, "admin", "acme-ops", "acme")
	op := newUIClient(t, g.URL)
	if st, _ := op.signIn(g.Admin); st != 303 {
		t.Fatalf("operator sign-in: %d", st)
	}
	_, _, page := op.do("GET", "/ui/ledger", nil)
	m := uiCSRF.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no verify form for the operator:\n%s", page)
	}
	if st, _, _ := op.do("POST", "/ui/ledger/verify", url.Values{"csrf": {m[1]}}); st != 303 {
		t.Fatalf("verify: %d", st)
	}
	var opPage string
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(opPage, "Verified OK") {
		if time.Now().After(deadline) {
			t.Fatalf("no verification outcome within 60 s:\n%s", opPage)
		}
		time.Sleep(50 * time.Millisecond)
		_, _, opPage = op.do("GET", "/ui/fragments/ledger", nil)
	}
	head := regexp.MustCompile(`Head hash <code>([0-9a-f]{16,})</code>`).FindStringSubmatch(opPage)
	if head == nil || !strings.Contains(opPage, "Receipt chains") {
		t.Fatalf("the operator's page lacks the head hash or the counts:\n%s", opPage)
	}
	ta := newUIClient(t, g.URL)
	if st, _ := ta.signIn(acme); st != 303 {
		t.Fatalf("tenant admin sign-in: %d", st)
	}
	for _, p := range []string{"/ui/ledger", "/ui/fragments/ledger"} {
		st, _, page := ta.do("GET", p, nil)
		if st != 200 || !strings.Contains(strings.ToLower(page), "verified ok") {
			t.Fatalf("%s for a tenant admin: %d\n%s", p, st, page)
		}
		for _, leak := range []string{head[1], "Receipt chains", "checkpoints", " receipts in ", "Head hash"} {
			if strings.Contains(page, leak) {
				t.Errorf("%s shows a tenant admin %q:\n%s", p, leak, page)
			}
		}
	}
}

// TestE2EAIWorkerRefusesModelsItsProfileDoesNotName (issue 37 item 8e): the
// real gate and `gate ai-worker`; the profile allows model-*. A task asking
// for another model (alone or in a fan-out) is dead-lettered as fatal and
// the provider never sees that model; an allowed one is answered.
func TestE2EAIWorkerRefusesModelsItsProfileDoesNotName(t *testing.T) {
	t.Parallel()
	b := newAIBundle(t, 30, func(r aitest.Request) aitest.Reply { return aitest.Answer("answer of " + r.Model) })
	b.startAIWorker(t, "ai.models")
	bad := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "x", "model": "premium-9"})
	badFan := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "x", "models": []string{"model-a", "premium-9"}})
	good := b.g.enqueue(t, b.agent, "ai.chat", map[string]any{"prompt": "x", "model": "model-a"})
	for _, id := range []string{bad, badFan} {
		if tk := b.waitStatus(t, id, "dead_letter"); !strings.Contains(tk.Error, "does not allow") {
			t.Fatalf("task %s: %+v", id, tk)
		}
	}
	b.waitStatus(t, good, "succeeded")
	for _, r := range b.prov.Requests() {
		if r.Model == "premium-9" {
			t.Fatal("the provider was asked for a model the profile does not allow")
		}
	}
}

// TestE2ELookAlikeResourceNames (issue 37 item 6): agent A holds
// FILE:/config.yaml. Agent B asking for it in full-width (ＦＩＬＥ：/ｃｏｎｆｉｇ.yaml)
// is refused as a conflict — it is the same resource; names with a
// zero-width character, a bidi override or a Cyrillic letter in a Latin
// word are 400 invalid_resource, at the resource door and in a task's
// resource_intents. A task queued with an intent today's rules refuse
// (written into the store as an older gate would have accepted it) is still
// leased, heartbeated and completed under its stored name. On SQLite and
// PostgreSQL.
func TestE2ELookAlikeResourceNames(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "data")
			extra := sc.args(t)
			g := startGate(t, dir, extra...)
			a, b := g.newKey(t, "agent", "agent.a", ""), g.newKey(t, "agent", "agent.b", "")
			intent := func(name, pred string) map[string]any {
				return map[string]any{"intents": []any{map[string]any{"resource": name, "predicate": pred}}}
			}
			want(t, call(t, "POST", g.URL+"/v1/resource-leases", a, intent("FILE:/config.yaml", "MUTATES")), 201, "")
			for _, name := range []string{"\uff26\uff29\uff2c\uff25\uff1a/\uff43\uff4f\uff4e\uff46\uff49\uff47.yaml", "file\uff1a/config.yaml", "FILE:/./config.yaml"} {
				want(t, call(t, "POST", g.URL+"/v1/resource-leases", b, intent(name, "READS")), 409, "resource_conflict")
			}
			for _, name := range []string{"FILE:/config\u200b.yaml", "FILE:/\u202elmay.gifnoc", "FILE:/c\u043enfig.yaml", "FILE:/config.yaml\u2060"} {
				want(t, call(t, "POST", g.URL+"/v1/resource-leases", b, intent(name, "MUTATES")), 400, "invalid_resource")
			}
			g.putType(t, "edit", map[string]any{"lease_seconds": 30}, "")
			want(t, call(t, "POST", g.URL+"/v1/tasks", b, map[string]any{"task_type": "edit", "params": map[string]any{},
				"resource_intents": []any{map[string]any{"resource": "FILE:/c\u043enfig.yaml", "predicate": "MUTATES"}}}), 400, "invalid_resource")

			// A task queued by an older gate under a name refused today.
			worker := g.newKey(t, "worker", "edit.1", "")
			r := call(t, "POST", g.URL+"/v1/tasks", b, map[string]any{"task_type": "edit", "params": map[string]any{},
				"resource_intents": []any{map[string]any{"resource": "FILE:/legacy", "predicate": "MUTATES"}}})
			want(t, r, 201, "")
			id := r.JSON(t)["task_id"].(string)
			g.Stop(syscall.SIGTERM)
			old := "FILE:/c\u043enfig.yaml" // Cyrillic о: accepted before issue 37
			raw, _ := json.Marshal([]map[string]string{{"resource": old, "predicate": "MUTATES"}})
			sc.exec(t, dir, extra, "UPDATE tasks SET resource_intents = ? WHERE id = '"+id+"'", string(raw))
			g = startGate(t, dir, extra...)
			o := g.lease(t, worker, "edit.1", nil)
			if len(o) != 1 || o[0].Task.ID != id {
				t.Fatalf("the task with a stored name was not leased: %+v", o)
			}
			var held struct {
				Leases []struct {
					Resource string `json:"resource"`
					TaskID   string `json:"task_id"`
				} `json:"leases"`
			}
			call(t, "GET", g.URL+"/v1/admin/resource-leases?state=held", g.Admin, nil).Into(t, &held)
			found := false
			for _, l := range held.Leases {
				found = found || (l.TaskID == id && l.Resource == old)
			}
			if !found {
				t.Fatalf("no resource lease on %q for the task: %+v", old, held.Leases)
			}
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/heartbeat", worker, nil), 200, "")
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, map[string]any{"result": "ok"}), 200, "")
		})
	}
}

// TestE2EGatePrincipalIsReserved: the gate's own principal ("asyncgate",
// the from of every receipt the gate issues) cannot hold a key — a tenant
// admin that made one would give an agent every task.assigned receipt of
// its tenant and escalations that read as the gate's own words.
func TestE2EGatePrincipalIsReserved(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	tadmin := g.newKey(t, "admin", "ops.t", "tz")
	for _, p := range []string{"asyncgate", "AsyncGate"} {
		for _, key := range []string{g.Admin, tadmin} {
			r := call(t, "POST", g.URL+"/v1/admin/keys?tenant=tz", key, map[string]string{"role": "agent", "principal": p, "tenant": "tz"})
			want(t, r, 403, "forbidden")
		}
	}
	if out, _, code := gateCLI(t, "keys", "create", "--data", g.dir, "--role", "agent", "--principal", "asyncgate"); code == 0 {
		t.Fatalf("gate keys create made a key for the gate's own principal: %s", out)
	}
}

// TestE2ELeaseCallsTellNothingOfOthersLeases: a worker that names a lease
// it cannot hold — another tenant's live one, or, in its own tenant,
// another worker's that has ended — gets the words an unknown lease gets:
// nothing that tells a real lease id from a made-up one, or the state of a
// task it may not read. The lease's own worker still hears why its lease
// is gone. On SQLite and PostgreSQL.
func TestE2ELeaseCallsTellNothingOfOthersLeases(t *testing.T) {
	t.Parallel()
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			g, agentA, workerA, workerA2, workerB := othersLeasesGate(t, sc)
			g.enqueue(t, agentA, "job", nil)
			o := g.lease(t, workerA, "job.a", nil)
			if len(o) != 1 {
				t.Fatalf("lease: %+v", o)
			}
			unknownID := "lease-01M8GME6G9P78S4Y21S82KRJ2A"
			detail := func(r resp, lease string) string {
				t.Helper()
				want(t, r, 409, "lease_expired")
				d, _ := r.JSON(t)["detail"].(string)
				return strings.ReplaceAll(d, lease, "X")
			}
			unknown := detail(call(t, "POST", g.URL+"/v1/leases/"+unknownID+"/heartbeat", workerB, map[string]any{}), unknownID)
			for _, verb := range []string{"heartbeat", "complete"} {
				body := map[string]any{}
				if verb == "complete" {
					body = map[string]any{"result": "x"}
				}
				if d := detail(call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/"+verb, workerB, body), o[0].LeaseID); d != unknown {
					t.Fatalf("another tenant's live lease (%s) answers %q, an unknown one %q", verb, d, unknown)
				}
			}
			want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", workerA, map[string]any{"result": "done"}), 200, "")
			d := detail(call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/heartbeat", workerA2, map[string]any{}), o[0].LeaseID)
			if d != unknown || strings.Contains(d, "succeeded") {
				t.Fatalf("another worker's ended lease answers %q, an unknown one %q", d, unknown)
			}
			if own := detail(call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/heartbeat", workerA, map[string]any{}), o[0].LeaseID); !strings.Contains(own, "succeeded") {
				t.Fatalf("the lease's own worker hears %q, want the task's state", own)
			}
		})
	}
}

// TestE2EDashboardPluginStatsAreTheOperators: the plugins page shows a
// tenant's admin what the gate runs, as GET /v1/admin/plugins does, but not
// the call counts and latencies, which count every tenant's traffic; the
// operator sees them.
func TestE2EDashboardPluginStatsAreTheOperators(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	g.waitPluginsReady(t)
	acme := g.newKey(t, "admin", "acme-ops", "acme")
	op, ten := newUIClient(t, g.URL), newUIClient(t, g.URL)
	if st, _ := op.signIn(g.Admin); st != 303 {
		t.Fatalf("operator sign-in: %d", st)
	}
	if st, _ := ten.signIn(acme); st != 303 {
		t.Fatalf("tenant admin sign-in: %d", st)
	}
	_, _, opPage := op.do("GET", "/ui/plugins", nil)
	_, _, tenPage := ten.do("GET", "/ui/plugins", nil)
	if !strings.Contains(opPage, "<th>Calls</th>") || !strings.Contains(opPage, "<th>p99</th>") {
		t.Fatalf("the operator's plugins page lacks the statistics:\n%.2000s", opPage)
	}
	if !strings.Contains(tenPage, "<td>inline</td>") {
		t.Fatalf("the tenant admin's plugins page lacks the plugins:\n%.2000s", tenPage)
	}
	for _, col := range []string{"<th>Calls</th>", "<th>Failures</th>", "<th>p50</th>", "<th>p99</th>", "idle of", "<th>Last error</th>"} {
		if strings.Contains(tenPage, col) {
			t.Fatalf("a tenant admin's plugins page shows the gate-wide %q:\n%.2000s", col, tenPage)
		}
	}
}
