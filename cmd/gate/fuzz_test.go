package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzBridgeEvents feeds arbitrary server-sent event streams to the stdio
// bridge's reader. It must never panic, and everything it writes to stdout
// must be one compact JSON message per line (a client reads line by line).
func FuzzBridgeEvents(f *testing.F) {
	for _, s := range []string{
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
		"data: {\"a\":\ndata: 1}\n\n",
		"data:{\"x\":[1,2]}\n\ndata: not json\n\n: comment\n",
		"data: {\"unterminated\": true}",
		"\n\n\ndata:\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		var out bytes.Buffer
		b := &bridge{out: &out, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		b.readEvents(bytes.NewReader(stream))
		sc := bufio.NewScanner(&out)
		sc.Buffer(make([]byte, 64<<10), 32<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if !json.Valid(line) {
				t.Fatalf("bridge wrote a line that is not JSON: %q", line)
			}
			var c bytes.Buffer
			if err := json.Compact(&c, line); err != nil || !bytes.Equal(c.Bytes(), line) {
				t.Fatalf("bridge wrote a message that is not compact: %q", line)
			}
		}
	})
}

// FuzzConfigFile feeds arbitrary config files to the loader. It must never
// panic; a file it accepts is a JSON object whose listen and data values are
// what the config holds.
func FuzzConfigFile(f *testing.F) {
	for _, s := range []string{
		`{"listen":"127.0.0.1:9090","data":"/tmp/x","max_lease_seconds":60}`,
		`{"listen":1}`,
		`{"unknown_field":true}`,
		`[]`,
		`{"log_level":"debug"} trailing`,
		``,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "gate.json")
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := defaultServeConfig()
		if err := loadConfigFile(path, &cfg); err != nil {
			if !strings.HasPrefix(err.Error(), "config") {
				t.Fatalf("error does not say it is about the config: %v", err)
			}
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("accepted a config that is not a JSON object: %q (%v)", raw, err)
		}
		if v, ok := m["listen"]; ok {
			var want string
			if json.Unmarshal(v, &want) == nil && want != cfg.Listen {
				t.Fatalf("listen %q in the file, %q in the config", want, cfg.Listen)
			}
		}
	})
}
