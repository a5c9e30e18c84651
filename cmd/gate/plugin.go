package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
)

func init() {
	register(command{
		name:    "plugin",
		summary: "scaffold, build and check WebAssembly plugins (new, build, check)",
		run:     runPlugin,
	})
}

func runPlugin(args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintln(stderr, `usage:
  gate plugin new KIND NAME [-dir DIR]    scaffold a plugin (KIND: policy, validator, channel)
  gate plugin build [-out DIR] SRC...     build plugin source folders into DIR/<name>.wasm + <name>.manifest.json
  gate plugin check [flags] FILE.wasm     load a built plugin, validate its manifest and run a self-test`)
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	switch args[0] {
	case "new":
		return pluginNew(args[1:], stdout, stderr)
	case "build":
		return pluginBuild(args[1:], stdout, stderr)
	case "check":
		return pluginCheck(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage()
		return 0
	}
	return usage()
}

var pluginNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// parseInterleaved parses flags that may come before or after positional args.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func pluginNew(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin new", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "folder to create (default ./NAME)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 2 {
		fmt.Fprintln(stderr, "usage: gate plugin new KIND NAME [-dir DIR]")
		return 2
	}
	kind, name := pos[0], pos[1]
	src, ok := pluginTemplates[kind]
	if !ok {
		fmt.Fprintf(stderr, "gate plugin new: unknown kind %q (policy, validator, channel)\n", kind)
		return 2
	}
	if !pluginNameRE.MatchString(name) {
		fmt.Fprintf(stderr, "gate plugin new: name %q must match %s\n", name, pluginNameRE)
		return 2
	}
	if *dir == "" {
		*dir = name
	}
	if _, err := os.Stat(*dir); err == nil {
		fmt.Fprintf(stderr, "gate plugin new: %s already exists\n", *dir)
		return 1
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "gate plugin new:", err)
		return 1
	}
	r := strings.NewReplacer("{{NAME}}", name, "{{KIND}}", kind)
	files := map[string]string{"main.go": r.Replace(src), "manifest.json": r.Replace(manifestTemplates[kind])}
	if _, err := pluginbuild.ModuleRoot(*dir); err != nil {
		// Outside any module: give the plugin its own.
		files["go.mod"] = r.Replace("module {{NAME}}\n\ngo 1.26\n\nrequire github.com/asyncgate/asyncgate v0.0.0\n\n// Point this at your AsyncGate checkout, or drop it once the SDK is published:\n// replace github.com/asyncgate/asyncgate => ../asyncgate\n")
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(*dir, f), []byte(body), 0o644); err != nil {
			fmt.Fprintln(stderr, "gate plugin new:", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "created %s plugin %q in %s\nnext: gate plugin build %s && gate plugin check %s\n",
		kind, name, *dir, *dir, filepath.Join(*dir, name+".wasm"))
	return 0
}

func pluginBuild(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "output folder (default: each source folder)")
	cache := fs.String("cache", "", "build cache folder (default: user cache dir)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) == 0 {
		fmt.Fprintln(stderr, "usage: gate plugin build [-out DIR] SRC...")
		return 2
	}
	ctx := context.Background()
	failed := false
	for _, root := range pos {
		srcs, err := pluginbuild.Sources(root)
		if err == nil && len(srcs) == 0 {
			err = fmt.Errorf("no manifest.json under %s", root)
		}
		if err != nil {
			fmt.Fprintln(stderr, "gate plugin build:", err)
			failed = true
			continue
		}
		for _, src := range srcs {
			dst := *out
			if dst == "" {
				dst = src
			}
			start := time.Now()
			name, err := pluginbuild.Build(ctx, src, dst, *cache)
			if err != nil {
				fmt.Fprintln(stderr, "gate plugin build:", err)
				failed = true
				continue
			}
			fmt.Fprintf(stdout, "built %s → %s (%v)\n", src, filepath.Join(dst, name+".wasm"), time.Since(start).Round(time.Millisecond))
		}
	}
	if failed {
		return 1
	}
	return 0
}

func pluginCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "config JSON for the self-test (policy/validator config, or the channel's operator config)")
	dir := fs.String("dir", "", "folder to grant a plugin that asks for one (default: a temp folder)")
	verbose := fs.Bool("v", false, "log the runtime's lines")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: gate plugin check [-config JSON] [-dir DIR] FILE.wasm")
		return 2
	}
	file := pos[0]
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stdout, "FAIL "+format+"\n", a...)
		return 1
	}
	wasm, err := os.ReadFile(file)
	if err != nil {
		return fail("%v", err)
	}
	manPath := strings.TrimSuffix(file, ".wasm") + ".manifest.json"
	man, err := os.ReadFile(manPath)
	if err != nil {
		manPath = filepath.Join(filepath.Dir(file), "manifest.json")
		if man, err = os.ReadFile(manPath); err != nil {
			return fail("no manifest beside %s (NAME.manifest.json or manifest.json)", file)
		}
	}
	m, err := plugin.ParseManifest(man)
	if err != nil {
		return fail("%s: %v", manPath, err)
	}
	if m.WasmSHA256 != "" && m.WasmSHA256 != plugin.Digest(wasm) {
		return fail("%s: wasm_sha256 %s does not match %s (sha256 %s): rebuild, or fix the manifest", manPath, m.WasmSHA256, file, plugin.Digest(wasm))
	}
	fmt.Fprintf(stdout, "ok   manifest %s: %s %s v%s (abi %d)\n", manPath, m.Kind, m.Name, m.Version, m.ABIVersion)

	logw := io.Discard
	if *verbose {
		logw = stderr
	}
	cacheDir := filepath.Join(pluginbuild.DefaultCacheDir(), "..", "wasm-cache")
	rt, err := plugin.NewRuntime(plugin.Options{CacheDir: cacheDir, Logger: slog.New(slog.NewTextHandler(logw, nil))})
	if err != nil {
		return fail("%v", err)
	}
	defer rt.Close()
	grant := plugin.Grant{Config: json.RawMessage(*config)}
	if m.Capabilities.FS == "dir" {
		if *dir == "" {
			tmp, err := os.MkdirTemp("", "gate-plugin-check-")
			if err != nil {
				return fail("%v", err)
			}
			defer os.RemoveAll(tmp)
			*dir = tmp
		}
		grant.Dir = *dir
	}
	if m.Capabilities.HTTP {
		addr, stop, err := startEchoStore()
		if err != nil {
			return fail("%v", err)
		}
		defer stop()
		grant.HTTPHosts = []string{addr}
		if *config == "" && m.Kind == plugin.KindChannel {
			grant.Config = json.RawMessage(`{"endpoint": "http://` + addr + `/results"}`)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	dir2, err := os.MkdirTemp("", "gate-plugin-check-reg-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(dir2)
	// The same registry, sandbox and grant binding as gate serve: the
	// grant (and the -dir folder) is bound to this module's digest.
	stamped, err := pluginbuild.StampManifest(man, wasm)
	if err != nil {
		return fail("%s: %v", manPath, err)
	}
	grant.SHA256 = []string{plugin.Digest(wasm)}
	os.WriteFile(filepath.Join(dir2, m.Name+".wasm"), wasm, 0o644)
	os.WriteFile(filepath.Join(dir2, m.Name+".manifest.json"), stamped, 0o644)
	reg, err := plugin.NewRegistry(ctx, rt, plugin.RegistryOptions{Dir: dir2, Grants: map[string]plugin.Grant{m.Name: grant}})
	if err != nil {
		return fail("%v", err)
	}
	defer reg.Close()
	p, err := reg.Plugin(m.Name)
	if err != nil {
		for _, in := range reg.List() {
			if in.Refused != "" {
				return fail("load: %s", in.Refused)
			}
		}
		return fail("load: %v", err)
	}
	fmt.Fprintf(stdout, "ok   loaded %s (sha256 %s) in %v: ABI %d, exports present\n", file, p.Digest[:16], time.Since(start).Round(time.Millisecond), plugin.ABIVersion)

	rc := 0
	check := func(what string, err error, detail string) {
		if err != nil {
			rc = 1
			fmt.Fprintf(stdout, "FAIL %s: %v\n", what, err)
			return
		}
		fmt.Fprintf(stdout, "ok   %s%s\n", what, detail)
	}
	cfg := json.RawMessage(*config)
	switch m.Kind {
	case plugin.KindPolicy:
		pol, err := reg.Policy(m.Name, cfg)
		if err != nil {
			return fail("config: %v", err)
		}
		for _, in := range []host.FailureInput{
			{TaskID: "check-1", TaskType: "check", Kind: host.FailureError, Retryable: true, Attempts: 1, MaxRetries: 3, Error: "sample"},
			{TaskID: "check-2", TaskType: "check", Kind: host.FailureError, Retryable: true, Attempts: 4, MaxRetries: 3},
			{TaskID: "check-3", TaskType: "check", Kind: host.FailureError, Retryable: false, Attempts: 1, MaxRetries: 3},
			{TaskID: "check-4", TaskType: "check", Kind: host.FailureExpiry, Retryable: true, Attempts: 0, MaxRetries: 3, LeaseExpiries: 1},
		} {
			d, err := pol.Decide(ctx, in)
			b, _ := json.Marshal(d)
			check(fmt.Sprintf("decide(kind=%s retryable=%v attempts=%d/%d)", in.Kind, in.Retryable, in.Attempts, in.MaxRetries), err, " → "+string(b))
		}
	case plugin.KindValidator:
		v, err := reg.Validator(m.Name, cfg)
		if err != nil {
			return fail("config: %v", err)
		}
		for _, params := range []string{`{"path": "docs/report.txt"}`, `{"path": "../../etc/passwd", "note": "a\u0000b"}`} {
			err := v.Validate(ctx, "check", json.RawMessage(params))
			verdict := "valid"
			if host.IsCode(err, host.CodeInvalidParams) {
				verdict, err = "invalid: "+host.ErrorDetail(err), nil
			}
			check("validate("+params+")", err, " → "+verdict)
		}
	case plugin.KindChannel:
		ch, err := reg.Channel(m.Name)
		if err != nil {
			return fail("%v", err)
		}
		caps, err := ch.Capabilities(ctx)
		b, _ := json.Marshal(caps)
		check("capabilities", err, " → "+string(b))
		payload := []byte(`{"self_test": true}`)
		ptr, err := ch.Put(ctx, "check-1", payload)
		check("put", err, " → "+ptr)
		if err == nil {
			got, err := ch.Get(ctx, ptr)
			if err == nil && !bytes.Equal(got, payload) {
				err = fmt.Errorf("got %q back, want %q", got, payload)
			}
			check("get", err, " → payload round-trips")
			check("ack", ch.Ack(ctx, ptr), "")
		}
	}
	st := p.Stats()
	fmt.Fprintf(stdout, "     %d calls, %d failures, p50 %.0f µs, p99 %.0f µs\n", st.Calls, st.Failures, st.LatencyP50US, st.LatencyP99US)
	if rc != 0 {
		fmt.Fprintln(stdout, "FAIL self-test")
	} else {
		fmt.Fprintln(stdout, "PASS")
	}
	return rc
}

// startEchoStore runs a loopback HTTP server that stores POSTed bodies and
// serves them back, for self-testing http channels.
func startEchoStore() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var mu sync.Mutex
	store := map[string][]byte{}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPost, http.MethodPut:
			b, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
			id := r.Header.Get("X-Asyncgate-Task-Id")
			store[r.URL.Path+"/"+id] = b
			w.Header().Set("Location", r.URL.Path+"/"+id)
			w.WriteHeader(http.StatusCreated)
		case http.MethodGet:
			b, ok := store[r.URL.Path]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Write(b)
		case http.MethodDelete:
			delete(store, r.URL.Path)
		}
	})}
	go srv.Serve(ln)
	return ln.Addr().String(), func() {
		if err := srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("echo store close", "err", err)
		}
	}, nil
}

