// Package plugins holds the sources of AsyncGate's built-in plugins
// (channels/ and policies/, each a main package built for GOOS=wasip1) and
// embeds their built modules from dist/, which `make plugins` fills.
package plugins

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Builtins returns the built-in plugins in the registry's flat layout
// (<name>.wasm beside <name>.manifest.json). Before `make plugins` it holds
// only a README, and the registry reports every built-in as missing.
func Builtins() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is always embedded
	}
	return sub
}
