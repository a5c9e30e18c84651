package plugin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Limits bound every plugin. Zero fields take the defaults noted.
type Limits struct {
	MemoryPages  uint32        // per instance, 64 KiB pages; default 1024 (64 MiB); a Go guest needs ≥ 43
	Timeout      time.Duration // per call; default 2 s
	StartTimeout time.Duration // per cold start (instantiate + _initialize); default 10 s
	MaxInstances int           // per plugin version; default 4
	IdleTimeout  time.Duration // an idle instance older than this is closed; default 60 s
	MaxResult    uint32        // bytes a result frame may have; default 64 MiB
	// KeepPages bounds the memory of a pooled instance, in 64 KiB pages:
	// one whose memory grew past it (a guest's memory never shrinks) is
	// closed after its call instead of going back to the pool, its memory
	// returned; default 256 (16 MiB; a Go guest starts at ~3 MiB).
	KeepPages uint32
}

func (l Limits) withDefaults() Limits {
	if l.MemoryPages == 0 {
		l.MemoryPages = 1024
	}
	if l.Timeout <= 0 {
		l.Timeout = 2 * time.Second
	}
	if l.StartTimeout <= 0 {
		l.StartTimeout = 10 * time.Second
	}
	if l.MaxInstances <= 0 {
		l.MaxInstances = 4
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 60 * time.Second
	}
	if l.MaxResult == 0 {
		l.MaxResult = 64 << 20
	}
	if l.KeepPages == 0 {
		l.KeepPages = 256
	}
	return l
}

// Grant is what the operator allows one plugin. A capability a manifest asks
// for is given only when the grant allows it too; a plugin that asks for fs
// or http without a matching grant is refused at load.
type Grant struct {
	Dir       string   // host directory mounted read-write at /data (capability "fs": "dir")
	HTTPHosts []string // hosts ("example.com" or "example.com:8443") http_request may reach
	// HTTPPrefixes, when set, narrows HTTPHosts: every request and every
	// redirect must be under one of these URLs (same scheme, host and port,
	// path at or below the prefix's path, no dot segments).
	HTTPPrefixes []string
	Clock        bool // allow the real wall clock (capability "clock")
	// Mail is the gate's mail client behind the mail_* host functions
	// (capability "mail"); its server, credentials and recipient allowlist
	// stay in the gate.
	Mail   Mail
	Config json.RawMessage // the operator's config for a channel plugin
	Limits Limits          // overrides of the runtime's limits for this plugin (zero = runtime's)
	// SHA256 binds the grant to modules (hex sha256 of the .wasm). Empty: the
	// grant is for the built-in of its name only, never for a plugin dropped
	// into the folder under that name (see RegistryOptions.Grants).
	SHA256 []string
}

// Options configure a Runtime.
type Options struct {
	// CacheDir holds wazero's compilation cache (e.g. <data>/wasm-cache), so a
	// restart compiles nothing. Empty keeps the cache in memory only.
	CacheDir string
	// Limits apply to every plugin unless its Grant overrides them.
	Limits Limits
	// Logger receives load, refusal and fault lines; default slog.Default().
	Logger *slog.Logger
	// Released, when set, is called after a wazero runtime closed (a
	// plugin went dormant, was replaced, or left the interpreter): its
	// memory is garbage now, which the process may want to return.
	Released func()
}

// Runtime compiles plugins and runs them. Compiled code is shared through one
// compilation cache; each loaded plugin version gets its own wazero runtime
// (its own memory limit and host functions) and a pool of warm instances.
type Runtime struct {
	opts  Options
	cache wazero.CompilationCache
	log   *slog.Logger
	// compiling holds the slot of the staged compile in flight (one at a
	// time: a cold start's interpreters and requests get the other core,
	// and one compile's garbage is made at a time).
	compiling chan struct{}
	imu       sync.Mutex
	interps   int           // interpreter loads in flight
	noInterp  chan struct{} // closed when interps drops to 0
	// headStart is interpHeadStart; beforeCompile, when set, runs before
	// each staged compile (tests hold a compile with it).
	headStart     time.Duration
	beforeCompile func(ctx context.Context)
	interpOnly    bool // every load runs on the interpreter only (tests)
	// limitsHook, when set, adjusts each load's limits (tests change a
	// start deadline between loads with it, as a machine's load changes).
	limitsHook func(name string, l Limits) Limits
}

// compiledMarks is the folder, in the compilation cache's, where a start
// notes each module it compiled (an empty file named by wazero's version and
// the module's sha256): wazero cannot be asked whether its cache holds a
// module, and a staged load must choose between waiting for the cache and
// starting the interpreter before it knows.
const compiledMarks = "asyncgate-compiled"

// markName names a module's mark: the wazero version keys the cache's own
// entries too, so a binary with another wazero does not trust old marks.
func markName(digest string) string { return wazeroVersion() + "-" + digest }

