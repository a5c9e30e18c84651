// Package mailtest runs a real mail server for tests: mailpit
// (github.com/axllent/mailpit, installed by scripts/ensure-mailpit.sh) on
// free ports for SMTP, POP3 and its HTTP API, with a temporary database.
// Without the binary the test skips, or fails under CI.
package mailtest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/mail"
)

// Mailbox credentials of the POP3 server.
const (
	User     = "gate"
	Password = "pop3-secret"
	// RefusingDomain is a domain the server refuses recipients of (550):
	// it accepts only .com and .org addresses.
	RefusingDomain = "refused.example.net"
)

// Server is a running mailpit.
type Server struct {
	t                  testing.TB
	bin, dir           string
	SMTPPort, POP3Port int
	HTTPPort           int
	cmd                *exec.Cmd
	exited             chan struct{}
	// TLS: SMTP requires STARTTLS and POP3 speaks TLS from the first byte,
	// with a self-signed certificate (Config sets InsecureSkipVerify).
	TLS bool
}

// Option changes how Start runs mailpit.
type Option func(*Server)

// WithTLS makes SMTP require STARTTLS and POP3 speak implicit TLS.
func WithTLS() Option { return func(s *Server) { s.TLS = true } }

// Binary finds mailpit: $ASYNCGATE_MAILPIT, PATH, $(go env GOPATH)/bin, ./bin.
func Binary() string {
	if p := os.Getenv("ASYNCGATE_MAILPIT"); p != "" {
		return p
	}
	if p, err := exec.LookPath("mailpit"); err == nil {
		return p
	}
	var cands []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		cands = append(cands, filepath.Join(gp, "bin", "mailpit"))
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		cands = append(cands, filepath.Join(string(trim(out)), "bin", "mailpit"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(home, "go", "bin", "mailpit"))
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c
		}
	}
	return ""
}

func trim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// Start starts mailpit and waits until its three ports answer. It is
// stopped when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("mailpit is not installed (scripts/ensure-mailpit.sh)")
		}
		t.Skip("mailpit is not installed here (scripts/ensure-mailpit.sh installs it); skipping the mail test")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pop3-auth"), []byte(User+":"+Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: dir}
	for _, o := range opts {
		o(s)
	}
	if s.TLS {
		writeCert(t, dir)
	}
	t.Cleanup(s.Stop)
	// The ports are free when chosen but bound by mailpit later; another
	// test may take one in between. Then mailpit exits at start, and it is
	// started again on other ports.
	for try := 1; ; try++ {
		s.SMTPPort, s.POP3Port, s.HTTPPort = freePort(t), freePort(t), freePort(t)
		err := s.start()
		if err == nil {
			return s
		}
		if try == 3 {
			t.Fatal(err)
		}
		t.Logf("%v; trying other ports", err)
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start starts mailpit on s's ports and waits until they answer. It
// returns an error when mailpit exited at start (a port was taken, say).
func (s *Server) start() error {
	s.t.Helper()
	s.cmd = exec.Command(s.bin,
		"--database", filepath.Join(s.dir, "mailpit.db"),
		"--listen", "127.0.0.1:"+strconv.Itoa(s.HTTPPort),
		"--smtp", "127.0.0.1:"+strconv.Itoa(s.SMTPPort),
		"--pop3", "127.0.0.1:"+strconv.Itoa(s.POP3Port),
		"--pop3-auth-file", filepath.Join(s.dir, "pop3-auth"),
		"--smtp-auth-accept-any", "--smtp-disable-rdns",
		// Recipients in .com and .org domains are accepted, any other
		// (RefusingDomain) is refused with 550.
		"--smtp-allowed-recipients", `\.(com|org)$`,
		"--quiet")
	if s.TLS {
		cert, key := filepath.Join(s.dir, "cert.pem"), filepath.Join(s.dir, "key.pem")
		s.cmd.Args = append(s.cmd.Args, "--smtp-tls-cert", cert, "--smtp-tls-key", key, "--smtp-require-starttls",
			"--pop3-tls-cert", cert, "--pop3-tls-key", key)
	} else {
		s.cmd.Args = append(s.cmd.Args, "--smtp-auth-allow-insecure")
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "mailpit.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("starting mailpit: %v", err)
	}
	s.exited = make(chan struct{})
	go func(c *exec.Cmd, ch chan struct{}) { _ = c.Wait(); logf.Close(); close(ch) }(s.cmd, s.exited)
	deadline := time.Now().Add(30 * time.Second)
	for _, port := range []int{s.SMTPPort, s.POP3Port, s.HTTPPort} {
		for {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-s.exited:
				log, _ := os.ReadFile(filepath.Join(s.dir, "mailpit.log"))
				s.cmd = nil
				return fmt.Errorf("mailpit exited at start: %s", log)
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("mailpit's port %d did not open in 30 s", port)
			}
		}
	}
	// A port may answer because another server took it between freePort
	// and mailpit's bind (mailpit then exits, perhaps only after the dial
	// above succeeded): each must be this mailpit's.
	if err := s.ours(); err != nil {
		s.Stop()
		return fmt.Errorf("a port answered but not as this mailpit: %w", err)
	}
	return nil
}

