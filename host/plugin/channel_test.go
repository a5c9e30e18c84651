package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

func TestInlineChannel(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]Grant{"inline": {Config: json.RawMessage(`{"max_size_bytes": 100}`)}}, Limits{}, "inline")
	ch, err := b.reg.Channel("inline")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ptr, err := ch.Put(ctx, "task-1", []byte("hello\x00world"))
	if err != nil {
		t.Fatal(err)
	}
	if ptr != "inline:aGVsbG8Ad29ybGQ=" {
		t.Fatalf("pointer %q", ptr)
	}
	got, err := ch.Get(ctx, ptr)
	if err != nil || string(got) != "hello\x00world" {
		t.Fatalf("get: %q %v", got, err)
	}
	if err := ch.Ack(ctx, ptr); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Put(ctx, "task-1", bytes.Repeat([]byte("x"), 101)); !host.IsCode(err, host.CodeTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	if _, err := ch.Get(ctx, "file:abc"); !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("foreign pointer: %v", err)
	}
	if _, err := ch.Get(ctx, "inline:!!!"); !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("bad base64: %v", err)
	}
	caps, err := ch.Capabilities(ctx)
	if err != nil || caps.MaxSizeBytes != 100 {
		t.Fatalf("caps %+v %v", caps, err)
	}
}

func TestChannelConfigRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]Grant{"inline": {Config: json.RawMessage(`{"max_size_bytes": "big"}`)}}, Limits{}, "inline")
	// Refused, so nothing serves the name: the gate's fault, not a
	// completion's (503 plugin_unavailable; the operator fixes the config).
	if _, err := b.reg.Channel("inline"); !host.IsCode(err, host.CodePluginUnavailable) {
		t.Fatalf("a channel with an invalid operator config must not load: %v", err)
	}
	info := b.reg.List()
	if len(info) != 1 || info[0].State != "refused" || !strings.Contains(info[0].Refused, "max_size_bytes") {
		t.Fatalf("list: %+v", info)
	}
}

