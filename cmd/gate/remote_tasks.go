package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/sdk/client"
)

// Exit statuses of gate tasks wait beyond the common ones.
const (
	exitTaskNotSucceeded = 3 // canceled or dead letter
	exitWaitTimedOut     = 4
)

func init() {
	var (
		status, types, recipient, cursor string
		limit                            int
		reason                           string
		waitFor, interval                time.Duration
		progress                         string
	)
	var (
		params, idemKey, summary, createRecipient, outFile string
		afterIDs, afterRule                                string
		priority, maxRetries                               int
		delay                                              time.Duration
		wait                                               bool
	)
	registerRemote(remoteGroup{name: "tasks", summary: "create, list, show, cancel and wait for tasks and read their results on a running gate", subs: []remoteSub{
		{name: "create", args: "TASK_TYPE", summary: "queue a task; --wait follows it to its end", minArgs: 1, maxArgs: 1,
			more: `--params takes the task's params as inline JSON, @FILE or - (stdin); without
it the task has no params. Prints the task's id (--json: the gate's answer).
With --wait it then waits as "gate tasks wait" does, with the same progress,
output and exit status (--json then prints only the finished task).`,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&params, "params", "", "the params: inline JSON, @FILE, or - for stdin")
				fs.IntVar(&priority, "priority", 0, "1..10, 10 first (0: the task type's default)")
				fs.StringVar(&idemKey, "idempotency-key", "", "a repeat with the same key answers the first task")
				fs.StringVar(&summary, "summary", "", "a description for people")
				fs.StringVar(&createRecipient, "recipient", "", "who receives the outcome (default: you)")
				fs.DurationVar(&delay, "delay", 0, "start no sooner than this from now (whole seconds)")
				fs.IntVar(&maxRetries, "max-retries", -1, "failures allowed (-1: the task type's default)")
				fs.StringVar(&afterIDs, "after", "", "comma-separated task ids this task waits on (status waiting until --after-rule is met)")
				fs.StringVar(&afterRule, "after-rule", "", "with --after: all_succeeded (default), any_succeeded or all_finished")
				fs.BoolVar(&wait, "wait", false, "wait until the task ends, drawing its progress")
				fs.DurationVar(&waitFor, "for", 0, "with --wait: give up after this long (0: wait until it ends)")
				fs.DurationVar(&interval, "interval", 500*time.Millisecond, "with --wait: how often to ask the gate")
				fs.StringVar(&progress, "progress", "auto", "with --wait: auto (a bar on a terminal), bar, plain or none")
			},
			run: func(rc *remoteCtx, args []string) error {
				if err := checkCreateFlags(delay, maxRetries, waitFor, interval); err != nil {
					return err
				}
				body := map[string]any{"task_type": args[0]}
				if params != "" {
					p, err := readJSONArg(params, os.Stdin)
					if err != nil {
						return exitErr{exitUsage, "--params: " + err.Error()}
					}
					body["params"] = p
				}
				if priority != 0 {
					body["priority"] = priority
				}
				if maxRetries >= 0 {
					body["max_retries"] = maxRetries
				}
				if delay > 0 {
					body["delay_seconds"] = int((delay + time.Second - 1) / time.Second)
				}
				if ids := splitIDs(afterIDs); len(ids) > 0 {
					body["after"] = ids
				}
				if afterRule != "" {
					body["after_rule"] = afterRule
				}
				for k, v := range map[string]string{"idempotency_key": idemKey, "task_summary": summary, "recipient_ai": createRecipient} {
					if v != "" {
						body[k] = v
					}
				}
				var raw json.RawMessage
				if err := rc.call("POST", "/v1/tasks", body, &raw); err != nil {
					return err
				}
				var ack client.Enqueued
				if err := json.Unmarshal(raw, &ack); err != nil {
					return err
				}
				switch {
				case rc.json && !wait:
					return rc.printJSON(raw)
				case rc.json:
				case ack.IsDuplicate:
					fmt.Fprintf(rc.out, "%s (the task of idempotency key %q, queued before; now %s)\n", ack.TaskID, idemKey, ack.Status)
				default:
					fmt.Fprintf(rc.out, "%s %s\n", ack.TaskID, ack.Status)
				}
				if !wait {
					return nil
				}
				return waitTask(rc, ack.TaskID, waitFor, interval, progress)
			}},
		{name: "result", args: "TASK_ID", summary: "print a succeeded task's result, checksum verified (--out FILE for large ones)", minArgs: 1, maxArgs: 1,
			more: `Fetches the result through its channel and writes the payload, decoded, to
stdout or to --out FILE (written beside it and renamed into place only once the
whole payload arrived and its checksum matched). A line on stderr says how many
bytes came, through which channel, and how the checksum was checked. A result
without a payload (artifacts only) prints where it is. --json prints the
gate's answer as it came (not with --out). Exit status: 0 done, 1 the gate refused, could not be
reached, or the payload does not match its checksum, 2 bad usage.`,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&outFile, "out", "", "write the payload to this file instead of stdout")
			},
			run: func(rc *remoteCtx, args []string) error {
				return printResult(rc, args[0], outFile)
			}},
		{name: "list", summary: "list tasks, oldest first (the order they were queued in)", maxArgs: 0,
			more: "Agent keys see the tasks they queued or that are addressed to them; admin keys their tenant's.",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&status, "status", "", "states, comma-separated: queued, leased, succeeded, canceled, dead_letter")
				fs.StringVar(&types, "type", "", "task types, comma-separated")
				fs.StringVar(&recipient, "recipient", "", "only tasks addressed to this principal")
				fs.IntVar(&limit, "limit", 50, "tasks per page, 1..500")
				fs.StringVar(&cursor, "cursor", "", "the cursor a previous page printed")
			},
			run: func(rc *remoteCtx, _ []string) error {
				q := url.Values{}
				for k, v := range map[string]string{"status": status, "task_type": types, "recipient_ai": recipient, "cursor": cursor} {
					if v != "" {
						q.Set(k, v)
					}
				}
				q.Set("limit", strconv.Itoa(limit)) // out of range: the gate's refusal
				var out struct {
					Tasks  []client.Task `json:"tasks"`
					Cursor string        `json:"cursor"`
				}
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/tasks?"+q.Encode(), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				printTaskTable(rc, out.Tasks, out.Cursor)
				return nil
			}},
		{name: "show", args: "TASK_ID", summary: "show a task: status, progress, result, its attempts and its timeline", minArgs: 1, maxArgs: 1,
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/tasks/"+url.PathEscape(args[0]), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var t client.Task
				if err := json.Unmarshal(raw, &t); err != nil {
					return err
				}
				printTask(rc, &t)
				return printTaskStory(rc, t.TaskID)
			}},
		{name: "cancel", args: "TASK_ID", summary: "cancel a task (queued: at once; leased: its worker is told)", minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet) { fs.StringVar(&reason, "reason", "", "why (kept with the task)") },
			run: func(rc *remoteCtx, args []string) error {
				var body any
				if reason != "" {
					body = map[string]string{"reason": reason}
				}
				var raw json.RawMessage
				if err := rc.call("POST", "/v1/tasks/"+url.PathEscape(args[0])+"/cancel", body, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var t client.Task
				if err := json.Unmarshal(raw, &t); err != nil {
					return err
				}
				if t.Status == client.StateCanceled {
					fmt.Fprintf(rc.out, "%s canceled\n", t.TaskID)
				} else {
					fmt.Fprintf(rc.out, "%s is %s: cancel requested, its worker learns it at its next heartbeat\n", t.TaskID, t.Status)
				}
				return nil
			}},
		{name: "wait", args: "TASK_ID", summary: "wait until a task finishes, drawing its progress", minArgs: 1, maxArgs: 1,
			more: `On a terminal, a progress bar redraws in place; otherwise (a pipe, a file,
--progress plain) a line is printed each time the status or progress changes.
--json prints the finished task as JSON. Exit status: 0 succeeded, 3 canceled
or dead letter, 4 --for elapsed first, 1 the gate refused or could not be
reached, 2 bad usage.`,
			flags: func(fs *flag.FlagSet) {
				fs.DurationVar(&waitFor, "for", 0, "give up after this long (0: wait until it ends)")
				fs.DurationVar(&interval, "interval", 500*time.Millisecond, "how often to ask the gate")
				fs.StringVar(&progress, "progress", "auto", "auto (a bar on a terminal), bar, plain or none")
			},
			run: func(rc *remoteCtx, args []string) error {
				return waitTask(rc, args[0], waitFor, interval, progress)
			}},
	}})
}

