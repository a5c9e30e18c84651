package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/private"
)

// RegistryOptions configure a Registry.
type RegistryOptions struct {
	// Dir is the plugins folder the operator drops plugins into. Each plugin is
	// two files side by side: <name>.wasm and <name>.manifest.json (the
	// manifest's name must be <name>, and its wasm_sha256 the module's hex
	// sha256). A pair is loaded only when the two agree, so the order and
	// speed of writing them does not matter; write each under another name
	// and rename it in, so no half-written file is ever read. Empty means
	// built-ins only.
	Dir string
	// Builtins holds the plugins embedded in the binary, in the same flat
	// layout. A manifest without its .wasm is listed as "missing" and logged.
	Builtins fs.FS
	// Grants are the operator's grants by plugin name. A grant without
	// SHA256 applies to the built-in of that name only; a grant with SHA256
	// applies to exactly those modules. A plugin dropped into Dir under a
	// built-in's name never inherits the built-in's grant.
	Grants map[string]Grant
	// PollInterval is how often Run rescans Dir and reaps idle instances;
	// default 1 s.
	PollInterval time.Duration
	// RemoveAfter is how long a plugin's files must stay gone from Dir before
	// it is unloaded; meanwhile the last good version keeps serving (an rm
	// followed by a cp does not unload it). Default 5 s.
	RemoveAfter time.Duration
	// Background makes NewRegistry return at once and load the plugins in
	// the background; until a plugin is loaded, calls that need it fail with
	// a FaultNotReady (host.CodePluginNotReady). See Ready and WaitReady.
	// Each module is served from wazero's interpreter while it compiles
	// (about a second after a start; see engineStaged), and a call that
	// needs a plugin still in its first load waits up to ReadyWait for it.
	Background bool
	// ReadyWait bounds how long a call waits for a plugin still in its
	// first load before it answers host.CodePluginNotReady; default 10 s.
	ReadyWait time.Duration
}

// Registry holds the loaded plugins by name: the built-ins, overridden by any
// plugin of the same name in the plugins folder. It reloads a plugin whose
// files change, keeps serving the previous version when a new one is
// refused, and counts calls per plugin across versions.
type Registry struct {
	rt   *Runtime
	opts RegistryOptions
	log  interface {
		Info(string, ...any)
		Warn(string, ...any)
	}

	mu      sync.Mutex // guards entries' non-atomic fields and the map
	entries map[string]*entry

	// Run loops and the background loader register here so Close can stop
	// them and wait for a scan in flight: closing plugins (and then the
	// runtime) under a compile crashes it.
	running   sync.WaitGroup
	closing   chan struct{}
	closeOnce sync.Once
	scanMu    sync.Mutex    // one Scan at a time
	ready     chan struct{} // closed when the first load of every plugin is done
	cancel    context.CancelFunc
}

type entry struct {
	// loaded is closed when the entry's first load ended (it serves, or it
	// was refused).
	loaded     chan struct{}
	loadedOnce sync.Once
	name       string
	stats      *stats
	cur        atomic.Pointer[Plugin]
	builtin    *Plugin
	missing    string // why a built-in is not available
	// notConfigured is set when missing says the operator granted the
	// built-in none of a capability it needs (setNotConfigured).
	notConfigured bool
	fp            string // fingerprint of the folder files last tried
	inDir         bool
	// dirFirst: the registry's first scan has yet to try this name's
	// folder files, so a built-in of the same name does not serve
	// meanwhile (the operator's version decides, or its refusal does).
	// builtinPending: the built-in of this name is still loading.
	dirFirst, builtinPending bool
	gone                     time.Time // when the folder files were first seen missing (zero: present)
	// retryAt is when a folder version refused for a transient cause (its
	// start ran out of time) is tried again, zero when none is due;
	// retryDelay is the wait before that try, doubled after each.
	retryAt    time.Time
	retryDelay time.Duration
	// retries counts the transient refusals of these files in a row.
	retries int
	// The built-in's own retry, as the folder's above: builtinRetryAt is
	// when a built-in whose start ran out of time is loaded again (zero:
	// none due), builtinRetrying while that load runs.
	builtinRetryAt    time.Time
	builtinRetryDelay time.Duration
	builtinRetries    int
	builtinRetrying   bool
	// builtinRefused: the standing refusal (stats) is the built-in's;
	// builtinRefusal is the built-in's last transient refusal, restored
	// when a drop-in of its name leaves and the built-in is not loaded.
	builtinRefused bool
	builtinRefusal string
	// waiting says why the folder's files of this name, present, are not
	// loaded (half a pair, or a module its manifest does not name): the
	// registry waits for a consistent pair. Empty otherwise.
	waiting string
	// removed is when the folder's files of this name left and nothing
	// serves the name since (no built-in of it serves); zero otherwise.
	removed time.Time
}

