package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/plugin"
)

// pluginExample is one entry of a manifest's "examples": a sample input
// `gate plugin check` runs the plugin on, and optionally what it must answer.
//
//   - policy: input is a decide input (task_id, task_type and kind may be
//     left out); want holds decision fields (action, delay_seconds, reason,
//     escalate_to).
//   - validator: input is {"params": ..., "task_type": ...}; want is
//     {"valid": true|false}.
//   - channel: input is {"payload": any JSON}, put then read back and acked;
//     want may hold {"pointer_prefix": "..."}.
//
// config is the policy's or validator's config for the example (default:
// check's -config); a channel's config is the operator's, from -config.
type pluginExample struct {
	Name   string          `json:"name"`
	Config json.RawMessage `json:"config"`
	Input  json.RawMessage `json:"input"`
	Want   map[string]any  `json:"want"`
}

// manifestExamples reads a manifest's examples.
func manifestExamples(man []byte) ([]pluginExample, error) {
	var m struct {
		Examples []pluginExample `json:"examples"`
	}
	if err := json.Unmarshal(man, &m); err != nil {
		return nil, err
	}
	for i := range m.Examples {
		if m.Examples[i].Name == "" {
			m.Examples[i].Name = fmt.Sprintf("example %d", i+1)
		}
	}
	return m.Examples, nil
}

// sampleExamples are what check runs on a plugin whose manifest has none.
func sampleExamples(kind string) []pluginExample {
	ex := func(name, input string) pluginExample {
		return pluginExample{Name: name, Input: json.RawMessage(input)}
	}
	switch kind {
	case plugin.KindPolicy:
		return []pluginExample{
			ex("retryable failure", `{"retryable": true, "attempts": 1, "max_retries": 3, "error": "sample"}`),
			ex("retries used up", `{"retryable": true, "attempts": 4, "max_retries": 3}`),
			ex("fatal failure", `{"retryable": false, "attempts": 1, "max_retries": 3}`),
			ex("lease expiry", `{"kind": "expiry", "retryable": true, "attempts": 0, "max_retries": 3, "lease_expiries": 1}`),
		}
	case plugin.KindValidator:
		return []pluginExample{
			ex("plain params", `{"params": {"path": "docs/report.txt"}}`),
			ex("hostile params", `{"params": {"path": "../../etc/passwd", "note": "a\u0000b"}}`),
		}
	case plugin.KindChannel:
		return []pluginExample{ex("round trip", `{"payload": {"self_test": true}}`)}
	}
	return nil
}

