package plugin

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestDropInOfAnotherKindsModuleRefused: an SDK policy module dropped in
// under a validator's manifest exports every operation, so the export
// check passes, but each validate answers not_implemented. Its load calls
// the kind's operation once and refuses it: over a serving validator the
// previous version keeps serving, and on a first load nothing serves.
func TestDropInOfAnotherKindsModuleRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyPlugin(t, "slowvalidator", "evilv", dir)
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, PollInterval: 20 * time.Millisecond, RemoveAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go reg.Run(ctx)
	v, err := reg.Validator("evilv", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(context.Background(), "fine", []byte(`{"n": 1}`)); err != nil {
		t.Fatalf("the real validator: %v", err)
	}
	good, _ := reg.Plugin("evilv")

	// The hostile policy module, under the validator's manifest.
	pwasm, _ := readBuilt(t, "hostile")
	_, vman := readBuilt(t, "slowvalidator")
	evil := []byte(replaceName(string(vman), "slowvalidator", "evilv"))
	writePair(t, dir, "evilv", pwasm, evil)
	waitFor(t, func() bool { return strings.Contains(infoOf(reg, "evilv").Refused, "not_implemented") })
	if p, _ := reg.Plugin("evilv"); p != good {
		t.Fatalf("a module that does not implement its kind replaced the serving validator: %s v%s", p.Digest, p.Manifest.Version)
	}
	if in := infoOf(reg, "evilv"); in.State != "ready" || in.Digest != good.Digest {
		t.Fatalf("info after refusal: %+v", in)
	}
	if err := v.Validate(context.Background(), "fine", []byte(`{"n": 1}`)); err != nil {
		t.Fatalf("the serving validator after the refusal: %v", err)
	}
	if st := good.Stats(); st.Failures != 0 {
		t.Fatalf("the load check counted as a failed call of the plugin: %+v", st)
	}

	// At a first load the same pair is refused, and nothing serves.
	dir2 := t.TempDir()
	writePair(t, dir2, "evilv", pwasm, evil)
	reg2, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg2.Close)
	if in := infoOf(reg2, "evilv"); in.State != "refused" || !strings.Contains(in.Refused, "does not implement its manifest's kind (validator)") {
		t.Fatalf("first load of a policy module under a validator manifest: %+v", in)
	}
	if _, err := reg2.Validator("evilv", nil); err == nil {
		t.Fatal("a refused plugin is usable as a validator")
	}
}
