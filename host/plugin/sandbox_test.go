package plugin

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// victim is a data folder with an admin.key beside the folder granted to a
// plugin, and links planted in the granted folder before the plugin loads.
type victim struct {
	data, granted, key string
}

const secretKey = "ag_admin_secret_do_not_leak\n"

func newVictim(t *testing.T) victim {
	t.Helper()
	data := t.TempDir()
	v := victim{data: data, granted: filepath.Join(data, "results"), key: filepath.Join(data, "admin.key")}
	if err := os.WriteFile(v.key, []byte(secretKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(v.granted, 0o700); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"planted":      "..",  // relative, to the data folder
		"planted-abs":  data,  // absolute, to the data folder
		"planted-file": v.key, // absolute, to the key itself
	} {
		if err := os.Symlink(target, filepath.Join(v.granted, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(v.key, filepath.Join(v.granted, "planted-hard")); err != nil {
		t.Fatal(err)
	}
	return v
}

// check fails the test if anything outside the granted folder was read,
// written or created, and returns the plugin's report.
func (v victim) check(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(v.granted, "escape-report.txt"))
	if err != nil {
		t.Fatalf("the escape plugin left no report: %v", err)
	}
	report := string(b)
	for _, line := range strings.Split(strings.TrimSpace(report), "\n") {
		if strings.HasPrefix(line, "LEAK") || strings.HasPrefix(line, "WROTE") || strings.HasPrefix(line, "BROKEN") {
			t.Errorf("sandbox: %s", line)
		}
	}
	if strings.Contains(report, strings.TrimSpace(secretKey)) {
		t.Errorf("the report holds the admin key")
	}
	if !strings.Contains(report, "works inside") {
		t.Errorf("the granted folder does not work for the plugin:\n%s", report)
	}
	if b, err := os.ReadFile(v.key); err != nil || string(b) != secretKey {
		t.Errorf("admin.key was changed: %q %v", b, err)
	}
	for _, f := range []string{"escaped.txt", "moved-out"} {
		if _, err := os.Lstat(filepath.Join(v.data, f)); err == nil {
			t.Errorf("the plugin created %s outside its folder", f)
		}
	}
	return report
}

// TestSandboxEscape loads a hostile channel plugin granted a folder; at load
// (capabilities runs then) it tries to leave the folder through relative and
// absolute symlinks it creates, hard links, "..", and links planted in the
// folder beforehand, to read and overwrite admin.key beside the folder.
// Every attempt must fail and the folder itself must keep working.
func TestSandboxEscape(t *testing.T) {
	t.Parallel()
	v := newVictim(t)
	cfg, _ := json.Marshal(map[string]string{"victim_dir": v.data})
	b := setup(t, map[string]Grant{"escape": {Dir: v.granted, Config: cfg}}, Limits{}, "escape")
	if in := infoOf(b.reg, "escape"); in.State != "ready" {
		t.Fatalf("escape did not load: %+v", in)
	}
	report := v.check(t)
	for _, attempt := range []string{"symlink-up-read", "symlink-root-read", "symlink-abs-dir-read", "hardlink-read",
		"dotdot-read", "planted-rel-read", "planted-abs-read", "planted-file-read", "planted-hard-read", "planted-hard-write"} {
		if !strings.Contains(report, "held "+attempt+" ") {
			t.Errorf("attempt %s not reported as held:\n%s", attempt, report)
		}
	}
	for _, made := range []string{"symlink-up", "symlink-root", "symlink-abs", "hardlink"} {
		if !strings.Contains(report, "refused "+made+" ") {
			t.Errorf("the guest could create link %s:\n%s", made, report)
		}
	}
	// The report is also what get answers: the channel works.
	ch, err := b.reg.Channel("escape")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ch.Get(context.Background(), "escape:report")
	if err != nil || string(got) != report {
		t.Fatalf("get: %q %v", got, err)
	}
}

// TestDropInDoesNotInheritGrant: a plugin dropped into the folder under a
// built-in's name gets none of the built-in's grant, so one that asks for a
// folder is refused at load (before its capabilities run) and the built-in
// keeps serving.
func TestDropInDoesNotInheritGrant(t *testing.T) {
	t.Parallel()
	v := newVictim(t)
	builtins := t.TempDir()
	copyPlugin(t, "file", "file", builtins)
	dir := t.TempDir()
	wasm, man := readBuilt(t, "escape")
	writePair(t, dir, "file", wasm, []byte(replaceName(string(man), "escape", "file")))
	rt := newTestRuntime(t, Limits{})
	grants := map[string]Grant{"file": {Dir: v.granted}}
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Builtins: os.DirFS(builtins), Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	in := infoOf(reg, "file")
	if in.Source != "builtin" || !strings.Contains(in.Refused, "granted none") {
		t.Fatalf("the drop-in was not refused for want of a grant: %+v", in)
	}
	if _, err := os.Stat(filepath.Join(v.granted, "escape-report.txt")); err == nil {
		t.Fatal("the drop-in ran in the built-in's folder")
	}
	if b, _ := os.ReadFile(v.key); string(b) != secretKey {
		t.Fatal("admin.key changed")
	}
	// A grant bound to the drop-in's digest is the operator's explicit choice.
	grants = map[string]Grant{"file": {Dir: v.granted, SHA256: []string{Digest(wasm)}}}
	reg2, err := NewRegistry(context.Background(), rt, RegistryOptions{Dir: dir, Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg2.Close)
	if in := infoOf(reg2, "file"); in.State != "ready" {
		t.Fatalf("a drop-in with a grant bound to its digest: %+v", in)
	}
	v.check(t)
}

// TestRootFSRefusesFIFO: a FIFO planted in the granted folder is refused
// at once; opening it for reading would wait for a writer, in host code no
// call deadline interrupts.
func TestRootFSRefusesFIFO(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	rfs, err := newRootFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rfs.close()
	done := make(chan experimentalsys.Errno, 1)
	go func() {
		f, e := rfs.OpenFile("/pipe", experimentalsys.O_RDONLY, 0)
		if e == 0 {
			f.Close()
		}
		done <- e
	}()
	select {
	case e := <-done:
		if e != experimentalsys.EPERM {
			t.Fatalf("opening a FIFO: errno %v, want EPERM", e)
		}
	case <-time.After(5 * time.Second):
		// Let the blocked open go: a writer arriving ends its wait.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("opening a FIFO in the granted folder blocked")
	}
}

// TestOpenResultRefusesHardLink: the host's own read of a file channel
// result refuses a file with more than one link, as the plugin's
// filesystem does, so a hard link planted in the results folder does not
// hand out the file it points at.
func TestOpenResultRefusesHardLink(t *testing.T) {
	t.Parallel()
	v := newVictim(t)
	builtins := t.TempDir()
	copyPlugin(t, "file", "file", builtins)
	rt := newTestRuntime(t, Limits{})
	reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Builtins: os.DirFS(builtins), Grants: map[string]Grant{"file": {Dir: v.granted}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	if err := reg.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	ch, err := reg.Channel("file")
	if err != nil {
		t.Fatal(err)
	}
	const task = "task-1"
	sum := strings.Repeat("ab", 32)
	folder := filepath.Join(v.granted, task[len(task)-2:], task)
	if err := os.MkdirAll(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(v.key, filepath.Join(folder, sum)); err != nil {
		t.Skip("no hard links here:", err)
	}
	rc, _, ok, err := ch.(*ChannelAdapter).OpenResult(context.Background(), task, "file:"+task+"/"+sum)
	if err == nil {
		b, _ := io.ReadAll(rc)
		rc.Close()
		t.Fatalf("a hard link to admin.key was served (%d bytes)", len(b))
	}
	if !ok || !host.IsCode(err, host.CodeChannelError) {
		t.Fatalf("got ok=%v %v, want a channel error", ok, err)
	}
}
