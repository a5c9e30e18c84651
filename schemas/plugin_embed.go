// Package schemas holds AsyncGate's JSON Schemas. The plugin schemas
// (plugin-*.schema.json) are embedded so the plugin runtime validates
// manifests and every call's input and output against the files in this folder.
package schemas

import "embed"

// PluginFS holds the plugin manifest and plugin I/O schemas.
//
//go:embed plugin-*.schema.json
var PluginFS embed.FS
