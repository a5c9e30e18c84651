package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// gate workflows: submit, get, list and cancel workflows on a running gate
// (docs/cli.md "Workflows").
func init() {
	var (
		idemKey, final, status, cursor, reason string
		limit                                  int
	)
	registerRemote(remoteGroup{name: "workflows", summary: "submit, get, list and cancel workflows (graphs of tasks) on a running gate", subs: []remoteSub{
		{name: "submit", args: "WORKFLOW_JSON", summary: "submit a workflow given as JSON (inline, @FILE or - for stdin)", minArgs: 1, maxArgs: 1,
			more: `The workflow is the body of POST /v1/workflows:
  {"name": "...", "steps": [{"name": "a", "task_type": "...", "params": {...}},
                            {"name": "b", "task_type": "...", "after": ["a"],
                             "delay_seconds": 3600}],
   "final_step": "b"}
A step also takes delay_seconds, not_before and resource_intents, as
POST /v1/tasks does (a delay counts from the submission).
--idempotency-key and --final-step give what the JSON leaves out (a JSON
naming another value is refused). Prints the workflow's
id and each step's task id (--json: the gate's answer).`,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&idemKey, "idempotency-key", "", "a repeat with the same key answers the first workflow")
				fs.StringVar(&final, "final-step", "", "the step whose outcome is the workflow's (default: the one step nothing waits on)")
			},
			run: func(rc *remoteCtx, args []string) error {
				raw, err := readJSONArg(args[0], os.Stdin)
				if err != nil {
					return exitErr{exitUsage, "workflow: " + err.Error()}
				}
				var body map[string]any
				if err := json.Unmarshal(raw, &body); err != nil {
					return exitErr{exitUsage, "workflow: want a JSON object: " + err.Error()}
				}
				// A flag gives what the JSON left out, or repeats it; two
				// different values are refused, not one silently chosen.
				for _, f := range []struct{ flag, field, value string }{
					{"--idempotency-key", "idempotency_key", idemKey}, {"--final-step", "final_step", final}} {
					if f.value == "" {
						continue
					}
					if inJSON, ok := body[f.field]; ok && inJSON != nil && inJSON != "" && inJSON != f.value {
						return exitErr{exitUsage, fmt.Sprintf("%s %q differs from the workflow's %s %s: give one of them, or the same",
							f.flag, f.value, f.field, jsonText(inJSON))}
					}
					body[f.field] = f.value
				}
				key, _ := body["idempotency_key"].(string)
				var ans json.RawMessage
				if err := rc.call("POST", "/v1/workflows", body, &ans); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(ans)
				}
				var sub client.Submitted
				if err := json.Unmarshal(ans, &sub); err != nil {
					return err
				}
				head := sub.WorkflowID + " " + sub.Status
				if sub.IsDuplicate {
					head += fmt.Sprintf(" (the workflow of idempotency key %q, submitted before)", key)
				}
				fmt.Fprintln(rc.out, head)
				var rows [][]string
				for name, id := range sub.Steps {
					rows = append(rows, []string{name, id})
				}
				sort.Slice(rows, func(i, j int) bool { return rows[i][0] < rows[j][0] })
				rc.table([]string{"STEP", "TASK"}, rows)
				return nil
			}},
		{name: "get", args: "WORKFLOW_ID", summary: "show a workflow and its steps with their states", minArgs: 1, maxArgs: 1,
			run: func(rc *remoteCtx, args []string) error {
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/workflows/"+url.PathEscape(args[0]), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var w client.Workflow
				if err := json.Unmarshal(raw, &w); err != nil {
					return err
				}
				status := w.Status
				if w.Status == "archived" {
					status += " (" + w.Outcome + ")"
				}
				fmt.Fprintf(rc.out, "%s  %s  %s\n", w.WorkflowID, oneLine(w.Name), status)
				if w.Result != nil {
					fmt.Fprintf(rc.out, "result: %s %q\n", oneLine(w.Result.Pointer), w.Result.Summary)
				}
				if w.ErrorMessage != "" {
					fmt.Fprintf(rc.out, "error: %s\n", oneLine(w.ErrorMessage))
				}
				rows := make([][]string, len(w.Steps))
				for i, s := range w.Steps {
					name := s.Name
					if s.Final {
						name += " (final)"
					}
					starts := "" // a delayed step not yet started: when it may
					if s.AvailableAt != nil {
						starts = s.AvailableAt.UTC().Format(time.RFC3339)
					}
					rows[i] = []string{name, s.TaskID, s.TaskType, s.Status, strings.Join(s.After, ","), starts}
				}
				rc.table([]string{"STEP", "TASK", "TYPE", "STATUS", "AFTER", "NOT BEFORE"}, rows)
				return nil
			}},
		{name: "list", summary: "list your workflows (admin keys: the tenant's), newest first", maxArgs: 0,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&status, "status", "", "running, succeeded, failed, canceled or archived")
				fs.IntVar(&limit, "limit", 50, "workflows per page, 1..500")
				fs.StringVar(&cursor, "cursor", "", "the cursor a previous page printed")
			},
			run: func(rc *remoteCtx, _ []string) error {
				q := url.Values{}
				if status != "" {
					q.Set("status", status)
				}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				q.Set("limit", strconv.Itoa(limit)) // out of range: the gate's refusal
				var raw json.RawMessage
				if err := rc.call("GET", "/v1/workflows?"+q.Encode(), nil, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var out struct {
					Workflows []client.Workflow `json:"workflows"`
					Cursor    string            `json:"cursor"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					return err
				}
				rows := make([][]string, len(out.Workflows))
				for i, w := range out.Workflows {
					status := w.Status
					if w.Status == "archived" {
						status += " (" + w.Outcome + ")"
					}
					rows[i] = []string{w.WorkflowID, w.Name, status, strconv.Itoa(w.StepCount), w.CreatedAt.Format("2006-01-02 15:04:05")}
				}
				rc.table([]string{"WORKFLOW", "NAME", "STATUS", "STEPS", "CREATED"}, rows)
				if out.Cursor != "" {
					fmt.Fprintf(rc.out, "next page: --cursor %s\n", out.Cursor)
				}
				return nil
			}},
		{name: "cancel", args: "WORKFLOW_ID", summary: "cancel a workflow: every step not finished is canceled", minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet) { fs.StringVar(&reason, "reason", "", "why (kept in steps and workflow)") },
			run: func(rc *remoteCtx, args []string) error {
				var body any
				if reason != "" {
					body = map[string]string{"reason": reason}
				}
				var raw json.RawMessage
				if err := rc.call("POST", "/v1/workflows/"+url.PathEscape(args[0])+"/cancel", body, &raw); err != nil {
					return err
				}
				if rc.json {
					return rc.printJSON(raw)
				}
				var w client.Workflow
				if err := json.Unmarshal(raw, &w); err != nil {
					return err
				}
				if w.Status == "canceled" {
					fmt.Fprintf(rc.out, "%s canceled\n", w.WorkflowID)
				} else {
					fmt.Fprintf(rc.out, "%s is %s: cancel requested, it ends when its running final step does\n", w.WorkflowID, w.Status)
				}
				return nil
			}},
	}})
}

// jsonText is v as JSON, for a message that quotes a value of a JSON body.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
