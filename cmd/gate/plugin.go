package main

import (
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

	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
)

func init() {
	register(command{
		name:    "plugin",
		summary: "scaffold, build, check and install WebAssembly plugins",
		run:     runPlugin,
	})
}

func runPlugin(args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintln(stderr, `usage:
  gate plugin new KIND NAME [-dir DIR]    scaffold a plugin (KIND: policy, validator, channel) in any folder
  gate plugin build [-out DIR] SRC...     build plugin source folders into DIR/<name>.wasm + <name>.manifest.json
  gate plugin check [flags] FILE.wasm     load a built plugin and run its manifest's examples
  gate plugin install [flags] FILE.wasm   drop a built plugin into a running gate and wait until it loads`)
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
	case "install":
		return pluginInstall(args[1:], stdout, stderr)
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
	files, err := scaffoldFiles(kind, name)
	if err != nil {
		fmt.Fprintln(stderr, "gate plugin new:", err)
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
	// Inside the AsyncGate repository (or a module that already requires the
	// SDK) the plugin is a package of that module; anywhere else it is its
	// own module with the SDK this binary carries.
	ownModule := !resolvesSDK(filepath.Dir(filepath.Clean(*dir)))
	if ownModule {
		files["go.mod"] = []byte(scaffoldGoMod(name))
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "gate plugin new:", err)
		return 1
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(*dir, f), body, 0o644); err != nil {
			fmt.Fprintln(stderr, "gate plugin new:", err)
			return 1
		}
	}
	if ownModule {
		pin, err := writeSDKCopy(*dir)
		if err != nil {
			fmt.Fprintln(stderr, "gate plugin new: writing the SDK:", err)
			return 1
		}
		fmt.Fprintf(stdout, "created %s plugin %q in %s (own module; SDK of gate %s, abi_version %d, in %s)\n",
			kind, name, *dir, pin.GateVersion, pin.ABIVersion, filepath.Join(*dir, filepath.FromSlash(sdkCopyDir)))
	} else {
		fmt.Fprintf(stdout, "created %s plugin %q in %s (a package of the enclosing module)\n", kind, name, *dir)
	}
	fmt.Fprintf(stdout, "next: (cd %s && go test .) && gate plugin build %s && gate plugin check %s\n",
		*dir, *dir, filepath.Join(*dir, name+".wasm"))
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
			// A scaffold carrying its own SDK copy gets this gate's SDK first.
			if root, err := pluginbuild.ModuleRoot(src); err == nil {
				if err := syncSDK(root, src, stdout); err != nil {
					fmt.Fprintln(stderr, "gate plugin build:", err)
					failed = true
					continue
				}
			}
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
	exs, err := manifestExamples(man)
	if err != nil {
		return fail("%s: %v", manPath, err)
	}
	if len(exs) == 0 {
		fmt.Fprintln(stdout, "     no examples in the manifest: running built-in samples")
		exs = sampleExamples(m.Kind)
	}
	if !runExamples(ctx, stdout, reg, m, json.RawMessage(*config), exs) {
		rc = 1
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
