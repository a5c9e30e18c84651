package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/sdk/client"
)

// gate schedules: an agent's recurring tasks on a running gate (issue 39).

func init() {
	var (
		cronExpr, zone, params, policy, recipient, summary, cursor string
		newName, taskType                                          string
		every                                                      givenDuration
		priority, missedCap, grace, limit, nextRuns, maxRetries    int
		paused                                                     bool
	)
	show := func(rc *remoteCtx, raw json.RawMessage) error {
		if rc.json {
			return rc.printJSON(raw)
		}
		var s client.Schedule
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		when := s.Cron
		if s.Timezone != "" {
			when += " (" + s.Timezone + ")"
		}
		if s.IntervalSeconds > 0 {
			when = "every " + (time.Duration(s.IntervalSeconds) * time.Second).String()
		}
		policyText := s.MissedPolicy
		if s.MissedPolicy == client.MissedRunAll {
			policyText += " (cap " + strconv.Itoa(s.MissedCap) + ")"
		}
		kv := [][2]string{{"schedule", s.ScheduleID}, {"name", s.Name}, {"owner", s.Owner}, {"when", when},
			{"task type", s.Template.TaskType}, {"missed runs", policyText}, {"grace", strconv.Itoa(s.GraceSeconds) + "s"},
			{"paused", strconv.FormatBool(s.Paused)}, {"fires", strconv.FormatInt(s.Fires, 10)}}
		if s.PausedReason != "" {
			kv = append(kv, [2]string{"paused by the gate", s.PausedReason})
		}
		if s.LastFireAt != nil {
			kv = append(kv, [2]string{"last fire", s.LastFireAt.Format(time.RFC3339)})
		}
		if ls := s.LastSkip; ls != nil {
			what := fmt.Sprintf("%s: %d fire(s) from %s to %s", ls.At.Format(time.RFC3339), ls.Skipped,
				ls.FirstFireAt.Format(time.RFC3339), ls.LastFireAt.Format(time.RFC3339))
			kv = append(kv, [2]string{"last skip", what})
			if ls.Error != "" {
				kv = append(kv, [2]string{"skip error", ls.Error + ": " + clip(ls.Detail, 200)})
			}
		}
		for i, t := range s.NextRuns {
			label := ""
			if i == 0 {
				label = "next runs"
			}
			kv = append(kv, [2]string{label, t.Format(time.RFC3339)})
		}
		rc.fields(kv)
		return nil
	}
	verb := func(v string) func(rc *remoteCtx, args []string) error {
		return func(rc *remoteCtx, args []string) error {
			var raw json.RawMessage
			if err := rc.call("POST", "/v1/schedules/"+url.PathEscape(args[0])+"/"+v, nil, &raw); err != nil {
				return err
			}
			return show(rc, raw)
		}
	}
	registerRemote(remoteGroup{name: "schedules", summary: "create, list, get, update, pause, resume and delete recurring tasks, and list their receipts, on a running gate", subs: []remoteSub{
		{name: "create", args: "NAME TASK_TYPE", summary: "create a schedule: a task of TASK_TYPE at each fire of --cron or --every", minArgs: 2, maxArgs: 2,
			more: `Give exactly one of --cron (five fields: minute hour day-of-month month
day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly; read in --tz,
default UTC) and --every (a whole number of seconds, at least 1s). Each fire
queues exactly one task, as you. --missed says what happens to the fires the
gate missed (it was down, or came later than --grace): skip (default),
run_once (one task for the latest) or run_all (each, up to --missed-cap).`,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&cronExpr, "cron", "", `a cron expression, e.g. "0 9 * * 1-5" or @hourly`)
				fs.StringVar(&zone, "tz", "", "the IANA time zone of --cron, e.g. Europe/Berlin (default UTC)")
				fs.Var(&every, "every", "fire at this interval instead of --cron (whole seconds)")
				fs.StringVar(&params, "params", "", "the tasks' params: inline JSON, @FILE, or - for stdin")
				fs.IntVar(&priority, "priority", 0, "1..10, 10 first (0: the task type's default)")
				fs.StringVar(&recipient, "recipient", "", "who receives each task's outcome (default: you)")
				fs.StringVar(&summary, "summary", "", "a description of each task for people")
				fs.IntVar(&maxRetries, "max-retries", -1, "failures allowed per task (-1: the task type's default)")
				fs.StringVar(&policy, "missed", "", "skip, run_once or run_all (default skip)")
				fs.IntVar(&missedCap, "missed-cap", 0, "with --missed run_all: the most missed fires to run (default 10, at most 100)")
				fs.IntVar(&grace, "grace", -1, "seconds a fire may be late and still run as on time (-1: 60)")
				fs.BoolVar(&paused, "paused", false, "create it paused")
			},
			run: func(rc *remoteCtx, args []string) error {
				ns := client.NewSchedule{Name: args[0], Cron: cronExpr, Timezone: zone, MissedPolicy: policy, MissedCap: missedCap, Paused: paused,
					Template: client.ScheduleTemplate{TaskType: args[1], Priority: priority, Recipient: recipient, Summary: summary}}
				if err := checkScheduleFlags(every, maxRetries, grace, missedCap); err != nil {
					return err
				}
				ns.IntervalSeconds = int64(every.d / time.Second)
				if grace >= 0 {
					ns.GraceSeconds = &grace
				}
				if maxRetries >= 0 {
					ns.Template.MaxRetries = &maxRetries
				}
				if params != "" {
					p, err := readJSONArg(params, os.Stdin)
					if err != nil {
						return exitErr{exitUsage, "--params: " + err.Error()}
					}
					ns.Template.Params = p
				}
				var raw json.RawMessage
				if err := rc.call("POST", "/v1/schedules", ns, &raw); err != nil {
					return err
				}
				return show(rc, raw)
			}},
		{name: "list", summary: "list your schedules (an admin key: the tenant's) with their next run", maxArgs: 0,
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&limit, "limit", 100, "schedules per page, 1..500")
				fs.StringVar(&cursor, "cursor", "", "the cursor a previous page printed")
				fs.IntVar(&nextRuns, "next-runs", 5, "next runs per schedule, 1..100 (--json)")
			},
			run: func(rc *remoteCtx, _ []string) error {
				q := url.Values{}
				q.Set("limit", strconv.Itoa(limit))
				q.Set("next_runs", strconv.Itoa(nextRuns))
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/schedules?"+q.Encode(), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					Schedules []client.Schedule `json:"schedules"`
					Cursor    string            `json:"cursor"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				rows := make([][]string, 0, len(out.Schedules))
				for _, s := range out.Schedules {
					when := s.Cron
					if s.IntervalSeconds > 0 {
						when = "every " + (time.Duration(s.IntervalSeconds) * time.Second).String()
					} else if s.Timezone != "" {
						when += " " + s.Timezone
					}
					next := "paused"
					if !s.Paused && len(s.NextRuns) > 0 {
						next = s.NextRuns[0].Format(time.RFC3339)
					}
					rows = append(rows, []string{s.ScheduleID, clip(s.Name, 30), s.Owner, when, s.Template.TaskType, next, strconv.FormatInt(s.Fires, 10)})
				}
				rc.table([]string{"SCHEDULE", "NAME", "OWNER", "WHEN", "TYPE", "NEXT RUN", "FIRES"}, rows)
				if out.Cursor != "" {
					fmt.Fprintf(rc.out, "more: --cursor %s\n", out.Cursor)
				}
				return nil
			}},
		{name: "get", args: "SCHEDULE_ID", summary: "show a schedule and its next runs", minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&nextRuns, "next-runs", 5, "how many next runs to show (at most 100)")
			},
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/schedules/"+url.PathEscape(args[0])+"?next_runs="+strconv.Itoa(nextRuns), nil, &raw); err != nil {
					return err
				}
				return show(rc, raw)
			}},
		{name: "receipts", args: "SCHEDULE_ID", summary: "list a schedule's receipts: created, changed, paused, resumed, each fire, each skip (with its error)", minArgs: 1, maxArgs: 1,
			more: `Lists the schedule's own receipts in ledger order, a page at a time: a
schedule.fired names the task it queued; a schedule.skipped counts the fires
not run and, when the task could not be queued (its task type disabled or
deleted, its params refused), says why. A deleted schedule's receipts are
still listed, to its owner and the tenant's admins.`,
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&limit, "limit", 100, "receipts per page, 1..500")
				fs.StringVar(&cursor, "cursor", "", "the cursor a previous page printed")
			},
			run: func(rc *remoteCtx, args []string) error {
				q := url.Values{}
				q.Set("limit", strconv.Itoa(limit))
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/schedules/"+url.PathEscape(args[0])+"/receipts?"+q.Encode(), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					Receipts []client.Receipt `json:"receipts"`
					Cursor   string           `json:"cursor"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				rows := make([][]string, 0, len(out.Receipts))
				for _, r := range out.Receipts {
					rows = append(rows, []string{r.CreatedAt.Format(time.RFC3339), r.ReceiptID, r.ReceiptType, r.From, r.TaskID, scheduleReceiptNote(r.Body)})
				}
				rc.table([]string{"AT", "RECEIPT", "TYPE", "BY", "TASK", "WHAT"}, rows)
				if out.Cursor != "" {
					fmt.Fprintf(rc.out, "more: --cursor %s\n", out.Cursor)
				}
				return nil
			}},
		{name: "update", args: "SCHEDULE_ID", summary: "change a schedule's name, timing, task or missed-runs policy", minArgs: 1, maxArgs: 1,
			more: `Only the flags given change. --cron (with --tz, default UTC) or --every
replaces the timing, which then runs from its first fire after now; --tz
alone moves a cron schedule to another zone. --task-type, --params,
--priority, --recipient, --summary and --max-retries change the task each
fire queues (the rest of the template stays as it is).`,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&newName, "name", "", "a new name")
				fs.StringVar(&cronExpr, "cron", "", `a new cron expression, e.g. "0 9 * * 1-5" or @hourly`)
				fs.StringVar(&zone, "tz", "", "the IANA time zone of the cron expression")
				fs.Var(&every, "every", "fire at this interval instead (whole seconds)")
				fs.StringVar(&taskType, "task-type", "", "a new task type for the tasks")
				fs.StringVar(&params, "params", "", "the tasks' new params: inline JSON, @FILE, or - for stdin")
				fs.IntVar(&priority, "priority", 0, "1..10, 10 first")
				fs.StringVar(&recipient, "recipient", "", "who receives each task's outcome")
				fs.StringVar(&summary, "summary", "", "a description of each task for people")
				fs.IntVar(&maxRetries, "max-retries", -1, "failures allowed per task")
				fs.StringVar(&policy, "missed", "", "skip, run_once or run_all")
				fs.IntVar(&missedCap, "missed-cap", 0, "with run_all: the most missed fires to run")
				fs.IntVar(&grace, "grace", -1, "seconds a fire may be late and still run as on time")
			},
			run: func(rc *remoteCtx, args []string) error {
				var ch client.ScheduleChange
				if newName != "" {
					ch.Name = &newName
				}
				if cronExpr != "" {
					ch.Cron = &cronExpr
				}
				if zone != "" {
					ch.Timezone = &zone
				}
				if err := checkScheduleFlags(every, maxRetries, grace, missedCap); err != nil {
					return err
				}
				if every.set {
					n := int64(every.d / time.Second)
					ch.IntervalSeconds = &n
				}
				if policy != "" {
					ch.MissedPolicy = &policy
				}
				if missedCap != 0 {
					ch.MissedCap = &missedCap
				}
				if grace >= 0 {
					ch.GraceSeconds = &grace
				}
				if taskType != "" || params != "" || priority != 0 || recipient != "" || summary != "" || maxRetries >= 0 {
					// The template is replaced whole: start from the one the
					// schedule has.
					cur, err := rc.c.Schedule(rc.ctx, args[0], 1)
					if err != nil {
						return err
					}
					t := cur.Template
					if taskType != "" {
						t.TaskType = taskType
					}
					if params != "" {
						p, err := readJSONArg(params, os.Stdin)
						if err != nil {
							return exitErr{exitUsage, "--params: " + err.Error()}
						}
						t.Params = p
					}
					if priority != 0 {
						t.Priority = priority
					}
					if recipient != "" {
						t.Recipient = recipient
					}
					if summary != "" {
						t.Summary = summary
					}
					if maxRetries >= 0 {
						t.MaxRetries = &maxRetries
					}
					ch.Template = &t
				}
				if ch == (client.ScheduleChange{}) {
					return exitErr{exitUsage, "nothing to change: give at least one flag (gate schedules update --help)"}
				}
				var raw json.RawMessage
				if err := rc.call("PATCH", "/v1/schedules/"+url.PathEscape(args[0]), ch, &raw); err != nil {
					return err
				}
				return show(rc, raw)
			}},
		{name: "pause", args: "SCHEDULE_ID", summary: "stop a schedule's fires until it is resumed", minArgs: 1, maxArgs: 1, run: verb("pause")},
		{name: "resume", args: "SCHEDULE_ID", summary: "resume a schedule from its first fire after now", minArgs: 1, maxArgs: 1, run: verb("resume")},
		{name: "delete", args: "SCHEDULE_ID", summary: "delete a schedule (the tasks it queued stay)", minArgs: 1, maxArgs: 1,
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("DELETE", "/v1/schedules/"+url.PathEscape(args[0]), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				fmt.Fprintf(rc.out, "schedule %s deleted\n", args[0])
				return nil
			}},
	}})
}

// scheduleReceiptNote is the gist of a schedule receipt's body for a table
// row: the fires it skipped and why, the fields a change changed, the
// reason the gate paused it.
func scheduleReceiptNote(body json.RawMessage) string {
	var b struct {
		Skipped any      `json:"skipped"`
		Error   string   `json:"error"`
		Detail  string   `json:"detail"`
		Reason  string   `json:"reason"`
		Changed []string `json:"changed"`
		FireAt  string   `json:"fire_at"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	var parts []string
	if b.FireAt != "" {
		parts = append(parts, "fire at "+b.FireAt)
	}
	if b.Skipped != nil {
		parts = append(parts, fmt.Sprintf("skipped %v", b.Skipped))
	}
	if b.Error != "" {
		parts = append(parts, b.Error+": "+b.Detail)
	}
	if b.Reason != "" {
		parts = append(parts, "reason "+b.Reason)
	}
	if len(b.Changed) > 0 {
		parts = append(parts, "changed "+strings.Join(b.Changed, ", "))
	}
	return clip(strings.Join(parts, "; "), 120)
}