var pluginTemplates = map[string]string{
	"policy": `// Command {{NAME}} is an AsyncGate retry policy plugin.
//
// Build: gate plugin build .   (or GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o {{NAME}}.wasm .)
package main

import "github.com/asyncgate/asyncgate/sdk/plugin"

// config is this policy's per-task-type config; keep it in step with
// manifest.json's config_schema.
type config struct {
	DelaySeconds float64 ` + "`json:\"delay_seconds\"`" + `
}

func decide(in plugin.FailureInput, c *config) (plugin.Decision, error) {
	if !in.Retryable {
		return plugin.Decision{Action: plugin.ActionDeadLetter, Reason: plugin.ReasonFatalError}, nil
	}
	if in.Attempts > in.MaxRetries {
		return plugin.Decision{Action: plugin.ActionDeadLetter, Reason: plugin.ReasonMaxRetriesExceeded}, nil
	}
	delay := c.DelaySeconds
	if delay <= 0 {
		delay = 60
	}
	return plugin.Decision{Action: plugin.ActionRetry, DelaySeconds: delay}, nil
}

func init() { plugin.Policy(decide) }

func main() {}
`,
	"validator": `// Command {{NAME}} is an AsyncGate task-params validator plugin.
package main

import (
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

type config struct{}

func validate(in plugin.ValidateInput, _ *config) ([]plugin.Violation, error) {
	var out []plugin.Violation
	if p, ok := in.Params.Get("path"); ok && strings.Contains(p.Str, "..") {
		out = append(out, plugin.Violation{Key: "/path", Message: "must not contain .."})
	}
	return out, nil
}

func init() { plugin.Validator(validate) }

func main() {}
`,
	"channel": `// Command {{NAME}} is an AsyncGate result channel plugin. This skeleton
// keeps payloads in memory (per instance) — replace it with real storage.
package main

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

type config struct{}

var store = map[string][]byte{}

func init() {
	plugin.Channel(plugin.ChannelImpl[config]{
		Put: func(_ *config, taskID string, payload []byte) (plugin.PutResult, error) {
			sum := sha256.Sum256(payload)
			key := hex.EncodeToString(sum[:])
			store[key] = append([]byte(nil), payload...)
			return plugin.PutResult{Pointer: "{{NAME}}:" + key}, nil
		},
		Get: func(_ *config, pointer string) ([]byte, error) {
			b, ok := store[pointer[len("{{NAME}}:"):]]
			if !ok {
				return nil, plugin.Errorf("not_found", "no such result")
			}
			return b, nil
		},
		Capabilities: func(*config) (plugin.Capabilities, error) {
			return plugin.Capabilities{MaxSizeBytes: 1 << 20}, nil
		},
	})
}

func main() {}
`,
}

var manifestTemplates = map[string]string{
	"policy": `{
  "name": "{{NAME}}",
  "kind": "policy",
  "version": "0.1.0",
  "abi_version": 1,
  "description": "TODO",
  "config_schema": {
    "type": "object",
    "additionalProperties": false,
    "properties": {"delay_seconds": {"type": "number", "minimum": 0}}
  }
}
`,
	"validator": `{
  "name": "{{NAME}}",
  "kind": "validator",
  "version": "0.1.0",
  "abi_version": 1,
  "description": "TODO",
  "config_schema": {"type": "object", "additionalProperties": false}
}
`,
	"channel": `{
  "name": "{{NAME}}",
  "kind": "channel",
  "version": "0.1.0",
  "abi_version": 1,
  "description": "TODO",
  "capabilities": {},
  "config_schema": {"type": "object", "additionalProperties": false}
}
`,
}