func printTaskTable(rc *remoteCtx, ts []client.Task, cursor string) {
	rows := make([][]string, 0, len(ts))
	for _, t := range ts {
		rows = append(rows, []string{t.TaskID, t.TaskType, t.Status, strconv.Itoa(t.Priority), strconv.Itoa(t.Attempts), progressPercent(&t), ago(t.CreatedAt), clip(t.Summary, 40)})
	}
	rc.table([]string{"TASK", "TYPE", "STATUS", "PRI", "FAILS", "PROGRESS", "AGE", "SUMMARY"}, rows)
	if len(ts) == 0 {
		fmt.Fprintln(rc.out, "(no tasks)")
	}
	if cursor != "" {
		fmt.Fprintf(rc.out, "more: --cursor %s\n", cursor)
	}
}

func fmtTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	if time.Until(*t) > 0 {
		return t.UTC().Format(time.RFC3339) + " (" + ago(*t) + ")" // short says "in …"
	}
	return t.UTC().Format(time.RFC3339) + " (" + ago(*t) + " ago)"
}

func printTask(rc *remoteCtx, t *client.Task) {
	prog := progressText(t)
	cancel := ""
	if t.CancelRequested {
		cancel = "yes"
	}
	kv := [][2]string{
		{"task", t.TaskID}, {"type", t.TaskType}, {"status", t.Status}, {"summary", t.Summary},
		{"priority", strconv.Itoa(t.Priority)}, {"created by", t.CreatedBy}, {"recipient", t.Recipient}, {"tenant", t.Tenant},
		{"created", fmtTime(&t.CreatedAt)}, {"available", fmtTime(&t.AvailableAt)}, {"started", fmtTime(t.StartedAt)},
		{"completed", fmtTime(t.CompletedAt)}, {"worker", t.WorkerID}, {"lease expires", fmtTime(t.LeaseExpiresAt)},
		{"progress", prog}, {"cancel requested", cancel}, {"cancel asked by", t.CancelRequestedBy}, {"cancel reason", t.CancelReason},
		{"failures", fmt.Sprintf("%d (retries allowed: %d)", t.Attempts, t.MaxRetries)}, {"leases", strconv.Itoa(t.LeaseCount)},
		{"error", t.ErrorMessage}, {"dead reason", t.DeadReason}, {"idempotency key", t.IdempotencyKey},
		{"assign receipt", t.AssignReceiptID},
	}
	if t.Result != nil {
		kv = append(kv, [2]string{"result channel", t.Result.Channel}, [2]string{"result pointer", t.Result.Pointer},
			[2]string{"result summary", t.Result.Summary}, [2]string{"archived", fmtTime(t.Result.ArchivedAt)})
	}
	if len(t.Params) > 0 && string(t.Params) != "null" {
		kv = append(kv, [2]string{"params", clip(string(t.Params), 200)})
	}
	rc.fields(kv)
}

