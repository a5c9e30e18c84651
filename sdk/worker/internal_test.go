package worker

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCompletionShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"nil", nil, `{"result":{}}`},
		{"map", map[string]int{"a": 1}, `{"result":{"a":1}}`},
		{"string", "hi", `{"result":"hi"}`},
		{"raw", json.RawMessage(`[1,2]`), `{"result":[1,2]}`},
		{"bytes", []byte{0, 1, 2}, `{"result_base64":"AAEC"}`},
		{"empty bytes", []byte{}, `{"result":{}}`},
		{"pointer", Pointer{Channel: "s3", Pointer: "s3://b/k", Summary: "ok", Metadata: map[string]int{"n": 1}},
			`{"summary":"ok","result_channel":"s3","result_pointer":"s3://b/k","metadata":{"n":1}}`},
		{"completion", &Completion{ResultPointer: "x:y", Summary: "s"}, `{"summary":"s","result_pointer":"x:y"}`},
	} {
		c, err := completion(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := json.Marshal(c)
		if string(b) != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, b, tc.want)
		}
	}
	for _, bad := range []any{Pointer{}, json.RawMessage(`{`), make(chan int)} {
		if _, err := completion(bad); err == nil || IsRetryable(err) {
			t.Errorf("%T: err %v, want a fatal error", bad, err)
		}
	}
}

func TestDataURIFallback(t *testing.T) {
	c, ok := dataURIFallback(Completion{Result: json.RawMessage(`{"a":1}`), Summary: "s"})
	if !ok || c.ResultChannel != "data" || c.Result != nil || c.Summary != "s" ||
		c.ResultPointer != "data:application/json;base64,"+base64.StdEncoding.EncodeToString([]byte(`{"a":1}`)) ||
		len(c.ResultChecksum) != len("sha256:")+64 {
		t.Fatalf("%+v %v", c, ok)
	}
	big := make([]byte, 10000)
	s := base64.StdEncoding.EncodeToString(big)
	if _, ok := dataURIFallback(Completion{ResultBase64: &s}); ok {
		t.Fatal("a payload over the pointer limit was rewritten")
	}
	if _, ok := dataURIFallback(Completion{ResultPointer: "p"}); ok {
		t.Fatal("a pointer completion was rewritten")
	}
}

func TestLeaseClock(t *testing.T) {
	sent := time.Now()
	server := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var none time.Time
	// A quick answer with a Date header only: the deadline counts from the
	// send, and a second is taken off for the header's whole seconds.
	ttl, dl := leaseClock(sent, sent.Add(50*time.Millisecond), none, server, server.Add(30*time.Second))
	if ttl != 29*time.Second || !dl.Equal(sent.Add(29*time.Second)) {
		t.Fatalf("ttl %v deadline %v", ttl, dl.Sub(sent))
	}
	// A long-poll answered 20 s after the send: the lease was granted near the
	// answer, so the wait is not taken off the lease (one more second is).
	received := sent.Add(20 * time.Second)
	ttl, dl = leaseClock(sent, received, none, server, server.Add(4*time.Second))
	if ttl != 3*time.Second || !dl.Equal(received.Add(2*time.Second)) {
		t.Fatalf("long-poll: ttl %v deadline %v after the answer", ttl, dl.Sub(received))
	}
	// With the gate's server_time (to the microsecond) nothing is taken off
	// the lease for the clock's resolution, whatever the Date header says.
	granted := server.Add(700 * time.Millisecond)
	ttl, dl = leaseClock(sent, sent.Add(50*time.Millisecond), granted, server, granted.Add(4*time.Second))
	if ttl != 4*time.Second || !dl.Equal(sent.Add(4*time.Second)) {
		t.Fatalf("server_time: ttl %v deadline %v", ttl, dl.Sub(sent))
	}
	ttl, dl = leaseClock(sent, received, granted, none, granted.Add(4*time.Second))
	if ttl != 4*time.Second || !dl.Equal(received.Add(3*time.Second)) {
		t.Fatalf("server_time, long-poll: ttl %v deadline %v after the answer", ttl, dl.Sub(received))
	}
	if ttl, _ := leaseClock(sent, sent, none, server, server.Add(-time.Second)); ttl != 0 {
		t.Fatalf("expired lease ttl %v", ttl)
	}
	if ttl, _ := leaseClock(sent, sent, granted, server, granted.Add(-time.Millisecond)); ttl != 0 {
		t.Fatalf("expired lease ttl %v (server_time)", ttl)
	}
}