var wazeroVersion = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				return d.Version
			}
		}
	}
	return "unknown"
})

// compiledBefore reports whether a module was compiled into this runtime's
// on-disk cache before (markCompiled).
func (r *Runtime) compiledBefore(digest string) bool {
	if r.opts.CacheDir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(r.opts.CacheDir, compiledMarks, markName(digest)))
	return err == nil
}

// markCompiled notes that the on-disk cache holds a module now.
func (r *Runtime) markCompiled(digest string) {
	if r.opts.CacheDir == "" || r.compiledBefore(digest) {
		return
	}
	// Best effort: without the mark the next start only runs the
	// interpreter for a while for nothing.
	dir := filepath.Join(r.opts.CacheDir, compiledMarks)
	if os.MkdirAll(dir, 0o700) == nil {
		_ = os.WriteFile(filepath.Join(dir, markName(digest)), nil, 0o600)
	}
}

// interpBegin and interpEnd count the interpreter loads in flight; a
// staged compile that did not start within its head start waits for them
// (interpsDone), so the interpreters of a cold start are not slowed by the
// compiles they are there to hide.
func (r *Runtime) interpBegin() {
	r.imu.Lock()
	if r.interps == 0 {
		r.noInterp = make(chan struct{})
	}
	r.interps++
	r.imu.Unlock()
}

func (r *Runtime) interpEnd() {
	r.imu.Lock()
	if r.interps--; r.interps == 0 {
		close(r.noInterp)
	}
	r.imu.Unlock()
}

func (r *Runtime) interpsDone() <-chan struct{} {
	r.imu.Lock()
	defer r.imu.Unlock()
	if r.interps == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return r.noInterp
}

// NewRuntime returns a Runtime. It compiles the embedded schemas once.
func NewRuntime(opts Options) (*Runtime, error) {
	if _, err := loadSchemas(); err != nil {
		return nil, err
	}
	opts.Limits = opts.Limits.withDefaults()
	r := &Runtime{opts: opts, log: opts.Logger, compiling: make(chan struct{}, 1), headStart: interpHeadStart}
	if r.log == nil {
		r.log = slog.Default()
	}
	if opts.CacheDir != "" {
		if err := os.MkdirAll(opts.CacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("plugin cache dir: %w", err)
		}
		c, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("plugin cache dir: %w", err)
		}
		r.cache = c
	} else {
		r.cache = wazero.NewCompilationCache()
	}
	return r, nil
}

// Close releases the compilation cache. Close every Plugin first.
func (r *Runtime) Close() error { return r.cache.Close(context.Background()) }

// Plugin is one loaded version of a plugin: its manifest, compiled module and
// pool of instances. It is safe for concurrent use.
type Plugin struct {
	Manifest *Manifest
	Digest   string // hex sha256 of the wasm module
	Source   string // where it came from ("builtin" or a file path)

	rt     *Runtime
	modCfg wazero.ModuleConfig
	grant  Grant
	limits Limits
	stats  *stats
	// cur is the pool calls go to: the compiled module's, or the
	// interpreter's until the compiled module is ready (see loadStaged).
	cur atomic.Pointer[pool]
	sem chan struct{} // one slot per instance in use, across pools
	// mu guards closed and pools; rootFS closes once the plugin is closed
	// and its last pool is gone.
	mu       sync.Mutex
	closed   bool
	pools    int
	upgraded chan struct{} // closed when no compile runs for this plugin anymore
	stop     context.CancelFunc
	// reread reads the module again, for a dormant plugin's next call
	// (nil: the plugin never goes dormant). wakeMu serializes wakes.
	reread   func() ([]byte, error)
	wakeMu   sync.Mutex
	caps     json.RawMessage // a channel's capabilities, read at load
	rootFS   *rootFS         // the granted folder, when the plugin has one
	loadedAt time.Time
	// manifestJSON is the manifest as read, to tell a touched file from a changed one.
	manifestJSON []byte
}

// Digest returns the hex sha256 of a module, as Plugin.Digest, a manifest's
// wasm_sha256 and Grant.SHA256 name it.
func Digest(wasm []byte) string { return digestOf(wasm) }

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Load compiles a plugin module, checks it against its manifest and the
// operator's grant, starts one instance to check its ABI version and exports,
// and returns it ready to call. st may be nil.
func (r *Runtime) Load(ctx context.Context, wasm, manifest []byte, grant Grant, source string) (*Plugin, error) {
	return r.load(ctx, wasm, manifest, grant, source, nil, engineCompiler)
}

// engineKind says how load runs a module.
type engineKind int

const (
	// engineCompiler compiles the module to machine code before load
	// returns (~1 s per built-in on a cold cache, ~50 ms from the cache).
	engineCompiler engineKind = iota
	// engineStaged serves a module the compilation cache does not hold
	// from wazero's interpreter (~0.3 s to load, calls ~5-7x slower)
	// while it compiles, and switches to the compiled module once it is
	// ready: a start has no window without the plugin (loadStaged).
	engineStaged
	// engineInterpreter runs the module on the interpreter only (tests).
	engineInterpreter
)

