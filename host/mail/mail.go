// Package mail is the gate's mail client: it sends through one SMTP server
// and reads back through one POP3 mailbox, both named in the gate's config
// with their credentials, which never leave the gate. Every recipient is
// checked against the operator's allowlist before a connection is made.
//
// IMAP is not spoken: POP3's USER/PASS, TOP, RETR and DELE are all the
// email channel needs (find a message by its Message-ID, read it, delete it
// on ack), and the seed itself prefers inbound webhooks over mailbox polling.
package mail

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	netmail "net/mail"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// Message is one message to send (host.MailMessage).
type Message = host.MailMessage

// Fetched is a message read back from the mailbox (host.FetchedMail).
type Fetched = host.FetchedMail

// Attachment is one attachment of a fetched message (host.MailAttachment).
type Attachment = host.MailAttachment

// TLS modes of a server.
const (
	TLSNone     = "none"     // plain TCP (only sensible on a trusted network)
	TLSStartTLS = "starttls" // plain TCP upgraded with STARTTLS (SMTP only)
	TLSImplicit = "tls"      // TLS from the first byte
)

// Limits of one message.
const (
	MaxSubject    = 998      // one header line
	MaxBody       = 10 << 20 // body text, or a channel payload
	MaxAttachment = 10 << 20
	MaxMessage    = 32 << 20 // a message read back through POP3
	// DefaultTimeout bounds one SMTP or POP3 session.
	DefaultTimeout = 20 * time.Second
)

// Server is one mail server the gate talks to.
type Server struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	TLS      string `json:"tls,omitempty"` // none, starttls (SMTP), tls; default none
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// InsecureSkipVerify accepts any server certificate (tests with a
	// self-signed one only).
	InsecureSkipVerify bool `json:"insecure_skip_verify,omitempty"`
}

func (s Server) addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

func (s Server) check(what string, starttls bool) error {
	if s.Host == "" || s.Port <= 0 || s.Port > 65535 {
		return fmt.Errorf("mail: %s needs host and port", what)
	}
	switch s.TLS {
	case "", TLSNone, TLSImplicit:
	case TLSStartTLS:
		if !starttls {
			return fmt.Errorf("mail: %s tls must be none or tls", what)
		}
	default:
		return fmt.Errorf("mail: %s tls %q must be none, starttls or tls", what, s.TLS)
	}
	return nil
}

// Config is the gate's mail section.
type Config struct {
	// SMTP sends; From is the sender address of every message.
	SMTP Server `json:"smtp"`
	From string `json:"from"`
	// POP3, when set, is the mailbox messages are read back from (the email
	// channel's get and ack, fetch_task_email).
	POP3 *Server `json:"pop3,omitempty"`
	// AllowedRecipients are exact addresses and *@domain patterns. A
	// recipient must match one; an empty list allows none.
	AllowedRecipients []string `json:"allowed_recipients"`
	// Timeout bounds one session (default DefaultTimeout).
	Timeout time.Duration `json:"-"`
}

