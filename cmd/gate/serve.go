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
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/oauth"
	"github.com/asyncgate/asyncgate/host/postgres"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/ui"
	"github.com/asyncgate/asyncgate/schemas"
)

func init() {
	register(command{name: "serve", summary: "run the gate: worker, agent and operator HTTP APIs", run: runServe})
}

// serveConfig is the config file's content (schemas/config.schema.json) after
// defaults and flags are applied.
type serveConfig struct {
	Listen string `json:"listen"`
	Data   string `json:"data"`
	DB     string `json:"db"`
	// DBWriters is how many writer connections a gate host runs on
	// PostgreSQL (0: postgres.DefaultWriters, two); SQLite always has one
	// writer.
	DBWriters              int    `json:"db_writers"`
	BodyLimitBytes         int64  `json:"body_limit_bytes"`
	MetricsPublic          bool   `json:"metrics_public"`
	MaxLeaseSeconds        int    `json:"max_lease_seconds"`
	ExpiryJitterMS         int    `json:"expiry_jitter_ms"`
	SweepIntervalMS        int    `json:"sweep_interval_ms"`
	AuthCacheSeconds       int    `json:"auth_cache_seconds"`
	ShutdownTimeoutSeconds int    `json:"shutdown_timeout_seconds"`
	LogLevel               string `json:"log_level"`
	LogFormat              string `json:"log_format"`
	// MCPAllowAnyHost turns off the MCP door's DNS-rebinding protection (see docs/mcp.md).
	MCPAllowAnyHost bool `json:"mcp_allow_any_host"`
	// PprofListen serves Go's profiling endpoints (/debug/pprof/) on a
	// loopback address of their own, without a key (empty: off; pprof.go).
	PprofListen string `json:"pprof_listen"`
	// OTLPEndpoint is the OTLP/HTTP collector spans go to (empty: the
	// standard OTEL_* variables decide; tracing.go).
	OTLPEndpoint string `json:"otlp_endpoint"`
	// DBTimeoutSeconds bounds each store call a request makes, and each
	// run of a PostgreSQL writer's batch: past it the request answers 503
	// database_unavailable (RATIONALE.md, "A request's store calls answer
	// within 15 s").
	DBTimeoutSeconds int `json:"db_timeout_seconds"`
	// WasmCacheDir holds compiled plugins (default <data>/wasm-cache); gates
	// may share one, so only the first start on a machine compiles.
	WasmCacheDir string `json:"wasm_cache_dir"`
	// PluginsDir is the drop-in plugins folder (default <data>/plugins).
	PluginsDir string `json:"plugins_dir"`
	// ResultsDir is the one folder the file channel may use (default <data>/results).
	ResultsDir string `json:"results_dir"`
	// HTTPChannel configures the http push channel; without it that channel is refused.
	HTTPChannel *httpChannelConfig `json:"http_channel"`
	// MemoryLimitMiB is the gate's soft memory limit (debug.SetMemoryLimit);
	// 0 sets none. A GOMEMLIMIT environment variable takes precedence.
	MemoryLimitMiB int64 `json:"memory_limit_mib"`
	// GCPercent is the collector's target (debug.SetGCPercent, as GOGC);
	// 0 keeps the runtime's default of 100. A GOGC environment variable
	// takes precedence.
	GCPercent int `json:"gc_percent"`
	// ResourceLeases tunes resource leases (KLIS-3); see resourceleases.go.
	ResourceLeases *resourceLeaseConfig `json:"resource_leases"`
	// Delivery configures retention and the outbox to an external ledger (delivery.go).
	Delivery *deliveryConfig `json:"delivery"`
	// Mail is the gate's mail server: send_email, the email channel,
	// fetch_task_email (mail.go).
	Mail *mailConfig `json:"mail"`
	// OAuth makes the gate an OAuth protected resource (oauth.go).
	OAuth *oauth.Config `json:"oauth"`
}

func defaultServeConfig() serveConfig {
	return serveConfig{
		Listen: "127.0.0.1:8080", Data: "./gate-data", BodyLimitBytes: httpapi.DefaultBodyLimit,
		MaxLeaseSeconds: 3600, ExpiryJitterMS: 3000, SweepIntervalMS: 1000, AuthCacheSeconds: 5,
		DBTimeoutSeconds:       int(store.DefaultTimeout / time.Second),
		ShutdownTimeoutSeconds: 15, LogLevel: "info", LogFormat: "text", MemoryLimitMiB: defaultMemoryLimitMiB,
		GCPercent: defaultGCPercent,
	}
}

