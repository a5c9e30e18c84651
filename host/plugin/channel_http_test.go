package plugin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// TestHTTPChannelStaysUnderBase: the http channel fetches only URLs under its
// configured base (scheme, host, port and path prefix), so the operator's
// headers reach nothing else on an allowlisted host, and a redirect that
// leaves the base is refused by the host.
func TestHTTPChannelStaysUnderBase(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var leaked []string // requests outside /results/ that carried the credential
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/results/") && r.Header.Get("X-Api-Key") != "" {
			mu.Lock()
			leaked = append(leaked, r.Method+" "+r.URL.String())
			mu.Unlock()
		}
		switch r.URL.Path {
		case "/results/ok":
			w.Write([]byte("fine"))
		case "/results/bounce":
			http.Redirect(w, r, "/admin/keys", http.StatusFound)
		case "/results/inside":
			http.Redirect(w, r, "/results/ok", http.StatusFound)
		default:
			w.Write([]byte("secret"))
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	cfg := json.RawMessage(`{"endpoint": "` + srv.URL + `/results", "headers": {"X-Api-Key": "operator-secret"}}`)
	b := setup(t, map[string]Grant{"http": {HTTPHosts: []string{u.Host}, HTTPPrefixes: []string{srv.URL + "/results"}, Config: cfg}}, Limits{}, "http")
	ch, err := b.reg.Channel("http")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if got, err := ch.Get(ctx, "http:"+srv.URL+"/results/ok"); err != nil || string(got) != "fine" {
		t.Fatalf("under the base: %q %v", got, err)
	}
	if got, err := ch.Get(ctx, "http:"+srv.URL+"/results/inside"); err != nil || string(got) != "fine" {
		t.Fatalf("a redirect inside the base: %q %v", got, err)
	}
	other := "http://" + strings.Replace(u.Host, "127.0.0.1", "localhost", 1)
	for _, bad := range []string{
		srv.URL + "/admin/keys",
		srv.URL + "/results-old/x", // a sibling sharing the prefix's characters
		srv.URL + "/results/../admin/keys",
		srv.URL + "/results/%2e%2e/admin/keys",
		srv.URL + "/results/..%2fadmin/keys",
		"https://" + u.Host + "/results/ok", // another scheme
		other + "/results/ok",               // another host name
		"http://user:pw@" + u.Host + "/results/ok",
	} {
		if _, err := ch.Get(ctx, "http:"+bad); !host.IsCode(err, host.CodeBadRequest) {
			t.Errorf("Get(%s): %v, want bad_request", bad, err)
		}
		if err := ch.Ack(ctx, "http:"+bad); !host.IsCode(err, host.CodeBadRequest) {
			t.Errorf("Ack(%s): %v, want bad_request", bad, err)
		}
	}
	// A redirect from inside the base to outside it is not followed.
	if _, err := ch.Get(ctx, "http:"+srv.URL+"/results/bounce"); !host.IsCode(err, host.CodeChannelError) || !strings.Contains(err.Error(), "not allowlisted") {
		t.Fatalf("redirect out of the base: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) > 0 {
		t.Fatalf("the operator's header left the base: %v", leaked)
	}
}

// TestURLUnder holds the host's prefix check to its rules.
func TestURLUnder(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		"http://h:8080/r":            true,
		"http://h:8080/r/x/y?q=1":    true,
		"HTTP://H:8080/r/x":          true,
		"http://h:8080/rx":           false,
		"http://h:8080/":             false,
		"http://h:8080/r/../x":       false,
		"http://h:8080/r/%2e%2e/x":   false,
		"http://h:8080/r/a%2Fb":      false,
		"http://h/r/x":               false,
		"https://h:8080/r/x":         false,
		"http://u@h:8080/r/x":        false,
		"http://h:8080.evil.com/r/x": false,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			if want {
				t.Errorf("%s: %v", raw, err)
			}
			continue
		}
		if got := URLUnder("http://h:8080/r/", u); got != want {
			t.Errorf("URLUnder(%s) = %v, want %v", raw, got, want)
		}
	}
	if !URLUnder("https://h/r", mustURL(t, "https://h:443/r/x")) || !URLUnder("http://h/", mustURL(t, "http://h:80/any")) {
		t.Error("default ports must compare equal")
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