// ours checks that the three ports are this mailpit's: its API names this
// server's database, and the mail ports greet as SMTP and POP3 servers do.
func (s *Server) ours() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/api/v1/info", s.HTTPPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("HTTP port %d: %w", s.HTTPPort, err)
	}
	var info struct{ Database string }
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.Database != filepath.Join(s.dir, "mailpit.db") {
		return fmt.Errorf("HTTP port %d answers for database %q (%v)", s.HTTPPort, info.Database, err)
	}
	if s.TLS {
		return nil // the mail ports speak TLS first (POP3) or after a greeting checked by the tests
	}
	for port, want := range map[int]string{s.SMTPPort: "220 ", s.POP3Port: "+OK"} {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
		if err != nil {
			return fmt.Errorf("port %d: %w", port, err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.HasPrefix(line, want) {
			return fmt.Errorf("port %d greets %q (%v), want %q", port, line, err, want)
		}
	}
	select {
	case <-s.exited:
		return errors.New("mailpit exited")
	default:
		return nil
	}
}

// Stop stops mailpit and waits for it to exit; its ports close.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart starts mailpit again on the same ports and database.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// Config returns a mail config for this server that allows allowed.
func (s *Server) Config(allowed ...string) mail.Config {
	c := mail.Config{
		SMTP:              mail.Server{Host: "127.0.0.1", Port: s.SMTPPort, TLS: mail.TLSNone},
		From:              "gate@asyncgate.example.com",
		POP3:              &mail.Server{Host: "127.0.0.1", Port: s.POP3Port, TLS: mail.TLSNone, Username: User, Password: Password},
		AllowedRecipients: allowed,
		Timeout:           10 * time.Second,
	}
	if s.TLS {
		c.SMTP.TLS, c.SMTP.InsecureSkipVerify = mail.TLSStartTLS, true
		c.SMTP.Username, c.SMTP.Password = "gate", "smtp-secret"
		c.POP3.TLS, c.POP3.InsecureSkipVerify = mail.TLSImplicit, true
	}
	return c
}

// writeCert writes a self-signed certificate for 127.0.0.1 into dir.
func writeCert(t testing.TB, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Summary is a message as mailpit's API lists it.
type Summary struct {
	ID        string `json:"ID"`
	MessageID string `json:"MessageID"`
	Subject   string `json:"Subject"`
	To        []struct {
		Address string `json:"Address"`
	} `json:"To"`
	// Bcc lists the envelope recipients not named in a header.
	Bcc []struct {
		Address string `json:"Address"`
	} `json:"Bcc"`
	Snippet string `json:"Snippet"`
}

// Messages lists the stored messages through mailpit's HTTP API, newest first.
func (s *Server) Messages(t testing.TB) []Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/api/v1/messages?limit=500", s.HTTPPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("mailpit API: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Messages []Summary `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("mailpit API: %v", err)
	}
	return out.Messages
}

// Find returns the stored message with Message-ID id, if any.
func (s *Server) Find(t testing.TB, id string) (Summary, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/api/v1/search?query=%s", s.HTTPPort, url.QueryEscape("message-id:"+id)), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("mailpit API: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Messages []Summary `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("mailpit API: %v", err)
	}
	for _, m := range out.Messages {
		if m.MessageID == id {
			return m, true
		}
	}
	return Summary{}, false
}

// Raw returns the raw source of the stored message with mailpit id.
func (s *Server) Raw(t testing.TB, id string) []byte {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/v1/message/%s/raw", s.HTTPPort, id))
	if err != nil {
		t.Fatalf("mailpit API: %v", err)
	}
	defer resp.Body.Close()
	var b []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	return b
}
