package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// reportLatency adds p50 and p99 per-call latencies (µs) to a benchmark.
func reportLatency(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100])/1e3, "p99-µs")
}

var benchInput = host.FailureInput{
	TaskID: "01JDQ8Z6X7W3K9M2N4P5R6S7T8", TaskType: "document_index", Kind: host.FailureError,
	Retryable: true, Attempts: 2, MaxRetries: 5, Error: "worker crashed: connection reset by peer",
}

// BenchmarkPolicyDecide measures one decide on a warm pool with the deadline
// (WithCloseOnContextDone) on, through the whole adapter: input schema,
// guest call, output schema, decode.
func BenchmarkPolicyDecide(b *testing.B) {
	for _, name := range []string{"backoff", "escalate"} {
		b.Run(name, func(b *testing.B) {
			bd := setup(b, nil, Limits{}, name)
			cfg := `{"base_seconds": 10, "max_seconds": 600, "jitter": 0.1}`
			if name == "escalate" {
				cfg = `{"supervisor": "ops", "base_seconds": 10, "max_seconds": 600}`
			}
			pol, err := bd.reg.Policy(name, json.RawMessage(cfg))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for range 100 { // warm up
				if _, err := pol.Decide(ctx, benchInput); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if _, err := pol.Decide(ctx, benchInput); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

// BenchmarkPolicyDecideRaw calls the decide export directly (no host-side
// schema validation or JSON), to split guest time from host time.
func BenchmarkPolicyDecideRaw(b *testing.B) {
	bd := setup(b, nil, Limits{}, "backoff")
	p, _ := bd.reg.Plugin("backoff")
	input := encodeFailureRecord(benchInput, json.RawMessage(`{"base_seconds": 10, "max_seconds": 600, "jitter": 0.1}`))
	inst, err := p.pool().get(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer p.pool().put(inst, true)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		frame, f := inst.call(ctx, "decide", input, nil)
		if f != nil || !bytes.Contains(frame, []byte(`"ok":true`)) {
			b.Fatalf("%v %s", f, frame)
		}
		cancel()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkPolicyDecideNative is the same decision in native Go, for scale.
func BenchmarkPolicyDecideNative(b *testing.B) {
	pol := host.ExponentialBackoff{Base: 10 * time.Second, Max: 10 * time.Minute}
	for range b.N {
		pol.Decide(context.Background(), benchInput)
	}
}

func BenchmarkFileChannel(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		bd := setup(b, map[string]Grant{"file": {Dir: b.TempDir()}}, Limits{}, "file")
		ch, err := bd.reg.Channel("file")
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		payload := bytes.Repeat([]byte("abcdefgh"), size/8)
		label := map[int]string{1 << 10: "1KiB", 1 << 20: "1MiB"}[size]
		b.Run("put-"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			lat := make([]time.Duration, 0, b.N)
			for i := range b.N {
				payload[0] = byte(i) // a new object each time
				payload[1] = byte(i >> 8)
				payload[2] = byte(i >> 16)
				t0 := time.Now()
				if _, err := ch.Put(ctx, "tsk_bench", payload); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat)
		})
		ptr, err := ch.Put(ctx, "tsk_bench", payload)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("get-"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				t0 := time.Now()
				got, err := ch.Get(ctx, ptr)
				if err != nil || len(got) != size {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat)
		})
	}
}

// BenchmarkRuntimeStart measures a gate start: new runtime and registry
// loading every built-in from a warm on-disk compilation cache.
func BenchmarkRuntimeStart(b *testing.B) {
	builtins := b.TempDir()
	for _, n := range []string{"backoff", "escalate", "safe-paths", "inline", "file", "http"} {
		copyPlugin(b, n, n, builtins)
	}
	cache := filepath.Join(b.TempDir(), "wasm-cache")
	grants := map[string]Grant{
		"file": {Dir: b.TempDir()},
		"http": {HTTPHosts: []string{"results.example.com"}, Config: json.RawMessage(`{"endpoint": "https://results.example.com/in"}`)},
	}
	start := func() {
		rt, err := NewRuntime(Options{CacheDir: cache, Logger: testLogger(b)})
		if err != nil {
			b.Fatal(err)
		}
		reg, err := NewRegistry(context.Background(), rt, RegistryOptions{Builtins: os.DirFS(builtins), Grants: grants})
		if err != nil {
			b.Fatal(err)
		}
		for _, in := range reg.List() {
			if in.State != "ready" {
				b.Fatalf("%s: %s %s", in.Name, in.State, in.Refused)
			}
		}
		reg.Close()
		rt.Close()
	}
	start() // fill the on-disk cache
	b.ResetTimer()
	for range b.N {
		start()
	}
}

// BenchmarkEngines compares one call on compiled code and on wazero's
// interpreter (which serves a plugin after a start until its compiled code
// is ready): a policy's decide, a validator's validate and an inline put,
// each through its adapter.
//
//	go test -run '^$' -bench Engines ./host/plugin
func BenchmarkEngines(b *testing.B) {
	for _, eng := range []string{"compiler", "interpreter"} {
		interp := eng == "interpreter"
		b.Run("decide/"+eng, func(b *testing.B) {
			bd := setupOn(b, interp, nil, Limits{}, "backoff")
			pol, err := bd.reg.Policy("backoff", json.RawMessage(`{"base_seconds": 10, "max_seconds": 600, "jitter": 0.1}`))
			if err != nil {
				b.Fatal(err)
			}
			benchCalls(b, func() error { _, err := pol.Decide(context.Background(), benchInput); return err })
		})
		b.Run("validate/"+eng, func(b *testing.B) {
			bd := setupOn(b, interp, nil, Limits{}, "safe-paths")
			v, err := bd.reg.Validator("safe-paths", nil)
			if err != nil {
				b.Fatal(err)
			}
			params := json.RawMessage(`{"path": "docs/index.md", "paths": ["a/b.txt", "c/d.txt"]}`)
			benchCalls(b, func() error { return v.Validate(context.Background(), "index", params) })
		})
		b.Run("inline-put/"+eng, func(b *testing.B) {
			bd := setupOn(b, interp, nil, Limits{}, "inline")
			ch, err := bd.reg.Channel("inline")
			if err != nil {
				b.Fatal(err)
			}
			payload := []byte(`{"summary": "done", "result": {"hello": "world"}}`)
			benchCalls(b, func() error { _, err := ch.Put(context.Background(), "tsk_bench", payload); return err })
		})
	}
}

// benchCalls warms up call, then times b.N of it with latency percentiles.
func benchCalls(b *testing.B, call func() error) {
	for range 20 {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}