// loadConfigFile validates a config file against the embedded schema and
// decodes it over cfg.
func loadConfigFile(path string, cfg *serveConfig) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("config.schema.json", bytes.NewReader(schemas.ConfigSchema)); err != nil {
		return fmt.Errorf("config schema: %w", err)
	}
	sch, err := c.Compile("config.schema.json")
	if err != nil {
		return fmt.Errorf("config schema: %w", err)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("config %s: not valid JSON: %w", path, err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("config %s: %v", path, err)
	}
	if err := json.Unmarshal(raw, cfg); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// parseServeFlags applies defaults, then the config file, then the
// ASYNCGATE_* environment variables (serve_env.go), then the flags that were
// given.
func parseServeFlags(args []string, stderr io.Writer) (serveConfig, error) {
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("gate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (JSON, see schemas/config.schema.json; default $ASYNCGATE_CONFIG)")
	listen := fs.String("listen", cfg.Listen, "address to listen on (host:port; :0 picks a free port)")
	data := fs.String("data", cfg.Data, "data folder (SQLite database and admin.key)")
	db := fs.String("db", "", "database URL (empty: SQLite in the data folder; postgres://… for PostgreSQL)")
	dbWriters := fs.Int("db-writers", 0, "writer connections of this gate host on PostgreSQL, 1 to 16 (0: 2); each batches the updates waiting when it is free")
	dbTimeout := fs.Duration("db-timeout", time.Duration(cfg.DBTimeoutSeconds)*time.Second, "longest a request's store call waits for the database before the request answers 503 database_unavailable (whole seconds, 1s to 60s)")
	bodyLimit := fs.Int64("body-limit", cfg.BodyLimitBytes, "largest request body in bytes")
	metricsPublic := fs.Bool("metrics-public", false, "serve /metrics without an admin key")
	maxLease := fs.Int("max-lease-seconds", cfg.MaxLeaseSeconds, "cap on every lease grant and extension")
	jitter := fs.Duration("expiry-jitter", time.Duration(cfg.ExpiryJitterMS)*time.Millisecond, "most random delay added after a lease expires (0: none)")
	sweep := fs.Duration("sweep-interval", time.Duration(cfg.SweepIntervalMS)*time.Millisecond, "how often expired leases are looked for")
	authCache := fs.Duration("auth-cache", time.Duration(cfg.AuthCacheSeconds)*time.Second, "how long a resolved API key is cached (0: off)")
	logLevel := fs.String("log-level", cfg.LogLevel, "debug, info, warn or error")
	logFormat := fs.String("log-format", cfg.LogFormat, "text or json")
	wasmCache := fs.String("wasm-cache", "", "folder of compiled plugins (default <data>/wasm-cache)")
	resultsDir := fs.String("results-dir", "", "the file channel's folder (default <data>/results; on PostgreSQL one folder shared by every gate host)")
	memLimit := fs.Int64("memory-limit-mib", cfg.MemoryLimitMiB, "soft memory limit of the gate in MiB (0: none; GOMEMLIMIT wins when set)")
	gcPercent := fs.Int("gc-percent", cfg.GCPercent, "the collector's target, as GOGC (0: the runtime's default, 100; GOGC wins when set)")
	pprofListen := fs.String("pprof-listen", "", "serve Go's profiling endpoints (/debug/pprof/) on this loopback address, apart from --listen and without a key (empty: off)")
	otlpEndpoint := fs.String("otlp-endpoint", "", "export traces over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318 (empty: the OTEL_* variables decide; off when none is set)")
	mcpAnyHost := fs.Bool("mcp-allow-any-host", false, "let /mcp answer loopback requests whose Host header is not localhost (behind a local reverse proxy)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *configPath == "" {
		*configPath = os.Getenv("ASYNCGATE_CONFIG")
	}
	if *configPath != "" {
		if err := loadConfigFile(*configPath, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := loadConfigEnv(os.Environ(), &cfg, stderr); err != nil {
		return cfg, err
	}
	var durErr error
	given := map[string]string{} // config field → the flag that set it
	fs.Visit(func(f *flag.Flag) {
		if field, ok := flagFields[f.Name]; ok {
			given[field] = "--" + f.Name
		}
		switch f.Name {
		case "listen":
			cfg.Listen = *listen
		case "data":
			cfg.Data = *data
		case "db":
			cfg.DB = *db
		case "db-writers":
			cfg.DBWriters = *dbWriters
		case "db-timeout":
			cfg.DBTimeoutSeconds, durErr = wholeUnits(durErr, "--db-timeout", *dbTimeout, time.Second)
		case "body-limit":
			cfg.BodyLimitBytes = *bodyLimit
		case "metrics-public":
			cfg.MetricsPublic = *metricsPublic
		case "max-lease-seconds":
			cfg.MaxLeaseSeconds = *maxLease
		case "expiry-jitter":
			cfg.ExpiryJitterMS, durErr = wholeUnits(durErr, "--expiry-jitter", *jitter, time.Millisecond)
		case "sweep-interval":
			cfg.SweepIntervalMS, durErr = wholeUnits(durErr, "--sweep-interval", *sweep, time.Millisecond)
		case "auth-cache":
			cfg.AuthCacheSeconds, durErr = wholeUnits(durErr, "--auth-cache", *authCache, time.Second)
		case "log-level":
			cfg.LogLevel = *logLevel
		case "log-format":
			cfg.LogFormat = *logFormat
		case "wasm-cache":
			cfg.WasmCacheDir = *wasmCache
		case "results-dir":
			cfg.ResultsDir = *resultsDir
		case "memory-limit-mib":
			cfg.MemoryLimitMiB = *memLimit
		case "gc-percent":
			cfg.GCPercent = *gcPercent
		case "mcp-allow-any-host":
			cfg.MCPAllowAnyHost = *mcpAnyHost
		case "pprof-listen":
			cfg.PprofListen = *pprofListen
		case "otlp-endpoint":
			cfg.OTLPEndpoint = *otlpEndpoint
		}
	})
	if durErr != nil {
		return cfg, durErr
	}
	// The flags get the config file's bounds, from the same schema.
	if err := checkFlagBounds(cfg, given); err != nil {
		return cfg, err
	}
	if err := checkPprofListen(cfg.PprofListen); err != nil {
		return cfg, err
	}
	if cfg.DBWriters > 1 && !isPostgresURL(cfg.DB) {
		return cfg, fmt.Errorf("--db-writers %d needs PostgreSQL (--db postgres://…): SQLite has one writer", cfg.DBWriters)
	}
	if cfg.OAuth != nil {
		if err := cfg.OAuth.Validate(); err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
	}
	return cfg, nil
}

// flagFields are the flags whose values the config schema bounds, by the
// config field they set.
var flagFields = map[string]string{
	"db-writers": "db_writers", "db-timeout": "db_timeout_seconds", "body-limit": "body_limit_bytes", "max-lease-seconds": "max_lease_seconds",
	"expiry-jitter": "expiry_jitter_ms", "sweep-interval": "sweep_interval_ms", "auth-cache": "auth_cache_seconds",
	"memory-limit-mib": "memory_limit_mib", "gc-percent": "gc_percent", "otlp-endpoint": "otlp_endpoint",
}

// checkFlagBounds checks the fields the flags set against the config schema,
// the one place their bounds are written: "--max-lease-seconds: must be <=
// 604800 but found 10000000000".
func checkFlagBounds(cfg serveConfig, given map[string]string) error {
	if len(given) == 0 {
		return nil
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	var all map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&all); err != nil {
		return err
	}
	obj := map[string]any{}
	for field := range given {
		obj[field] = all[field]
	}
	sch, err := compileConfigSchema()
	if err != nil {
		return err
	}
	if err := sch.Validate(obj); err != nil {
		return envSchemaError(err, given)
	}
	return nil
}

// wholeUnits is d in units, refusing a value that is not a whole number of
// them: --auth-cache 500ms would otherwise be 0 seconds, the cache off.
func wholeUnits(prev error, name string, d, unit time.Duration) (int, error) {
	if prev != nil {
		return 0, prev
	}
	if d%unit != 0 {
		what := "milliseconds"
		if unit == time.Second {
			what = "seconds"
		}
		return 0, fmt.Errorf("%s %s: must be a whole number of %s", name, d, what)
	}
	return int(d / unit), nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: use text or json", format)
}

func runServe(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseServeFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "gate serve:", err)
		return 2
	}
	log, err := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(stderr, "gate serve:", err)
		return 2
	}
	setMemoryLimit(cfg.MemoryLimitMiB, log)
	setGCPercent(cfg.GCPercent, log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log, nil); err != nil {
		log.Error("gate stopped with an error", "err", err)
		return 1
	}
	return 0
}

