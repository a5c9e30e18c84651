// Package plugin is the guest-side SDK for AsyncGate plugins: WebAssembly
// modules built with the standard Go toolchain,
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o NAME.wasm .
//
// and loaded by the gate with wazero. A plugin is a main package whose init
// function registers its operations with one of Policy, Validator or Channel:
//
//	package main
//
//	import "github.com/asyncgate/asyncgate/sdk/plugin"
//
//	type config struct{ Supervisor string `json:"supervisor"` }
//
//	func init() {
//		plugin.Policy(func(in plugin.FailureInput, c *config) (plugin.Decision, error) {
//			return plugin.Decision{Action: plugin.ActionEscalate, EscalateTo: c.Supervisor}, nil
//		})
//	}
//
//	func main() {}
//
// The SDK implements ABI version 1 (schemas/plugin-abi.md): it exports
// asyncgate_abi_version, asyncgate_alloc and one export per operation
// (decide, validate, put, get, ack, capabilities), keeps the buffers it hands
// the host reachable, turns panics into error results, and wraps every result
// in the {"ok":...} envelope. The hot path uses a small hand-written JSON
// reader and writer instead of encoding/json; configs are decoded with
// encoding/json once per distinct config document.
//
// The package does not import the host: its types mirror the host's JSON
// contracts (host.FailureInput, host.Decision, host.ChannelCapabilities).
// Outside wasip1 everything but HTTP works natively, so plugin logic can be
// unit-tested with go test; Dispatch runs an operation as the host would.
package plugin
