package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

func init() {
	register(command{name: "worker", summary: "run a reference worker (echo, http.fetch, shell.exec) with the Go worker SDK", run: runWorker})
}

const workerUsage = `Usage: gate worker [flags]

Runs a worker built on sdk/worker that handles generic task types:

  echo        returns its params (smoke tests)
  http.fetch  GET params.url (http or https only); the status, headers and
              body (capped) are the inline result
  shell.exec  runs params.argv (no shell, no interpolation) with a timeout;
              exit code, stdout and stderr (capped) are the result.
              Disabled unless --enable-shell.

With --admin-key, task types that do not exist yet are registered
(PUT /v1/admin/task-types/{name}); existing ones are left alone. Without it,
an operator registers them, for example:

  curl -X PUT $URL/v1/admin/task-types/http.fetch -H "Authorization: Bearer $ADMIN" \
       -d '{"task_type":"http.fetch","lease_seconds":120}'

The worker key's principal is the worker id ({type}.{instance}):

  gate keys create --role worker --principal worker.ref-1

Flags:
`

// workerFlags are gate worker's settings.
type workerFlags struct {
	url, key, adminKey, workerID, spool, logLevel string
	concurrency, leaseSeconds                     int
	enableShell, allowPrivate, dataURIFallback    bool
	fetchMax, shellMax                            int64
	fetchTimeout, shellTimeout, shutdown          time.Duration
}