func TestFileChannel(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	b := setup(t, map[string]Grant{"file": {Dir: store}}, Limits{}, "file")
	ch, err := b.reg.Channel("file")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64)
	sum := sha256.Sum256(payload)
	want := "file:task-1/" + hex.EncodeToString(sum[:])
	ptr, err := ch.Put(ctx, "task-1", payload)
	if err != nil || ptr != want {
		t.Fatalf("put: %q %v, want %q", ptr, err, want)
	}
	onDisk, err := os.ReadFile(filepath.Join(store, "-1", "task-1", hex.EncodeToString(sum[:])))
	if err != nil || !bytes.Equal(onDisk, payload) {
		t.Fatalf("stored file: %v", err)
	}
	// Equal content of another task is another object, owned by that task.
	other, err := ch.Put(ctx, "task-2", payload)
	if err != nil || other != "file:task-2/"+hex.EncodeToString(sum[:]) {
		t.Fatalf("second task's put: %q %v", other, err)
	}
	got, err := ch.Get(ctx, ptr)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("get: %v", err)
	}
	for _, bad := range []string{"file:../../etc/passwd", "file:/etc/passwd", "file:" + strings.Repeat("A", 64), "file:" + strings.Repeat("a", 63) + "/",
		"file:" + strings.Repeat("a", 65), "file:../" + hex.EncodeToString(sum[:]), "file:task-1/../" + hex.EncodeToString(sum[:]), "file:-x/" + hex.EncodeToString(sum[:])} {
		if _, err := ch.Get(ctx, bad); !host.IsCode(err, host.CodeBadRequest) {
			t.Errorf("Get(%q): %v, want bad_request", bad, err)
		}
	}
	if err := ch.Ack(ctx, ptr); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Get(ctx, ptr); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("after ack: %v, want not_found", err)
	}
	if got, err := ch.Get(ctx, other); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("acking task-1 took task-2's equal result with it: %v", err)
	}
	// A pointer of the earlier shared layout is read, and ack leaves it alone.
	legacy := filepath.Join(store, hex.EncodeToString(sum[:])[:2], hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(filepath.Dir(legacy), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(legacy, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	old := "file:" + hex.EncodeToString(sum[:])
	if got, err := ch.Get(ctx, old); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("legacy get: %v", err)
	}
	if err := ch.Ack(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(legacy); err != nil {
		t.Fatalf("ack removed a shared legacy file: %v", err)
	}
}

func TestFileChannelNeedsGrant(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, Limits{})
	wasm, man := readBuilt(t, "file")
	if _, err := rt.Load(context.Background(), wasm, man, Grant{}, "test"); err == nil || !strings.Contains(err.Error(), "granted none") {
		t.Fatalf("got %v, want a refusal for the missing fs grant", err)
	}
}

func TestHTTPChannel(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stored := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPost:
			body, _ := io.ReadAll(r.Body)
			id := r.Header.Get("X-Asyncgate-Task-Id")
			stored["/results/"+id] = body
			w.Header().Set("Location", "/results/"+id)
			w.Header().Set("X-Receipt", "rcpt-"+id)
			w.WriteHeader(http.StatusCreated)
		case http.MethodGet:
			b, ok := stored[r.URL.Path]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Write(b)
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	cfg := json.RawMessage(`{"endpoint": "` + srv.URL + `/results"}`)
	b := setup(t, map[string]Grant{"http": {HTTPHosts: []string{u.Host}, Config: cfg}}, Limits{}, "http")
	ch, err := b.reg.Channel("http")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ptr, proof, err := ch.(*ChannelAdapter).PutWithProof(ctx, "task-9", []byte(`{"answer":42}`))
	if err != nil {
		t.Fatal(err)
	}
	if ptr != "http:"+srv.URL+"/results/task-9" {
		t.Fatalf("pointer %q", ptr)
	}
	var p struct {
		Status  int    `json:"status"`
		Receipt string `json:"receipt"`
		SHA256  string `json:"sha256"`
	}
	if err := json.Unmarshal(proof, &p); err != nil || p.Status != 201 || p.Receipt != "rcpt-task-9" || len(p.SHA256) != 64 {
		t.Fatalf("proof %s: %v", proof, err)
	}
	got, err := ch.Get(ctx, ptr)
	if err != nil || string(got) != `{"answer":42}` {
		t.Fatalf("get %q %v", got, err)
	}
	if _, err := ch.Get(ctx, "http:"+srv.URL+"/results/none"); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("missing: %v", err)
	}
	// A pointer to a host off the channel's base is refused.
	_, err = ch.Get(ctx, "http:http://169.254.169.254/latest/meta-data")
	if !host.IsCode(err, host.CodeBadRequest) || !strings.Contains(err.Error(), "not under the channel's base") {
		t.Fatalf("off-base get: %v", err)
	}
}

func TestHTTPChannelDenied(t *testing.T) {
	t.Parallel()
	hit := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit = true }))
	t.Cleanup(srv.Close)
	cfg := json.RawMessage(`{"endpoint": "` + srv.URL + `/results"}`)
	b := setup(t, map[string]Grant{"http": {HTTPHosts: []string{"results.example.com"}, Config: cfg}}, Limits{}, "http")
	ch, err := b.reg.Channel("http")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.Put(context.Background(), "t", []byte("x"))
	if !host.IsCode(err, host.CodeChannelError) || !strings.Contains(err.Error(), "not on this plugin's allowlist") {
		t.Fatalf("got %v", err)
	}
	if hit {
		t.Fatal("the request reached a host that is not allowlisted")
	}
	// Without any HTTP grant the plugin does not load at all.
	rt := newTestRuntime(t, Limits{})
	wasm, man := readBuilt(t, "http")
	if _, err := rt.Load(context.Background(), wasm, man, Grant{Config: cfg}, "test"); err == nil {
		t.Fatal("http plugin loaded without an allowlist")
	}
}
