// Command slowvalidator is a hostile test validator: on task type "loop",
// or params {"loop": true} of any type, it never returns (the host stops it
// at its deadline), on "panic" it
// panics, on "exit" the guest exits (a trap), on "garbage" it answers a
// result its output schema refuses, on "error" it returns an error of its
// own instead of a verdict, and on "refuse" it refuses the params as a
// validator should (a violation); any other params are valid.
package main

import (
	"os"
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

func validate(in plugin.ValidateInput, _ *struct{}) ([]plugin.Violation, error) {
	taskType := in.TaskType
	if v, ok := in.Params.Get("loop"); ok && v.Kind == plugin.KindBool && v.Bool {
		taskType = "loop" // these params only: the type's others pass
	}
	switch taskType {
	case "loop":
		n := 0
		for {
			n++
		}
	case "panic":
		var m map[string]int
		m["boom"]++
	case "exit":
		os.Exit(3)
	case "garbage":
		// A message over the schema's 1,000 characters: bad output.
		return []plugin.Violation{{Key: "/x", Message: strings.Repeat("x", 2000)}}, nil
	case "error":
		return nil, plugin.Errorf("validator_broken", "cannot judge anything today")
	case "refuse":
		return []plugin.Violation{{Key: "/n", Message: "must not be given"}}, nil
	}
	return nil, nil
}

func init() { plugin.Validator(validate) }

func main() {}
