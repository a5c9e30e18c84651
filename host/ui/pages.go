package ui

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/host/store"
)

// tenantPattern is the API's tenant name rule.
var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$`)

// pageSize is how many rows a list page shows.
const pageSize = 50

var allStates = []host.TaskState{host.StateWaiting, host.StateQueued, host.StateScheduled, host.StateLeased, host.StateSucceeded, host.StateCanceled, host.StateDeadLetter}

// stateCount is one row of the queue table.
type stateCount struct {
	State host.TaskState
	N     int64
}

// typeRow is one task type's tasks in every state.
type typeRow struct {
	Name     string
	Counts   []stateCount // in allStates order
	Enabled  bool
	Paused   bool // its leasing is paused (enqueue still accepted)
	Known    bool // a registered type (not only tasks of a deleted one)
	Priority int
}

// queuesData is the overview's polled part.
type queuesData struct {
	Tenant  string
	States  []stateCount
	Types   []typeRow
	Oldest  string
	Rates   rates
	Backlog Plot
	Age     Plot
	Samples int
}

func (u *UI) queues(c echo.Context) (*queuesData, error) {
	s := sessionOf(c)
	ctx := c.Request().Context()
	qs, err := u.eng.Stats(ctx, s.tenant)
	if err != nil {
		return nil, err
	}
	tts, err := u.eng.ListTaskTypes(ctx, s.tenant)
	if err != nil {
		return nil, err
	}
	pauses, err := u.eng.TaskTypePauses(ctx, s.tenant)
	if err != nil {
		return nil, err
	}
	paused := map[string]bool{}
	for _, p := range pauses {
		paused[p.TaskType] = true
	}
	d := &queuesData{Tenant: s.tenant, Oldest: ago(qs.OldestReadyAge)}
	for _, st := range allStates {
		d.States = append(d.States, stateCount{st, qs.ByState[st]})
	}
	counts := func(name string) []stateCount {
		out := make([]stateCount, len(allStates))
		for i, st := range allStates {
			out[i] = stateCount{st, qs.ByTypeState[name][st]}
		}
		return out
	}
	seen := map[string]bool{}
	for _, tt := range tts {
		seen[tt.Name] = true
		d.Types = append(d.Types, typeRow{Name: tt.Name, Counts: counts(tt.Name), Enabled: tt.Enabled, Paused: paused[tt.Name], Known: true, Priority: tt.DefaultPriority})
	}
	for name := range qs.ByTypeState { // tasks of a type since deleted
		if !seen[name] {
			d.Types = append(d.Types, typeRow{Name: name, Counts: counts(name)})
		}
	}
	sort.Slice(d.Types, func(i, j int) bool { return d.Types[i].Name < d.Types[j].Name })
	ss := u.sampler.watch(ctx, s.tenant)
	now := u.now()
	d.Samples = len(ss)
	d.Rates = computeRates(ss)
	d.Backlog = plot("Backlog (queued tasks ready to lease)", ss, now, func(s sample) float64 { return float64(s.ready) }, count)
	d.Age = plot("Oldest ready task's age", ss, now, func(s sample) float64 { return s.oldest.Seconds() }, seconds)
	return d, nil
}

// overview is GET /ui/: queues by type and state, rates, and the plots.
func (u *UI) overview(c echo.Context) error {
	d, err := u.queues(c)
	if err != nil {
		return err
	}
	return u.render(c, http.StatusOK, "overview", u.newPage(c, "Queues", "queues", d))
}

// queuesFragment is GET /ui/fragments/queues, polled by the overview.
func (u *UI) queuesFragment(c echo.Context) error {
	d, err := u.queues(c)
	if err != nil {
		return err
	}
	return u.fragment(c, "queues", d)
}

// tasksData is the task list page.
type tasksData struct {
	Tasks     []*host.Task
	State     string
	Type      string
	Recipient string
	States    []host.TaskState
	Next      string // the next page's URL, "" on the last
}

// findTask is POST /ui/find-task {q}: open a task by id. It is a post so
// that whatever is typed (a key pasted by mistake) stays out of URLs.
func (u *UI) findTask(c echo.Context) error {
	q := strings.TrimSpace(c.FormValue("q"))
	if q == "" {
		return c.Redirect(http.StatusSeeOther, "/ui/tasks")
	}
	if strings.HasPrefix(q, "agw_") {
		return host.Errorf(host.CodeBadRequest, "that is an API key, not a task id; nothing was looked up (revoke the key if it was shared)")
	}
	return c.Redirect(http.StatusSeeOther, "/ui/tasks/"+url.PathEscape(q))
}

// errKeyInFilter refuses an API key typed into a filter, whose value would
// otherwise be shown back in the page and its next-page links.
func errKeyInFilter(field string) error {
	return host.Errorf(host.CodeBadRequest, "that %s is an API key, not a principal's name; nothing was looked up (revoke the key if it was shared: it is in this page's URL)", field)
}

// tasks is GET /ui/tasks?state=&type=&recipient=&cursor=: a page of tasks
// in queue order.
func (u *UI) tasks(c echo.Context) error {
	s := sessionOf(c)
	d := tasksData{State: c.QueryParam("state"), Type: strings.TrimSpace(c.QueryParam("type")),
		Recipient: strings.TrimSpace(c.QueryParam("recipient")), States: allStates}
	if auth.ContainsKey(d.Recipient) {
		return errKeyInFilter("recipient")
	}
	if auth.ContainsKey(d.Type) {
		return errKeyInFilter("task type")
	}
	f := store.TaskFilter{Recipient: d.Recipient, Cursor: c.QueryParam("cursor"), Limit: pageSize}
	if d.State != "" {
		f.States = []host.TaskState{host.TaskState(d.State)}
	}
	if d.Type != "" {
		f.Types = []string{d.Type}
	}
	ts, cur, err := u.eng.ListTasks(c.Request().Context(), s.actor(), f)
	if err != nil {
		return err
	}
	d.Tasks = ts
	if cur != "" {
		v := url.Values{"cursor": {cur}}
		for k, x := range map[string]string{"state": d.State, "type": d.Type, "recipient": d.Recipient} {
			if x != "" {
				v.Set(k, x)
			}
		}
		d.Next = "/ui/tasks?" + v.Encode()
	}
	return u.render(c, http.StatusOK, "tasks", u.newPage(c, "Tasks", "tasks", d))
}

// progressData is the task page's polled part.
type progressData struct {
	Task    *host.Task
	Percent float64 // 0–100, for the bar
	Known   bool
	Bars    []progressBar // the history, oldest first
	History []store.Progress
	Poll    bool
	// First and Last are the times of the oldest and newest report shown.
	First, Last time.Time
}

// progressBar is one report of the history chart.
type progressBar struct {
	X, Y, W, H float64
	Title      string
}

const historyW, historyH = 600, 60

func (u *UI) progressOf(c echo.Context) (*progressData, error) {
	s := sessionOf(c)
	t, ps, err := u.eng.Progress(c.Request().Context(), s.actor(), c.Param("id"), 100)
	if err != nil {
		return nil, err
	}
	d := &progressData{Task: t, Poll: !t.State.Terminal()}
	if t.ProgressPercent != nil {
		d.Known, d.Percent = true, clamp(*t.ProgressPercent)
	} else if t.State == host.StateSucceeded {
		d.Known, d.Percent = true, 100
	}
	for i := len(ps) - 1; i >= 0; i-- { // newest first → oldest first
		d.History = append(d.History, ps[i])
	}
	if n := len(d.History); n > 0 {
		d.First, d.Last = d.History[0].At, d.History[n-1].At
		w := float64(historyW) / float64(n)
		for i, p := range d.History {
			v := 0.0
			if p.Percent != nil {
				v = clamp(*p.Percent)
			}
			h := float64(historyH) * v / 100
			title := ts(p.At) + " " + trimFloat(v) + "%"
			if p.Message != "" {
				title += " " + p.Message
			}
			d.Bars = append(d.Bars, progressBar{X: float64(i) * w, Y: historyH - h, W: max(w-1, 1), H: h, Title: title})
		}
	}
	return d, nil
}

func clamp(v float64) float64 { return max(0, min(100, v)) }

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func ts(t interface{ Format(string) string }) string { return t.Format("15:04:05") }

// receiptRow is one receipt of the task page's chain with its checks.
type receiptRow struct {
	*host.Receipt
	HashOK       bool   // the hash matches the content and prev_hash
	LinkChecked  bool   // the chain predecessor is on this page too
	LinkOK       bool   // its hash is this receipt's prev_hash
	TerminatedBy string // for an obligation: the receipt that discharged it
	Obligation   bool
}

// resultView is a succeeded task's payload, fetched through its channel.
type resultView struct {
	Channel   string
	Pointer   string
	Checksum  string
	Valid     *bool
	Text      string
	Size      int64
	Binary    bool
	Truncated bool
	Err       string
}

// maxShownResult is the most of a payload the task page shows.
const maxShownResult = 64 << 10

type taskData struct {
	Task     *host.Task
	Failures string
	Story    *storyData
	Params   string
	Progress *progressData
	Receipts []receiptRow
	More     bool
	Result   *resultView
	CanRedo  bool
}

// task is GET /ui/tasks/{id}.
func (u *UI) task(c echo.Context) error {
	s := sessionOf(c)
	ctx := c.Request().Context()
	pd, err := u.progressOf(c)
	if err != nil {
		return err
	}
	t := pd.Task
	d := taskData{Task: t, Failures: failuresText(t), Progress: pd, Params: indent(t.Params), CanRedo: t.State == host.StateDeadLetter}
	if d.Story, err = u.story(c, t.ID); err != nil {
		return err
	}
	rs, cur, err := u.eng.TaskReceipts(ctx, s.actor(), t.ID, "", 200)
	if err != nil {
		return err
	}
	d.More = cur != ""
	if d.Receipts, err = u.checkReceipts(c, rs); err != nil {
		return err
	}
	if t.State == host.StateSucceeded && t.Result != nil {
		d.Result = u.result(c, t)
	}
	return u.render(c, http.StatusOK, "task", u.newPage(c, "Task "+t.ID, "tasks", d))
}

// checkReceipts recomputes each receipt's hash from its content and
// prev_hash, checks the links between receipts of one chain shown together,
// and looks up who discharged each obligation (indexed lookups only).
func (u *UI) checkReceipts(c echo.Context, rs []*host.Receipt) ([]receiptRow, error) {
	ctx := c.Request().Context()
	s := sessionOf(c)
	out := make([]receiptRow, len(rs))
	err := u.st.View(ctx, func(r store.Reader) error {
		heads, err := r.LedgerHeads(ctx)
		if err != nil {
			return err
		}
		version := map[int64]int{}
		for _, h := range heads.Chains {
			version[h.ID] = h.Version
		}
		byPos := map[[2]int64]*host.Receipt{}
		for _, rc := range rs {
			byPos[[2]int64{rc.ChainID, rc.ChainSeq}] = rc
		}
		for i, rc := range rs {
			row := receiptRow{Receipt: rc, Obligation: rc.Type.CreatesObligation()}
			row.HashOK = host.HashReceipt(version[rc.ChainID], rc, rc.PrevHash) == rc.Hash
			if prev := byPos[[2]int64{rc.ChainID, rc.ChainSeq - 1}]; prev != nil {
				row.LinkChecked, row.LinkOK = true, prev.Hash == rc.PrevHash
			}
			if row.Obligation {
				if row.TerminatedBy, err = r.Terminator(ctx, s.tenant, rc.ID); err != nil {
					return err
				}
			}
			out[i] = row
		}
		return nil
	})
	return out, err
}

// result fetches a succeeded task's payload through its channel, at most
// maxShownResult of it; a failure is shown, not raised.
func (u *UI) result(c echo.Context, t *host.Task) *resultView {
	v := &resultView{Channel: t.Result.Channel, Pointer: t.Result.Pointer, Checksum: t.Result.Checksum}
	rs, err := u.eng.OpenResult(c.Request().Context(), sessionOf(c).actor(), t.ID)
	if err != nil {
		v.Err = err.Error()
		return v
	}
	defer rs.Close()
	v.Channel, v.Pointer, v.Size = rs.Channel, rs.Pointer, rs.Size
	if rs.Empty() {
		return v
	}
	b, err := io.ReadAll(io.LimitReader(rs, maxShownResult+1))
	if err != nil {
		v.Err = "the channel failed while reading: " + err.Error()
		return v
	}
	if len(b) > maxShownResult {
		v.Truncated, b = true, b[:maxShownResult]
	} else {
		v.Valid = rs.ChecksumValid()
	}
	if !utf8.Valid(b) {
		v.Binary = true
		return v
	}
	if json.Valid(b) && !v.Truncated {
		v.Text = indent(b)
	} else {
		v.Text = string(b)
	}
	return v
}

func indent(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var out strings.Builder
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	enc := json.NewEncoder(&out)
	enc.SetIndent("", "  ")
	if enc.Encode(v) != nil {
		return string(b)
	}
	return out.String()
}

// progressFragment is GET /ui/tasks/{id}/progress, polled by the task page.
func (u *UI) progressFragment(c echo.Context) error {
	d, err := u.progressOf(c)
	if err != nil {
		return err
	}
	if !d.Poll {
		c.Response().Header().Set("X-Poll-Stop", "1")
	}
	return u.fragment(c, "progress", d)
}

// cancel is POST /ui/tasks/{id}/cancel.
func (u *UI) cancel(c echo.Context) error {
	s := sessionOf(c)
	id := c.Param("id")
	t, err := u.eng.Cancel(c.Request().Context(), s.actor(), id, strings.TrimSpace(c.FormValue("reason")))
	if err != nil {
		return err
	}
	if t.State == host.StateCanceled {
		u.flash(c, "Task "+id+" is canceled.")
	} else {
		u.flash(c, "Cancel requested: the worker holding task "+id+" is told at its next heartbeat.")
	}
	return c.Redirect(http.StatusSeeOther, "/ui/tasks/"+url.PathEscape(id))
}

type deadData struct {
	Tasks []*host.Task
	Next  string
}

// deadLetters is GET /ui/dead-letters?cursor=.
func (u *UI) deadLetters(c echo.Context) error {
	s := sessionOf(c)
	ts, cur, err := u.eng.DeadLetters(c.Request().Context(), s.tenant, c.QueryParam("cursor"), pageSize)
	if err != nil {
		return err
	}
	d := deadData{Tasks: ts}
	if cur != "" {
		d.Next = "/ui/dead-letters?" + url.Values{"cursor": {cur}}.Encode()
	}
	return u.render(c, http.StatusOK, "dead", u.newPage(c, "Dead letters", "dead", d))
}

// maxRedrive bounds one redrive post.
const maxRedrive = 500

// redrive is POST /ui/dead-letters/redrive: one task (the row's button,
// field id) or the selected ones (field ids).
func (u *UI) redrive(c echo.Context) error {
	s := sessionOf(c)
	form, err := c.FormParams()
	if err != nil {
		return host.Errorf(host.CodeBadRequest, "the form could not be read: %v", err)
	}
	ids := form["ids"]
	if one := form.Get("id"); one != "" {
		ids = []string{one}
	}
	if len(ids) == 0 {
		return host.Errorf(host.CodeBadRequest, "select at least one dead letter to redrive")
	}
	if len(ids) > maxRedrive {
		return host.Errorf(host.CodeTooLarge, "at most %d dead letters per redrive; %d were selected", maxRedrive, len(ids))
	}
	var done int
	var failed []string
	for _, id := range ids {
		if _, err := u.eng.Redrive(c.Request().Context(), s.actor(), id); err != nil {
			failed = append(failed, id+": "+host.ErrorCode(err))
			continue
		}
		done++
	}
	msg := "Redriven: " + strconv.Itoa(done) + " task"
	if done != 1 {
		msg += "s"
	}
	if done == 1 && len(ids) == 1 {
		msg = "Redriven: " + ids[0]
	}
	if len(failed) > 0 {
		msg += ". Not redriven: " + strings.Join(failed, ", ")
	}
	u.flash(c, msg+".")
	return c.Redirect(http.StatusSeeOther, "/ui/dead-letters")
}

// workers is GET /ui/workers.
func (u *UI) workers(c echo.Context) error {
	ws, err := u.eng.Workers(c.Request().Context(), sessionOf(c).tenant)
	if err != nil {
		return err
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].LastSeen.After(ws[j].LastSeen) })
	return u.render(c, http.StatusOK, "workers", u.newPage(c, "Workers", "workers", ws))
}

type schedulesData struct {
	Schedules []*engine.ScheduleView
	Next      string
}

// schedules is GET /ui/schedules: the tenant's schedules with their next
// runs (issue 39).
func (u *UI) schedules(c echo.Context) error {
	vs, next, err := u.eng.ListSchedules(c.Request().Context(), sessionOf(c).actor(), c.QueryParam("cursor"), 100, 5)
	if err != nil {
		return err
	}
	return u.render(c, http.StatusOK, "schedules", u.newPage(c, "Schedules", "schedules", schedulesData{Schedules: vs, Next: next}))
}

type pluginsData struct {
	Known    bool
	Ready    bool
	Operator bool // the gate-wide statistics and errors are shown
	Plugins  []plugin.Info
}

// plugins is GET /ui/plugins. A tenant's admin sees what the gate runs
// (name, kind, version, state), as GET /v1/admin/plugins shows it: not its
// folders or error texts, nor its call statistics, which count every
// tenant's traffic (the operator's to see).
func (u *UI) plugins(c echo.Context) error {
	d := pluginsData{Operator: sessionOf(c).operator()}
	if u.cfg.Plugins != nil {
		d.Known = true
		d.Ready, d.Plugins = u.cfg.Plugins()
		if !d.Operator {
			for i, p := range d.Plugins {
				d.Plugins[i] = plugin.Info{Name: p.Name, Kind: p.Kind, Version: p.Version, Digest: p.Digest, State: p.State, Capabilities: p.Capabilities}
			}
		}
	}
	return u.render(c, http.StatusOK, "plugins", u.newPage(c, "Plugins", "plugins", d))
}

type obligationsData struct {
	Principal  string
	Role       string
	Principals []string // principals with keys in this tenant, as shortcuts
	Rows       []host.Obligation
	Owes       int // on this page, owed by Principal
	Owed       int // on this page, owed to Principal
	Next       string
	// Summary counts each principal's open obligations when none is picked.
	Summary     []obligationCount
	SummaryMore bool // more principals than the summary counts for
}

// obligations is GET /ui/obligations?principal=&role=&cursor=: the open
// obligations one principal owes or is owed, from the obligation index.
func (u *UI) obligations(c echo.Context) error {
	s := sessionOf(c)
	ctx := c.Request().Context()
	d := obligationsData{Principal: strings.TrimSpace(c.QueryParam("principal")), Role: c.QueryParam("role")}
	if auth.ContainsKey(d.Principal) {
		return errKeyInFilter("principal")
	}
	var keys []store.Key
	if err := u.st.View(ctx, func(r store.Reader) error {
		var err error
		keys, err = r.ListKeys(ctx)
		return err
	}); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if k.Tenant == s.tenant && k.RevokedAt == nil && !seen[k.Principal] {
			seen[k.Principal] = true
			d.Principals = append(d.Principals, k.Principal)
		}
	}
	sort.Strings(d.Principals)
	if d.Principal == "" {
		var err error
		if d.Summary, d.SummaryMore, err = u.obligationsSummary(c, d.Principals); err != nil {
			return err
		}
	}
	if d.Principal != "" {
		obs, cur, err := u.eng.OpenObligations(ctx, s.actor(), store.ObligationFilter{Principal: d.Principal, Role: d.Role, Cursor: c.QueryParam("cursor"), Limit: 100})
		if err != nil {
			return err
		}
		d.Rows = obs
		for _, o := range obs {
			if o.Obligor == d.Principal {
				d.Owes++
			}
			if o.Obligee == d.Principal {
				d.Owed++
			}
		}
		if cur != "" {
			v := url.Values{"principal": {d.Principal}, "cursor": {cur}}
			if d.Role != "" {
				v.Set("role", d.Role)
			}
			d.Next = "/ui/obligations?" + v.Encode()
		}
	}
	return u.render(c, http.StatusOK, "obligations", u.newPage(c, "Open obligations", "obligations", d))
}
