package main

import (
	"bytes"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

// The flags are held to the config file's bounds (the schema), and a value
// a flag cannot carry exactly is refused rather than truncated.
func TestServeFlagsAreRefusedOutsideTheConfigBounds(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-lease-seconds", "10000000000"}, "--max-lease-seconds"},
		{[]string{"--max-lease-seconds", "0"}, "--max-lease-seconds"},
		{[]string{"--body-limit", "2147483648"}, "--body-limit"},
		{[]string{"--body-limit", "100"}, "--body-limit"},
		{[]string{"--memory-limit-mib", "17592186044416"}, "--memory-limit-mib"},
		{[]string{"--auth-cache", "500ms"}, "--auth-cache 500ms: must be a whole number of seconds"},
		{[]string{"--auth-cache", "1h1ms"}, "--auth-cache"},
		{[]string{"--auth-cache", "2h"}, "--auth-cache"},
		{[]string{"--sweep-interval", "5ms"}, "--sweep-interval"},
		{[]string{"--expiry-jitter", "1500us"}, "--expiry-jitter 1.5ms: must be a whole number of milliseconds"},
		{[]string{"--db-writers", "17"}, "--db-writers"},
		{[]string{"--db-timeout", "1500ms"}, "--db-timeout 1.5s: must be a whole number of seconds"},
		{[]string{"--db-timeout", "0s"}, "--db-timeout"},
		{[]string{"--db-timeout", "90s"}, "--db-timeout"},
		{[]string{"--gc-percent", "-1"}, "--gc-percent"},
	} {
		_, err := parseServeFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
	var stderr bytes.Buffer
	if code := runServe([]string{"--max-lease-seconds", "10000000000", "--listen", "127.0.0.1:0", "--data", t.TempDir()}, io.Discard, &stderr); code != 2 {
		t.Fatalf("gate serve --max-lease-seconds 10000000000 exited %d, want 2 (%s)", code, stderr.String())
	}
	t.Logf("%s", stderr.String())
	cfg, err := parseServeFlags([]string{"--max-lease-seconds", "604800", "--auth-cache", "2s", "--expiry-jitter", "0", "--body-limit", "1073741824", "--db-timeout", "1m"}, io.Discard)
	if err != nil || cfg.MaxLeaseSeconds != 604800 || cfg.AuthCacheSeconds != 2 || cfg.ExpiryJitterMS != 0 || cfg.BodyLimitBytes != 1<<30 || cfg.DBTimeoutSeconds != 60 {
		t.Fatalf("in-bounds flags: %+v %v", cfg, err)
	}
	if cfg, err := parseServeFlags(nil, io.Discard); err != nil || cfg.DBTimeoutSeconds != 15 {
		t.Fatalf("the default store timeout: %d s (%v), want 15", cfg.DBTimeoutSeconds, err)
	}
}

// A memory limit too large for bytes in an int64 is capped, not wrapped
// into a tiny one.
func TestMemoryLimitTooLargeIsCappedNotOverflowed(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	setMemoryLimit(1<<44, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := debug.SetMemoryLimit(-1); got < 1<<40 {
		t.Fatalf("memory_limit_mib 2^44 set a limit of %d bytes", got)
	}
}