// interpHeadStart is how long a staged load of a module the compilation
// cache holds (~50 ms to load, seconds on a busy machine) waits before it
// starts the interpreter too, in case the cache did not have it after all
// (emptied, or written by another wazero version).
const interpHeadStart = 2 * time.Second

func (r *Runtime) load(ctx context.Context, wasm, manifest []byte, grant Grant, source string, st *stats, eng engineKind) (_ *Plugin, err error) {
	m, err := ParseManifest(manifest)
	if err != nil {
		return nil, err
	}
	if r.interpOnly {
		eng = engineInterpreter
	}
	p := &Plugin{Manifest: m, Digest: digestOf(wasm), Source: source, rt: r, grant: grant, stats: st, loadedAt: time.Now(), upgraded: make(chan struct{})}
	if p.stats == nil {
		p.stats = newStats()
	}
	base := r.opts.Limits
	if grant.Mail != nil && grant.Mail.CallBound() > base.Timeout {
		// A call that talks to a mail server needs as long as a session
		// may take (mail timeout_seconds), not the runtime's default; the
		// manifest may still ask for less and the grant may set its own.
		base.Timeout = grant.Mail.CallBound()
	}
	p.limits = mergeLimits(base, m.Limits, grant.Limits)
	if r.limitsHook != nil {
		p.limits = r.limitsHook(m.Name, p.limits)
	}
	p.sem = make(chan struct{}, p.limits.MaxInstances)

	modCfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions("_initialize").
		WithRandSource(rand.Reader).
		// The guest's Go runtime does not know the instance's memory cap; a
		// soft limit at 75% makes its GC work harder before the cap is hit
		// (the guest sees no other environment variable).
		WithEnv("GOMEMLIMIT", fmt.Sprintf("%dKiB", uint64(p.limits.MemoryPages)*64*3/4))
	switch {
	case m.Capabilities.FS == "dir" && grant.Dir == "":
		return nil, notGranted{fmt.Sprintf("plugin %s asks for a directory (capabilities.fs) but the operator granted none", m.Name)}
	case m.Capabilities.FS == "dir":
		if st, err := os.Stat(grant.Dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("plugin %s: granted directory %q is not a directory", m.Name, grant.Dir)
		}
		// Not WithDirMount: wazero's directory mount follows links out of
		// the folder. rootFS resolves every path beneath it (see rootfs.go).
		rfs, err := newRootFS(grant.Dir)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: granted directory %q: %w", m.Name, grant.Dir, err)
		}
		p.rootFS = rfs
		defer func() {
			if err != nil {
				rfs.close()
			}
		}()
		modCfg = modCfg.WithFSConfig(wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(rfs, "/data"))
	}
	if m.Capabilities.HTTP && len(grant.HTTPHosts) == 0 {
		return nil, notGranted{fmt.Sprintf("plugin %s asks for http but the operator allowlisted no hosts", m.Name)}
	}
	if m.Capabilities.Mail && grant.Mail == nil {
		return nil, notGranted{fmt.Sprintf("plugin %s asks for mail but the operator granted none (configure mail)", m.Name)}
	}
	if m.Capabilities.Clock && grant.Clock {
		modCfg = modCfg.WithSysWalltime().WithSysNanotime()
	}
	if m.Kind == KindChannel {
		if err := m.ValidateConfig(grant.Config); err != nil {
			return nil, err
		}
	}
	p.modCfg = modCfg
	var pl *pool
	if eng == engineStaged {
		pl, err = p.loadStaged(ctx, wasm)
	} else {
		close(p.upgraded)
		if pl, err = p.newPool(ctx, wasm, eng == engineInterpreter); err == nil {
			p.cur.Store(pl)
		}
	}
	if err != nil {
		return nil, err
	}
	if m.Kind == KindChannel {
		res, err := p.Call(ctx, "capabilities", p.withConfig(nil, grant.Config), nil)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("plugin %s: capabilities: %w", m.Name, err)
		}
		p.caps = res.JSON
	} else if err := p.implementsKind(ctx); err != nil {
		p.Close()
		return nil, err
	}
	r.log.Info("plugin loaded", "plugin", m.Name, "kind", m.Kind, "version", m.Version, "sha256", p.Digest[:12], "source", source, "engine", pl.engineName())
	return p, nil
}

// loadCheckType is the task type of the call implementsKind makes.
const loadCheckType = "asyncgate.load-check"