// waitTask polls a task until it ends, drawing its progress.
// checkCreateFlags refuses, as bad usage, the values of gate tasks
// create's flags that would not reach the gate as given: a --delay that is
// not a whole number of seconds in the gate's range (a negative one would
// be sent as no delay, a fraction rounded), a --max-retries below -1 (the
// type's default), and a negative --for or a --interval not above 0.
func checkCreateFlags(delay time.Duration, maxRetries int, waitFor, interval time.Duration) error {
	switch {
	case delay < 0 || delay%time.Second != 0 || delay > host.MaxDelaySeconds*time.Second:
		return exitErr{exitUsage, fmt.Sprintf("--delay must be a whole number of seconds from 0s to %ds (delay_seconds 0..%d), got %s", host.MaxDelaySeconds, host.MaxDelaySeconds, delay)}
	case maxRetries < -1:
		return exitErr{exitUsage, fmt.Sprintf("--max-retries must be 0 or more (-1: the task type's default), got %d", maxRetries)}
	case waitFor < 0:
		return exitErr{exitUsage, fmt.Sprintf("--for must be 0 or more (0: wait until the task ends), got %s", waitFor)}
	case interval <= 0:
		return exitErr{exitUsage, fmt.Sprintf("--interval must be more than 0, got %s", interval)}
	}
	return nil
}