// Client sends and reads mail with one Config. It is safe for concurrent use.
type Client struct {
	cfg    Config
	domain string // of From, for Message-IDs
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if err := cfg.SMTP.check("smtp", true); err != nil {
		return nil, err
	}
	if cfg.POP3 != nil {
		if err := cfg.POP3.check("pop3", false); err != nil {
			return nil, err
		}
	}
	if err := CheckAddress(cfg.From); err != nil {
		return nil, fmt.Errorf("mail: from: %s", host.ErrorDetail(err))
	}
	for _, a := range cfg.AllowedRecipients {
		if d, ok := strings.CutPrefix(a, "*@"); ok {
			if d == "" || strings.ContainsAny(d, "@ \r\n") {
				return nil, fmt.Errorf("mail: allowed_recipients: %q is not *@domain", a)
			}
			continue
		}
		if err := CheckAddress(a); err != nil {
			return nil, fmt.Errorf("mail: allowed_recipients: %s", host.ErrorDetail(err))
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	_, domain, _ := strings.Cut(cfg.From, "@")
	return &Client{cfg: cfg, domain: domain}, nil
}

// CallBound is the longest one Send, Fetch or Delete takes: one session's
// bound (Config.Timeout), plus the wait for the server to end a session in
// which a message was deleted (QuitGrace). A caller that puts a deadline of
// its own around these calls (a plugin call) needs at least this.
func (c *Client) CallBound() time.Duration { return c.cfg.Timeout + QuitGrace }

// CanRead reports whether a POP3 mailbox is configured.
func (c *Client) CanRead() bool { return c.cfg.POP3 != nil }

// CheckAddress accepts one bare address (local@domain): no display name, no
// angle brackets, no CR or LF, and no relay route in the local part (the
// "percent hack" user%other.example@allowed.example and UUCP's bang paths,
// which a relaying server may forward past the recipient allowlist).
func CheckAddress(addr string) error {
	if addr == "" {
		return host.Errorf(host.CodeInvalidEmailAddress, "an email address is required")
	}
	if len(addr) > 254 || strings.ContainsAny(addr, "\r\n<>,; \t\"") {
		return host.Errorf(host.CodeInvalidEmailAddress, "%q is not one bare email address", clip(addr, 80))
	}
	if strings.ContainsAny(addr, "%!") {
		return host.Errorf(host.CodeInvalidEmailAddress, "%q names a relay route (%% or !), which the gate does not send to", clip(addr, 80))
	}
	a, err := netmail.ParseAddress(addr)
	if err != nil || a.Name != "" || a.Address != addr || !strings.Contains(addr[strings.LastIndexByte(addr, '@')+1:], ".") && !strings.HasSuffix(addr, "@localhost") {
		return host.Errorf(host.CodeInvalidEmailAddress, "%q is not a valid email address", clip(addr, 80))
	}
	return nil
}

// CheckRecipient checks that addr is one valid address on the allowlist.
func (c *Client) CheckRecipient(addr string) error {
	if err := CheckAddress(addr); err != nil {
		return err
	}
	at := strings.LastIndexByte(addr, '@')
	for _, a := range c.cfg.AllowedRecipients {
		if d, ok := strings.CutPrefix(a, "*@"); ok {
			if strings.EqualFold(addr[at+1:], d) {
				return nil
			}
		} else if strings.EqualFold(a, addr) {
			return nil
		}
	}
	return host.Errorf(host.CodeEmailRecipientNotAllowed, "%s is not on the gate's recipient allowlist", addr)
}

// CheckSubject refuses a subject that could inject headers or is too long.
func CheckSubject(s string) error {
	if strings.ContainsAny(s, "\r\n\x00") {
		return host.Errorf(host.CodeBadRequest, "subject must not contain CR, LF or NUL")
	}
	if len(s) > MaxSubject {
		return host.Errorf(host.CodeTooLarge, "subject is %d bytes, the limit is %d", len(s), MaxSubject)
	}
	return nil
}

// NewMessageID returns a fresh Message-ID (without angle brackets) in the
// sender's domain.
func (c *Client) NewMessageID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ag-" + hex.EncodeToString(b[:]) + "@" + c.domain
}

// CheckMessageID refuses a Message-ID that is not id-left@id-right of
// printable characters without spaces or brackets.
func CheckMessageID(id string) error {
	if id == "" || len(id) > 250 || !strings.Contains(id, "@") {
		return host.Errorf(host.CodeBadRequest, "message id must be id@domain")
	}
	for _, r := range id {
		if r <= ' ' || r >= 0x7f || r == '<' || r == '>' {
			return host.Errorf(host.CodeBadRequest, "message id must be printable ASCII without spaces or angle brackets")
		}
	}
	return nil
}

// PermanentError is a server's final refusal (an SMTP 5xx answer, for
// example a recipient the server refuses): sending again will not help.
type PermanentError struct {
	Code int
	Msg  string
}

func (e *PermanentError) Error() string {
	return fmt.Sprintf("the mail server refused: %d %s", e.Code, e.Msg)
}

// Permanent reports true: the engine tells a final refusal from a failure
// worth retrying by this method, without importing this package.
func (e *PermanentError) Permanent() bool { return true }

// IsPermanent reports whether err is a final refusal.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// ErrNotFound: no message with that Message-ID in the mailbox.
var ErrNotFound = errors.New("mail: no such message in the mailbox")

// dial opens a connection to s under ctx and the client's timeout; the
// returned deadline is set on the connection.
func (c *Client) dial(ctx context.Context, s Server) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	d := &net.Dialer{}
	var conn net.Conn
	var err error
	if s.TLS == TLSImplicit {
		td := &tls.Dialer{NetDialer: d, Config: c.tlsConfig(s)}
		conn, err = td.DialContext(ctx, "tcp", s.addr())
	} else {
		conn, err = d.DialContext(ctx, "tcp", s.addr())
	}
	if err != nil {
		return nil, err
	}
	dl := time.Now().Add(c.cfg.Timeout)
	if t, ok := ctx.Deadline(); ok && t.Before(dl) {
		dl = t
	}
	_ = conn.SetDeadline(dl)
	return conn, nil
}

func (c *Client) tlsConfig(s Server) *tls.Config {
	return &tls.Config{ServerName: s.Host, InsecureSkipVerify: s.InsecureSkipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // operator's choice for tests
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