// implementsKind makes one cheap call of a policy's or validator's
// operation, as gate plugin check's self-test does, and refuses a module
// that answers not_implemented: the SDK exports every operation, so a
// module built for another kind passes the export check and answers each
// real call with not_implemented. Any other answer, an error or fault
// included, is the plugin's business with a real config and input: the
// call only asks whether the operation is there. It is bounded by the
// plugin's call deadline, is not counted in its stats, and runs on the
// warm instance the load just started (a channel's capabilities call at
// load is its equivalent).
func (p *Plugin) implementsKind(ctx context.Context) error {
	var op string
	var input []byte
	schemas := true
	switch p.Manifest.Kind {
	case KindPolicy:
		op, schemas = "decide", false
		input = encodeFailureRecord(host.FailureInput{TaskID: "load-check", TaskType: loadCheckType, Kind: host.FailureError,
			Retryable: true, Attempts: 1, MaxRetries: 3}, nil)
	case KindValidator:
		op, input = "validate", []byte(`{"task_type":"`+loadCheckType+`","params":{}}`)
	default:
		return nil
	}
	_, f := p.call(ctx, op, input, nil, schemas, nil)
	if f != nil && f.Kind == FaultGuestError && f.Code == "not_implemented" {
		return fmt.Errorf("plugin %s: module does not implement its manifest's kind (%s): %s answered not_implemented (%s); is the manifest's kind the one the module was built as?",
			p.Manifest.Name, p.Manifest.Kind, op, f.Message)
	}
	return nil
}

// newPool builds a wazero runtime for the module (the compiler's, sharing
// the compilation cache, or the interpreter's), compiles the module, checks
// its imports and exports, and starts one instance, which checks the ABI
// version and leaves the pool warm.
func (p *Plugin) newPool(ctx context.Context, wasm []byte, interp bool) (_ *pool, err error) {
	m := p.Manifest
	cfg := wazero.NewRuntimeConfigCompiler()
	if interp {
		cfg = wazero.NewRuntimeConfigInterpreter()
	}
	cfg = cfg.WithCoreFeatures(api.CoreFeaturesV2 &^ api.CoreFeatureReferenceTypes).
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(p.limits.MemoryPages)
	if !interp {
		// The interpreter's compiled form is not cached: it is quick to
		// make and lives only until the compiled module replaces it.
		cfg = cfg.WithCompilationCache(p.rt.cache)
	}
	pl := &pool{p: p, interp: interp, wrt: wazero.NewRuntimeWithConfig(ctx, cfg)}
	defer func() {
		if err != nil {
			// Closing the runtime alone does not release the module's
			// machine code while the compilation cache is shared: only
			// closing the compiled module does (see closeRuntime).
			if pl.compiled != nil {
				pl.compiled.Close(context.Background())
			}
			pl.wrt.Close(context.Background())
		}
	}()
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, pl.wrt); err != nil {
		return nil, fmt.Errorf("plugin %s: wasi: %w", m.Name, err)
	}
	if err := p.instantiateHostModule(ctx, pl.wrt); err != nil {
		return nil, fmt.Errorf("plugin %s: host module: %w", m.Name, err)
	}
	// Two compile workers: wazero's single-worker compile never looks at
	// ctx, so closing a registry that is still compiling in the background
	// would wait for every module to finish; the worker pool stops at the
	// next function once ctx ends (and is ~2x faster on a cold cache).
	cctx := experimental.WithCompilationWorkers(ctx, 2)
	if pl.compiled, err = pl.wrt.CompileModule(cctx, wasm); err != nil {
		return nil, fmt.Errorf("plugin %s: compile: %w", m.Name, err)
	}
	// A table lives in the gate's heap, outside the memory cap, and
	// table.grow runs in host code the call deadline cannot stop: without
	// reference types a module has no table.grow (nor table.fill, nor more
	// than one table), and checkTables bounds the one it declares once the module compiled. Go's
	// wasip1 output uses no reference-types instruction.
	if err := checkTables(wasm); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", m.Name, err)
	}
	exports := pl.compiled.ExportedFunctions()
	for _, name := range append([]string{"_initialize", "asyncgate_abi_version", "asyncgate_alloc"}, kindOps[m.Kind]...) {
		if _, ok := exports[name]; !ok {
			return nil, fmt.Errorf("plugin %s: module does not export %s (is it built with -buildmode=c-shared and sdk/plugin?)", m.Name, name)
		}
	}
	for _, imp := range pl.compiled.ImportedFunctions() {
		mod, name, _ := imp.Import()
		if mod != hostModule || name == "sha256" {
			continue
		}
		if strings.HasPrefix(name, "mail_") {
			if !m.Capabilities.Mail {
				return nil, fmt.Errorf("plugin %s imports %s.%s but its manifest does not ask for mail", m.Name, mod, name)
			}
			continue
		}
		if !m.Capabilities.HTTP {
			return nil, fmt.Errorf("plugin %s imports %s.%s but its manifest does not ask for http", m.Name, mod, name)
		}
	}
	inst, err := pl.get(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.pools++
	p.mu.Unlock()
	pl.put(inst, true)
	if !interp {
		p.rt.markCompiled(p.Digest)
	}
	return pl, nil
}