func parseWorkerFlags(args []string, stderr io.Writer) (workerFlags, error) {
	var f workerFlags
	fs := flag.NewFlagSet("gate worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, workerUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.url, "url", envOr("ASYNCGATE_URL", "http://127.0.0.1:8080"), "the gate's base URL (env ASYNCGATE_URL)")
	fs.StringVar(&f.key, "key", os.Getenv("ASYNCGATE_KEY"), "worker key (env ASYNCGATE_KEY)")
	fs.StringVar(&f.adminKey, "admin-key", os.Getenv("ASYNCGATE_ADMIN_KEY"), "admin key to register missing task types (env ASYNCGATE_ADMIN_KEY)")
	fs.StringVar(&f.workerID, "worker-id", "", "worker id {type}.{instance} (default: the key's)")
	fs.IntVar(&f.concurrency, "concurrency", 4, "tasks run at once")
	fs.IntVar(&f.leaseSeconds, "lease-seconds", 0, "lease length to ask for (0: the task type's)")
	fs.StringVar(&f.spool, "spool", "", "spool file for undeliverable outcomes (default: in the user cache folder)")
	fs.BoolVar(&f.enableShell, "enable-shell", false, "handle shell.exec (runs commands on this machine)")
	fs.BoolVar(&f.allowPrivate, "fetch-allow-private", false, "let http.fetch reach loopback, private and link-local addresses")
	fs.Int64Var(&f.fetchMax, "fetch-max-bytes", 1<<20, "largest http.fetch body kept (the rest is cut)")
	fs.DurationVar(&f.fetchTimeout, "fetch-timeout", 30*time.Second, "longest http.fetch (params.timeout_seconds may ask for less)")
	fs.Int64Var(&f.shellMax, "shell-max-output", 256<<10, "largest stdout and stderr kept per shell.exec")
	fs.DurationVar(&f.shellTimeout, "shell-timeout", 60*time.Second, "longest shell.exec (params.timeout_seconds may ask for less)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "how long in-flight tasks may finish after SIGINT/SIGTERM")
	fs.BoolVar(&f.dataURIFallback, "data-uri-fallback", false, "complete with a data: URI when the gate has no result channel")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if f.key == "" {
		return f, errors.New("--key (or ASYNCGATE_KEY) is required")
	}
	u, err := url.Parse(f.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return f, fmt.Errorf("--url %q is not an http(s) URL", f.url)
	}
	if f.concurrency < 1 || f.fetchMax < 1 || f.shellMax < 1 || f.fetchTimeout <= 0 || f.shellTimeout <= 0 {
		return f, errors.New("--concurrency, --fetch-max-bytes, --shell-max-output and the timeouts must be positive")
	}
	return f, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func runWorker(args []string, stdout, stderr io.Writer) int {
	f, err := parseWorkerFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "gate worker:", err)
		return 2
	}
	log, err := newLogger(stderr, f.logLevel, "text")
	if err != nil {
		fmt.Fprintln(stderr, "gate worker:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	client := worker.NewClient(f.url, f.key, worker.WithUserAgent("gate-worker/"+buildVersion()))
	r := worker.NewRunner(client, worker.Config{
		WorkerID: f.workerID, Concurrency: f.concurrency, LeaseSeconds: f.leaseSeconds,
		SpoolPath: f.spool, ShutdownTimeout: f.shutdown, DataURIFallback: f.dataURIFallback, Logger: log,
	})
	r.Handle("echo", handleEcho)
	r.Handle("http.fetch", fetchHandler(f))
	if f.enableShell {
		r.Handle("shell.exec", shellHandler(f))
	}
	if f.adminKey != "" {
		if err := registerTaskTypes(ctx, f.url, f.adminKey, r.TaskTypes(), log); err != nil {
			log.Error("registering task types", "err", err)
			return 1
		}
	}
	if err := r.Run(ctx); err != nil {
		log.Error("worker stopped with an error", "err", err)
		return 1
	}
	return 0
}

// referenceTypes are the task types gate worker registers when they are
// missing: short leases (heartbeats keep long tasks alive) and retries.
var referenceTypes = map[string]map[string]any{
	"echo":       {"description": "returns its params", "lease_seconds": 60},
	"http.fetch": {"description": "GET a URL; status, headers and body (capped) inline", "lease_seconds": 120},
	"shell.exec": {"description": "run an argv without a shell; exit code and capped output", "lease_seconds": 120},
}

// registerTaskTypes creates the reference task types that do not exist yet.
func registerTaskTypes(ctx context.Context, base, adminKey string, types []string, log *slog.Logger) error {
	bodies := make(map[string]map[string]any, len(types))
	for _, name := range types {
		body := map[string]any{"task_type": name}
		for k, v := range referenceTypes[name] {
			body[k] = v
		}
		bodies[name] = body
	}
	return ensureTaskTypes(ctx, base, adminKey, bodies, log)
}

// ensureTaskTypes creates, with an admin key over HTTP, each task type in
// bodies (name → PUT body) that does not exist yet; existing ones are left
// as they are. Names are taken in order, so logs and errors are stable.
func ensureTaskTypes(ctx context.Context, base, adminKey string, bodies map[string]map[string]any, log *slog.Logger) error {
	hc := &http.Client{Timeout: 30 * time.Second}
	do := func(method, path string, body any) (int, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+adminKey)
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		return res.StatusCode, b, nil
	}
	names := make([]string, 0, len(bodies))
	for name := range bodies {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := "/v1/admin/task-types/" + url.PathEscape(name)
		st, b, err := do(http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		if st == http.StatusOK {
			log.Info("task type exists; leaving it as it is", "task_type", name)
			continue
		}
		if st != http.StatusNotFound {
			return fmt.Errorf("GET %s: %d %s", path, st, b)
		}
		st, b, err = do(http.MethodPut, path, bodies[name])
		if err != nil {
			return err
		}
		if st != http.StatusOK {
			return fmt.Errorf("PUT %s: %d %s", path, st, b)
		}
		log.Info("registered task type", "task_type", name)
	}
	return nil
}

// handleEcho returns the task's params.
func handleEcho(ctx context.Context, t *worker.Task) (any, error) {
	if len(t.Params) == 0 {
		return nil, nil
	}
	return t.Params, nil
}

// fetchParams are http.fetch's params.
type fetchParams struct {
	URL            string            `json:"url"`
	Headers        map[string]string `json:"headers,omitempty"`
	MaxBytes       int64             `json:"max_bytes,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
}

// fetchResult is http.fetch's inline result.
type fetchResult struct {
	URL        string            `json:"url"`
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
	Bytes      int               `json:"bytes"`
	Truncated  bool              `json:"truncated"`
}

var errPrivateAddress = errors.New("the address is loopback, private or link-local (see --fetch-allow-private)")

// fetchHandler GETs params.url: http and https only, at most f.fetchMax
// bytes kept, at most f.fetchTimeout. 5xx answers and network errors are
// retryable failures; a bad URL is fatal; any other answer is the result.
func fetchHandler(f workerFlags) worker.HandlerFunc {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if !f.allowPrivate {
		dialer.Control = func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip := net.ParseIP(host)
			if ip == nil || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() {
				return errPrivateAddress
			}
			return nil
		}
	}
	hc := &http.Client{
		Transport: &http.Transport{DialContext: dialer.DialContext, Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: 10 * time.Second,
			ResponseHeaderTimeout: f.fetchTimeout, MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return worker.Fatalf("redirect to a %q URL refused", req.URL.Scheme)
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		},
	}
	return func(ctx context.Context, t *worker.Task) (any, error) {
		var p fetchParams
		if err := t.Bind(&p); err != nil {
			return nil, worker.Fatal(err)
		}
		u, err := url.Parse(p.URL)
		if err != nil || u.Host == "" {
			return nil, worker.Fatalf("params.url %q is not a URL", p.URL)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, worker.Fatalf("params.url scheme %q is not allowed (http, https)", u.Scheme)
		}
		limit := f.fetchMax
		if p.MaxBytes > 0 && p.MaxBytes < limit {
			limit = p.MaxBytes
		}
		timeout := f.fetchTimeout
		if p.TimeoutSeconds > 0 && time.Duration(p.TimeoutSeconds*float64(time.Second)) < timeout {
			timeout = time.Duration(p.TimeoutSeconds * float64(time.Second))
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, worker.Fatal(err)
		}
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("User-Agent", "asyncgate-worker/"+buildVersion())
		res, err := hc.Do(req)
		if err != nil {
			if errors.Is(err, errPrivateAddress) {
				return nil, worker.Fatal(err)
			}
			return nil, fmt.Errorf("fetching %s: %w", u.Redacted(), err) // retryable
		}
		defer res.Body.Close()
		body, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", u.Redacted(), err)
		}
		if res.StatusCode >= 500 {
			return nil, fmt.Errorf("%s answered %d", u.Redacted(), res.StatusCode) // retryable
		}
		out := fetchResult{URL: res.Request.URL.String(), Status: res.StatusCode, Headers: map[string]string{}}
		for _, h := range []string{"Content-Type", "Content-Length", "Last-Modified", "Etag", "Location"} {
			if v := res.Header.Get(h); v != "" {
				out.Headers[h] = v
			}
		}
		if int64(len(body)) > limit {
			body, out.Truncated = body[:limit], true
		}
		out.Bytes = len(body)
		if utf8.Valid(body) {
			s := string(body)
			out.Body = &s
		} else {
			out.BodyBase64 = base64.StdEncoding.EncodeToString(body)
		}
		return out, nil
	}
}

// shellParams are shell.exec's params.
type shellParams struct {
	Argv           []string `json:"argv"`
	Stdin          string   `json:"stdin,omitempty"`
	TimeoutSeconds float64  `json:"timeout_seconds,omitempty"`
}

// shellResult is shell.exec's inline result.
type shellResult struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
}

// capped is a writer that keeps the first n bytes and counts the rest.
type capped struct {
	buf  bytes.Buffer
	n    int64
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.n - int64(c.buf.Len())
	if room > 0 {
		if int64(len(p)) > room {
			c.buf.Write(p[:room])
			c.over = true
		} else {
			c.buf.Write(p)
		}
	} else if len(p) > 0 {
		c.over = true
	}
	return len(p), nil
}

// shellHandler runs params.argv directly (exec, no shell) with a timeout.
// The exit code is part of the result; a timeout or a cancelled task kills
// the process (a retryable failure); a missing program is fatal.
func shellHandler(f workerFlags) worker.HandlerFunc {
	return func(ctx context.Context, t *worker.Task) (any, error) {
		var p shellParams
		if err := t.Bind(&p); err != nil {
			return nil, worker.Fatal(err)
		}
		if len(p.Argv) == 0 || p.Argv[0] == "" {
			return nil, worker.Fatalf("params.argv must name a program")
		}
		timeout := f.shellTimeout
		if p.TimeoutSeconds > 0 && time.Duration(p.TimeoutSeconds*float64(time.Second)) < timeout {
			timeout = time.Duration(p.TimeoutSeconds * float64(time.Second))
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, p.Argv[0], p.Argv[1:]...)
		cmd.WaitDelay = 5 * time.Second
		cmd.Stdin = strings.NewReader(p.Stdin)
		stdout, stderr := &capped{n: f.shellMax}, &capped{n: f.shellMax}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		err := cmd.Run()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: stopped: %w", p.Argv[0], context.Cause(ctx))
		}
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
		case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission):
			return nil, worker.Fatal(err)
		default:
			return nil, err
		}
		return shellResult{
			ExitCode: cmd.ProcessState.ExitCode(),
			Stdout:   strings.ToValidUTF8(stdout.buf.String(), "\uFFFD"), StdoutTruncated: stdout.over,
			Stderr: strings.ToValidUTF8(stderr.buf.String(), "\uFFFD"), StderrTruncated: stderr.over,
		}, nil
	}
}
