// Command hog is a hostile test validator that uses memory: on task type
// "hog" it allocates and touches params.mib MiB (its linear memory grows
// to hold them, up to the instance's cap) and then accepts the params, so
// the instance goes back to the pool healthy but grown. Any other task type
// is accepted at once. On "hog-exit" it allocates as much and exits with
// status 3.
package main

import (
	"os"
	"strconv"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

var sink [][]byte

func validate(in plugin.ValidateInput, _ *struct{}) ([]plugin.Violation, error) {
	if in.TaskType != "hog" && in.TaskType != "hog-exit" {
		return nil, nil
	}
	mib := 0
	if v, ok := in.Params.Get("mib"); ok {
		mib, _ = strconv.Atoi(v.Str)
	}
	for range mib {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		sink = append(sink, b)
	}
	if in.TaskType == "hog-exit" {
		os.Exit(3) // out through proc_exit, its memory grown
	}
	sink = nil // the memory stays grown; the next call reuses it
	return nil, nil
}

func init() { plugin.Validator(validate) }

func main() {}