// loadStaged starts compiling the module and serves its pool if that ends
// within interpHeadStart (the module was in the compilation cache), else
// the interpreter's pool, which serves until the compiled one replaces it
// (then it swaps them). Staged compiles take turns and yield to the
// interpreters (compileStaged).
func (p *Plugin) loadStaged(ctx context.Context, wasm []byte) (*pool, error) {
	type built struct {
		pl  *pool
		err error
	}
	cctx, cancel := context.WithCancel(ctx)
	p.stop = cancel
	done := make(chan built, 1)
	// A module compiled before (markCompiled) loads from the cache: wait
	// for that. Any other goes to the interpreter at once, and its compile
	// waits for the interpreters in flight.
	cached := p.rt.compiledBefore(p.Digest)
	wait := time.Duration(0)
	if cached {
		wait = p.rt.headStart
	} else {
		p.rt.interpBegin()
	}
	go func() {
		pl, err := p.compileStaged(cctx, wasm, cached)
		done <- built{pl, err}
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case b := <-done:
		if !cached {
			p.rt.interpEnd()
		}
		close(p.upgraded)
		if b.err == nil {
			p.cur.Store(b.pl)
		}
		return b.pl, b.err
	case <-t.C:
	}
	if cached {
		p.rt.interpBegin()
	}
	ipl, err := p.newPool(ctx, wasm, true)
	p.rt.interpEnd()
	if err != nil {
		// The compiler has the last word on a module the interpreter refused.
		b := <-done
		close(p.upgraded)
		if b.err == nil {
			p.cur.Store(b.pl)
		}
		return b.pl, b.err
	}
	p.cur.Store(ipl)
	go func() {
		defer close(p.upgraded)
		b := <-done
		if b.err != nil {
			if cctx.Err() == nil {
				p.rt.log.Warn("plugin did not compile; it keeps running on the interpreter", "plugin", p.Manifest.Name,
					"version", p.Manifest.Version, "err", b.err)
			}
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			b.pl.retire()
			return
		}
		old := p.cur.Swap(b.pl)
		p.mu.Unlock()
		old.retire()
		p.rt.log.Info("plugin compiled", "plugin", p.Manifest.Name, "version", p.Manifest.Version, "sha256", p.Digest[:12])
	}()
	return ipl, nil
}

