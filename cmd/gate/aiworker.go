package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
	"github.com/asyncgate/asyncgate/worker/ai"
)

func init() {
	register(command{name: "ai-worker", summary: "run the AI worker: chat-completion loops with MCP tools (OpenAI-compatible providers)", run: runAIWorker})
}

const aiWorkerUsage = `Usage: gate ai-worker --config ai.json [flags]

Runs the AI worker (package worker/ai) on the Go worker SDK: each task of a
configured type runs a chat-completion loop against an OpenAI-compatible
endpoint (OpenAI, OpenRouter, llama.cpp, vLLM) with the MCP tools its
instruction profile allows, and completes with the model's final answer.

The config file names the provider, the profiles folder, the MCP servers and
the task types (see docs/workers.md). The provider key comes from the
environment: the variable provider.api_key_env names, else AI_API_KEY, else
OPENAI_API_KEY.

Task params: {"prompt": "…", "model": "…" (optional), "models": [… ] (optional:
ask each model concurrently)}.

Flags:
`

// aiWorkerFlags are gate ai-worker's settings.
type aiWorkerFlags struct {
	config, url, key, adminKey, workerID, spool, logLevel string
	profiles, baseURL, model                              string
	concurrency, leaseSeconds                             int
	shutdown                                              time.Duration
	check                                                 bool
}

func parseAIWorkerFlags(args []string, stderr io.Writer) (aiWorkerFlags, error) {
	var f aiWorkerFlags
	fs := flag.NewFlagSet("gate ai-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, aiWorkerUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.config, "config", os.Getenv("AI_WORKER_CONFIG"), "the AI worker's config file (env AI_WORKER_CONFIG)")
	fs.StringVar(&f.url, "url", envOr("ASYNCGATE_URL", "http://127.0.0.1:8080"), "the gate's base URL (env ASYNCGATE_URL)")
	fs.StringVar(&f.key, "key", os.Getenv("ASYNCGATE_KEY"), "worker key (env ASYNCGATE_KEY)")
	fs.StringVar(&f.adminKey, "admin-key", os.Getenv("ASYNCGATE_ADMIN_KEY"), "admin key to register missing task types (env ASYNCGATE_ADMIN_KEY)")
	fs.StringVar(&f.workerID, "worker-id", "", "worker id {type}.{instance} (default: the key's)")
	fs.IntVar(&f.concurrency, "concurrency", 4, "tasks run at once")
	fs.IntVar(&f.leaseSeconds, "lease-seconds", 0, "lease length to ask for (0: the task type's)")
	fs.StringVar(&f.spool, "spool", "", "spool file for undeliverable outcomes (default: in the user cache folder)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "how long in-flight tasks may finish after SIGINT/SIGTERM")
	fs.StringVar(&f.profiles, "profiles", "", "the profiles folder (overrides the config's profiles_dir)")
	fs.StringVar(&f.baseURL, "base-url", os.Getenv("AI_BASE_URL"), "the provider's API root (overrides provider.base_url; env AI_BASE_URL)")
	fs.StringVar(&f.model, "model", os.Getenv("AI_MODEL"), "the default model (overrides provider.model; env AI_MODEL)")
	fs.BoolVar(&f.check, "check", false, "check the config and profiles, then exit")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if f.config == "" {
		return f, errors.New("--config (or AI_WORKER_CONFIG) is required")
	}
	if f.check {
		return f, nil
	}
	if f.key == "" {
		return f, errors.New("--key (or ASYNCGATE_KEY) is required")
	}
	u, err := url.Parse(f.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return f, fmt.Errorf("--url %q is not an http(s) URL", f.url)
	}
	if f.concurrency < 1 {
		return f, errors.New("--concurrency must be positive")
	}
	return f, nil
}

// loadAIWorker reads the config and profiles and builds the worker.
func loadAIWorker(f aiWorkerFlags, log *slog.Logger) (*ai.Worker, ai.Config, error) {
	cfg, err := ai.LoadConfig(f.config)
	if err != nil {
		return nil, cfg, err
	}
	if f.profiles != "" {
		cfg.ProfilesDir = f.profiles
	}
	if f.baseURL != "" {
		cfg.Provider.BaseURL = f.baseURL
	}
	if f.model != "" {
		cfg.Provider.Model = f.model
	}
	profiles := map[string]*ai.Profile{}
	if cfg.ProfilesDir != "" {
		if profiles, err = ai.LoadProfiles(cfg.ProfilesDir); err != nil {
			return nil, cfg, err
		}
	}
	w, err := ai.New(cfg, profiles, log)
	return w, cfg, err
}

func runAIWorker(args []string, stdout, stderr io.Writer) int {
	f, err := parseAIWorkerFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "gate ai-worker:", err)
		return 2
	}
	log, err := newLogger(stderr, f.logLevel, "text")
	if err != nil {
		fmt.Fprintln(stderr, "gate ai-worker:", err)
		return 2
	}
	w, cfg, err := loadAIWorker(f, log)
	if err != nil {
		fmt.Fprintln(stderr, "gate ai-worker:", err)
		return 2
	}
	defer w.Close()
	if f.check {
		fmt.Fprintf(stdout, "ok: %d task types (%s)\n", len(cfg.TaskTypes), strings.Join(w.TaskTypes(), ", "))
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	client := worker.NewClient(f.url, f.key, worker.WithUserAgent("gate-ai-worker/"+buildVersion()))
	r := worker.NewRunner(client, worker.Config{
		WorkerID: f.workerID, Concurrency: f.concurrency, LeaseSeconds: f.leaseSeconds,
		SpoolPath: f.spool, ShutdownTimeout: f.shutdown, Logger: log,
	})
	w.Register(r)
	if f.adminKey != "" {
		if err := registerAITaskTypes(ctx, f.url, f.adminKey, cfg, log); err != nil {
			log.Error("registering task types", "err", err)
			return 1
		}
	}
	if err := r.Run(ctx); err != nil {
		log.Error("ai worker stopped with an error", "err", err)
		return 1
	}
	return 0
}

// registerAITaskTypes creates the configured task types that do not exist
// yet (lease_seconds from the config, default 120); existing ones are left
// alone.
func registerAITaskTypes(ctx context.Context, base, adminKey string, cfg ai.Config, log *slog.Logger) error {
	bodies := make(map[string]map[string]any, len(cfg.TaskTypes))
	for name, tt := range cfg.TaskTypes {
		lease := tt.LeaseSeconds
		if lease <= 0 {
			lease = 120
		}
		bodies[name] = map[string]any{"task_type": name, "lease_seconds": lease,
			"description": "AI worker: chat-completion loop with profile " + tt.Profile}
	}
	return ensureTaskTypes(ctx, base, adminKey, bodies, log)
}
