package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// The operator commands against a running gate: gate dlq, types, workers,
// stats (admin keys).

func init() {
	var (
		limit  int
		cursor string
		all    bool
	)
	registerRemote(remoteGroup{name: "dlq", summary: "list and redrive dead-lettered tasks on a running gate (admin)", subs: []remoteSub{
		{name: "list", summary: "list dead letters, oldest first", maxArgs: 0, tenant: true,
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&limit, "limit", 50, "tasks per page, 1..500")
				fs.StringVar(&cursor, "cursor", "", "the cursor a previous page printed")
			},
			run: func(rc *remoteCtx, _ []string) error {
				q := url.Values{}
				q.Set("limit", strconv.Itoa(limit)) // out of range: the gate's refusal
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				var raw json.RawMessage
				if err := rc.call("GET", rc.withTenant("/v1/admin/dead-letters?"+q.Encode()), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					Tasks  []client.Task `json:"tasks"`
					Cursor string        `json:"cursor"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				rows := make([][]string, 0, len(out.Tasks))
				for _, t := range out.Tasks {
					why := t.DeadReason
					if t.ErrorMessage != "" {
						why = strings.TrimSpace(why + ": " + t.ErrorMessage)
					}
					rows = append(rows, []string{t.TaskID, t.TaskType, strconv.Itoa(t.Attempts), ago(t.UpdatedAt), clip(why, 60)})
				}
				rc.table([]string{"TASK", "TYPE", "FAILS", "DEAD FOR", "WHY"}, rows)
				if len(out.Tasks) == 0 {
					fmt.Fprintln(rc.out, "(no dead letters)")
				}
				if out.Cursor != "" {
					fmt.Fprintf(rc.out, "more: --cursor %s\n", out.Cursor)
				}
				return nil
			}},
		{name: "redrive", args: "TASK_ID…", summary: "queue dead letters again (one, several, or --all)", maxArgs: -1, tenant: true,
			more: "Each task is redriven on its own; the command goes on after a refusal and exits 1 if any failed.",
			flags: func(fs *flag.FlagSet) {
				fs.BoolVar(&all, "all", false, "redrive every dead letter of the tenant")
			},
			run: func(rc *remoteCtx, ids []string) error {
				if all == (len(ids) > 0) {
					return exitErr{exitUsage, "give TASK_IDs or --all"}
				}
				if all {
					var err error
					if ids, err = allDeadLetters(rc); err != nil {
						return err
					}
				}
				var done []client.Task
				failed := 0
				for _, id := range ids {
					var t client.Task
					if err := rc.call("POST", rc.withTenant("/v1/admin/dead-letters/"+url.PathEscape(id)+"/redrive"), nil, &t); err != nil {
						fmt.Fprintf(rc.errw, "%s: %s\n", id, describeErr(err))
						failed++
						continue
					}
					done = append(done, t)
					if !rc.json {
						fmt.Fprintf(rc.out, "%s redriven: %s\n", t.TaskID, t.Status)
					}
				}
				if rc.json {
					if done == nil {
						done = []client.Task{}
					}
					if err := rc.printJSON(map[string]any{"redriven": done, "failed": failed}); err != nil {
						return err
					}
				} else if len(ids) == 0 {
					fmt.Fprintln(rc.out, "(no dead letters)")
				}
				if failed > 0 {
					return exitErr{exitError, fmt.Sprintf("%d of %d not redriven", failed, len(ids))}
				}
				return nil
			}},
	}})

	var body, reason string
	registerRemote(remoteGroup{name: "types", summary: "list, get, put and patch task types on a running gate (admin)", subs: []remoteSub{
		{name: "list", summary: "list task types", maxArgs: 0, tenant: true,
			run: func(rc *remoteCtx, _ []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", rc.withTenant("/v1/admin/task-types"), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					Types []taskTypeView `json:"task_types"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				rows := make([][]string, 0, len(out.Types))
				for _, t := range out.Types {
					rows = append(rows, []string{t.Name, yesNo(t.Enabled), yesNo(t.Paused != nil), strconv.Itoa(t.DefaultPriority), strconv.Itoa(t.DefaultMaxRetries),
						strconv.Itoa(t.LeaseSeconds) + "s", t.RetryPolicy.Plugin, clip(t.Description, 40)})
				}
				rc.table([]string{"TYPE", "ENABLED", "PAUSED", "PRI", "RETRIES", "LEASE", "POLICY", "DESCRIPTION"}, rows)
				if len(out.Types) == 0 {
					fmt.Fprintln(rc.out, "(no task types)")
				}
				return nil
			}},
		{name: "get", args: "NAME", summary: "print a task type as JSON (what put takes back)", minArgs: 1, maxArgs: 1, tenant: true,
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", rc.withTenant("/v1/admin/task-types/"+url.PathEscape(args[0])), nil, &raw); err != nil {
					return err
				}
				return rc.printJSON(raw)
			}},
		{name: "put", args: "NAME", summary: "create or replace a task type (fields left out take the defaults)", minArgs: 1, maxArgs: 1, tenant: true,
			more: `The body is the task type as JSON (docs/http.md, Operator API), from --body:
inline JSON, @FILE, or - for stdin. Example:
  gate types put code.generate --body '{"params_schema":{"type":"object"},"lease_seconds":900}'`,
			flags: func(fs *flag.FlagSet) { fs.StringVar(&body, "body", "{}", "the task type: JSON, @FILE or - (stdin)") },
			run: func(rc *remoteCtx, args []string) error {
				return sendType(rc, "PUT", args[0], body)
			}},
		{name: "patch", args: "NAME", summary: "change some fields of a task type (a JSON merge patch)", minArgs: 1, maxArgs: 1, tenant: true,
			more: `Fields left out keep their values; null resets one to its default. Example:
  gate types patch code.generate --body '{"enabled":false}'`,
			flags: func(fs *flag.FlagSet) { fs.StringVar(&body, "body", "", "the patch: JSON, @FILE or - (stdin)") },
			run: func(rc *remoteCtx, args []string) error {
				if body == "" {
					return exitErr{exitUsage, "--body is required"}
				}
				return sendType(rc, "PATCH", args[0], body)
			}},
		{name: "pause", args: "NAME", summary: "pause a task type's leasing: tasks are still accepted, no worker is offered them", minArgs: 1, maxArgs: 1, tenant: true,
			more: `Every gate host sharing the store stops offering the type's tasks (within the
task type cache's 2 s); the pause survives restarts. gate types resume NAME ends it.`,
			flags: func(fs *flag.FlagSet) { fs.StringVar(&reason, "reason", "", "why, kept with the pause") },
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("POST", rc.withTenant("/v1/admin/task-types/"+url.PathEscape(args[0])+"/pause"), map[string]string{"reason": reason}, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					Paused typePause `json:"paused"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				fmt.Fprintf(rc.out, "task type %s paused by %s at %s\n", args[0], out.Paused.By, out.Paused.At.Format(time.RFC3339))
				return nil
			}},
		{name: "resume", args: "NAME", summary: "resume a paused task type's leasing", minArgs: 1, maxArgs: 1, tenant: true,
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("POST", rc.withTenant("/v1/admin/task-types/"+url.PathEscape(args[0])+"/resume"), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					WasPaused bool `json:"was_paused"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				if out.WasPaused {
					fmt.Fprintf(rc.out, "task type %s resumed\n", args[0])
				} else {
					fmt.Fprintf(rc.out, "task type %s was not paused\n", args[0])
				}
				return nil
			}},
	}})

	registerRemote(remoteGroup{name: "workers", summary: "list the workers a running gate has seen and the leases they hold (admin)", subs: []remoteSub{
		{maxArgs: 0, tenant: true, summary: "list the workers a running gate has seen and the leases they hold (admin)",
			run: func(rc *remoteCtx, _ []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", rc.withTenant("/v1/admin/workers"), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					Workers []struct {
						ID       string    `json:"worker_id"`
						Tenant   string    `json:"tenant"`
						First    time.Time `json:"first_seen"`
						Last     time.Time `json:"last_seen"`
						InFlight []string  `json:"in_flight_leases"`
					} `json:"workers"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				rows := make([][]string, 0, len(out.Workers))
				for _, w := range out.Workers {
					rows = append(rows, []string{w.ID, w.Tenant, ago(w.Last) + " ago", strconv.Itoa(len(w.InFlight)), ago(w.First) + " ago"})
				}
				rc.table([]string{"WORKER", "TENANT", "LAST SEEN", "LEASES", "FIRST SEEN"}, rows)
				if len(out.Workers) == 0 {
					fmt.Fprintln(rc.out, "(no workers seen)")
				}
				return nil
			}},
	}})

	registerRemote(remoteGroup{name: "stats", summary: "task counts by state and type, the oldest ready task's age and workflow counts by state (admin)", subs: []remoteSub{
		{maxArgs: 0, tenant: true, summary: "task counts by state and type, the oldest ready task's age and workflow counts by state (admin)",
			run: func(rc *remoteCtx, _ []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", rc.withTenant("/v1/admin/stats"), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var s struct {
					Tenant  string           `json:"tenant"`
					ByState map[string]int64 `json:"by_state"`
					ByType  map[string]int64 `json:"by_type"`
					Oldest  float64          `json:"oldest_ready_age_seconds"`
					// Paused counts the queued tasks each paused type holds.
					Paused map[string]int64 `json:"paused_by_type"`
					// Workflows counts workflows by status.
					Workflows map[string]int64 `json:"workflows_by_state"`
				}
				if err := json.Unmarshal(raw, &s); err != nil {
					return err
				}
				var rows [][]string
				// Every state, in a task's order; one the gate counts that
				// this binary does not know of is shown after them.
				states := []string{client.StateWaiting, client.StateQueued, client.StateScheduled, client.StateLeased, client.StateSucceeded, client.StateCanceled, client.StateDeadLetter}
				for _, st := range sortedKeys(s.ByState) {
					if !slices.Contains(states, st) {
						states = append(states, st)
					}
				}
				for _, st := range states {
					rows = append(rows, []string{st, strconv.FormatInt(s.ByState[st], 10)})
				}
				fmt.Fprintf(rc.out, "tenant %s, oldest ready task waiting %s\n\n", s.Tenant, short(time.Duration(s.Oldest*float64(time.Second))))
				rc.table([]string{"STATE", "TASKS"}, rows)
				if len(s.ByType) > 0 {
					fmt.Fprintln(rc.out)
					rows = rows[:0]
					for _, t := range sortedKeys(s.ByType) {
						rows = append(rows, []string{t, strconv.FormatInt(s.ByType[t], 10)})
					}
					rc.table([]string{"TYPE", "QUEUED+LEASED"}, rows)
				}
				if len(s.Paused) > 0 {
					// Queued, but offered to no worker until resumed, and
					// not in the oldest ready task's age.
					fmt.Fprintln(rc.out)
					rows = rows[:0]
					for _, t := range sortedKeys(s.Paused) {
						rows = append(rows, []string{t, strconv.FormatInt(s.Paused[t], 10)})
					}
					rc.table([]string{"PAUSED TYPE", "QUEUED (HELD)"}, rows)
				}
				if len(s.Workflows) > 0 {
					fmt.Fprintln(rc.out)
					rows = rows[:0]
					for _, st := range []string{"running", "succeeded", "failed", "canceled", "archived"} {
						rows = append(rows, []string{st, strconv.FormatInt(s.Workflows[st], 10)})
					}
					rc.table([]string{"STATE", "WORKFLOWS"}, rows)
				}
				return nil
			}},
	}})
}

// taskTypeView is the part of a task type the tables show.
type taskTypeView struct {
	Name              string `json:"task_type"`
	Description       string `json:"description"`
	Enabled           bool   `json:"enabled"`
	DefaultPriority   int    `json:"default_priority"`
	DefaultMaxRetries int    `json:"default_max_retries"`
	LeaseSeconds      int    `json:"lease_seconds"`
	RetryPolicy       struct {
		Plugin string `json:"plugin"`
	} `json:"retry_policy"`
	Paused *typePause `json:"paused"`
}

// typePause is a task type's pause as the gate shows it.
type typePause struct {
	By     string    `json:"paused_by"`
	At     time.Time `json:"paused_at"`
	Reason string    `json:"reason"`
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// sendType PUTs or PATCHes a task type and prints the gate's answer.
func sendType(rc *remoteCtx, method, name, body string) error {
	b, err := readJSONArg(body, os.Stdin)
	if err != nil {
		return exitErr{exitUsage, "--body: " + err.Error()}
	}
	if method == "PUT" {
		// The body's task_type must match the path: fill it in when absent.
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) == nil && m != nil {
			if _, ok := m["task_type"]; !ok {
				m["task_type"], _ = json.Marshal(name)
				b, _ = json.Marshal(m)
			}
		}
	}
	var raw json.RawMessage
	if err := rc.call(method, rc.withTenant("/v1/admin/task-types/"+url.PathEscape(name)), b, &raw); err != nil {
		return err
	}
	if rc.json {
		return rc.printJSON(raw)
	}
	var t taskTypeView
	if err := json.Unmarshal(raw, &t); err != nil {
		return err
	}
	fmt.Fprintf(rc.out, "task type %s saved (enabled: %s, lease %ds, retries %d, policy %s)\n", t.Name, yesNo(t.Enabled), t.LeaseSeconds, t.DefaultMaxRetries, t.RetryPolicy.Plugin)
	return nil
}

// allDeadLetters lists every dead letter's id, page by page.
func allDeadLetters(rc *remoteCtx) ([]string, error) {
	var ids []string
	cur := ""
	for {
		path := "/v1/admin/dead-letters?limit=100"
		if cur != "" {
			path += "&cursor=" + url.QueryEscape(cur)
		}
		var out struct {
			Tasks []struct {
				ID string `json:"task_id"`
			} `json:"tasks"`
			Cursor string `json:"cursor"`
		}
		if err := rc.call("GET", rc.withTenant(path), nil, &out); err != nil {
			return nil, err
		}
		for _, t := range out.Tasks {
			ids = append(ids, t.ID)
		}
		if out.Cursor == "" || len(out.Tasks) == 0 {
			return ids, nil
		}
		cur = out.Cursor
	}
}
