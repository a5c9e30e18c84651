package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// gateBinary returns the gate binary the HTTP workloads run: -gate as given,
// or <root>/bin/gate after `make build` (cheap when nothing changed), so the
// binary is the one of this checkout.
func gateBinary(ctx context.Context, o options) (string, error) {
	if o.gateBin != "" {
		if _, err := os.Stat(o.gateBin); err != nil {
			return "", fmt.Errorf("-gate: %w", err)
		}
		return filepath.Abs(o.gateBin)
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(o.stderr, "compare: make -C %s build\n", root)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "make", "-C", root, "build")
	cmd.Stdout, cmd.Stderr = o.stderr, o.stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("make build (or pass -gate): %w", err)
	}
	return filepath.Join(root, "bin", "gate"), nil
}

// servedGate is a `gate serve` subprocess.
type servedGate struct {
	cmd  *exec.Cmd
	base string
	key  string
	done chan struct{}
	mu   sync.Mutex
	tail []string // its last log lines, for error messages
}

// serveGate starts `gate serve` on a fresh data folder (and dbURL when set)
// and waits, up to o.timeout, for it to listen. The compiled plugins are
// shared by every gate this invocation starts, so only the first compiles.
func serveGate(ctx context.Context, o options, dbURL string) (*servedGate, error) {
	dir, err := os.MkdirTemp(o.scratchDir, "gate-http-")
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--data", dir, "--listen", "127.0.0.1:0", "--log-level", "info", "--wasm-cache", o.wasmCache}
	if dbURL != "" {
		args = append(args, "--db", dbURL)
		if o.pgWriters > 0 {
			args = append(args, "--db-writers", strconv.Itoa(o.pgWriters))
		}
	}
	cmd := exec.Command(o.gateBin, args...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &servedGate{cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		defer close(g.done)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.tail = append(g.tail, line)
			if len(g.tail) > 10 {
				g.tail = g.tail[1:]
			}
			g.mu.Unlock()
			if strings.Contains(line, "msg=listening") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						select {
						case addrc <- a:
						default:
						}
					}
				}
			}
		}
	}()
	t := time.NewTimer(o.timeout)
	defer t.Stop()
	select {
	case a := <-addrc:
		g.base = "http://" + a
	case <-g.done:
		g.stop()
		return nil, fmt.Errorf("gate serve exited before listening: %s", g.lastLines())
	case <-t.C:
		g.stop()
		return nil, fmt.Errorf("gate serve did not listen within %s: %s", o.timeout, g.lastLines())
	case <-ctx.Done():
		g.stop()
		return nil, ctx.Err()
	}
	k, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		g.stop()
		return nil, err
	}
	g.key = strings.TrimSpace(string(k))
	return g, nil
}

func (g *servedGate) lastLines() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.tail, " | ")
}

// stop interrupts the gate and waits up to 30 s before killing it.
func (g *servedGate) stop() {
	_ = g.cmd.Process.Signal(os.Interrupt)
	exited := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-exited
	}
}

var (
	benchRate = regexp.MustCompile(`completed (\d+) in ([0-9.]+)s: (\d+) full cycles/s`)
	benchE2L  = regexp.MustCompile(`enqueue→lease\s+(\S+)\s+(\S+)\s+(\S+)`)
)

// gateHTTP runs `gate bench` against a `gate serve` subprocess: o.producers
// producers, o.workers workers leasing o.httpBatch and completing in turn
// (one completer, each call completing whatever is ready, up to
// o.httpOutcomes, in one POST /v1/leases/batch), for o.duration.
func gateHTTP(pg bool) side {
	return func(ctx context.Context, o options) (result, error) {
		var dbURL string
		if pg {
			u, drop, err := freshDatabase(ctx, o.pgURL)
			if err != nil {
				return result{}, err
			}
			defer drop()
			dbURL = u
		}
		g, err := serveGate(ctx, o, dbURL)
		if err != nil {
			return result{}, err
		}
		defer g.stop()
		// gate bench drains for at most 30 s after producers stop.
		bctx, cancel := context.WithTimeout(ctx, o.duration+o.timeout)
		defer cancel()
		cmd := exec.CommandContext(bctx, o.gateBin, "bench", "--url", g.base, "--key", g.key,
			"--producers", strconv.Itoa(o.producers), "--workers", strconv.Itoa(o.workers),
			"--batch", strconv.Itoa(o.httpBatch), "--completers", "1", "--outcome-batch", strconv.Itoa(o.httpOutcomes),
			"--duration", o.duration.String(), "--progress=false")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		runErr := cmd.Run()
		return parseGateBench(out.String(), runErr, errb.String())
	}
}

func parseGateBench(out string, runErr error, stderr string) (result, error) {
	m := benchRate.FindStringSubmatch(out)
	if m == nil {
		return result{}, fmt.Errorf("gate bench: %v: %s %s", runErr, strings.TrimSpace(out), strings.TrimSpace(stderr))
	}
	// A backlog larger than gate bench's 30 s drain ends it with an error
	// after it printed its figures; its rate (completions over the time to
	// the last one) is still what it measured.
	if runErr != nil && !strings.Contains(stderr, "enqueued but not completed") {
		return result{}, fmt.Errorf("gate bench: %v: %s", runErr, strings.TrimSpace(out))
	}
	done, _ := strconv.ParseInt(m[1], 10, 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	if secs <= 0 || done == 0 {
		return result{}, errors.New("gate bench completed nothing")
	}
	r := result{rate: float64(done) / secs, done: done}
	if l := benchE2L.FindStringSubmatch(out); l != nil {
		if d, err := time.ParseDuration(l[3]); err == nil {
			r.p99 = d
		}
	}
	return r, nil
}
