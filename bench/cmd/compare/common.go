package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// riverVersion is the River release go.mod requires.
const riverVersion = "v0.51.2"

// maxSamples bounds the latency samples one run keeps.
const maxSamples = 2_000_000

// latencies collects enqueue→work samples from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	if len(l.d) < maxSamples {
		l.d = append(l.d, d)
	}
	l.mu.Unlock()
}

func (l *latencies) addAll(ds []time.Duration) {
	l.mu.Lock()
	if room := maxSamples - len(l.d); room > 0 {
		l.d = append(l.d, ds[:min(room, len(ds))]...)
	}
	l.mu.Unlock()
}

// p99 is the 99th percentile, 0 without samples.
func (l *latencies) p99() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	return l.d[int(float64(len(l.d)-1)*0.99)]
}

// pgSettings reports the server's durability settings as the runs see them.
func pgSettings(ctx context.Context, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, durableURL(base))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var version, sc, fsync string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&version, &sc, &fsync); err != nil {
		return "", err
	}
	if sc != "on" || fsync != "on" {
		return "", fmt.Errorf("synchronous_commit=%s fsync=%s: commits are not durable, the comparison would mislead", sc, fsync)
	}
	return fmt.Sprintf("%s synchronous_commit=%s fsync=%s", version, sc, fsync), nil
}

// durableURL asks every connection for synchronous_commit=on (pgx sends
// unknown URL parameters as run-time parameters), whatever the server's
// default.
func durableURL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	q := u.Query()
	q.Set("synchronous_commit", "on")
	u.RawQuery = q.Encode()
	return u.String()
}

// freshDatabase creates a database of its own for one run and returns its
// URL and a function that drops it.
func freshDatabase(ctx context.Context, base string) (string, func(), error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "agbench_" + hex.EncodeToString(b[:])
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, base)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(cctx)
	if _, err := conn.Exec(cctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(durableURL(base))
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		// The run's context may be cancelled already: drop with a fresh one.
		dctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, err := pgx.Connect(dctx, base)
		if err != nil {
			return
		}
		defer c.Close(dctx)
		_, _ = c.Exec(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

// redact hides a password in a URL for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// sqliteDSN opens a modernc SQLite file in WAL mode with synchronous=FULL,
// the gate's own durability.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)"
}

// window runs until d has passed or ctx ends and reports how long it ran.
func window(ctx context.Context, d time.Duration) time.Duration {
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return time.Since(start)
}

// burnResult is a burn-down's rate: done tasks over el, the time from the
// workers' start to the last completion. A burn-down cut off by -timeout
// still has a rate over what it completed, marked partial; one cut off by
// Ctrl-C has none.
func burnResult(ctx context.Context, o options, done int64, el time.Duration) (result, error) {
	if done == 0 || el <= 0 {
		return result{}, fmt.Errorf("burn-down: nothing completed within %s", o.timeout)
	}
	r := result{rate: float64(done) / el.Seconds(), done: done, partial: done < int64(o.burn)}
	if r.partial && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return result{}, ctx.Err()
	}
	return r, nil
}
