package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the SQLite workloads once, tiny, on both sides (go test
// -short ./...; not part of the gate's CI).
func TestSmoke(t *testing.T) {
	if !testing.Short() {
		t.Skip("the smoke test runs with -short")
	}
	var out, errb bytes.Buffer
	rc := run([]string{"-only", "^sqlite-", "-runs", "1", "-burn", "300", "-duration", "1s", "-timeout", "2m"}, &out, &errb)
	if rc != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", rc, out.String(), errb.String())
	}
	for _, want := range []string{"| SQLite burn-down: 300 queued", "| SQLite steady: 32 producers", "×"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestParseGateBench(t *testing.T) {
	out := `gate bench: external gate http://127.0.0.1:1
  enqueued 5000, completed 5000 in 2.50s: 2000 full cycles/s
  latency                p50       p90       p99       max
  enqueue→lease       1.00ms    2.00ms   12.50ms   40.00ms
`
	r, err := parseGateBench(out, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.done != 5000 || r.rate != 2000 || r.p99 != 12500*time.Microsecond {
		t.Errorf("got %+v, want 5000 done, 2000/s, p99 12.5ms", r)
	}
	if _, err := parseGateBench(out, errors.New("exit status 1"), "gate bench: 7 tasks were enqueued but not completed"); err != nil {
		t.Errorf("a drain cut short still has a rate: %v", err)
	}
	if _, err := parseGateBench(out, errors.New("exit status 1"), "gate bench: connection refused"); err == nil {
		t.Error("a failed gate bench was taken as a result")
	}
	if _, err := parseGateBench("nothing", nil, ""); err == nil {
		t.Error("output without figures was taken as a result")
	}
}

func TestMedian(t *testing.T) {
	m := median([]result{{rate: 3, p99: 9}, {rate: 1, p99: 1}, {rate: 2, p99: 5}})
	if m.rate != 2 || m.p99 != 5 {
		t.Errorf("median = %+v, want rate 2, p99 5", m)
	}
	if m := median([]result{{rate: 1}, {rate: 3}}); m.rate != 2 {
		t.Errorf("median of two = %v, want 2", m.rate)
	}
}

func TestBurnResult(t *testing.T) {
	o := options{burn: 100, timeout: time.Second}
	r, err := burnResult(context.Background(), o, 100, 2*time.Second)
	if err != nil || r.rate != 50 || r.partial {
		t.Errorf("full burn-down: %+v %v, want 50/s, not partial", r, err)
	}
	expired, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-expired.Done()
	r, err = burnResult(expired, o, 40, 2*time.Second)
	if err != nil || r.rate != 20 || !r.partial {
		t.Errorf("burn-down cut by -timeout: %+v %v, want 20/s, partial", r, err)
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if _, err := burnResult(stopped, o, 40, 2*time.Second); err == nil {
		t.Error("a burn-down stopped by Ctrl-C was taken as a result")
	}
	if _, err := burnResult(expired, o, 0, 2*time.Second); err == nil {
		t.Error("a burn-down that completed nothing was taken as a result")
	}
}
