package ai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// ProviderConfig says how to reach an OpenAI-compatible chat-completions
// endpoint (OpenAI, OpenRouter, a llama.cpp or vLLM server).
type ProviderConfig struct {
	// BaseURL is the API root, for example https://openrouter.ai/api/v1 or
	// http://127.0.0.1:8000/v1. Empty: OPENAI_BASE_URL, else OpenAI's.
	BaseURL string `json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable holding the key (default
	// AI_API_KEY, then OPENAI_API_KEY). Keys never go in the config file.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// Model is the default model when neither the task, its type nor its
	// profile names one.
	Model string `json:"model,omitempty"`
	// TimeoutSeconds bounds one request attempt (default 120).
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// MaxAttempts is the retry budget of one chat-completion call: timeouts,
	// network errors, 408, 409, 429, 5xx and unreadable answers are tried
	// this many times in all (default 4) before the task fails retryable.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// BackoffInitialSeconds and BackoffMaxSeconds pace those attempts
	// (default 1 s doubling to 30 s, ±10% jitter; an answer's Retry-After,
	// in seconds or as an HTTP-date, or its Retry-After-Ms, is honoured up
	// to the maximum).
	BackoffInitialSeconds float64 `json:"backoff_initial_seconds,omitempty"`
	BackoffMaxSeconds     float64 `json:"backoff_max_seconds,omitempty"`
	// Headers are sent with every request (OpenRouter's HTTP-Referer and
	// X-Title, for example). Values may name environment variables as
	// ${NAME}.
	Headers map[string]string `json:"headers,omitempty"`

	// APIKey, when set, is used instead of the environment (programs that
	// embed the package).
	APIKey string `json:"-"`
}

func (c ProviderConfig) timeout() time.Duration {
	if c.TimeoutSeconds <= 0 {
		return 120 * time.Second
	}
	return seconds(c.TimeoutSeconds)
}

func (c ProviderConfig) attempts() int {
	if c.MaxAttempts <= 0 {
		return 4
	}
	return c.MaxAttempts
}

func (c ProviderConfig) backoff() worker.Backoff {
	b := worker.Backoff{Initial: seconds(c.BackoffInitialSeconds), Max: seconds(c.BackoffMaxSeconds)}
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	return b
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Provider calls the chat-completions endpoint through the official openai-go
// client, with its own retry budget (the client's retries are off so every
// attempt is logged and classified here).
type Provider struct {
	cfg    ProviderConfig
	client openai.Client
	log    *slog.Logger
}

// NewProvider returns a Provider for cfg. The key comes from cfg.APIKey, the
// variable cfg.APIKeyEnv names, AI_API_KEY or OPENAI_API_KEY, in that order;
// local servers usually need none.
func NewProvider(cfg ProviderConfig, log *slog.Logger) *Provider {
	if log == nil {
		log = slog.Default()
	}
	opts := []option.RequestOption{option.WithMaxRetries(0)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	key := cfg.APIKey
	if key == "" && cfg.APIKeyEnv != "" {
		key = getenv(cfg.APIKeyEnv)
	}
	if key == "" {
		key = getenv("AI_API_KEY")
	}
	if key == "" {
		key = getenv("OPENAI_API_KEY")
	}
	if key == "" {
		key = "none" // local servers take any key; the header must not be empty
	}
	opts = append(opts, option.WithAPIKey(key))
	for k, v := range cfg.Headers {
		opts = append(opts, option.WithHeader(k, expandEnv(v)))
	}
	return &Provider{cfg: cfg, client: openai.NewClient(opts...), log: log}
}

// Complete runs one chat completion within the retry budget. Its errors are
// classified for the worker SDK: worker.Fatal for a request the provider
// refuses for good (400, 404, 413, 422: a bad model name, a prompt too
// long), worker.Retryable otherwise (the budget used up on timeouts, 429s,
// 5xx or unreadable answers; or 401/403, a key the operator must fix, which
// is not retried at once). A cancelled ctx returns context.Cause(ctx).
func (p *Provider) Complete(ctx context.Context, params openai.ChatCompletionNewParams) (*openai.ChatCompletion, error) {
	var last error
	n := p.cfg.attempts()
	for attempt := 1; attempt <= n; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		actx, cancel := context.WithTimeout(ctx, p.cfg.timeout())
		res, err := p.client.Chat.Completions.New(actx, params)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if err == nil && len(res.Choices) == 0 {
			err = errors.New("the answer has no choices")
		}
		if err == nil {
			return res, nil
		}
		var wait time.Duration
		var ae *openai.Error
		switch {
		case timedOut:
			last = fmt.Errorf("no answer within %s", p.cfg.timeout())
		case errors.As(err, &ae):
			last = fmt.Errorf("%d %s: %s", ae.StatusCode, http.StatusText(ae.StatusCode), truncate(ae.Message, 300))
			switch s := ae.StatusCode; {
			case s == http.StatusUnauthorized || s == http.StatusForbidden:
				return nil, worker.Retryable(fmt.Errorf("provider refused the key: %w", last))
			case s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500:
				wait = retryAfter(ae.Response)
			default:
				return nil, worker.Fatal(fmt.Errorf("provider refused the request: %w", last))
			}
		default:
			last = err // network error or an answer that does not decode
		}
		if attempt == n {
			break
		}
		d := p.cfg.backoff().Delay(attempt)
		if wait > d {
			d = min(wait, p.cfg.backoff().Max)
		}
		p.log.Warn("chat completion failed; retrying", "model", params.Model, "attempt", attempt, "of", n, "err", last, "retry_in", d.Round(time.Millisecond))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
	}
	return nil, worker.Retryable(&ProviderError{Attempts: n, Err: last})
}

// ProviderError is the last error of a chat-completion call whose retry
// budget was used up.
type ProviderError struct {
	Attempts int
	Err      error
}

// Error implements error.
func (e *ProviderError) Error() string {
	return fmt.Sprintf("provider unavailable after %d attempts: %v", e.Attempts, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *ProviderError) Unwrap() error { return e.Err }

// retryAfterBound bounds the wait retryAfter reads: a longer delay, or an
// HTTP-date further away, reads as retryAfterBound (Complete caps the wait
// at the backoff's maximum in any case).
const retryAfterBound = 24 * time.Hour

// retryAfter reads how long an answer asks to wait: its Retry-After-Ms (in
// milliseconds, a fraction allowed; OpenAI sends it, and openai-go's own
// retries, off here, prefer it) when that reads, else its Retry-After:
// delay-seconds (a fraction allowed), or an HTTP-date measured against the
// answer's Date (the local clock when it has none that reads). It is at most
// retryAfterBound, and 0 without an answer, for absent or unreadable
// headers and for a date already past.
func retryAfter(res *http.Response) time.Duration {
	if res == nil {
		return 0
	}
	if d, ok := parseDelay(strings.TrimSpace(res.Header.Get("Retry-After-Ms")), time.Millisecond); ok {
		return d
	}
	v := strings.TrimSpace(res.Header.Get("Retry-After"))
	if d, ok := parseDelay(v, time.Second); ok {
		return d
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	now, err := http.ParseTime(res.Header.Get("Date"))
	if err != nil {
		now = time.Now()
	}
	return min(max(at.Sub(now), 0), retryAfterBound)
}

// parseDelay reads v as a number of units: ASCII digits with an optional
// fraction ("2", "1.5"), no sign or exponent, at most retryAfterBound. ok is
// false for anything else.
func parseDelay(v string, unit time.Duration) (d time.Duration, ok bool) {
	whole, frac, _ := strings.Cut(v, ".")
	if whole+frac == "" || !digits(whole) || !digits(frac) {
		return 0, false
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || n >= float64(retryAfterBound)/float64(unit) {
		return retryAfterBound, true // digits only, so err is only ever out of range
	}
	return time.Duration(n * float64(unit)), true
}

// digits reports whether s is ASCII digits only (true for "").
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