// checkScheduleFlags refuses, as bad usage, the values of gate schedules
// create's and update's flags that would not reach the gate as given: an
// --every given that is not a whole number of seconds in the gate's range
// (interval_seconds 1..31622400; 0s or a negative one was sent as none), a
// --max-retries or --grace below -1 (their "not given"), a negative
// --missed-cap (0: not given).
func checkScheduleFlags(every givenDuration, maxRetries, grace, missedCap int) error {
	switch d := every.d; {
	case every.set && (d%time.Second != 0 || d < host.MinScheduleInterval*time.Second || d > host.MaxScheduleInterval*time.Second):
		return exitErr{exitUsage, fmt.Sprintf("--every must be a whole number of seconds from %ds to %ds (interval_seconds %d..%d), got %s",
			host.MinScheduleInterval, host.MaxScheduleInterval, host.MinScheduleInterval, host.MaxScheduleInterval, d)}
	case maxRetries < -1:
		return exitErr{exitUsage, fmt.Sprintf("--max-retries must be 0 or more (-1: not given), got %d", maxRetries)}
	case grace < -1:
		return exitErr{exitUsage, fmt.Sprintf("--grace must be 0 or more seconds (-1: not given), got %d", grace)}
	case missedCap < 0:
		return exitErr{exitUsage, fmt.Sprintf("--missed-cap must be 1..%d (0: not given), got %d", host.MaxMissedCap, missedCap)}
	}
	return nil
}

// givenDuration is a duration flag that knows whether it was given, so an
// explicit 0s is refused rather than read as "not given".
type givenDuration struct {
	d   time.Duration
	set bool
}

func (g *givenDuration) String() string {
	if g == nil || !g.set {
		return ""
	}
	return g.d.String()
}

func (g *givenDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("parse error")
	}
	g.d, g.set = d, true
	return nil
}