// compileStaged compiles the module for loadStaged. A module the cache
// holds loads at once (loads run side by side: they are short); a real
// compile waits for the interpreters in flight, so they get the CPU first,
// and compiles take turns, so one compile's garbage exists at a time.
func (p *Plugin) compileStaged(ctx context.Context, wasm []byte, cached bool) (*pool, error) {
	if !cached {
		select {
		case p.rt.compiling <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-p.rt.compiling }()
		select {
		case <-p.rt.interpsDone():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if p.rt.beforeCompile != nil {
		p.rt.beforeCompile(ctx)
	}
	return p.newPool(ctx, wasm, false)
}

// Interpreted reports whether calls run on wazero's interpreter now (the
// compiled module is not ready yet).
func (p *Plugin) Interpreted() bool { return p.cur.Load().interp }

// WaitCompiled waits until no compile runs for the plugin anymore (it
// serves compiled code, or its compile failed and it stays on the
// interpreter) or ctx ends.
func (p *Plugin) WaitCompiled(ctx context.Context) error {
	select {
	case <-p.upgraded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func mergeLimits(base Limits, req ManifestLimits, grant Limits) Limits {
	l := base
	if req.MemoryPages > 0 && req.MemoryPages < l.MemoryPages {
		l.MemoryPages = req.MemoryPages
	}
	if t := req.Timeout(); t > 0 && t < l.Timeout {
		l.Timeout = t
	}
	if grant.MemoryPages > 0 {
		l.MemoryPages = grant.MemoryPages
	}
	if grant.Timeout > 0 {
		l.Timeout = grant.Timeout
	}
	if grant.StartTimeout > 0 {
		l.StartTimeout = grant.StartTimeout
	}
	if grant.MaxInstances > 0 {
		l.MaxInstances = grant.MaxInstances
	}
	if grant.IdleTimeout > 0 {
		l.IdleTimeout = grant.IdleTimeout
	}
	if grant.MaxResult > 0 {
		l.MaxResult = grant.MaxResult
	}
	if grant.KeepPages > 0 {
		l.KeepPages = grant.KeepPages
	}
	return l
}

// withConfig returns the JSON object obj with "config" set (obj may be nil).
func (p *Plugin) withConfig(obj map[string]any, config json.RawMessage) []byte {
	if obj == nil {
		obj = map[string]any{}
	}
	if len(config) > 0 {
		obj["config"] = config
	}
	b, _ := json.Marshal(obj)
	return b
}

// Result is what a successful call returns: the JSON result (valid against the
// operation's output schema) and the binary data, if any.
type Result struct {
	JSON json.RawMessage
	Data []byte
}

type envelope struct {
	OK     *bool           `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Panic   bool   `json:"panic"`
	} `json:"error"`
}

// Call runs one operation on a warm instance: it validates input against the
// operation's input schema, calls the export under the plugin's deadline, and
// validates the result against the output schema. Any error is a *Fault; the
// instance that produced a trap, timeout, panic or bad output is discarded.
func (p *Plugin) Call(ctx context.Context, op string, input, data []byte) (Result, error) {
	return p.run(ctx, op, input, data, true, nil)
}

// run is Call with the schema checks optional: the decide fast path checks
// its binary input and its output with typed code equivalent to the schemas.
// check, when not nil, is one more check of the result JSON; like the
// schemas it runs before the instance goes back to the pool, and an error
// from it is a FaultBadOutput that discards the instance.
func (p *Plugin) run(ctx context.Context, op string, input, data []byte, schemas bool, check func(json.RawMessage) error) (Result, error) {
	start := time.Now()
	ctx, span := p.startCallSpan(ctx, op)
	res, f := p.call(ctx, op, input, data, schemas, check)
	endCallSpan(span, f)
	if f == nil {
		p.stats.observe(time.Since(start), false, false, "")
		return res, nil
	}
	f.Plugin, f.Version, f.Op = p.Manifest.Name, p.Manifest.Version, op
	p.stats.observe(time.Since(start), true, f.discard(), f.Error())
	lvl := slog.LevelWarn
	if f.Kind == FaultGuestError || f.Kind == FaultCanceled {
		lvl = slog.LevelInfo
	}
	attrs := []any{"plugin", p.Manifest.Name, "version", p.Manifest.Version,
		"op", op, "fault", string(f.Kind), "code", f.Code, "detail", truncate(f.Message, 4000)}
	if f.Trace != "" {
		attrs = append(attrs, "trace", truncate(f.Trace, 8000))
	}
	p.rt.log.Log(ctx, lvl, "plugin call failed", attrs...)
	return Result{}, f
}

func (p *Plugin) call(ctx context.Context, op string, input, data []byte, schemas bool, check func(json.RawMessage) error) (Result, *Fault) {
	if schemas {
		if err := validateJSON(schemaSet.in[op], input); err != nil {
			return Result{}, &Fault{Kind: FaultBadInput, Code: "bad_request", Message: "input: " + err.Error()}
		}
	}
	inst, err := p.getInstance(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, &Fault{Kind: FaultCanceled, Message: err.Error(), Err: err}
		}
		return Result{}, &Fault{Kind: FaultUnavailable, Message: err.Error(), Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, p.limits.Timeout)
	frame, f := inst.call(cctx, op, input, data)
	if f == nil && cctx.Err() != nil {
		// The answer came after the deadline (a host function ran past
		// it and the guest returned without another check): it is a
		// timeout, and wazero has closed the instance meanwhile.
		f = &Fault{Kind: FaultTimeout, Message: "deadline exceeded; the answer came too late", Err: cctx.Err()}
	}
	cancel()
	if f == nil {
		var res Result
		res, f = p.parseFrame(op, frame, schemas)
		if f == nil && check != nil {
			if err := check(res.JSON); err != nil {
				f = &Fault{Kind: FaultBadOutput, Message: "result: " + err.Error()}
			}
		}
		if f == nil {
			inst.pool.put(inst, true)
			return res, nil
		}
	}
	if f.Kind == FaultTimeout && ctx.Err() != nil {
		f.Kind = FaultCanceled
	}
	if f.discard() {
		if tail := inst.stderr.String(); tail != "" {
			if f.Trace != "" {
				f.Trace += "\n"
			}
			f.Trace += "guest stderr: " + truncate(tail, 2000)
		}
	}
	inst.pool.put(inst, !f.discard())
	return Result{}, f
}

// okPrefix is how the SDK starts every success envelope; parseFrame takes the
// result out of such an envelope without a JSON pass (the result is then
// fully parsed by its validation).
const okPrefix = `{"ok":true,"result":`

func (p *Plugin) parseFrame(op string, frame []byte, schemas bool) (Result, *Fault) {
	if len(frame) < 4 {
		return Result{}, &Fault{Kind: FaultBadOutput, Message: "result frame shorter than 4 bytes"}
	}
	n := binary.LittleEndian.Uint32(frame)
	if uint64(n) > uint64(len(frame)-4) {
		return Result{}, &Fault{Kind: FaultBadOutput, Message: "result frame length exceeds the frame"}
	}
	j := frame[4 : 4+n]
	var env envelope
	if len(j) > len(okPrefix) && string(j[:len(okPrefix)]) == okPrefix && j[len(j)-1] == '}' {
		t := true
		env.OK, env.Result = &t, j[len(okPrefix):len(j)-1]
	} else if err := json.Unmarshal(j, &env); err != nil || env.OK == nil {
		return Result{}, &Fault{Kind: FaultBadOutput, Message: "result envelope is not {\"ok\":...} JSON: " + truncate(string(frame[4:4+n]), 120)}
	}
	if !*env.OK {
		if env.Error == nil || env.Error.Code == "" {
			return Result{}, &Fault{Kind: FaultBadOutput, Message: "error envelope without a code"}
		}
		if env.Error.Panic {
			// The SDK sends the panic value and the goroutine's stack: the
			// stack is for the operator's log only.
			msg, trace := splitTrace(env.Error.Message)
			return Result{}, &Fault{Kind: FaultPanic, Code: env.Error.Code, Message: truncate(msg, 2000), Trace: trace}
		}
		return Result{}, &Fault{Kind: FaultGuestError, Code: env.Error.Code, Message: truncate(env.Error.Message, 2000)}
	}
	if schemas {
		if err := validateJSON(schemaSet.out[op], env.Result); err != nil {
			return Result{}, &Fault{Kind: FaultBadOutput, Message: "result: " + err.Error()}
		}
	}
	return Result{JSON: env.Result, Data: frame[4+n:]}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Capabilities returns a channel plugin's capabilities as read at load.
func (p *Plugin) Capabilities() json.RawMessage { return p.caps }

// Stats returns a snapshot of the plugin's call metrics.
func (p *Plugin) Stats() Stats { s, _, _ := p.stats.snapshot(); return s }

// Instances returns how many instances are alive and how many of them are idle.
func (p *Plugin) Instances() (live, idle int) {
	pl := p.pool()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.live, len(pl.idle)
}

// Reap closes instances idle for longer than the idle timeout, so an unused
// plugin shrinks to zero instances; the next call cold-starts one.
//
// A compiled plugin that has had no instance for the idle timeout goes
// dormant as well: its wazero runtime closes, and with it the module's
// machine code (~13 MB per built-in), its decoded form (~6 MB) and the
// instances' memory. The next call loads it again from the compilation
// cache (~50 ms, see wake). Only plugins whose module can be read again and
// whose runtime has an on-disk cache go dormant.
func (p *Plugin) Reap() {
	pl := p.pool()
	pl.reap(p.limits.IdleTimeout)
	if p.reread == nil || p.rt.opts.CacheDir == "" || pl.interp || pl.dormant {
		return
	}
	pl.mu.Lock()
	idle := pl.live == 0 && !pl.retired && time.Since(pl.lastUsed) >= p.limits.IdleTimeout
	pl.mu.Unlock()
	if !idle {
		return
	}
	p.mu.Lock()
	if p.closed || p.cur.Load() != pl {
		p.mu.Unlock()
		return
	}
	p.cur.Store(&pool{p: p, dormant: true})
	p.mu.Unlock()
	pl.retire() // a call that took an instance meanwhile finishes on it
	p.rt.log.Debug("plugin dormant", "plugin", p.Manifest.Name, "version", p.Manifest.Version)
}

// wake replaces the dormant pool dpl with a compiled one: it reads the
// module again (it must still have the plugin's digest) and loads it from
// the compilation cache. Concurrent calls wait for one wake.
func (p *Plugin) wake(ctx context.Context, dpl *pool) error {
	p.wakeMu.Lock()
	defer p.wakeMu.Unlock()
	if p.pool() != dpl {
		return nil // woken meanwhile
	}
	start := time.Now()
	wasm, err := p.reread()
	if err == nil && digestOf(wasm) != p.Digest {
		err = errors.New("the module changed since it was loaded")
	}
	if err != nil {
		return fmt.Errorf("plugin %s: reload after idle: %w", p.Manifest.Name, err)
	}
	pl, err := p.newPool(ctx, wasm, false)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed || p.cur.Load() != dpl {
		p.mu.Unlock()
		pl.retire()
		return errRetired
	}
	p.cur.Store(pl)
	p.mu.Unlock()
	p.rt.log.Debug("plugin woke", "plugin", p.Manifest.Name, "version", p.Manifest.Version, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// Close retires the plugin: idle instances close now, busy ones when their
// call ends, and the wazero runtime when the last instance is gone. Calls
// after Close fail with FaultUnavailable.
func (p *Plugin) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	if p.stop != nil {
		p.stop()
	}
	<-p.upgraded // a compile in flight stops at its next function
	p.pool().retire()
}

// pool returns the pool calls go to now.
func (p *Plugin) pool() *pool { return p.cur.Load() }

// getInstance takes an instance from the current pool; when that pool was
// replaced meanwhile (the compiled module took over from the interpreter)
// it takes one from its successor.
func (p *Plugin) getInstance(ctx context.Context) (*instance, error) {
	for {
		pl := p.pool()
		if pl.dormant {
			if err := p.wake(ctx, pl); err != nil {
				return nil, err
			}
			continue
		}
		inst, err := pl.get(ctx)
		if errors.Is(err, errRetired) && p.pool() != pl {
			continue
		}
		return inst, err
	}
}

// errRetired is returned by pool.get after the plugin version was replaced.
var errRetired = errors.New("plugin version retired")

// pool holds the instances of a plugin version on one wazero runtime (the
// compiler's or the interpreter's). Idle instances are reused LIFO so the
// busiest stay warm and the rest age out.
type pool struct {
	p        *Plugin
	interp   bool
	dormant  bool // no runtime: the next call loads the module again (see Plugin.Reap)
	wrt      wazero.Runtime
	compiled wazero.CompiledModule
	mu       sync.Mutex
	lastUsed time.Time // when an instance last went back to the pool
	idle     []*instance
	live     int
	retired  bool
	closed   bool
	// waiting counts the calls waiting for an instance slot.
	waiting atomic.Int32
}

func (pl *pool) get(ctx context.Context) (*instance, error) {
	pl.waiting.Add(1)
	select {
	case pl.p.sem <- struct{}{}:
		pl.waiting.Add(-1)
	case <-ctx.Done():
		pl.waiting.Add(-1)
		return nil, ctx.Err()
	}
	pl.mu.Lock()
	if pl.retired {
		pl.mu.Unlock()
		<-pl.p.sem
		return nil, errRetired
	}
	if n := len(pl.idle); n > 0 {
		inst := pl.idle[n-1]
		pl.idle = pl.idle[:n-1]
		pl.mu.Unlock()
		return inst, nil
	}
	pl.live++
	pl.mu.Unlock()
	inst, err := pl.newInstance(ctx)
	if err != nil {
		pl.mu.Lock()
		pl.live--
		closeRT := pl.retired && pl.live == 0
		pl.mu.Unlock()
		<-pl.p.sem
		if closeRT {
			pl.closeRuntime()
		}
		return nil, err
	}
	return inst, nil
}

func (pl *pool) put(inst *instance, healthy bool) {
	if m := inst.mod.Memory(); healthy && m != nil && uint64(m.Size()) > uint64(pl.p.limits.KeepPages)<<16 {
		healthy = false // grown past what a pooled instance may hold (Limits.KeepPages)
	}
	pl.mu.Lock()
	if healthy && !pl.retired {
		inst.lastUsed = time.Now()
		pl.lastUsed = inst.lastUsed
		pl.idle = append(pl.idle, inst)
		pl.mu.Unlock()
		<-pl.p.sem
		return
	}
	pl.live--
	closeRT := pl.retired && pl.live == 0
	pl.mu.Unlock()
	inst.close()
	<-pl.p.sem
	if closeRT {
		pl.closeRuntime()
	}
}

func (pl *pool) reap(idleFor time.Duration) {
	cutoff := time.Now().Add(-idleFor)
	pl.mu.Lock()
	var keep, drop []*instance
	for _, inst := range pl.idle {
		if inst.lastUsed.Before(cutoff) {
			drop = append(drop, inst)
		} else {
			keep = append(keep, inst)
		}
	}
	pl.idle = keep
	pl.live -= len(drop)
	pl.mu.Unlock()
	for _, inst := range drop {
		inst.close()
	}
}

func (pl *pool) retire() {
	pl.mu.Lock()
	if pl.retired {
		pl.mu.Unlock()
		return
	}
	pl.retired = true
	drop := pl.idle
	pl.idle = nil
	pl.live -= len(drop)
	closeRT := pl.live == 0
	pl.mu.Unlock()
	for _, inst := range drop {
		inst.close()
	}
	if closeRT {
		pl.closeRuntime()
	}
}

func (pl *pool) closeRuntime() {
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return
	}
	pl.closed = true
	pl.mu.Unlock()
	p := pl.p
	if pl.wrt != nil {
		pl.wrt.Close(context.Background())
		// With a shared compilation cache, closing the runtime leaves the
		// module's machine code in the cache's engine: only closing the
		// compiled module releases it (reference-counted per compile).
		pl.compiled.Close(context.Background())
		p.mu.Lock()
		p.pools--
		p.mu.Unlock()
		if p.rt.opts.Released != nil {
			p.rt.opts.Released()
		}
	}
	p.mu.Lock()
	closeFS := p.closed && p.pools == 0
	p.mu.Unlock()
	if closeFS && p.rootFS != nil {
		p.rootFS.close()
	}
}

func (pl *pool) engineName() string {
	switch {
	case pl.interp:
		return "interpreter"
	case pl.dormant:
		return "dormant"
	}
	return "compiler"
}

// ErrNotGranted is what a load is refused with when the plugin asks for a
// capability (a folder, http hosts, mail) the operator's config does not
// grant it: the plugin is not configured, nothing is broken.
var ErrNotGranted = errors.New("plugin: capability not granted")

// notGranted is an ErrNotGranted with the words that say what is missing.
type notGranted struct{ msg string }

func (e notGranted) Error() string        { return e.msg }
func (e notGranted) Is(target error) bool { return target == ErrNotGranted }
