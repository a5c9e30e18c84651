package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds a Chromium to drive: $ASYNCGATE_CHROMIUM, else the usual
// names on PATH. Without one the browser tests skip, except under CI, where
// scripts/ensure-chromium.sh installs it and its absence is a failure.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ASYNCGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium found under CI: scripts/ensure-chromium.sh should have installed it")
	}
	t.Skip("no Chromium here (apt-get install chromium, or run scripts/ensure-chromium.sh): the browser test skips")
	return ""
}

// newBrowser starts a headless Chromium for the test and returns its tab.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to sandbox as root (CI containers)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(func() { cancel(); cancelTab(); cancelAlloc() })
	return ctx
}

// step runs browser actions, failing the test with what it was doing.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// textOf returns the text of the element sel.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("browser: text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// waitTrue polls a JavaScript predicate in the page until it holds.
func waitTrue(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("browser: waiting for %s: %v", what, err)
	}
}

// TestE2EDashboardInABrowser drives the dashboard of a real gate in headless
// Chromium: sign in, see the queue plot, find a task, watch its progress move
// without reloading, see its result fetched through its channel with the
// checksum verified, redrive a dead letter, have a form posted without its
// CSRF token refused, and see the worker and the plugins.
func TestE2EDashboardInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: not in -short")
	}
	ctx := newBrowser(t)
	g := startGate(t, filepath.Join(t.TempDir(), "data"))
	agent := g.newKey(t, "agent", "agent.ui", "")
	worker := g.newKey(t, "worker", "uidemo.w1", "")
	g.putType(t, "uidemo", map[string]any{"task_type": "uidemo", "lease_seconds": 60}, "")
	watched := g.enqueue(t, agent, "uidemo", map[string]any{"step": "watched"})
	doomed := g.enqueue(t, agent, "uidemo", map[string]any{"step": "doomed"})

	// Sign in: the key goes into a form field, never into a URL.
	step(t, ctx, "sign in",
		chromedp.Navigate(g.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), g.Admin),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#queues")),
	)
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); strings.Contains(loc, "agw_") || !strings.HasSuffix(loc, "/ui/") {
		t.Fatalf("after sign-in the browser is at %q", loc)
	}
	if html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html"))); strings.Contains(html, g.Admin) {
		t.Fatal("the page shows the admin key")
	}
	cookies, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil || strings.Contains(cookies, "asyncgate_session") {
		t.Fatalf("the session cookie is readable from script (%q, %v): it must be HttpOnly", cookies, err)
	}

	// The queue: two queued tasks, and the backlog plot with a sample.
	if n := textOf(t, ctx, "#count-queued"); n != "2" {
		t.Fatalf("queued count %q, want 2", n)
	}
	step(t, ctx, "the backlog plot", chromedp.WaitVisible(chromedp.CSS(`figure.plot[data-plot^="Backlog"] svg circle.dot`)))

	// Find the task by id and open its page.
	step(t, ctx, "find the task",
		chromedp.Navigate(g.URL+"/ui/tasks"),
		chromedp.WaitVisible(chromedp.CSS("#q")),
		chromedp.SendKeys(chromedp.CSS("#q"), watched),
		chromedp.Submit(chromedp.CSS("#q")),
		chromedp.WaitVisible(chromedp.CSS("#task-status")),
	)
	if s := textOf(t, ctx, "#task-status"); s != "queued" {
		t.Fatalf("task status %q, want queued", s)
	}
	// A marker on the page: it survives only if progress arrives by polling,
	// not by a reload.
	step(t, ctx, "mark the page", chromedp.Evaluate[chromedp.Void](`window.__noReload = true`))

	// A worker takes the task and reports progress; the page follows.
	offers := g.lease(t, worker, "uidemo.w1", map[string]any{"task_types": []string{"uidemo"}, "max_tasks": 1})
	if len(offers) != 1 || offers[0].Task.ID != watched {
		t.Fatalf("leased %+v, want %s", offers, watched)
	}
	lease := offers[0].LeaseID
	for _, pct := range []int{25, 70} {
		want(t, call(t, "POST", g.URL+"/v1/leases/"+lease+"/heartbeat", worker,
			map[string]any{"worker_id": "uidemo.w1", "progress_percent": pct, "progress_message": "working"}), 200, "")
		waitTrue(t, ctx, "progress "+strconv.Itoa(pct),
			`document.querySelector("#progress-percent").textContent === "`+strconv.Itoa(pct)+`.0%" && window.__noReload === true`)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.history rect.hbar").length`)); n != 2 {
		t.Fatalf("the progress history shows %d bars, want 2", n)
	}
	// The page's styles come from its style sheet alone (the policy allows
	// no inline style), and the history's axis gets its width from there.
	if w, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector(".history-axis")).width`)); w != "600px" {
		t.Fatalf("the progress history's axis is %q wide, want 600px", w)
	}
	// Text a worker or an agent wrote is isolated: a bidi override in it
	// cannot reverse the fields after it.
	if b, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("td, dd, code")].map(e => getComputedStyle(e).unicodeBidi).filter(v => v !== "isolate").length + "/" + document.querySelectorAll("td, dd, code").length`)); !strings.HasPrefix(b, "0/") || b == "0/0" {
		t.Fatalf("cells, facts and code spans not isolated (not isolated/all): %s", b)
	}

	// The form without its CSRF token is refused and changes nothing.
	step(t, ctx, "post the cancel form without its CSRF token",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('form[action$="/cancel"] input[name="csrf"]').remove()`),
		chromedp.Click(chromedp.CSS("#cancel")),
		chromedp.WaitVisible(chromedp.CSS("#error-code")),
	)
	if code := textOf(t, ctx, "#error-code"); code != "forbidden" {
		t.Fatalf("a form without its CSRF token answered %q, want forbidden", code)
	}
	if st := call(t, "GET", g.URL+"/v1/tasks/"+watched, g.Admin, nil).JSON(t); st["status"] != "leased" || st["cancel_requested"] != false {
		t.Fatalf("the refused cancel changed the task: %v %v", st["status"], st["cancel_requested"])
	}

	// The task's story while it runs: its attempt, its lease's expiry, when
	// its worker was last heard, the attempts and the timeline.
	step(t, ctx, "the running attempt",
		chromedp.Navigate(g.URL+"/ui/tasks/"+watched),
		chromedp.WaitVisible(chromedp.CSS("#current-attempt")),
	)
	if a := textOf(t, ctx, "#attempt-number"); !strings.HasPrefix(a, "1 (lease 1 of the task)") {
		t.Fatalf("attempt number %q", a)
	}
	if e := textOf(t, ctx, "#lease-expiry"); !strings.Contains(e, "(in ") || !strings.Contains(e, "Z") {
		t.Fatalf("lease expiry %q", e)
	}
	if h := textOf(t, ctx, "#heartbeat-age"); !strings.Contains(h, "ago") {
		t.Fatalf("heartbeat age %q", h)
	}
	if a := textOf(t, ctx, "#attempts tbody"); !strings.Contains(a, "uidemo.w1") || !strings.Contains(a, "running") {
		t.Fatalf("attempts while running: %q", a)
	}
	if tl := textOf(t, ctx, "#timeline tbody"); !strings.Contains(tl, "task.assigned") || !strings.Contains(tl, "lease.granted") ||
		!strings.Contains(tl, "25% working") || !strings.Contains(tl, "70% working") {
		t.Fatalf("timeline while running: %q", tl)
	}
	if l := textOf(t, ctx, ".history-label"); !strings.Contains(l, "percent") {
		t.Fatalf("progress history label %q", l)
	}
	if ws, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("#timeline td.nowrap")).whiteSpace`)); ws != "nowrap" {
		t.Fatalf("timeline times wrap: white-space %q", ws)
	}
	if icon, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('link[rel="icon"]').href`)); !strings.HasSuffix(icon, "/ui/static/favicon.svg") {
		t.Fatalf("favicon link %q", icon)
	} else if r := call(t, "GET", icon, "", nil); r.Status != 200 || !strings.Contains(string(r.Body), "<svg") {
		t.Fatalf("favicon: %d", r.Status)
	}

	// The worker completes; the page shows the result through its channel.
	want(t, call(t, "POST", g.URL+"/v1/leases/"+lease+"/complete", worker,
		map[string]any{"worker_id": "uidemo.w1", "result": map[string]any{"answer": 42}}), 200, "")
	step(t, ctx, "the result",
		chromedp.Navigate(g.URL+"/ui/tasks/"+watched),
		chromedp.WaitVisible(chromedp.CSS("#result")),
	)
	if res := textOf(t, ctx, "#result"); !strings.Contains(res, `"answer": 42`) {
		t.Fatalf("result shown %q", res)
	}
	if ok := textOf(t, ctx, "#checksum"); !strings.Contains(ok, "verified") {
		t.Fatalf("checksum %q", ok)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#receipts .hash-ok").length`)); n != 2 {
		t.Fatalf("%d receipts with a verified hash, want 2 (task.assigned, task.completed)", n)
	}
	if a := textOf(t, ctx, "#attempts tbody"); !strings.Contains(a, "succeeded") || strings.Contains(a, "running") {
		t.Fatalf("attempts after completion: %q", a)
	}
	if tl := textOf(t, ctx, "#timeline tbody"); !strings.Contains(tl, "task.completed") {
		t.Fatalf("timeline after completion: %q", tl)
	}
	if ws, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("#receipts td code")).whiteSpace`)); ws != "nowrap" {
		t.Fatalf("receipt ids wrap: white-space %q", ws)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("#receipts tbody tr")].filter(r => /\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ/.test(r.cells[1].textContent)).length`)); n != 2 {
		t.Fatalf("%d receipts with a time, want 2", n)
	}

	// The other task dies; redrive it from the dead letters page.
	offers = g.lease(t, worker, "uidemo.w1", map[string]any{"task_types": []string{"uidemo"}, "max_tasks": 1})
	if len(offers) != 1 || offers[0].Task.ID != doomed {
		t.Fatalf("leased %+v, want %s", offers, doomed)
	}
	want(t, call(t, "POST", g.URL+"/v1/leases/"+offers[0].LeaseID+"/fail", worker,
		map[string]any{"worker_id": "uidemo.w1", "error_message": "no such thing " + strings.Repeat("E", 3000), "retryable": false}), 200, "")
	step(t, ctx, "the dead letter's page",
		chromedp.Navigate(g.URL+"/ui/tasks/"+doomed),
		chromedp.WaitVisible(chromedp.CSS("#failures")),
	)
	if f := textOf(t, ctx, "#failures"); !strings.HasPrefix(f, "dead letter after 1 failure; the worker said it cannot succeed") || strings.Contains(f, "of 0 allowed") {
		t.Fatalf("a dead letter's failures read %q", f)
	}
	if a := textOf(t, ctx, "#attempts tbody"); !strings.Contains(a, "dead_letter") || !strings.Contains(a, "no such thing") {
		t.Fatalf("the dead letter's attempts: %q", a)
	}
	// A worker's error of 3,000 letters without a space wraps: the page
	// stays as wide as the window and the redrive button on it.
	wide := `document.documentElement.scrollWidth <= window.innerWidth`
	if ok, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](wide)); !ok {
		t.Fatal("a long error without spaces widens the dead letter's page past the window")
	}
	step(t, ctx, "the dead letters page",
		chromedp.Navigate(g.URL+"/ui/dead-letters"),
		chromedp.WaitVisible(chromedp.CSS(`button.redrive-one[value="`+doomed+`"]`)),
	)
	if ok, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](wide+` && document.querySelector('button.redrive-one').getBoundingClientRect().right <= window.innerWidth`)); !ok {
		t.Fatal("a long error without spaces pushes the dead letters page, and its redrive button, past the window")
	}
	step(t, ctx, "redrive the dead letter",
		chromedp.Click(chromedp.CSS(`button.redrive-one[value="`+doomed+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	)
	if f := textOf(t, ctx, "#flash"); f != "Redriven: "+doomed+"." {
		t.Fatalf("flash %q", f)
	}
	if st := call(t, "GET", g.URL+"/v1/tasks/"+doomed, g.Admin, nil).JSON(t)["status"]; st != "queued" {
		t.Fatalf("after redrive the task is %v, want queued", st)
	}

	// The worker and the plugins that served the result are listed.
	step(t, ctx, "workers", chromedp.Navigate(g.URL+"/ui/workers"), chromedp.WaitVisible(chromedp.CSS("#workers")))
	if w := textOf(t, ctx, "#workers tbody"); !strings.Contains(w, "uidemo.w1") {
		t.Fatalf("workers page: %q", w)
	}
	// A schedule is listed with its next runs.
	if r := call(t, "POST", g.URL+"/v1/schedules", g.Admin, map[string]any{"name": "ui-nightly", "cron": "0 3 * * *",
		"timezone": "Europe/Berlin", "template": map[string]any{"task_type": "uidemo"}}); r.Status != 201 {
		t.Fatalf("create schedule: %d %s", r.Status, r.Body)
	}
	step(t, ctx, "schedules", chromedp.Navigate(g.URL+"/ui/schedules"), chromedp.WaitVisible(chromedp.CSS("#schedules")))
	if s := textOf(t, ctx, "#schedules tbody"); !strings.Contains(s, "ui-nightly") || !strings.Contains(s, "Europe/Berlin") || strings.Count(s, "Z") < 5 {
		t.Fatalf("schedules page: %q", s)
	}
	// A workflow is listed, and its page draws its steps in their states.
	wr := call(t, "POST", g.URL+"/v1/workflows", g.Admin, map[string]any{"name": "ui-diamond", "steps": []map[string]any{
		{"name": "plan", "task_type": "uidemo"},
		{"name": "left", "task_type": "uidemo", "after": []string{"plan"}},
		{"name": "right", "task_type": "uidemo", "after": []string{"plan"}},
		{"name": "join", "task_type": "uidemo", "after": []string{"left", "right"}},
	}})
	if wr.Status != 201 {
		t.Fatalf("submit workflow: %d %s", wr.Status, wr.Body)
	}
	wfID, _ := wr.JSON(t)["workflow_id"].(string)
	step(t, ctx, "workflows", chromedp.Navigate(g.URL+"/ui/workflows"), chromedp.WaitVisible(chromedp.CSS("#workflow-list")))
	if s := textOf(t, ctx, "#workflow-list tbody"); !strings.Contains(s, "ui-diamond") || !strings.Contains(s, "running") {
		t.Fatalf("workflows page: %q", s)
	}
	step(t, ctx, "a workflow's page",
		chromedp.Click(chromedp.CSS(`a[href="/ui/workflows/`+wfID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#workflow-graph")),
	)
	nodes, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`String(document.querySelectorAll("#workflow-graph .wf-node").length) + "/" + String(document.querySelectorAll("#workflow-graph .wf-edge").length)`))
	if nodes != "4/4" {
		t.Fatalf("the workflow graph draws nodes/edges %q, want 4/4", nodes)
	}
	if c := textOf(t, ctx, "#step-counts"); !strings.Contains(c, "1 queued") || !strings.Contains(c, "3 waiting") {
		t.Fatalf("the workflow's step counts read %q", c)
	}
	step(t, ctx, "plugins", chromedp.Navigate(g.URL+"/ui/plugins"), chromedp.WaitVisible(chromedp.CSS("#plugins")))
	if p := textOf(t, ctx, "#plugins tbody"); !strings.Contains(p, "inline") || !strings.Contains(p, "ready") {
		t.Fatalf("plugins page: %q", p)
	}
	// The optional plugins this gate has no config for are grey, not red.
	for _, name := range []string{"http", "email"} {
		row, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const r = [...document.querySelectorAll("#plugins tbody tr")].find(r => r.cells[0].textContent === "`+name+`");
			return r ? (r.querySelector(".bad") ? "red: " : "") + r.textContent : "none" })()`))
		if !strings.Contains(row, "not configured") || strings.HasPrefix(row, "red: ") {
			t.Fatalf("plugin %s: %q", name, row)
		}
	}
	if strings.Contains(g.Log(), "level=WARN msg=\"built-in plugin unavailable\"") {
		t.Fatalf("the start warned of an optional plugin:\n%s", g.Log())
	}

	// The obligations page opens on a summary.
	step(t, ctx, "obligations", chromedp.Navigate(g.URL+"/ui/obligations"), chromedp.WaitVisible(chromedp.CSS("#obligations-summary")))
	if o := textOf(t, ctx, "#obligations-summary tbody"); !strings.Contains(o, "agent.ui") {
		t.Fatalf("obligations summary: %q", o)
	}
}
