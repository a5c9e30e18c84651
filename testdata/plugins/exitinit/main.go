// Command exitinit is a hostile test validator whose start function exits
// with status 0 (proc_exit(0) in _initialize): wazero hands back a closed
// module, on which nothing may run.
package main

import (
	"os"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

func validate(plugin.ValidateInput, *struct{}) ([]plugin.Violation, error) { return nil, nil }

func init() {
	plugin.Validator(validate)
	os.Exit(0)
}

func main() {}
