package plugin

import "embed"

// Source is this SDK's own source: its go.mod and .go files (tests
// included). The gate binary carries it so `gate plugin new` and `gate plugin
// build` can give a plugin the SDK of the gate's own version without a
// network or a checkout. A plugin that does not refer to Source does not
// carry it: the linker drops unreferenced variables.
//
//go:embed go.mod *.go
var Source embed.FS
