package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestE2EOversizedBodyGetsItsAnswer: a client that writes its whole body
// before it reads the answer (as Python's urllib does) and sends far more
// than the body limit gets the 413 too_large answer, not a connection reset
// in the middle of its write: with Content-Length (refused unread), chunked
// (cut at the limit while decoding) and compressed (refused unread, 415).
// One that waits for 100 Continue is answered 413 without being asked for
// the body.
func TestE2EOversizedBodyGetsItsAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	u, err := url.Parse(b.g.URL)
	if err != nil {
		t.Fatal(err)
	}
	const size = 24 << 20 // well past what the kernel's socket buffers hold
	payload := `{"task_type":"echo","params":{"x":"` + strings.Repeat("a", size) + `"}}`
	for _, c := range []struct {
		name, headers string
		body          func(w io.Writer) error
		status        int
		code          string
	}{
		{"content-length", fmt.Sprintf("Content-Length: %d\r\n", len(payload)), func(w io.Writer) error {
			_, err := io.WriteString(w, payload)
			return err
		}, 413, "too_large"},
		{"chunked", "Transfer-Encoding: chunked\r\n", func(w io.Writer) error {
			for rest := payload; rest != ""; {
				n := min(len(rest), 1<<16)
				if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", n, rest[:n]); err != nil {
					return err
				}
				rest = rest[n:]
			}
			_, err := io.WriteString(w, "0\r\n\r\n")
			return err
		}, 413, "too_large"},
		{"gzip", fmt.Sprintf("Content-Encoding: gzip\r\nContent-Length: %d\r\n", len(payload)), func(w io.Writer) error {
			_, err := io.WriteString(w, payload)
			return err
		}, 415, "unsupported_media_type"},
	} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		w := bufio.NewWriterSize(conn, 1<<16)
		fmt.Fprintf(w, "POST /v1/tasks HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%s\r\n", u.Host, b.agent, c.headers)
		if err := c.body(w); err != nil {
			t.Fatalf("%s: writing the body: %v (the gate reset the connection before answering)", c.name, err)
		}
		if err := w.Flush(); err != nil {
			t.Fatalf("%s: writing the body: %v (the gate reset the connection before answering)", c.name, err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", c.name, err)
		}
		var m map[string]any
		err = json.NewDecoder(res.Body).Decode(&m)
		res.Body.Close()
		conn.Close()
		if res.StatusCode != c.status || err != nil || m["error"] != c.code {
			t.Fatalf("%s: %d %v (%v), want %d %s", c.name, res.StatusCode, m, err, c.status, c.code)
		}
	}

	// A client that waits for 100 Continue before it sends its body (curl
	// does for large ones) is answered 413 at once: the gate does not ask
	// for the body it refuses.
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /v1/tasks HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", u.Host, b.agent, len(payload))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || res.StatusCode != 413 {
		t.Fatalf("expect 100-continue: %v %v, want 413 without the body sent", res, err)
	}
	res.Body.Close()
}