// Refusal codes: the machine-readable reason of a refused plugin
// (Info.RefusedCode), beside its text (Info.Refused).
const (
	// RefusalStartTimeout: its start ran out of time (as on a busy
	// machine); it is tried again (Info.RetryAt) while a try is due.
	RefusalStartTimeout = "start_timeout"
	// RefusalNotPrivate: a file breaks the plugins folder's rule (a
	// symlink, writable by others, owned by another user).
	RefusalNotPrivate = "not_private"
	// RefusalManifest: the manifest is invalid, lacks wasm_sha256, or
	// names another plugin.
	RefusalManifest = "invalid_manifest"
	// RefusalKind: a new version of another kind than the serving one.
	RefusalKind = "kind_changed"
	// RefusalNotGranted: the module asks for a capability the operator's
	// grants do not give it.
	RefusalNotGranted = "not_granted"
	// RefusalLoad: the module does not load (does not compile, wrong
	// exports or ABI, does not implement its manifest's kind).
	RefusalLoad = "load_failed"
)

// loadRefusal is the refusal code of a failed load.
func loadRefusal(err error) string {
	switch {
	case errors.Is(err, errTransient):
		return RefusalStartTimeout
	case errors.Is(err, ErrNotGranted):
		return RefusalNotGranted
	}
	return RefusalLoad
}

// Retries of a folder version refused for a transient cause wait
// retryFirst, doubling up to retryMax, until it loads, its files change, or
// retryLimit refusals in a row (about ten minutes): a start that never
// finishes (an init that loops) is not a busy machine, and each try holds
// the folder's scan for its start timeout.
const (
	retryFirst = time.Second
	retryMax   = time.Minute
	retryLimit = 15
)

// NewRegistry loads the plugins folder and the built-ins (a built-in serves
// where no plugin of its name is in the folder). A plugin that fails to load
// is logged and listed, not fatal. With opts.Background it returns at once
// and loads in the background. Call Run to watch the folder.
func NewRegistry(ctx context.Context, rt *Runtime, opts RegistryOptions) (*Registry, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.RemoveAfter <= 0 {
		opts.RemoveAfter = 5 * time.Second
	}
	if opts.ReadyWait <= 0 {
		opts.ReadyWait = defaultReadyWait
	}
	r := &Registry{rt: rt, opts: opts, log: rt.log, entries: map[string]*entry{}, closing: make(chan struct{}), ready: make(chan struct{})}
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("plugins folder: %w", err)
		}
	}
	var manifests []string
	if opts.Builtins != nil {
		var err error
		if manifests, err = fs.Glob(opts.Builtins, "*.manifest.json"); err != nil {
			return nil, err
		}
	}
	// Known names answer "not ready" (not "no such plugin") while loading.
	for _, mf := range manifests {
		r.entry(strings.TrimSuffix(mf, ".manifest.json")).builtinPending = true
	}
	if opts.Dir != "" {
		dropped, _ := filepath.Glob(filepath.Join(opts.Dir, "*.manifest.json"))
		for _, mf := range dropped {
			r.entry(strings.TrimSuffix(filepath.Base(mf), ".manifest.json")).dirFirst = true
		}
	}
	// The built-ins and the folder load side by side: a drop-in whose first
	// load is slow (a start that never ends takes its StartTimeout, on the
	// interpreter and again compiled) holds only itself and the folder's
	// other plugins, never a built-in of another name.
	load := func(ctx context.Context) {
		defer close(r.ready)
		var wg sync.WaitGroup
		if opts.Dir != "" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.Scan(ctx)
				r.mu.Lock()
				for _, e := range r.entries {
					r.endDirFirstLocked(e)
				}
				r.mu.Unlock()
			}()
		}
		r.loadBuiltins(ctx, manifests)
		wg.Wait()
	}
	if !opts.Background {
		load(ctx)
		return r, nil
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	r.running.Add(1)
	go func() {
		defer r.running.Done()
		start := time.Now()
		load(lctx)
		r.log.Info("plugins loaded in the background", "took", time.Since(start).Round(time.Millisecond))
	}()
	return r, nil
}

// engine is how the registry loads a module: a registry that loads in the
// background serves each module from the interpreter while it compiles.
func (r *Registry) engine() engineKind {
	if r.opts.Background {
		return engineStaged
	}
	return engineCompiler
}

// Ready reports whether the first load of every plugin has finished (each
// either serves or was refused).
func (r *Registry) Ready() bool {
	select {
	case <-r.ready:
		return true
	default:
		return false
	}
}

// Pending returns the names of the plugins not serving yet that will be
// tried again, sorted: those whose first load has not ended; built-ins
// refused because their start ran out of time while a try of them is due;
// and drop-ins so refused for their first pendingDropInTries tries only (a
// busy machine at boot), so a drop-in whose start never ends holds /readyz
// for about a minute, not for all its retries: its state stays in
// /v1/admin/plugins. /readyz names them.
func (r *Registry) Pending() []string {
	r.mu.Lock()
	held := map[string]bool{}
	for name, e := range r.entries {
		held[name] = !e.builtinRetryAt.IsZero() || (!e.retryAt.IsZero() && e.retries < pendingDropInTries)
	}
	r.mu.Unlock()
	var out []string
	for _, in := range r.List() {
		if in.State == "loading" || (in.State == "refused" && !in.RetryAt.IsZero() && held[in.Name]) {
			out = append(out, in.Name)
		}
	}
	return out
}

// pendingDropInTries is how many start-timeout refusals in a row of a
// drop-in hold /readyz (Pending): with retryFirst doubling, the tries of
// its first few seconds.
const pendingDropInTries = 3

