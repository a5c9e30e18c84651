package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register(command{name: "version", summary: "print the gate's version", run: runVersion})
}

// version is the release or `git describe` of this build, set by the
// Makefile with -ldflags "-X main.version=…". Empty means not stamped:
// buildVersion then reads the module's build information.
var version string

// versionInfo is what `gate version --json` prints.
type versionInfo struct {
	Version  string `json:"version"`
	Go       string `json:"go"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"vcs_time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

// readVersion gathers the version: the -ldflags stamp when there is one,
// else the module version (set by `go install …@vX`), else the VCS revision
// the toolchain recorded (with -dirty for local changes), else "dev".
func readVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return versionFrom(version, bi)
}

// versionFrom is readVersion over a given stamp and build information (nil:
// none).
func versionFrom(stamp string, bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: stamp, Go: runtime.Version()}
	if bi == nil {
		if v.Version == "" {
			v.Version = "dev"
		}
		return v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	switch {
	case v.Version != "":
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		v.Version = bi.Main.Version
	case v.Revision != "":
		v.Version = "devel-" + v.Revision[:min(12, len(v.Revision))]
		if v.Modified {
			v.Version += "-dirty"
		}
	default:
		v.Version = "dev"
	}
	return v
}

// buildVersion is the version the gate reports (/healthz, MCP initialize).
func buildVersion() string { return readVersion().Version }

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gate version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "gate version: takes no arguments")
		return 2
	}
	v := readVersion()
	if *asJSON {
		b, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	fmt.Fprintf(stdout, "gate %s (%s", v.Version, v.Go)
	if v.Revision != "" {
		fmt.Fprintf(stdout, ", revision %s", v.Revision)
		if v.Modified {
			fmt.Fprint(stdout, ", modified")
		}
	}
	fmt.Fprintln(stdout, ")")
	return 0
}