func TestSpoolAddLoadRemove(t *testing.T) {
	sp := &spool{path: filepath.Join(t.TempDir(), "sub", "spool.jsonl")}
	for _, id := range []string{"l1", "l2", "l3"} {
		if err := sp.add(spoolEntry{Kind: "complete", LeaseID: id, TaskID: "T-" + id, Body: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// A line cut short by a crash is skipped.
	f, _ := os.OpenFile(sp.path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"kind":"compl`)
	f.Close()
	es, bad, err := sp.load()
	if err != nil || len(es) != 3 || bad != 1 {
		t.Fatalf("load: %d entries, %d bad, %v", len(es), bad, err)
	}
	// An outcome spooled after the torn line starts a line of its own:
	// it is kept, not glued to the torn one and skipped with it.
	if err := sp.add(spoolEntry{Kind: "complete", LeaseID: "l4", TaskID: "T-l4", Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	es, bad, err = sp.load()
	if err != nil || len(es) != 4 || bad != 1 || es[3].LeaseID != "l4" {
		t.Fatalf("load after a torn line: %d entries (%+v), %d bad, %v", len(es), es, bad, err)
	}
	if err := sp.remove(map[string]bool{es[3].key(): true}); err != nil {
		t.Fatal(err)
	}
	if err := sp.remove(map[string]bool{es[0].key(): true, es[2].key(): true}); err != nil {
		t.Fatal(err)
	}
	if es, _, _ = sp.load(); len(es) != 1 || es[0].LeaseID != "l2" {
		t.Fatalf("after remove: %+v", es)
	}
	if err := sp.remove(map[string]bool{es[0].key(): true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sp.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an empty spool is not removed: %v", err)
	}
}

func TestBackoffBounds(t *testing.T) {
	var b Backoff
	for n, want := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 4: 40 * time.Second, 5: time.Minute, 9: time.Minute} {
		d := b.Delay(n)
		if d < want*9/10 || d > want*11/10 {
			t.Errorf("Delay(%d) = %v, want %v ±10%%", n, d, want)
		}
	}
}

// TestHeartbeatPacing: early heartbeats for progress are max(1 s, lease/10)
// apart, never more than the regular third of the lease; retries after a
// failed heartbeat back off (never faster with more failures) and stay
// within half the time left on the lease.
func TestHeartbeatPacing(t *testing.T) {
	for _, tc := range []struct{ ttl, want time.Duration }{
		{30 * time.Second, 3 * time.Second},
		{5 * time.Second, time.Second},
		{2 * time.Second, 666666666 * time.Nanosecond},
		{60 * time.Millisecond, 50 * time.Millisecond},
	} {
		if got := progressGap(tc.ttl); got != tc.want {
			t.Errorf("progressGap(%v) = %v, want %v", tc.ttl, got, tc.want)
		}
	}
	interval, left := 10*time.Second, 25*time.Second
	prev := time.Duration(0)
	for fails := 1; fails <= 10; fails++ {
		d := heartbeatRetry(fails, interval, left, 0)
		if d < prev || d > interval || d > left/2 {
			t.Fatalf("retry %d waits %v after %v (interval %v, %v left)", fails, d, prev, interval, left)
		}
		prev = d
	}
	if prev != interval {
		t.Fatalf("retries settle at %v, want the interval %v", prev, interval)
	}
	if d := heartbeatRetry(1, interval, 300*time.Millisecond, 0); d != 150*time.Millisecond {
		t.Fatalf("retry with 300 ms left waits %v, want half of it", d)
	}
	if d := heartbeatRetry(1, interval, 10*time.Millisecond, 0); d != 50*time.Millisecond {
		t.Fatalf("retry with 10 ms left waits %v, want the 50 ms floor", d)
	}
}

func TestParseRetryAfter(t *testing.T) {
	date := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"5", 5 * time.Second},
		{" 60 ", time.Minute},
		{"0", 0},
		{"-3", 0},
		{"1.5", 0}, // delay-seconds is a whole number
		{"soon", 0},
		{"Sat, 01 Mar 2025 12:00:07 GMT", 7 * time.Second}, // against the answer's Date
		{"Sat, 01 Mar 2025 11:59:00 GMT", 0},               // already past
		{"Mon, 03 Mar 2025 12:00:00 GMT", 24 * time.Hour},  // bounded as delay-seconds is
		{"Fri, 31 Dec 9999 23:59:59 GMT", 24 * time.Hour},
		{"99999999999", 24 * time.Hour},
		{"99999999999999999999", 24 * time.Hour}, // past int64: still the bound, not 0
		{"+5", 0},                                // delay-seconds is digits only
		{"0x10", 0},
	} {
		if got := parseRetryAfter(tc.v, date); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.v, got, tc.want)
		}
	}
	// Without a Date header, a date counts from the local clock.
	if got := parseRetryAfter(time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), time.Time{}); got < 58*time.Minute || got > time.Hour {
		t.Errorf("an HTTP-date an hour away without a Date header: %v", got)
	}
}

func TestRetryWait(t *testing.T) {
	busy := &APIError{Status: http.StatusServiceUnavailable, Code: "busy", RetryAfter: 2 * time.Second}
	for range 100 {
		if d := retryWait(busy, 100*time.Millisecond); d < 2*time.Second || d > 2200*time.Millisecond {
			t.Fatalf("after a Retry-After of 2 s: %v, want 2 s plus at most 10%%", d)
		}
	}
	if d := retryWait(busy, 5*time.Second); d != 5*time.Second {
		t.Fatalf("a longer backoff: %v, want it kept", d)
	}
	long := &APIError{Status: http.StatusTooManyRequests, Code: "quota_exceeded", RetryAfter: time.Hour}
	if d := retryWait(long, time.Second); d < MaxRetryAfter || d > MaxRetryAfter+MaxRetryAfter/10 {
		t.Fatalf("a Retry-After of an hour: %v, want the cap %v plus at most 10%%", d, MaxRetryAfter)
	}
	final := &APIError{Status: http.StatusBadRequest, Code: "bad_request", RetryAfter: 10 * time.Second}
	if d := retryWait(fmt.Errorf("wrapped: %w", final), time.Second); d != time.Second {
		t.Fatalf("a Retry-After on a final answer: %v, want the backoff", d)
	}
	if d := retryWait(errors.New("network"), time.Second); d != time.Second {
		t.Fatalf("a network error: %v, want the backoff", d)
	}
}

// TestRetryAfterJitterAtCap: a Retry-After at or past MaxRetryAfter (the
// gate's 429 quota_exceeded asks for 60 s) is capped first and then
// jittered, so that workers told the same do not all come back at once.
func TestRetryAfterJitterAtCap(t *testing.T) {
	for _, ra := range []time.Duration{MaxRetryAfter, time.Hour} {
		e := &APIError{Status: http.StatusTooManyRequests, Code: "quota_exceeded", RetryAfter: ra}
		seen := map[time.Duration]bool{}
		for range 100 {
			d := retryAfter(e)
			if d < MaxRetryAfter || d > MaxRetryAfter+MaxRetryAfter/10 {
				t.Fatalf("a Retry-After of %v: %v, want %v plus at most 10%%", ra, d, MaxRetryAfter)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("a Retry-After of %v: every wait was %v, want jitter", ra, MaxRetryAfter)
		}
	}
}

// TestRetryAfterKeepsLeaseBounds: a heartbeat retry (of a task's lease or
// of a Holder's) waits for Retry-After, but never past half the time left
// on the lease.
func TestRetryAfterKeepsLeaseBounds(t *testing.T) {
	interval := 3 * time.Second
	if d := heartbeatRetry(1, interval, 20*time.Second, 5*time.Second); d != 5*time.Second {
		t.Fatalf("heartbeat retry with a Retry-After of 5 s, 20 s left: %v, want 5 s", d)
	}
	if d := heartbeatRetry(1, interval, 4*time.Second, 5*time.Second); d != 2*time.Second {
		t.Fatalf("heartbeat retry with a Retry-After of 5 s, 4 s left: %v, want half the time left", d)
	}
	if d := heartbeatRetry(5, interval, time.Minute, 100*time.Millisecond); d != interval {
		t.Fatalf("heartbeat retry with a short Retry-After: %v, want its own backoff %v", d, interval)
	}
	if d := holderRetry(3*time.Second, 20*time.Second, 5*time.Second); d != 5*time.Second {
		t.Fatalf("holder retry with a Retry-After of 5 s, 20 s left: %v", d)
	}
	if d := holderRetry(3*time.Second, 4*time.Second, 5*time.Second); d != 2*time.Second {
		t.Fatalf("holder retry with a Retry-After of 5 s, 4 s left: %v, want half the time left", d)
	}
	if d := holderRetry(3*time.Second, 20*time.Second, 0); d != 751*time.Millisecond {
		t.Fatalf("holder retry without Retry-After: %v, want a quarter of the period", d)
	}
}

// TestDependencyTruncatedDecoded: an offer whose dependencies' outcomes
// passed their size bound marks the later ones truncated (docs/http.md,
// dependencies); the SDK keeps the mark, so a handler can tell an outcome
// left out from an empty one.
func TestDependencyTruncatedDecoded(t *testing.T) {
	raw := `{"leases":[{"lease_id":"L-1","task":{"task_id":"T-3"},"dependencies":[
{"task_id":"T-1","task_type":"a","status":"dead_letter","error_message":"boom","dead_reason":"fatal_error"},
{"task_id":"T-2","task_type":"a","status":"dead_letter","truncated":true}]}]}`
	var out struct {
		Leases []Offer `json:"leases"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatal(err)
	}
	ds := out.Leases[0].Dependencies
	if len(ds) != 2 || ds[0].Truncated || ds[0].Error != "boom" || !ds[1].Truncated || ds[1].Error != "" {
		t.Fatalf("dependencies decoded as %+v", ds)
	}
}

// TestProgressMessage: a progress message is made one the gate takes (at
// most 4096 bytes of UTF-8 once encoded and decoded as JSON, no NUL),
// keeping as much of it as fits.
func TestProgressMessage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"halfway", "halfway"},
		{"a\x00b", "a\uFFFDb"},
		{strings.Repeat("é", 3000), strings.Repeat("é", 2048)},
		{strings.Repeat("€", 2000), strings.Repeat("€", 1365)},
		{strings.Repeat("x", 4095) + "€", strings.Repeat("x", 4095)},
		{strings.Repeat("x", 4096) + "€", strings.Repeat("x", 4096)},
		{strings.Repeat("\x00", 2000), strings.Repeat("\uFFFD", 1365)},
		{"ok\xffthen", "ok\uFFFDthen"},
		{strings.Repeat("\xff", 5000), "\uFFFD"},
	} {
		got := progressMessage(tc.in)
		if got != tc.want {
			t.Errorf("progressMessage(%.20q…) = %.20q… (%d bytes), want %.20q… (%d bytes)", tc.in, got, len(got), tc.want, len(tc.want))
		}
		// What the gate counts: the string the JSON it is sent as decodes to.
		raw, _ := json.Marshal(got)
		var back string
		if err := json.Unmarshal(raw, &back); err != nil || back != got || len(back) > maxProgressMessage || strings.Contains(back, "\x00") {
			t.Errorf("progressMessage(%.20q…): %d bytes after JSON (%v)", tc.in, len(back), err)
		}
	}
}

// TestSnoozeBounds: a snooze is sent within the gate's bound (1..31622400
// seconds), its reason within 1000 characters and without NUL.
func TestSnoozeBounds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Hour, 1}, {0, 1}, {time.Millisecond, 1}, {1500 * time.Millisecond, 2}, {time.Minute, 60},
		{366 * 24 * time.Hour, 31622400}, {400 * 24 * time.Hour, 31622400}, {time.Duration(1<<63 - 1), 31622400},
	} {
		if got := snoozeSeconds(tc.d); got != tc.want {
			t.Errorf("snoozeSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	if got := snoozeReason("not\x00yet"); got != "not\uFFFDyet" {
		t.Errorf("snoozeReason with NUL: %q", got)
	}
	if got := snoozeReason(strings.Repeat("é", 1200)); got != strings.Repeat("é", 1000) {
		t.Errorf("snoozeReason of 1200 characters: %d characters", len([]rune(got)))
	}
}

// TestTypeChunks: the task types go to lease calls of at most 50 each, in
// order, every type in exactly one.
func TestTypeChunks(t *testing.T) {
	for _, n := range []int{1, 49, 50, 51, 100, 101, 250} {
		types := make([]string, n)
		for i := range types {
			types[i] = fmt.Sprintf("t-%03d", i)
		}
		chunks := typeChunks(types)
		var all []string
		for _, c := range chunks {
			if len(c) == 0 || len(c) > 50 {
				t.Fatalf("%d types: a chunk of %d", n, len(c))
			}
			all = append(all, c...)
		}
		if want := (n + 49) / 50; len(chunks) != want || strings.Join(all, ",") != strings.Join(types, ",") {
			t.Fatalf("%d types: %d chunks (want %d) holding %d types", n, len(chunks), want, len(all))
		}
	}
}
