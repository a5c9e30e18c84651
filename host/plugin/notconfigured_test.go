package plugin

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer a logger may write from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBuiltinWithoutItsGrantIsNotConfigured (issue 42): an optional
// built-in whose capability the operator did not configure (the http
// channel with no allowlisted hosts, email with no mail) is listed as
// not_configured with a note saying what to configure, not as a fault, and
// its start logs no warning.
func TestBuiltinWithoutItsGrantIsNotConfigured(t *testing.T) {
	t.Parallel()
	builtins := t.TempDir()
	copyPlugin(t, "http", "http", builtins)
	copyPlugin(t, "email", "email", builtins)
	copyPlugin(t, "backoff", "backoff", builtins)
	logs := &lockedBuffer{}
	rt, err := NewRuntime(Options{CacheDir: wasmCacheDir, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: t.TempDir(), Builtins: os.DirFS(builtins)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	for name, what := range map[string]string{"http": "allowlisted no hosts", "email": "configure mail"} {
		in := infoOf(reg, name)
		if in.State != "not_configured" || in.Refused != "" || !strings.Contains(in.Note, what) {
			t.Errorf("%s: %+v", name, in)
		}
	}
	if in := infoOf(reg, "backoff"); in.State != "ready" {
		t.Errorf("backoff: %+v", in)
	}
	if l := logs.String(); strings.Contains(l, "level=WARN") || !strings.Contains(l, "built-in plugin not configured") {
		t.Errorf("start-up logs:\n%s", l)
	}
}
