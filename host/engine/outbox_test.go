package engine

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// putChannel records Puts and answers with err.
type putChannel struct {
	err  error
	puts map[string][]byte
}

func (c *putChannel) Put(_ context.Context, id string, b []byte) (string, error) {
	if c.err != nil {
		return "", c.err
	}
	c.puts[id] = b
	return "x:" + id, nil
}
func (c *putChannel) Get(context.Context, string) ([]byte, error) { return nil, nil }
func (c *putChannel) Ack(context.Context, string) error           { return nil }
func (c *putChannel) Capabilities(context.Context) (host.ChannelCapabilities, error) {
	return host.ChannelCapabilities{}, nil
}

type onePlugin struct{ ch host.Channel }

func (onePlugin) Policy(*host.TaskType) (host.RetryPolicy, error)     { return nil, nil }
func (onePlugin) Validators(*host.TaskType) ([]host.Validator, error) { return nil, nil }
func (p onePlugin) Channel(name string) (host.Channel, error) {
	if name != "ledger" || p.ch == nil {
		return nil, host.Errorf(host.CodeNotFound, "no channel %s", name)
	}
	return p.ch, nil
}

// TestChannelSink: a channel plugin as the outbox's sink puts each entry
// under its dedupe key; its bad_request is a refusal, other errors (and a
// channel not loaded yet) are retried.
func TestChannelSink(t *testing.T) {
	ctx := context.Background()
	e := store.OutboxEntry{Tenant: "acme", TaskID: "T-1", Kind: "receipt", Key: "receipt:R-1", Body: json.RawMessage(`{"a":1}`)}
	ch := &putChannel{puts: map[string][]byte{}}
	if err := (ChannelSink{Plugins: onePlugin{ch}, Name: "ledger"}).Deliver(ctx, e); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Key  string          `json:"dedupe_key"`
		Item json.RawMessage `json:"item"`
	}
	if err := json.Unmarshal(ch.puts["receipt:R-1"], &got); err != nil || got.Key != e.Key || string(got.Item) != `{"a":1}` {
		t.Fatalf("put %s: %v", ch.puts["receipt:R-1"], err)
	}
	var refused *RefusedError
	ch.err = host.Errorf(host.CodeBadRequest, "no")
	if err := (ChannelSink{Plugins: onePlugin{ch}, Name: "ledger"}).Deliver(ctx, e); !errors.As(err, &refused) {
		t.Fatalf("bad_request: %v, want a refusal", err)
	}
	ch.err = host.Errorf(host.CodeChannelError, "down")
	if err := (ChannelSink{Plugins: onePlugin{ch}, Name: "ledger"}).Deliver(ctx, e); err == nil || errors.As(err, &refused) {
		t.Fatalf("channel error: %v, want a retryable error", err)
	}
	if err := (ChannelSink{Plugins: onePlugin{}, Name: "ledger"}).Deliver(ctx, e); err == nil || errors.As(err, &refused) {
		t.Fatalf("missing channel: %v, want a retryable error", err)
	}
}

func TestOutboxBackoffBounded(t *testing.T) {
	c := OutboxConfig{}
	c.defaults()
	for a := 1; a < 40; a++ {
		d := c.backoff(a)
		if d < c.MinBackoff/2 || d > c.MaxBackoff {
			t.Fatalf("backoff(%d) = %v, outside [%v, %v]", a, d, c.MinBackoff/2, c.MaxBackoff)
		}
	}
}
