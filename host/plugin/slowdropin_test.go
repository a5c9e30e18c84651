package plugin

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// slowStart starts a background registry over the built-ins backoff and
// inline, with a folder holding initloop (a policy whose start never ends)
// under its own name and under the built-in name backoff (an operator's
// override). dropInStart, when set, is the drop-ins' start deadline
// (granted to their module), else startTimeout, which is every plugin's.
func slowStart(t *testing.T, startTimeout, dropInStart, readyWait time.Duration) *Registry {
	t.Helper()
	builtins, dir := t.TempDir(), t.TempDir()
	copyPlugin(t, "backoff", "backoff", builtins)
	copyPlugin(t, "inline", "inline", builtins)
	copyPlugin(t, "initloop", "initloop", dir)
	copyPlugin(t, "initloop", "backoff", dir)
	var grants map[string]Grant
	if dropInStart > 0 {
		wasm, _ := readBuilt(t, "initloop")
		g := Grant{SHA256: []string{Digest(wasm)}, Limits: Limits{StartTimeout: dropInStart}}
		grants = map[string]Grant{"initloop": g, "backoff": g}
	}
	rt := newTestRuntime(t, Limits{StartTimeout: startTimeout, Timeout: 10 * time.Second})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Builtins: os.DirFS(builtins), Grants: grants, Background: true, ReadyWait: readyWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	return reg
}

// TestSlowDropInDoesNotHoldBuiltins: a drop-in whose first load never ends
// (here: its start deadline is an hour) holds neither the built-ins nor the
// calls that need them: the inline channel serves while the drop-in is
// still loading. Readiness waits for the drop-in, and says so (Pending),
// and the built-in backoff, which the folder overrides, does not serve in
// its place meanwhile: no call is answered by a plugin the operator
// replaced.
func TestSlowDropInDoesNotHoldBuiltins(t *testing.T) {
	t.Parallel()
	// ReadyWait bounds the wait of the first call below: before the
	// built-ins loaded beside the folder it waited this long and failed.
	// Generous, since the interpreter's load under -race on a busy machine
	// takes seconds.
	reg := slowStart(t, time.Hour, 0, 2*time.Minute)
	ch, err := reg.Channel("inline")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ptr, err := ch.Put(ctx, "t1", []byte("payload"))
	if err != nil {
		t.Fatalf("put to the built-in inline while a drop-in starts: %v", err)
	}
	if got, err := ch.Get(ctx, ptr); err != nil || string(got) != "payload" {
		t.Fatalf("get: %q, %v", got, err)
	}
	if reg.Ready() {
		t.Fatal("ready while a drop-in is still in its first load")
	}
	if p := reg.Pending(); strings.Join(p, ",") != "backoff,initloop" {
		t.Fatalf("pending: %v; want the drop-ins (backoff is overridden by one)", p)
	}
	if in := infoOf(reg, "inline"); in.State != "ready" {
		t.Fatalf("inline: %+v", in)
	}
	var f *Fault
	if p, err := reg.Plugin("backoff"); !errors.As(err, &f) || f.Kind != FaultNotReady {
		t.Fatalf("backoff while its override loads: %v, %v; want not ready (the built-in must not serve in its place)", p, err)
	}
}

// TestRefusedDropInReleasesItsName: a drop-in whose start does not end
// within StartTimeout is refused; the built-in it would have overridden
// then serves, and the registry becomes ready, without the built-ins having
// waited for it.
func TestRefusedDropInReleasesItsName(t *testing.T) {
	t.Parallel()
	// The built-ins keep a start deadline a loaded machine cannot miss;
	// the drop-ins' module is granted half a second.
	reg := slowStart(t, 10*time.Minute, 500*time.Millisecond, 10*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a guard, not a measure
	defer cancel()
	if err := reg.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initloop", "backoff"} {
		if in := infoOf(reg, name); !strings.Contains(in.Refused, "deadline") {
			t.Errorf("%s: %+v; want refused for its start deadline", name, in)
		}
	}
	if in := infoOf(reg, "initloop"); in.State != "refused" {
		t.Errorf("initloop: %+v", in)
	}
	pol, err := reg.Policy("backoff", nil)
	if err != nil {
		t.Fatalf("%v: %+v", err, infoOf(reg, "backoff"))
	}
	in := host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3}
	if d, err := pol.Decide(ctx, in); err != nil || d.Action != host.ActionRetry {
		t.Fatalf("the built-in backoff after its override was refused: %+v, %v", d, err)
	}
	if p, _ := reg.Plugin("backoff"); p == nil || p.Source != "builtin" {
		t.Fatalf("backoff serves %v, want the built-in", p)
	}
}