func waitTask(rc *remoteCtx, id string, waitFor, interval time.Duration, mode string) error {
	switch mode {
	case "auto":
		mode = "plain"
		if isTerminal(rc.raw) {
			mode = "bar"
		}
	case "bar", "plain", "none":
	default:
		return exitErr{exitUsage, fmt.Sprintf("--progress %q: use auto, bar, plain or none", mode)}
	}
	if rc.json && mode != "none" {
		mode = "none" // stdout is for the JSON
	}
	ctx := rc.ctx
	if waitFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, waitFor)
		defer cancel()
	}
	start := time.Now()
	last := ""
	var seen *client.Task // the last answer, for the timeout message
	draw := func(t *client.Task) {
		seen = t
		switch mode {
		case "bar":
			// The redraw's own controls go out as they are; the bar's text
			// (a worker's progress message among it) is made inert.
			fmt.Fprint(rc.raw, "\r"+inert(progressBar(t, time.Since(start), 30))+"\x1b[K")
		case "plain":
			line := strings.TrimSpace(t.Status + " " + progressText(t))
			if t.CancelRequested && !t.Terminal() {
				line += " (cancel requested)"
			}
			if line != last {
				fmt.Fprintf(rc.out, "%s %s %s\n", time.Now().UTC().Format(time.RFC3339), t.TaskID, oneLine(line))
				last = line
			}
		}
	}
	t, err := rc.c.Wait(ctx, id, &client.WaitOptions{Interval: interval, OnPoll: draw, PollTimeout: rc.timeout})
	if mode == "bar" {
		fmt.Fprintln(rc.out)
	}
	if err != nil {
		if ctx.Err() != nil && rc.ctx.Err() == nil {
			return exitErr{exitWaitTimedOut, fmt.Sprintf("%s still %s after %s", id, statusOf(seen), waitFor)}
		}
		return err
	}
	if rc.json {
		if err := rc.printJSON(t); err != nil {
			return err
		}
	} else {
		end := t.Status
		switch {
		case t.ErrorMessage != "" && t.Status != client.StateSucceeded:
			end += ": " + t.ErrorMessage
		case t.Result != nil && t.Result.Summary != "":
			end += ": " + t.Result.Summary
		}
		fmt.Fprintf(rc.out, "%s %s\n", t.TaskID, oneLine(end))
	}
	if t.Status != client.StateSucceeded {
		return exitErr{code: exitTaskNotSucceeded}
	}
	return nil
}

func statusOf(t *client.Task) string {
	if t == nil {
		return "unknown"
	}
	return t.Status
}

// progressBar is one line: the task, a bar of its progress (or its status
// when it reports none), the percentage, the message and the time waited.
func progressBar(t *client.Task, waited time.Duration, width int) string {
	filled := 0
	pct := ""
	if t.ProgressPercent != nil {
		p := min(max(*t.ProgressPercent, 0), 100)
		filled = int(p / 100 * float64(width))
		pct = fmt.Sprintf("%5.1f%%", p)
	}
	if t.Status == client.StateSucceeded {
		filled, pct = width, "100.0%"
	}
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	msg := clip(t.ProgressMessage, 40)
	return fmt.Sprintf("%s %-11s %s %6s %s  %s", t.TaskID, t.Status, bar, pct, msg, short(waited))
}

// isTerminal reports whether w is a character device (a terminal) and TERM
// does not say it cannot redraw.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressPercent is a task's progress as a percentage for a table: what
// the worker last reported while it runs, 100% once it succeeded (whatever
// its last report said), "stopped at" it when it was canceled or dead
// lettered.
func progressPercent(t *client.Task) string {
	pct := ""
	if t.ProgressPercent != nil {
		pct = strconv.FormatFloat(*t.ProgressPercent, 'f', -1, 64) + "%"
	}
	switch {
	case t.Status == client.StateSucceeded:
		return "100%"
	case t.Terminal() && pct != "":
		return "stopped at " + pct
	}
	return pct
}

// progressText is a task's progress for a line: the percentage
// (progressPercent) and, while the task runs, the worker's last message. A
// finished task's last report is history (gate tasks show lists it), not
// its progress: a succeeded task reads 100%, never the 25% its worker said
// before it completed.
func progressText(t *client.Task) string {
	if t.Terminal() {
		return progressPercent(t)
	}
	return strings.TrimSpace(progressPercent(t) + " " + t.ProgressMessage)
}

// splitIDs reads a comma-separated list of ids, ignoring blanks.
func splitIDs(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
