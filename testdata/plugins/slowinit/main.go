// Command slowinit is a test policy plugin whose start is slow but ends:
// its package initialisation spins a while (on compiled code well past a
// start deadline of a few milliseconds), as a heavy plugin's start does on
// a busy machine.
package main

import "github.com/asyncgate/asyncgate/sdk/plugin"

var spins int64

func decide(plugin.FailureInput, *struct{}) (plugin.Decision, error) {
	return plugin.Decision{Action: plugin.ActionRetry, DelaySeconds: 1, Reason: "slowinit-ok"}, nil
}

func init() {
	for spins < 20_000_000 {
		spins++
	}
	plugin.Policy(decide)
}

func main() {}