// WaitCompiled waits until every plugin loaded so far runs compiled code
// (or its compile failed and it stays on the interpreter), or ctx ends.
func (r *Registry) WaitCompiled(ctx context.Context) error {
	if err := r.WaitReady(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	var ps []*Plugin
	for _, e := range r.entries {
		if p := e.cur.Load(); p != nil {
			ps = append(ps, p)
		}
		if e.builtin != nil {
			ps = append(ps, e.builtin)
		}
	}
	r.mu.Unlock()
	for _, p := range ps {
		if err := p.WaitCompiled(ctx); err != nil {
			return err
		}
	}
	return nil
}

// defaultReadyWait is RegistryOptions.ReadyWait's default: a staged load
// serves from the interpreter within about a second, so callers during a
// start see a slower answer, not a refusal.
const defaultReadyWait = 10 * time.Second

// pluginWhenReady is Plugin, but waits (up to ReadyWait, or until ctx
// ends) for a plugin that is still in its first load.
func (r *Registry) pluginWhenReady(ctx context.Context, name string) (*Plugin, error) {
	p, err := r.Plugin(name)
	var f *Fault
	if err == nil || !errors.As(err, &f) || f.Kind != FaultNotReady {
		return p, err
	}
	wctx, cancel := context.WithTimeout(ctx, r.opts.ReadyWait)
	defer cancel()
	r.mu.Lock()
	e := r.entries[name]
	r.mu.Unlock()
	if e == nil {
		// Every name a start loads is known from its first moment: this
		// one is in neither the built-ins nor the folder.
		return p, err
	}
	loaded := e.loaded
	// The entry's own first load, then (a folder version refused, the
	// built-in still loading) the end of the registry's first load.
	for _, ch := range []chan struct{}{loaded, r.ready} {
		select {
		case <-ch:
		case <-r.ready:
		case <-wctx.Done():
		}
		if p, err = r.Plugin(name); err == nil || !errors.As(err, &f) || f.Kind != FaultNotReady || wctx.Err() != nil {
			return p, err
		}
	}
	return p, err
}

// WaitReady waits until Ready or ctx ends.
func (r *Registry) WaitReady(ctx context.Context) error {
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// grantFor returns the operator's grant for a module: a grant bound to
// digests applies to those modules; an unbound grant to the built-in only.
func (r *Registry) grantFor(name, digest string, builtin bool) Grant {
	g, ok := r.opts.Grants[name]
	if !ok {
		return Grant{}
	}
	if len(g.SHA256) == 0 {
		if builtin {
			return g
		}
		return Grant{}
	}
	for _, d := range g.SHA256 {
		if strings.EqualFold(d, digest) {
			return g
		}
	}
	return Grant{}
}

func (r *Registry) entry(name string) *entry {
	e := r.entries[name]
	if e == nil {
		e = &entry{name: name, stats: newStats(), loaded: make(chan struct{})}
		r.entries[name] = e
	}
	return e
}

func (r *Registry) loadBuiltins(ctx context.Context, manifests []string) {
	// Load in parallel: compiling is the slow part on a cold cache.
	var wg sync.WaitGroup
	for _, mf := range manifests {
		name := strings.TrimSuffix(mf, ".manifest.json")
		r.mu.Lock()
		e := r.entry(name)
		r.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := r.loadBuiltin(ctx, e)
			r.mu.Lock()
			e.builtin, e.builtinPending = p, false
			r.settleLocked(e)
			r.mu.Unlock()
		}()
	}
	wg.Wait()
}

// loadBuiltin loads the built-in e.name, or records why not: a start that
// ran out of time is refused and tried again (refuseBuiltin, RetryBuiltins);
// any other cause leaves it missing (or not configured) until a restart.
func (r *Registry) loadBuiltin(ctx context.Context, e *entry) *Plugin {
	name := e.name
	man, err := fs.ReadFile(r.opts.Builtins, name+".manifest.json")
	if err != nil {
		r.setMissing(e, err.Error())
		return nil
	}
	wasm, err := fs.ReadFile(r.opts.Builtins, name+".wasm")
	if err != nil {
		r.setMissing(e, "built-in not built (run make plugins): "+name+".wasm missing")
		return nil
	}
	if m, err := ParseManifest(man); err == nil && m.WasmSHA256 != "" && m.WasmSHA256 != digestOf(wasm) {
		r.setMissing(e, "built-in "+name+".wasm does not match its manifest's wasm_sha256 (rebuild with make plugins)")
		return nil
	} else if err == nil && m.Name != name {
		// Before loading, so the log never says it loaded.
		r.setMissing(e, fmt.Sprintf("manifest name %q does not match file name %q", m.Name, name))
		return nil
	}
	loaded, err := r.rt.load(ctx, wasm, man, r.grantFor(name, digestOf(wasm), true), "builtin", e.stats, r.engine())
	switch {
	case errors.Is(err, errTransient):
		r.refuseBuiltin(e, err)
		return nil
	case errors.Is(err, ErrNotGranted):
		r.setNotConfigured(e, err.Error())
		return nil
	case err != nil:
		r.setMissing(e, err.Error())
		return nil
	}
	loaded.reread = func() ([]byte, error) { return fs.ReadFile(r.opts.Builtins, name+".wasm") }
	r.mu.Lock()
	e.builtinRetryAt, e.builtinRetryDelay, e.builtinRetries = time.Time{}, 0, 0
	e.missing, e.notConfigured, e.builtinRefusal = "", false, ""
	clear := e.builtinRefused
	e.builtinRefused = false
	r.mu.Unlock()
	if clear {
		e.stats.setRefused("", "")
		r.log.Info("built-in plugin loaded on a retry", "plugin", name, "version", loaded.Manifest.Version)
	}
	return loaded
}

// refuseBuiltin records a built-in whose start ran out of time (as on a
// busy machine at boot): refused, and tried again by RetryBuiltins with
// the folder's backoff and limit (retryFirst doubling to retryMax,
// retryLimit tries in a row).
func (r *Registry) refuseBuiltin(e *entry, err error) {
	msg := err.Error()
	attrs := []any{"plugin", e.name, "reason", msg}
	r.mu.Lock()
	attrs = append(attrs, backoff(err, &e.builtinRetryAt, &e.builtinRetryDelay, &e.builtinRetries, "the gate tries it again when restarted")...)
	e.builtinRefusal = "refused: " + msg
	e.missing, e.notConfigured = "", false
	// A drop-in of its name that loaded serves, and its state is the one
	// listed: the built-in's refusal stands only where no drop-in serves.
	record := !e.inDir
	e.builtinRefused = e.builtinRefused || record
	r.mu.Unlock()
	r.log.Warn("built-in plugin refused", attrs...)
	if record {
		e.stats.setRefused(RefusalStartTimeout, "refused: "+msg)
	}
}

// RetryBuiltins starts a load of each built-in whose retry is due (its
// start ran out of time); Run calls it every PollInterval, tests directly.
// The loads run in the background: a start that runs out of time again
// holds neither the folder's scan nor the other built-ins.
func (r *Registry) RetryBuiltins(ctx context.Context) {
	if r.opts.Builtins == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.closing:
		return
	default:
	}
	for _, e := range r.entries {
		if e.builtinRetrying || e.builtinRetryAt.IsZero() || now.Before(e.builtinRetryAt) {
			continue
		}
		e.builtinRetrying = true
		r.running.Add(1)
		go func() {
			defer r.running.Done()
			p := r.loadBuiltin(ctx, e)
			r.mu.Lock()
			defer r.mu.Unlock()
			e.builtinRetrying = false
			if p != nil {
				e.builtin = p
				r.settleLocked(e)
			}
		}()
	}
}

