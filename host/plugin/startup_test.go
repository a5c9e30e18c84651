package plugin

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// heldFS holds every read of a .wasm until release is closed: a start-up
// whose compile has not finished yet, without depending on timing.
type heldFS struct {
	fs.FS
	release chan struct{}
}

func (h heldFS) Open(name string) (fs.File, error) {
	if strings.HasSuffix(name, ".wasm") {
		<-h.release
	}
	return h.FS.Open(name)
}

// TestBackgroundLoading: with Background, NewRegistry returns before any
// plugin is loaded; a call that needs one answers plugin_not_ready (503)
// instead of waiting, the listing says loading, and once loaded the same
// call works.
func TestBackgroundLoading(t *testing.T) {
	t.Parallel()
	builtins := t.TempDir()
	copyPlugin(t, "backoff", "backoff", builtins)
	copyPlugin(t, "inline", "inline", builtins)
	held := heldFS{FS: os.DirFS(builtins), release: make(chan struct{})}
	rt := newTestRuntime(t, Limits{})
	made := make(chan *Registry, 1)
	go func() {
		reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Builtins: held, Background: true})
		if err != nil {
			t.Error(err)
		}
		made <- reg
	}()
	var reg *Registry
	select {
	case reg = <-made:
	case <-time.After(time.Minute):
		close(held.release)
		t.Fatal("NewRegistry waited for the plugins to load")
	}
	released := false
	t.Cleanup(func() {
		if !released {
			close(held.release)
		}
		reg.Close()
	})
	if reg.Ready() {
		t.Fatal("ready before any module was read")
	}
	_, err := reg.Plugin("backoff")
	var f *Fault
	if !errors.As(err, &f) || f.Kind != FaultNotReady {
		t.Fatalf("Plugin while loading: %v", err)
	}
	if _, err := reg.Policy("backoff", nil); !host.IsCode(err, host.CodePluginNotReady) || host.HTTPStatus(host.ErrorCode(err)) != 503 {
		t.Fatalf("Policy while loading: %v", err)
	}
	if in := infoOf(reg, "backoff"); in.State != "loading" {
		t.Fatalf("listing while loading: %+v", in)
	}
	// A known channel can be named (a task type's default channel) while
	// loading; using it answers plugin_not_ready. An unknown one is an error.
	ch, err := reg.Channel("inline")
	if err != nil {
		t.Fatalf("Channel while loading: %v", err)
	}
	if _, err := ch.Capabilities(context.Background()); !host.IsCode(err, host.CodePluginNotReady) {
		t.Fatalf("channel call while loading: %v", err)
	}
	if _, err := reg.Channel("nope"); err == nil {
		t.Fatal("an unknown channel was accepted while loading")
	}

	close(held.release)
	released = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := reg.WaitReady(ctx); err != nil {
		t.Fatalf("never ready: %v", err)
	}
	pol, err := reg.Policy("backoff", nil)
	if err != nil {
		t.Fatal(err)
	}
	in := host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3}
	if _, err := pol.Decide(context.Background(), in); err != nil {
		t.Fatalf("decide after loading: %v", err)
	}
	if in := infoOf(reg, "backoff"); in.State != "ready" {
		t.Fatalf("listing after loading: %+v", in)
	}
	if _, err := ch.Capabilities(context.Background()); err != nil {
		t.Fatalf("channel after loading: %v", err)
	}
	// Once loaded, an unknown name is not found, not "not ready".
	if _, err := reg.Policy("nope", nil); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("unknown plugin after loading: %v", err)
	}
}
