package ai

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin/inline"
	"github.com/asyncgate/asyncgate/sdk/worker"
)

// A task that waited on others (a fan-in, such as a workflow's synthesize
// step after its consult steps) gets their outcomes with its lease; the
// model reads them after the task's own prompt, in the order the task
// named them.

// Bounds on what DependencyContext quotes.
const (
	maxDependencyText  = 8 << 10  // of one dependency's answer
	maxDependencyTotal = 64 << 10 // of all of them
)

// DependencyContext is the text that tells the model what the tasks this
// one waited on produced: each one's answer (an AI task's answer, or its
// models' answers, or the payload as text) — read from the pointer when
// its result is inline, else through read (a payload the gate stored in
// another channel: worker.DependencyResult), else its summary and where
// its result is; a failed one's error. read may be nil.
func DependencyContext(deps []worker.Dependency, read func(taskID string) ([]byte, error)) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Results of the %d tasks this task waited on:", len(deps))
	for i, d := range deps {
		var r struct {
			Pointer string `json:"result_pointer"`
			Summary string `json:"summary"`
		}
		_ = json.Unmarshal(d.Result, &r)
		text := ""
		switch {
		case d.Status != "succeeded":
			text = "did not succeed"
			if d.Error != "" {
				text += ": " + d.Error
			}
		default:
			if raw, err := inline.Payload(r.Pointer); err == nil {
				text = answerOf(raw)
			} else if r.Pointer != "" && read != nil {
				if raw, err := read(d.TaskID); err == nil && len(raw) > 0 {
					text = answerOf(raw)
				} else if err != nil {
					text = r.Summary + " (result at " + r.Pointer + ", not readable: " + err.Error() + ")"
				}
			}
			if text == "" {
				text = r.Summary
				if r.Pointer != "" {
					text += " (result at " + r.Pointer + ")"
				}
			}
		}
		fmt.Fprintf(&b, "\n\n[%d] task %s (%s, %s):\n%s", i+1, d.TaskID, d.TaskType, d.Status, truncate(strings.TrimSpace(text), maxDependencyText))
		if b.Len() > maxDependencyTotal {
			fmt.Fprintf(&b, "\n\n(the other %d results are left out: too long)", len(deps)-i-1)
			break
		}
	}
	return b.String()
}

// answerOf is the answer a result's payload holds: an AI task's answer,
// its fan-out's answers, or the payload as text.
func answerOf(raw []byte) string {
	var one Answer
	if json.Unmarshal(raw, &one) == nil && one.Answer != "" {
		return one.Answer
	}
	var fan FanOut
	if json.Unmarshal(raw, &fan) == nil && len(fan.Answers) > 0 {
		var parts []string
		for _, a := range fan.Answers {
			parts = append(parts, a.Model+": "+a.Answer)
		}
		return strings.Join(parts, "\n")
	}
	return string(raw)
}