// markLoaded records that e's first load ended.
func (e *entry) markLoaded() { e.loadedOnce.Do(func() { close(e.loaded) }) }

// settleLocked (r.mu held) runs when one of e's first loads ended: once
// the folder's first try of the name is over, a built-in serves where no
// folder version does, and the entry's first load has ended when something
// serves or nothing is left to load.
func (r *Registry) settleLocked(e *entry) {
	if e.dirFirst {
		return
	}
	if e.cur.Load() == nil && e.builtin != nil {
		e.cur.Store(e.builtin)
		e.removed = time.Time{}
	}
	if e.cur.Load() != nil || !e.builtinPending {
		e.markLoaded()
	}
}

// endDirFirstLocked (r.mu held) records that the first scan tried e's
// folder files (loaded, refused, or not a consistent pair).
func (r *Registry) endDirFirstLocked(e *entry) {
	if e.dirFirst {
		e.dirFirst = false
		r.settleLocked(e)
	}
}

// setNotConfigured records a built-in that asks for a capability the
// operator's config does not grant (the http channel without allowlisted
// hosts, email without mail): an optional plugin left off, not a fault, so
// it is logged at info and listed as not_configured.
func (r *Registry) setNotConfigured(e *entry, why string) {
	r.log.Info("built-in plugin not configured", "plugin", e.name, "reason", why)
	r.mu.Lock()
	e.missing, e.notConfigured = why, true
	r.endBuiltinRefusalLocked(e)
	r.mu.Unlock()
}

func (r *Registry) setMissing(e *entry, why string) {
	r.log.Warn("built-in plugin unavailable", "plugin", e.name, "reason", why)
	r.mu.Lock()
	e.missing = why
	r.endBuiltinRefusalLocked(e)
	r.mu.Unlock()
}

// endBuiltinRefusalLocked (r.mu held): a retry of the built-in ended for a
// cause no retry mends; its transient refusal no longer stands.
func (r *Registry) endBuiltinRefusalLocked(e *entry) {
	e.builtinRetryAt, e.builtinRetryDelay, e.builtinRetries = time.Time{}, 0, 0
	e.builtinRefusal = ""
	if e.builtinRefused {
		e.builtinRefused = false
		e.stats.setRefused("", "")
	}
}

// Run rescans the plugins folder and reaps idle instances every
// PollInterval until ctx ends.
func (r *Registry) Run(ctx context.Context) {
	r.mu.Lock()
	select {
	case <-r.closing:
		r.mu.Unlock()
		return
	default:
	}
	r.running.Add(1)
	r.mu.Unlock()
	defer r.running.Done()
	t := time.NewTicker(r.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.closing:
			return
		case <-t.C:
			if r.opts.Dir != "" {
				r.Scan(ctx)
			}
			r.RetryBuiltins(ctx)
			r.Reap()
		}
	}
}

