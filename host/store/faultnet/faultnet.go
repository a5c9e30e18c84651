// Package faultnet is a TCP proxy for fault tests: it stands between a
// store and its database server and can freeze, so the store meets a
// database that stops answering without refusing anything (a network
// partition, a stopped server), then thaw. Tests only.
package faultnet

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a backend (the test PostgreSQL
// server) and can be frozen: while frozen it forwards no byte in either
// direction and passes on no close, yet closes no socket, so the peers see
// what a network partition or a stopped server (SIGSTOP) gives them: writes
// that are taken and never answered, connections that neither fail nor
// progress. New connections are accepted while frozen and get no further.
// Thaw forwards what was held, in order, closes included.
type Proxy struct {
	ln      net.Listener
	backend string

	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

// Start listens on a loopback port and forwards to backend
// (host:port) until the test ends.
func Start(t testing.TB, backend string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, backend: backend}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops all forwarding.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Thaw forwards again, what was held first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	p.frozen = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// hold waits while the proxy is frozen; false once it is closed.
func (p *Proxy) hold() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			b, err := net.Dial("tcp", p.backend)
			if err != nil {
				c.Close()
				return
			}
			if !p.track(b) {
				c.Close()
				return
			}
			var both sync.WaitGroup
			both.Add(2)
			go func() { defer both.Done(); p.pipe(b, c) }()
			go func() { defer both.Done(); p.pipe(c, b) }()
			both.Wait()
			c.Close()
			b.Close()
		}()
	}
}

// pipe copies src to dst, holding every chunk and the end of the stream
// while the proxy is frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hold() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF && p.hold() {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			dst.Close()
			return
		}
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// Through returns the PostgreSQL URL db with its host and port replaced
// by a Proxy's, and the proxy.
func Through(t testing.TB, db string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" || strings.Contains(u.Host, ",") {
		t.Fatalf("faultnet: %q is not a postgres:// URL naming one host (%v)", db, err)
	}
	backend := u.Host
	if u.Port() == "" {
		backend = net.JoinHostPort(u.Hostname(), "5432")
	}
	p := Start(t, backend)
	u.Host = p.Addr()
	return u.String(), p
}
