// Command hog is a hostile test validator that uses memory: on task type
// "hog" it allocates and touches params.mib MiB (its linear memory grows
// to hold them, up to the instance's cap) and then accepts the params, so
// the instance goes back to the pool healthy but grown. Any other task type
// is accepted at once. On "hog-sleep-panic" it allocates as much, sleeps 3 s
// (past a test's deadline, in a host call) and exits with status 3.
package main

import (
	"os"
	"strconv"
	"time"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

var sink [][]byte

func validate(in plugin.ValidateInput, _ *struct{}) ([]plugin.Violation, error) {
	if in.TaskType != "hog" && in.TaskType != "hog-sleep-panic" {
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
	if in.TaskType == "hog-sleep-panic" {
		// Past the call's deadline in a host call (poll_oneoff), then
		// out through proc_exit.
		time.Sleep(3 * time.Second)
		os.Exit(3)
	}
	sink = nil // the memory stays grown; the next call reuses it
	return nil, nil
}

func init() { plugin.Validator(validate) }

func main() {}