// Reap closes idle instances past their idle timeout in every plugin.
func (r *Registry) Reap() {
	r.mu.Lock()
	var ps []*Plugin
	for _, e := range r.entries {
		if p := e.cur.Load(); p != nil {
			ps = append(ps, p)
		}
		if e.builtin != nil && e.builtin != e.cur.Load() {
			ps = append(ps, e.builtin)
		}
	}
	r.mu.Unlock()
	for _, p := range ps {
		p.Reap()
	}
}

// fingerprint says whether the folder files changed since the last try:
// their size, time, mode and whether they pass the private rule, so a
// chmod go-w or a chown of a refused file is noticed like a new version.
// A symlink counts as present (and is refused when read).
func fingerprint(paths ...string) (string, bool) {
	var b strings.Builder
	for _, p := range paths {
		st, err := os.Lstat(p)
		if err != nil {
			return "", false
		}
		fmt.Fprintf(&b, "%d/%d/%v/%v;", st.Size(), st.ModTime().UnixNano(), st.Mode(), private.Entry(st) == nil)
	}
	return b.String(), true
}

// Scan loads new and changed plugins from the folder once, and unloads those
// whose files have been gone for RemoveAfter. Run calls it every
// PollInterval; tests call it directly.
func (r *Registry) Scan(ctx context.Context) {
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	manifests, _ := filepath.Glob(filepath.Join(r.opts.Dir, "*.manifest.json"))
	seen, half := map[string]bool{}, map[string]bool{}
	for _, mf := range manifests {
		name := strings.TrimSuffix(filepath.Base(mf), ".manifest.json")
		wasmPath := filepath.Join(r.opts.Dir, name+".wasm")
		fp, ok := fingerprint(mf, wasmPath)
		if !ok {
			// Half a pair: treated as missing below when a version of it
			// was loaded; otherwise listed as waiting for its module.
			half[name] = true
			r.mu.Lock()
			if e := r.entries[name]; e != nil && !e.inDir {
				e.waiting = name + ".wasm is not in the plugins folder: waiting for the module beside its manifest"
				e.removed = time.Time{}
			}
			r.mu.Unlock()
			continue
		}
		seen[name] = true
		r.mu.Lock()
		e := r.entry(name)
		changed := e.fp != fp
		if changed {
			// New files: a retry of the old ones is off, and a transient
			// refusal of these starts its backoff afresh.
			e.retryAt, e.retryDelay, e.retries = time.Time{}, 0, 0
		}
		retry := !changed && !e.retryAt.IsZero() && !time.Now().Before(e.retryAt)
		e.fp = fp
		e.gone = time.Time{}
		r.mu.Unlock()
		if changed || retry {
			r.loadFromDir(ctx, e, mf, wasmPath)
		}
		r.mu.Lock()
		r.endDirFirstLocked(e)
		r.mu.Unlock()
	}
	now := time.Now()
	r.mu.Lock()
	var gone []*entry
	for name, e := range r.entries {
		if !seen[name] {
			e.retryAt, e.retryDelay, e.retries = time.Time{}, 0, 0 // no files, no retry of them
		}
		if !e.inDir && !seen[name] && !half[name] {
			r.filesLeftLocked(e, now)
		}
		if !e.inDir || seen[name] {
			continue
		}
		if e.gone.IsZero() {
			e.gone = now
			e.fp = ""
			r.log.Info("plugin files missing from the folder; still serving the last good version", "plugin", name,
				"unload_after", r.opts.RemoveAfter)
		}
		if now.Sub(e.gone) >= r.opts.RemoveAfter {
			gone = append(gone, e)
		}
	}
	r.mu.Unlock()
	for _, e := range gone {
		r.mu.Lock()
		e.inDir, e.fp, e.gone = false, "", time.Time{}
		old := e.cur.Swap(e.builtin)
		// Nothing serves the name now unless its built-in does: listed
		// removed, or (a built-in whose start ran out of time) refused
		// with the built-in's reason.
		// (Under r.mu: a built-in's retry sets e.builtin and its refusal.)
		builtin := e.builtin
		code, refusal := "", ""
		switch {
		case builtin != nil:
		case e.builtinRefusal != "":
			code, refusal, e.builtinRefused = RefusalStartTimeout, e.builtinRefusal, true
		default:
			e.removed = now
		}
		e.stats.setRefused(code, refusal)
		r.mu.Unlock()
		if old != nil && old != builtin {
			old.Close()
		}
		r.log.Info("plugin removed from folder", "plugin", e.name, "builtin_restored", builtin != nil)
	}
}

// filesLeftLocked (r.mu held) runs for a name whose files are not in the
// folder and of which no version from the folder is loaded: a refusal of
// its folder files, or a wait for their other half, no longer stands, and
// a name nothing serves (no built-in of it) is listed removed.
func (r *Registry) filesLeftLocked(e *entry, now time.Time) {
	e.waiting = ""
	if code, _ := e.stats.refusal(); code != "" && !e.builtinRefused {
		e.stats.setRefused("", "")
		e.fp = ""
	}
	if e.builtinRefusal != "" && !e.builtinRefused {
		e.builtinRefused = true
		e.stats.setRefused(RefusalStartTimeout, e.builtinRefusal)
	}
	if e.cur.Load() == nil && e.builtin == nil && !e.builtinPending && !e.builtinRefused && e.missing == "" && e.removed.IsZero() {
		e.removed = now
	}
}

