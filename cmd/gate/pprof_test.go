package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestPprofListenLoopbackOnly: the profiling endpoints answer without a key,
// so an address that is not loopback is refused at start, from the flag, the
// config file or the environment alike, with an error that says why.
func TestPprofListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:6060", "[::1]:0", "localhost:6060", "127.0.0.2:0"} {
		cfg, err := parseServeFlags([]string{"--pprof-listen", addr}, io.Discard)
		if err != nil || cfg.PprofListen != addr {
			t.Errorf("--pprof-listen %s: %v (cfg %q), want accepted", addr, err, cfg.PprofListen)
		}
	}
	for _, addr := range []string{":6060", "0.0.0.0:6060", "[::]:6060", "192.0.2.7:6060", "gate.example.com:6060", "127.0.0.1", "http://127.0.0.1:6060"} {
		_, err := parseServeFlags([]string{"--pprof-listen", addr}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--pprof-listen") {
			t.Errorf("--pprof-listen %s: %v, want an error naming the flag", addr, err)
		}
	}
	t.Setenv("ASYNCGATE_PPROF_LISTEN", "0.0.0.0:6060")
	if _, err := parseServeFlags(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("ASYNCGATE_PPROF_LISTEN=0.0.0.0:6060: %v, want refused as not loopback", err)
	}
}

// TestE2EPprofListen runs the gate with --pprof-listen: a CPU profile comes
// from that address (gzipped protobuf), the gate's own listener does not
// serve /debug/pprof/, and without the flag nothing is profiled.
func TestE2EPprofListen(t *testing.T) {
	g := startGate(t, t.TempDir(), "--pprof-listen", "127.0.0.1:0")
	var addr string
	for _, line := range strings.Split(g.Log(), "\n") {
		if !strings.Contains(line, "profiling endpoints listening") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if a, ok := strings.CutPrefix(f, "pprof_addr="); ok {
				addr = a
			}
		}
	}
	if addr == "" {
		t.Fatalf("no \"profiling endpoints listening\" line with pprof_addr in the log:\n%s", g.Log())
	}
	get := func(url string) resp {
		t.Helper()
		r, err := tryCall("GET", url, "", nil)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		return r
	}
	r := get("http://" + addr + "/debug/pprof/profile?seconds=1")
	if r.Status != 200 || !bytes.HasPrefix(r.Body, []byte{0x1f, 0x8b}) {
		t.Fatalf("CPU profile: %d, %d bytes starting %x, want 200 and gzip", r.Status, len(r.Body), r.Body[:min(4, len(r.Body))])
	}
	if r := get("http://" + addr + "/debug/pprof/goroutine?debug=1"); r.Status != 200 || !strings.Contains(string(r.Body), "goroutine profile:") {
		t.Fatalf("goroutine profile: %d %.200s", r.Status, r.Body)
	}
	if r := get(g.URL + "/debug/pprof/"); r.Status == 200 {
		t.Fatalf("the gate's listener served /debug/pprof/ (%d)", r.Status)
	}
	plain := startGate(t, t.TempDir())
	if strings.Contains(plain.Log(), "profiling endpoints") {
		t.Fatalf("a gate without --pprof-listen started profiling endpoints:\n%s", plain.Log())
	}
}
