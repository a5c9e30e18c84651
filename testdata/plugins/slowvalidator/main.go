// Command slowvalidator is a hostile test validator: on task type "loop" it
// never returns (the host stops it at its 300 ms deadline), on "panic" it
// panics; any other params are valid.
package main

import "github.com/asyncgate/asyncgate/sdk/plugin"

func validate(in plugin.ValidateInput, _ *struct{}) ([]plugin.Violation, error) {
	switch in.TaskType {
	case "loop":
		n := 0
		for {
			n++
		}
	case "panic":
		var m map[string]int
		m["boom"]++
	}
	return nil, nil
}

func init() { plugin.Validator(validate) }

func main() {}