// runExamples runs each example on the loaded plugin, prints its outcome and
// reports whether all passed (ran without error and matched their want).
func runExamples(ctx context.Context, w io.Writer, reg *plugin.Registry, m *plugin.Manifest, flagConfig json.RawMessage, exs []pluginExample) bool {
	ok := true
	report := func(ex pluginExample, call, got string, err error) {
		if err != nil {
			ok = false
			if got != "" {
				call += " → " + got
			}
			fmt.Fprintf(w, "FAIL %s: %s: %v\n", ex.Name, call, err)
			return
		}
		fmt.Fprintf(w, "ok   %s: %s → %s\n", ex.Name, call, got)
	}
	config := func(ex pluginExample) json.RawMessage {
		if len(ex.Config) > 0 {
			return ex.Config
		}
		return flagConfig
	}
	var ch host.Channel
	if m.Kind == plugin.KindChannel {
		var err error
		if ch, err = reg.Channel(m.Name); err != nil {
			fmt.Fprintf(w, "FAIL channel: %v\n", err)
			return false
		}
		caps, err := ch.Capabilities(ctx)
		b, _ := json.Marshal(caps)
		report(pluginExample{Name: "capabilities"}, "capabilities()", string(b), err)
	}
	for i, ex := range exs {
		switch m.Kind {
		case plugin.KindPolicy:
			in := host.FailureInput{TaskID: fmt.Sprintf("check-%d", i+1), TaskType: "check", Kind: host.FailureError}
			if err := strictJSON(ex.Input, &in); err != nil {
				report(ex, "decide", "", fmt.Errorf("input: %w", err))
				continue
			}
			call := fmt.Sprintf("decide(kind=%s retryable=%v attempts=%d/%d)", in.Kind, in.Retryable, in.Attempts, in.MaxRetries)
			pol, err := reg.Policy(m.Name, config(ex))
			if err != nil {
				report(ex, call, "", fmt.Errorf("config: %w", err))
				continue
			}
			d, err := pol.Decide(ctx, in)
			if err != nil {
				report(ex, call, "", err)
				continue
			}
			b, _ := json.Marshal(d)
			report(ex, call, string(b), wantFields(ex.Want, b))
		case plugin.KindValidator:
			var in struct {
				TaskType string          `json:"task_type"`
				Params   json.RawMessage `json:"params"`
			}
			if err := strictJSON(ex.Input, &in); err != nil || len(in.Params) == 0 {
				report(ex, "validate", "", fmt.Errorf("input must be {\"params\": ...}: %v", err))
				continue
			}
			if in.TaskType == "" {
				in.TaskType = "check"
			}
			call := "validate(" + string(compact(in.Params)) + ")"
			v, err := reg.Validator(m.Name, config(ex))
			if err != nil {
				report(ex, call, "", fmt.Errorf("config: %w", err))
				continue
			}
			err = v.Validate(ctx, in.TaskType, in.Params)
			got, verdict := `{"valid":true}`, "valid"
			if host.IsCode(err, host.CodeInvalidParams) {
				got, verdict, err = `{"valid":false}`, "invalid: "+host.ErrorDetail(err), nil
			}
			if err == nil {
				err = wantFields(ex.Want, []byte(got))
			}
			report(ex, call, verdict, err)
		case plugin.KindChannel:
			var in struct {
				Payload json.RawMessage `json:"payload"`
			}
			if err := strictJSON(ex.Input, &in); err != nil || len(in.Payload) == 0 {
				report(ex, "put", "", fmt.Errorf("input must be {\"payload\": ...}: %v", err))
				continue
			}
			payload := compact(in.Payload)
			ptr, err := ch.Put(ctx, fmt.Sprintf("check-%d", i+1), payload)
			if err == nil {
				if p, _ := ex.Want["pointer_prefix"].(string); p != "" && !strings.HasPrefix(ptr, p) {
					err = fmt.Errorf("pointer %q, want prefix %q", ptr, p)
				}
			}
			report(ex, fmt.Sprintf("put(%d bytes)", len(payload)), ptr, err)
			if err != nil {
				continue
			}
			got, err := ch.Get(ctx, ptr)
			if err == nil && !bytes.Equal(got, payload) {
				err = fmt.Errorf("got %q back, want %q", got, payload)
			}
			report(ex, "get("+ptr+")", "payload round-trips", err)
			report(ex, "ack("+ptr+")", "acked", ch.Ack(ctx, ptr))
		}
	}
	return ok
}

// strictJSON decodes b into v, refusing unknown fields (a typo in an example
// should not pass silently).
func strictJSON(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func compact(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// wantFields checks that the JSON object got has every field of want; a
// field got leaves out (omitted as empty) matches a zero want.
func wantFields(want map[string]any, got []byte) error {
	if len(want) == 0 {
		return nil
	}
	var g map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		return err
	}
	var diffs []string
	for k, wv := range want {
		gv, present := g[k]
		if !present && (wv == nil || wv == "" || wv == float64(0) || wv == false) {
			continue
		}
		if !reflect.DeepEqual(gv, wv) {
			wj, _ := json.Marshal(wv)
			gj, _ := json.Marshal(gv)
			diffs = append(diffs, fmt.Sprintf("%s is %s, want %s", k, gj, wj))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return fmt.Errorf("%s", strings.Join(diffs, "; "))
	}
	return nil
}
