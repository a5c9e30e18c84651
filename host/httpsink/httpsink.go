// Package httpsink is the built-in outbox sink: it POSTs each outbox entry
// (a receipt, or a result promoted to memory) as JSON to one URL of an
// external ledger (ReceiptGate, MemoryGate, or anything that takes them).
//
// The request carries the entry's dedupe key twice, as the Idempotency-Key
// header and as dedupe_key in the body, so the receiver can drop repeats:
// the outbox delivers at least once. A 2xx answer, or 409 (the receiver
// already has it), is delivered. 400, 413, 415 and 422 are a refusal: the
// entry goes to the outbox's dead list. Anything else (a 5xx, 408, 429, a
// 401 or 404 that an operator may fix, a timeout, a refused connection) is
// retried with backoff.
package httpsink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Config configures a Sink.
type Config struct {
	// URL receives a POST per entry (http or https).
	URL string `json:"url"`
	// Headers are added to every request (for example Authorization). They
	// live in the gate's config, never in a plugin.
	Headers map[string]string `json:"headers,omitempty"`
	// Timeout bounds one request (default 10 s; the outbox's own deadline
	// applies too).
	Timeout time.Duration `json:"-"`
}

// Sink is the HTTP sink. It implements engine.Sink.
type Sink struct {
	url    string
	header http.Header
	client *http.Client
}

var _ engine.Sink = (*Sink)(nil)

// New checks cfg and returns a Sink.
func New(cfg Config) (*Sink, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("httpsink: url %q must be an absolute http or https URL", cfg.URL)
	}
	h := http.Header{}
	for k, v := range cfg.Headers {
		if k == "" || strings.ContainsAny(k+v, "\r\n") {
			return nil, fmt.Errorf("httpsink: header %q is not valid", k)
		}
		h.Set(k, v)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &Sink{url: u.String(), header: h, client: &http.Client{Timeout: cfg.Timeout, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

// Item is the JSON body of one delivery.
type Item struct {
	DedupeKey string          `json:"dedupe_key"`
	Kind      string          `json:"kind"` // "receipt" or "memory"
	Tenant    string          `json:"tenant"`
	TaskID    string          `json:"task_id,omitempty"`
	Body      json.RawMessage `json:"item"`
}

// Deliver implements engine.Sink.
func (s *Sink) Deliver(ctx context.Context, e store.OutboxEntry) error {
	b, err := json.Marshal(Item{DedupeKey: e.Key, Kind: e.Kind, Tenant: e.Tenant, TaskID: e.TaskID, Body: e.Body})
	if err != nil {
		return &engine.RefusedError{Reason: "the entry is not valid JSON: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	for k, v := range s.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", e.Key)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch c := resp.StatusCode; {
	case c/100 == 2, c == http.StatusConflict:
		return nil
	case c == http.StatusBadRequest, c == http.StatusRequestEntityTooLarge, c == http.StatusUnsupportedMediaType, c == http.StatusUnprocessableEntity:
		return &engine.RefusedError{Reason: fmt.Sprintf("%d %s", c, strings.TrimSpace(string(msg)))}
	default:
		return fmt.Errorf("sink answered %d %s", c, strings.TrimSpace(string(msg)))
	}
}