func (r *Registry) loadFromDir(ctx context.Context, e *entry, manifestPath, wasmPath string) {
	// A drop-in is code the gate runs: each file must pass the rule `gate
	// serve` applies to the whole folder at start (a regular file, not a
	// link, that no other user can write), or the plugin is refused here
	// and the next start would refuse the folder.
	man, err1 := private.ReadFile(manifestPath)
	wasm, err2 := private.ReadFile(wasmPath)
	if err := errors.Join(err1, err2); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			r.mu.Lock()
			e.fp = "" // gone meanwhile: try again next scan
			r.mu.Unlock()
			return
		}
		var why []string
		for _, f := range []struct {
			path string
			err  error
		}{{manifestPath, err1}, {wasmPath, err2}} {
			var pe *fs.PathError
			if errors.As(f.err, &pe) {
				f.err = pe.Err
			}
			if f.err != nil {
				why = append(why, filepath.Base(f.path)+": "+f.err.Error())
			}
		}
		r.refuse(e, RefusalNotPrivate, fmt.Errorf("%s; the plugins folder may hold only regular files no other user can write (chmod go-w; copy the files in, do not link them)", strings.Join(why, "; ")))
		return
	}
	digest := digestOf(wasm)
	if cur := e.cur.Load(); cur != nil && cur.Source == wasmPath && cur.Digest == digest && bytes.Equal(cur.manifestJSON, man) {
		r.mu.Lock()
		e.waiting = ""
		r.mu.Unlock()
		e.stats.setRefused("", "") // what the folder holds serves: an earlier refusal is over
		return                     // touched, not changed
	}
	m, err := ParseManifest(man)
	if err != nil {
		r.refuse(e, RefusalManifest, err)
		return
	}
	switch {
	case m.WasmSHA256 == "":
		r.refuse(e, RefusalManifest, fmt.Errorf("manifest: no wasm_sha256: a plugin in the folder must name its module's sha256 (gate plugin build writes it; or add the output of sha256sum %s.wasm)", e.name))
		return
	case m.WasmSHA256 != digest:
		// Half of a new pair: wait for the other half, keep serving.
		r.mu.Lock()
		e.waiting = e.name + ".wasm does not match the wasm_sha256 its manifest names: waiting for a consistent pair"
		e.removed = time.Time{}
		r.mu.Unlock()
		r.log.Info("plugin files do not match yet; waiting for a consistent pair", "plugin", e.name,
			"manifest_wasm_sha256", truncate(m.WasmSHA256, 12), "wasm_sha256", digest[:12])
		return
	case m.Name != e.name:
		// Refused before it loads: the log says only the refusal.
		r.refuse(e, RefusalManifest, fmt.Errorf("manifest name %q does not match file name %q", m.Name, e.name))
		return
	}
	if err := kindKept(e, m.Kind, r.opts.RemoveAfter); err != nil {
		r.refuse(e, RefusalKind, err)
		return
	}
	p, err := r.rt.load(ctx, wasm, man, r.grantFor(e.name, digest, false), wasmPath, e.stats, r.engine())
	if err == nil {
		// The bytes it was loaded from, not the file: the operator may
		// replace or remove the file while the plugin sleeps, and a wake
		// that failed would leave its calls to another policy until the
		// next scan loaded the new version. ~2–3 MB kept beside the
		// ~13 MB of machine code dormancy frees.
		p.reread = func() ([]byte, error) { return wasm, nil }
	}
	if err != nil {
		r.refuse(e, loadRefusal(err), err)
		return
	}
	p.manifestJSON = man
	r.mu.Lock()
	e.inDir = true
	e.retryAt, e.retryDelay, e.retries = time.Time{}, 0, 0
	e.waiting, e.removed, e.builtinRefused = "", time.Time{}, false
	old := e.cur.Swap(p)
	builtin := e.builtin
	r.mu.Unlock()
	e.markLoaded()
	e.stats.setRefused("", "")
	if old != nil && old != builtin {
		old.Close()
	}
	prev := ""
	if old != nil {
		prev = old.Manifest.Version
	}
	r.log.Info("plugin reloaded", "plugin", e.name, "version", p.Manifest.Version, "previous", prev)
}

// kindKept refuses a new version of a kind other than the one serving
// under its name (a drop-in's, or the built-in it would override): task
// types name a plugin for its kind (a validator, a policy, a result
// channel, whose stored pointers carry its name), so a validator replaced
// in place by a channel of its name would turn every enqueue of those
// types into plugin_unavailable and strand every pointer of the channel it
// replaced. The serving version keeps serving and the refusal is logged and
// listed, as for any refused version. A name with nothing serving (at
// start, or once a drop-in's files stayed gone for RemoveAfter and no
// built-in has the name) takes a plugin of any kind.
func kindKept(e *entry, kind string, removeAfter time.Duration) error {
	cur := e.cur.Load()
	if cur == nil || cur.Manifest.Kind == kind {
		return nil
	}
	if cur == e.builtin {
		return fmt.Errorf("manifest kind %q is not the kind of the built-in %s it would override (%s): a drop-in that replaces a serving built-in must be of its kind; name it otherwise",
			kind, e.name, cur.Manifest.Kind)
	}
	return fmt.Errorf("manifest kind %q is not the serving version's (%s): a plugin keeps its kind while the gate runs, since task types name it as a %s; to serve a %s under this name, remove its files until it is unloaded (%s), then drop the new one in, or name it otherwise",
		kind, cur.Manifest.Kind, cur.Manifest.Kind, kind, removeAfter)
}

