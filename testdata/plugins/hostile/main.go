// Command hostile is a test policy plugin that misbehaves on request: the
// task type picks the fault. Any other task type gets a normal decision, so
// tests can check that the host keeps working after each fault.
package main

import (
	"os"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

var hoard [][]byte

func decide(in plugin.FailureInput, _ *struct{}) (plugin.Decision, error) {
	switch in.TaskType {
	case "loop":
		n := 0
		for {
			n++
		}
	case "panic":
		var m map[string]int
		m["boom"]++ // nil map write: a Go panic the SDK recovers
	case "exit":
		os.Exit(3)
	case "bomb":
		for {
			hoard = append(hoard, make([]byte, 1<<20))
		}
	case "garbage":
		return plugin.Decision{Action: "explode", DelaySeconds: -1}, nil
	case "readfile":
		for _, p := range []string{"/etc/passwd", "/data/secret.txt", "../secret.txt"} {
			if b, err := os.ReadFile(p); err == nil {
				return plugin.Decision{}, plugin.Errorf("leak", string(b))
			}
		}
		return plugin.Decision{}, plugin.Errorf("no_access", "could not read any file")
	case "error":
		return plugin.Decision{}, plugin.Errorf("policy_refused", "refusing on purpose")
	}
	return plugin.Decision{Action: plugin.ActionRetry, DelaySeconds: 1, Reason: "hostile-ok"}, nil
}

func init() { plugin.Policy(decide) }

func main() {}