// serve runs the gate until ctx is done, then shuts down gracefully: stop
// accepting, end long-polls, drain in-flight requests, stop the engine, close
// the store. ready, when set, receives the listening address.
//
// Start-up binds the port first, so a busy port fails at once and before
// anything is written to the data folder; then it opens (on a first start,
// creates) the store, starts the plugin runtime and serves HTTP. ctx ends
// every phase: a signal during start-up stops the gate cleanly.
func serve(ctx context.Context, cfg serveConfig, log *slog.Logger, ready chan<- string) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	stopped := func(phase string) error {
		log.Info("stopped during start-up", "phase", phase)
		return nil
	}
	stopTracing, err := startTracing(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	if cfg.PprofListen != "" {
		stopPprof, err := servePprof(cfg.PprofListen, log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	if ctx.Err() != nil {
		return stopped("listen")
	}
	// The data folder holds the database, admin.key and results: a folder
	// another user can write is refused before anything is opened in it.
	if err := ensurePrivateDir(cfg.Data, "data folder", false); err != nil {
		return err
	}
	dbTimeout := time.Duration(cfg.DBTimeoutSeconds) * time.Second
	st, created, err := openStoreWith(ctx, cfg.Data, cfg.DB, openOrCreate, postgres.Options{Writers: cfg.DBWriters, Timeout: dbTimeout})
	if err != nil {
		if ctx.Err() != nil {
			return stopped("store")
		}
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Warn("closing the store", "err", err)
		}
	}()
	if created {
		log.Info("created a new gate", "data", cfg.Data)
	}
	if err := os.MkdirAll(cfg.Data, 0o700); err != nil { // the store may live elsewhere (--db)
		return fmt.Errorf("data folder: %w", err)
	}
	if err := ensureAdminKey(ctx, st, cfg.Data, log); err != nil {
		if ctx.Err() != nil {
			return stopped("admin key")
		}
		return err
	}

	metrics := httpapi.NewMetrics()
	ecfg := engine.Config{
		Store: st, Logger: log, MaxLeaseSeconds: cfg.MaxLeaseSeconds, OnEvent: metrics.OnEvent,
		ExpiryJitter:  time.Duration(cfg.ExpiryJitterMS) * time.Millisecond,
		SweepInterval: time.Duration(cfg.SweepIntervalMS) * time.Millisecond,
	}
	ecfg.ResourceLeases = cfg.ResourceLeases.engine()
	if ecfg.ExpiryJitter == 0 {
		ecfg.ExpiryJitter = -1 // the engine reads 0 as "default"; the config's 0 means none
	}
	if err := checkResultsFolder(ctx, st, resultsDir(cfg), log); err != nil {
		return err
	}
	plugins, err := startPluginsUntil(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	if plugins == nil {
		return stopped("plugins")
	}
	defer plugins.Close()
	go idleRelease(ctx, log)
	ecfg.Plugins = plugins.Plugins
	if ecfg.Delivery, err = cfg.Delivery.engineConfig(ecfg.Plugins); err != nil {
		return err
	}
	if mc, err := cfg.Mail.client(); err != nil {
		return fmt.Errorf("mail: %w", err)
	} else if mc != nil {
		ecfg.Delivery.Mail = mc
		ecfg.Delivery.EmailLimit = cfg.Mail.SendLimit
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return err
	}
	eng.Start()
	defer eng.Close()

	authTTL := time.Duration(cfg.AuthCacheSeconds) * time.Second
	if authTTL == 0 {
		authTTL = -1
	}
	v := buildVersion()
	// The doors: the HTTP door serves the JSON API and mounts the MCP door,
	// the dashboard and the plugins list; they share one key resolver, so a
	// key revoked through the API is forgotten by the dashboard at once.
	authn := auth.NewAuthenticator(st, authTTL)
	eng.OnKeysRevoked(authn.Forget) // a revocation on another host (PostgreSQL)
	mcpSrv, err := mcpapi.New(mcpapi.Config{Engine: eng, Logger: log, Version: v, AllowAnyHost: cfg.MCPAllowAnyHost,
		Challenge: mcpChallenge(authn)})
	if err != nil {
		return err
	}
	oauthOpts, signIn, err := setupOAuth(cfg.OAuth, st, authTTL, authn)
	if err != nil {
		return err
	}
	dashCtx, stopDash := context.WithCancel(context.Background())
	defer stopDash()
	dash, err := ui.New(ui.Config{Engine: eng, Authenticate: authn.Authenticate, Plugins: plugins.Info,
		Version: v, Logger: log, Context: dashCtx, SignIn: signIn})
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	srv, err := httpapi.New(httpapi.Config{
		Engine: eng, Logger: log, BodyLimit: cfg.BodyLimitBytes, Metrics: metrics,
		MetricsPublic: cfg.MetricsPublic, Authenticator: authn, Version: v, StoreTimeout: dbTimeout,
	}, append([]httpapi.Option{plugins.Routes, plugins.Pending, httpapi.WithRoutes(mcpSrv.Mount), httpapi.WithRoutes(mountDashboard(dash))}, oauthOpts...)...)
	if err != nil {
		return err
	}
	warnUndocumentedRoutes(srv, log)
	addr := ln.Addr().String()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("listening", "addr", addr, "data", cfg.Data, "store", st.Driver(), "version", v)
	if ready != nil {
		ready <- addr
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout_seconds", cfg.ShutdownTimeoutSeconds)
	mcpSrv.Close() // end MCP lease waits before draining
	stopDash()     // and the dashboard's sampler and ledger checks
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.ShutdownTimeoutSeconds)*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("in-flight requests did not finish in time", "err", err)
	}
	<-errc
	eng.Close()
	log.Info("stopped")
	return nil
}

// mountDashboard mounts the operator dashboard at /ui. It signs operators
// in with its own cookie sessions, not the bearer-key middleware.
func mountDashboard(dash *ui.UI) func(*echo.Echo, echo.MiddlewareFunc) {
	return func(e *echo.Echo, _ echo.MiddlewareFunc) { dash.Mount(e) }
}

// startPluginsUntil runs startPlugins, or gives up when ctx ends first: it
// then returns nil, nil, and the plugins are closed once their start ends.
// startPlugins is meant to return promptly (plugins compile in the
// background); this keeps a signal from waiting on it when it does not.
func startPluginsUntil(ctx context.Context, cfg serveConfig, log *slog.Logger) (*pluginWiring, error) {
	type started struct {
		w   *pluginWiring
		err error
	}
	c := make(chan started, 1)
	go func() {
		w, err := startPlugins(cfg, log)
		c <- started{w, err}
	}()
	select {
	case s := <-c:
		if ctx.Err() != nil {
			if s.err == nil {
				s.w.Close()
			}
			return nil, nil
		}
		return s.w, s.err
	case <-ctx.Done():
		go func() {
			if s := <-c; s.err == nil {
				s.w.Close()
			}
		}()
		return nil, nil
	}
}

// ensureAdminKey creates the first admin key when the store has no keys at
// all, writes it to <data>/admin.key (mode 0600) and logs the path. It never
// overwrites an admin.key: one that exists beside a store without keys belongs
// to another database, and the start is refused.
func ensureAdminKey(ctx context.Context, st store.Store, dataDir string, log *slog.Logger) error {
	ks, err := auth.ListKeys(ctx, st)
	if err != nil {
		return fmt.Errorf("reading API keys: %w", err)
	}
	if len(ks) > 0 {
		return nil
	}
	path := filepath.Join(dataDir, "admin.key")
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("the database has no API keys, but %s exists: it was written for another database; "+
			"move it away to let this start create the first admin key, or create one with `gate keys create --role admin`", path)
	}
	k, err := auth.CreateKey(ctx, st, auth.NewKeyRequest{Role: engine.RoleAdmin, Principal: "admin", Tenant: auth.DefaultTenant})
	if err != nil {
		return fmt.Errorf("creating the admin key: %w", err)
	}
	if err := writeNewFile(path, []byte(k.APIKey+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the admin key: %w", err)
	}
	log.Info("created the first admin key", "path", path, "key_id", k.ID)
	return nil
}

// writeNewFile writes a file that must not exist yet and syncs it and its
// folder, so an acknowledged first key survives a crash.
func writeNewFile(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		defer d.Close()
		return d.Sync()
	}
	return nil
}