// refuse records a folder version refused, with its refusal code (a
// Refusal* constant). One refused for a transient cause (errTransient: its
// start ran out of time, as on a busy machine) is tried again after a
// backoff (retryFirst doubling to retryMax) until it loads, its files
// change or retryLimit tries in a row fail; any other waits for new files.
func (r *Registry) refuse(e *entry, code string, err error) {
	msg := err.Error()
	serving := ""
	if cur := e.cur.Load(); cur != nil {
		serving = cur.Manifest.Version
	}
	attrs := []any{"plugin", e.name, "reason", msg, "still_serving", serving}
	r.mu.Lock()
	attrs = append(attrs, backoff(err, &e.retryAt, &e.retryDelay, &e.retries, "new files are tried again")...)
	e.builtinRefused = false // the standing refusal is this one
	e.waiting, e.removed = "", time.Time{}
	r.mu.Unlock()
	r.log.Warn("plugin refused", attrs...)
	e.stats.setRefused(code, "refused: "+msg)
}

// backoff (r.mu held) schedules the next try of a load refused with err:
// after a transient refusal the wait (retryFirst, doubling to retryMax)
// until retryLimit refusals in a row, then none (then says what tries it
// again); any other refusal resets the count. It returns the log's attrs.
func backoff(err error, at *time.Time, delay *time.Duration, tries *int, then string) []any {
	switch {
	case errors.Is(err, errTransient) && *tries < retryLimit:
		*tries++
		*delay = min(max(2**delay, retryFirst), retryMax)
		*at = time.Now().Add(*delay)
		return []any{"retry_in", *delay}
	case errors.Is(err, errTransient):
		*at, *delay = time.Time{}, 0
		return []any{"retry", fmt.Sprintf("given up after %d tries in a row; %s", *tries, then)}
	}
	*at, *delay, *tries = time.Time{}, 0, 0
	return nil
}

// Close retires every plugin. Calls in flight finish first.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closeOnce.Do(func() { close(r.closing) })
	r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
	}
	r.running.Wait() // a scan or load in flight finishes before its plugins close
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.entries {
		if p := e.cur.Swap(nil); p != nil {
			p.Close()
		}
		if e.builtin != nil {
			e.builtin.Close()
		}
	}
}

// Plugin returns the version of a plugin now serving.
func (r *Registry) Plugin(name string) (*Plugin, error) {
	r.mu.Lock()
	e := r.entries[name]
	r.mu.Unlock()
	if e != nil {
		if p := e.cur.Load(); p != nil {
			return p, nil
		}
	}
	if !r.Ready() {
		return nil, &Fault{Plugin: name, Kind: FaultNotReady, Message: "plugin " + name + " is still loading (plugins compile at start-up); retry shortly"}
	}
	return nil, &Fault{Plugin: name, Kind: FaultUnavailable, Message: "no plugin named " + name + " is loaded"}
}

func (r *Registry) bind(name, kind string, config json.RawMessage) (*binding, error) {
	p, err := r.pluginWhenReady(context.Background(), name)
	if err != nil {
		var f *Fault
		if errors.As(err, &f) && f.Kind == FaultNotReady {
			return nil, ErrorFor(kind, err)
		}
		return nil, host.WrapError(host.CodeNotFound, err, err.Error())
	}
	if p.Manifest.Kind != kind {
		return nil, host.Errorf(host.CodeBadRequest, "plugin %s is a %s, not a %s", name, p.Manifest.Kind, kind)
	}
	if err := p.Manifest.ValidateConfig(config); err != nil {
		return nil, host.WrapError(host.CodeBadRequest, err, err.Error())
	}
	return &binding{reg: r, name: name, kind: kind, config: config}, nil
}

// Policy returns the policy plugin name as a host.RetryPolicy with config (a
// task type's policy config, validated now against the manifest's
// config_schema). Wrap it in FallbackPolicy so a plugin fault still yields a
// decision. Errors: host.CodeNotFound (no such plugin), host.CodeBadRequest
// (wrong kind or invalid config), host.CodePluginNotReady (still in its
// first load after ReadyWait). Like every call that needs a plugin, it
// waits (up to ReadyWait) for one still in its first load.
func (r *Registry) Policy(name string, config json.RawMessage) (host.RetryPolicy, error) {
	b, err := r.bind(name, KindPolicy, config)
	if err != nil {
		return nil, err
	}
	return &PolicyAdapter{b: b}, nil
}

// Validator returns the validator plugin name as a host.Validator with
// config, validated now against the manifest's config_schema.
func (r *Registry) Validator(name string, config json.RawMessage) (host.Validator, error) {
	b, err := r.bind(name, KindValidator, config)
	if err != nil {
		return nil, err
	}
	return &ValidatorAdapter{b: b}, nil
}

