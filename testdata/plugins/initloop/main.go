// Command initloop is a test policy plugin whose start never ends: its
// package initialisation loops, as a broken or hostile drop-in's might. The
// host's start deadline (Limits.StartTimeout) is all that stops it.
package main

import "github.com/asyncgate/asyncgate/sdk/plugin"

var spins int64

func decide(plugin.FailureInput, *struct{}) (plugin.Decision, error) {
	return plugin.Decision{Action: plugin.ActionRetry, DelaySeconds: 1, Reason: "initloop-ok"}, nil
}

func init() {
	for spins >= 0 {
		spins++
	}
	plugin.Policy(decide)
}

func main() {}
