package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpsink"
)

// deliveryConfig is the config file's "delivery" section (issue 13).
type deliveryConfig struct {
	// RetentionDays applies to finished tasks of task types no longer
	// registered (each registered type has its own retention_days).
	RetentionDays int `json:"retention_days,omitempty"`
	// DeadLetterRetentionDays is how long dead letters are kept.
	DeadLetterRetentionDays int `json:"dead_letter_retention_days,omitempty"`
	// RetentionSweepSeconds is how often retention runs (default 60; -1: never).
	RetentionSweepSeconds int `json:"retention_sweep_seconds,omitempty"`
	// Sink turns the outbox on: every receipt is delivered to it at least once.
	Sink *sinkConfig `json:"sink,omitempty"`
}

// sinkConfig says where the outbox delivers: an HTTP endpoint (the
// built-in sink) or a channel plugin by name.
type sinkConfig struct {
	URL            string            `json:"url,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Channel        string            `json:"channel,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	Workers        int               `json:"workers,omitempty"`
}

// engineConfig turns the section into the engine's delivery config. plugins
// resolves a channel sink.
func (d *deliveryConfig) engineConfig(plugins engine.Plugins) (engine.DeliveryConfig, error) {
	var out engine.DeliveryConfig
	if d == nil {
		return out, nil
	}
	out.Retention = engine.RetentionConfig{DefaultDays: d.RetentionDays, DeadLetterDays: d.DeadLetterRetentionDays,
		Interval: time.Duration(d.RetentionSweepSeconds) * time.Second}
	if s := d.Sink; s != nil {
		timeout := time.Duration(s.TimeoutSeconds) * time.Second
		out.OutboxConfig = engine.OutboxConfig{Workers: s.Workers, Timeout: timeout}
		switch {
		case s.URL != "" && s.Channel != "":
			return out, fmt.Errorf("delivery.sink: give url or channel, not both")
		case s.URL != "":
			hs, err := httpsink.New(httpsink.Config{URL: s.URL, Headers: s.Headers, Timeout: timeout})
			if err != nil {
				return out, fmt.Errorf("delivery.sink: %w", err)
			}
			out.OutboxConfig.Sink = hs
		case s.Channel != "":
			out.OutboxConfig.Sink = engine.ChannelSink{Plugins: plugins, Name: s.Channel}
		default:
			return out, fmt.Errorf("delivery.sink: give url or channel")
		}
	}
	return out, nil
}

func init() {
	register(command{name: "outbox", summary: "show or retry the outbox of receipts for the external ledger", run: runOutbox})
}

const outboxUsage = `Usage:
  gate outbox status --data DIR [--db URL] [--json] [--limit N]
  gate outbox retry  --data DIR [--db URL] [ID...]

status prints how many entries wait for the external ledger, the lag (age of
the oldest), and the dead list: entries the sink refused. retry moves dead
entries (all, or the given ids) back to pending; a running gate delivers
them within a second.
`

func runOutbox(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "status" && args[0] != "retry") {
		fmt.Fprint(stderr, outboxUsage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("gate outbox "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./gate-data", "data folder")
	db := fs.String("db", "", "database URL (empty: SQLite in the data folder)")
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 100, "dead entries to list")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var ids []int64
	for _, a := range fs.Args() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 || verb != "retry" {
			fmt.Fprintf(stderr, "gate outbox %s: unexpected argument %q\n%s", verb, a, outboxUsage)
			return 2
		}
		ids = append(ids, id)
	}
	ctx := context.Background()
	st, _, err := openStore(ctx, *data, *db, openAsIs)
	if err != nil {
		fmt.Fprintf(stderr, "gate outbox %s: %v\n", verb, err)
		return 1
	}
	defer st.Close()
	now := host.SystemClock{}.Now()
	if verb == "retry" {
		n, err := engine.RetryOutboxOf(ctx, st, ids, now)
		if err != nil {
			fmt.Fprintln(stderr, "gate outbox retry:", err)
			return 1
		}
		fmt.Fprintf(stdout, "%d dead entries back to pending\n", n)
		return 0
	}
	s, err := engine.OutboxStatusOf(ctx, st, now, *limit)
	if err != nil {
		fmt.Fprintln(stderr, "gate outbox status:", err)
		return 1
	}
	if *asJSON {
		b, _ := json.MarshalIndent(s, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	fmt.Fprintf(stdout, "pending %d, dead %d, lag %.1f s\n", s.Pending, s.Dead, s.LagSeconds)
	for _, e := range s.DeadList {
		fmt.Fprintf(stdout, "dead %d  %s  task %s  attempts %d  %s\n", e.ID, e.Key, e.TaskID, e.Attempts, e.LastError)
	}
	return 0
}