// Channel returns the channel plugin name as a host.Channel. Its config is
// the operator's (Grant.Config), checked when the plugin loaded. The
// concrete type is *ChannelAdapter, which also offers PutWithProof.
//
// While the registry is still loading, a channel known by name (a built-in
// or a plugin in the folder) is returned unchecked: its calls answer
// host.CodePluginNotReady until it is loaded, and naming it (as a task
// type's default_result_channel) does not fail.
//
// Once loaded, a name the registry knows with nothing serving it (its
// files left the folder, it was refused, a built-in was not built) is
// host.CodePluginUnavailable (503): the gate had it and an operator may
// restore it, so a completion naming it is retried, not refused for good.
// A name the registry never knew, or a built-in the operator's config
// leaves off (not_configured), is host.CodeNotFound.
func (r *Registry) Channel(name string) (host.Channel, error) {
	var config json.RawMessage
	p, err := r.Plugin(name)
	if err == nil {
		config = p.grant.Config
	} else {
		r.mu.Lock()
		e, known := r.entries[name]
		off := known && e.notConfigured
		r.mu.Unlock()
		switch {
		case known && !r.Ready():
			return &ChannelAdapter{b: &binding{reg: r, name: name, kind: KindChannel}}, nil
		case known && !off && e.cur.Load() == nil:
			return nil, host.WrapError(host.CodePluginUnavailable, err, fmt.Sprintf(
				"result channel %s is not loaded now (it left the plugins folder or was refused); an operator must restore it", name))
		}
	}
	b, err := r.bind(name, KindChannel, config)
	if err != nil {
		return nil, err
	}
	return &ChannelAdapter{b: b}, nil
}

// Info describes one plugin for the admin API (GET /v1/admin/plugins).
type Info struct {
	Name    string `json:"name"`
	Kind    string `json:"kind,omitempty"`
	Version string `json:"version,omitempty"`
	Digest  string `json:"sha256,omitempty"`
	Source  string `json:"source,omitempty"`
	// State: ready; loading (start-up); refused (nothing serves: the newest
	// version was refused, Refused and RefusedCode say why); missing
	// (built-in not built, or not loadable: Refused says why);
	// not_configured (built-in the config grants nothing it needs: Note);
	// incomplete (its files in the folder are not a consistent pair yet:
	// Note); removed (its files left the folder and it was unloaded: Note).
	State string `json:"state"`
	// Engine is what runs the plugin's calls: "compiler" (machine code),
	// "interpreter" while its compile is still running after a start, or
	// "dormant" (idle: nothing loaded; the next call loads it from the
	// compilation cache).
	Engine  string `json:"engine,omitempty"`
	Refused string `json:"refused,omitempty"`
	// RefusedCode is Refused's machine code when a version was refused (a
	// Refusal* constant: start_timeout, not_private, invalid_manifest,
	// kind_changed, not_granted, load_failed).
	RefusedCode string `json:"refused_code,omitempty"`
	// Note says why nothing serves a not_configured, incomplete or removed
	// plugin (what to configure, which file is awaited, when it left).
	Note         string       `json:"note,omitempty"`
	Capabilities Capabilities `json:"capabilities"`
	// RetryAt is when a version refused for a transient cause (its start
	// ran out of time) is loaded again; absent when no retry is due.
	RetryAt   time.Time `json:"retry_at,omitzero"`
	Instances int       `json:"instances"`
	Idle      int       `json:"idle_instances"`
	LoadedAt  time.Time `json:"loaded_at,omitzero"`
	Stats
}

// List describes every known plugin, sorted by name.
func (r *Registry) List() []Info {
	r.mu.Lock()
	entries := make([]*entry, 0, len(r.entries))
	for _, e := range r.entries {
		entries = append(entries, e)
	}
	r.mu.Unlock()
	out := make([]Info, 0, len(entries))
	for _, e := range entries {
		st, code, refused := e.stats.snapshot()
		in := Info{Name: e.name, Stats: st, Refused: refused, RefusedCode: code}
		r.mu.Lock()
		missing, notConfigured, waiting, removed := e.missing, e.notConfigured, e.waiting, e.removed
		in.RetryAt = e.retryAt
		if e.builtinRefused {
			in.RetryAt = e.builtinRetryAt
		}
		r.mu.Unlock()
		if p := e.cur.Load(); p != nil {
			in.Kind, in.Version, in.Digest, in.Source = p.Manifest.Kind, p.Manifest.Version, p.Digest, p.Source
			in.Capabilities, in.LoadedAt, in.State = p.Manifest.Capabilities, p.loadedAt, "ready"
			in.Engine = p.pool().engineName()
			in.Instances, in.Idle = p.Instances()
		} else if missing != "" && notConfigured {
			in.State, in.Note = "not_configured", missing
		} else if missing != "" {
			in.State, in.Refused = "missing", missing
		} else if !r.Ready() && refused == "" {
			in.State = "loading"
		} else if refused != "" {
			in.State = "refused"
		} else if waiting != "" {
			in.State, in.Note = "incomplete", waiting
		} else if !removed.IsZero() {
			in.State, in.Note = "removed", "its files left the plugins folder and it was unloaded at "+removed.UTC().Format(time.RFC3339)+"; copy them in again to serve it"
		} else {
			// Not reached: every way to nothing serving records why.
			in.State, in.Note = "unavailable", "nothing serves this name"
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
