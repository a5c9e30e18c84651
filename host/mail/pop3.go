package mail

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	netmail "net/mail"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// MaxScan is how many messages of the mailbox, newest first, a lookup by
// Message-ID reads the headers of.
const MaxScan = 2000

// QuitGrace bounds how long Delete waits, after the server has answered
// QUIT, for the server to end the session (see awaitClose).
const QuitGrace = 5 * time.Second

// pop3 is one POP3 session.
type pop3 struct {
	tp   *textproto.Conn
	conn net.Conn
}

// awaitClose waits, after QUIT was answered, until the server closes the
// connection, at most QuitGrace. RFC 1939 has the server remove the messages
// marked deleted before it answers QUIT; some servers (mailpit among them)
// answer first, then remove them, then close. Waiting for the close makes a
// message Delete removed gone from the mailbox when Delete returns, on both
// kinds. A server that neither closes nor sends anything within the bound is
// taken at its word (its +OK); the caller's context still cuts the wait short.
func (p *pop3) awaitClose() {
	_ = p.conn.SetReadDeadline(time.Now().Add(QuitGrace))
	_, _ = io.Copy(io.Discard, io.LimitReader(p.tp.R, 1<<16))
}

func (p *pop3) cmd(format string, args ...any) (string, error) {
	if err := p.tp.PrintfLine(format, args...); err != nil {
		return "", err
	}
	return p.status()
}

func (p *pop3) status() (string, error) {
	line, err := p.tp.ReadLine()
	if err != nil {
		return "", err
	}
	if rest, ok := strings.CutPrefix(line, "+OK"); ok {
		return strings.TrimSpace(rest), nil
	}
	return "", fmt.Errorf("the POP3 server answered %q", clip(line, 200))
}

// open connects and logs in to the mailbox.
func (c *Client) openPOP3(ctx context.Context) (*pop3, func(), error) {
	if c.cfg.POP3 == nil {
		return nil, nil, host.Errorf(host.CodeMailUnavailable, "this gate has no POP3 mailbox configured (mail.pop3) to read messages back")
	}
	s := *c.cfg.POP3
	conn, err := c.dial(ctx, s)
	if err != nil {
		return nil, nil, host.WrapError(host.CodeMailUnavailable, err, "connecting to the POP3 server: "+err.Error())
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	p := &pop3{tp: textproto.NewConn(conn), conn: conn}
	done := func() { stop(); p.tp.Close() }
	fail := func(err error) (*pop3, func(), error) {
		done()
		return nil, nil, host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
	}
	if _, err := p.status(); err != nil {
		return fail(err)
	}
	if _, err := p.cmd("USER %s", s.Username); err != nil {
		return fail(err)
	}
	if _, err := p.cmd("PASS %s", s.Password); err != nil {
		return fail(errors.New("login refused"))
	}
	return p, done, nil
}

// count returns how many messages the mailbox holds (STAT).
func (p *pop3) count() (int, error) {
	st, err := p.cmd("STAT")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(st)
	if len(f) < 1 {
		return 0, fmt.Errorf("bad STAT answer %q", st)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, fmt.Errorf("bad STAT answer %q", st)
	}
	return n, nil
}

// findBelow returns the number of the next message, from message from
// down, whose Message-ID is id, or 0; it reads no message more than MaxScan
// below n, the mailbox's count.
func (p *pop3) findBelow(id string, from, n int) (int, error) {
	want := "<" + id + ">"
	for i := from; i >= 1 && i > n-MaxScan; i-- {
		if _, err := p.cmd("TOP %d 0", i); err != nil {
			continue // deleted or vanished meanwhile
		}
		hdr, err := p.tp.ReadDotBytes()
		if err != nil {
			return 0, err
		}
		m, err := netmail.ReadMessage(bytes.NewReader(append(hdr, '\r', '\n')))
		if err != nil {
			continue
		}
		if strings.TrimSpace(m.Header.Get("Message-ID")) == want {
			return i, nil
		}
	}
	return 0, nil
}

// Fetch reads the message with Message-ID id (without angle brackets) from
// the mailbox. ErrNotFound (wrapped in a not_found error) when it is not there.
func (c *Client) Fetch(ctx context.Context, id string) (*Fetched, error) {
	return c.FetchWhere(ctx, id, nil)
}

// FetchWhere reads a message with Message-ID id from the mailbox, newest
// first, that accept takes (any, when accept is nil). The gate's mailbox
// takes mail from anyone, and anyone who read a Message-ID may send a
// message that carries it: accept tells the gate's own message from such a
// copy, which is passed over. ErrNotFound (wrapped in a not_found error)
// when no message with that id is taken.
func (c *Client) FetchWhere(ctx context.Context, id string, accept func(*Fetched) bool) (*Fetched, error) {
	if err := CheckMessageID(id); err != nil {
		return nil, err
	}
	p, done, err := c.openPOP3(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	total, err := p.count()
	if err != nil {
		return nil, host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
	}
	for from := total; ; {
		n, err := p.findBelow(id, from, total)
		if err != nil {
			return nil, host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
		}
		if n == 0 {
			_, _ = p.cmd("QUIT")
			return nil, host.WrapError(host.CodeNotFound, ErrNotFound, "no message "+id+" in the mailbox")
		}
		if _, err := p.cmd("RETR %d", n); err != nil {
			return nil, host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
		}
		dr := p.tp.DotReader()
		raw, err := io.ReadAll(io.LimitReader(dr, MaxMessage+1))
		if err != nil {
			return nil, host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
		}
		if len(raw) > MaxMessage {
			// Read the rest of the answer, so the session stays in step.
			if _, err := io.Copy(io.Discard, dr); err != nil {
				return nil, host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
			}
			if accept == nil {
				return nil, host.Errorf(host.CodeTooLarge, "message %s is larger than %d bytes", id, MaxMessage)
			}
			from = n - 1
			continue
		}
		f, err := Parse(raw)
		if err != nil && accept == nil {
			return nil, err
		}
		if err == nil && (accept == nil || accept(f)) {
			_, _ = p.cmd("QUIT")
			return f, nil
		}
		from = n - 1
	}
}

// Delete removes every message with Message-ID id from the mailbox (within
// the newest MaxScan). A message that is not there is not an error
// (deleting twice is a no-op).
func (c *Client) Delete(ctx context.Context, id string) error {
	if err := CheckMessageID(id); err != nil {
		return err
	}
	p, done, err := c.openPOP3(ctx)
	if err != nil {
		return err
	}
	defer done()
	total, err := p.count()
	if err != nil {
		return host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
	}
	// Every message with the id goes: a second send of the same message (a
	// crash between its send and its bookkeeping) and a copy someone else
	// mailed under the id alike, so none is left behind the deleted one.
	deleted := 0
	for from := total; ; {
		n, err := p.findBelow(id, from, total)
		if err != nil {
			return host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
		}
		if n == 0 {
			break
		}
		if _, err := p.cmd("DELE %d", n); err != nil {
			return host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
		}
		deleted++
		from = n - 1
	}
	// QUIT commits the deletion (RFC 1939 UPDATE state).
	if _, err := p.cmd("QUIT"); err != nil {
		return host.WrapError(host.CodeMailUnavailable, err, "POP3: "+err.Error())
	}
	if deleted > 0 {
		p.awaitClose()
	}
	return nil
}

// Parse reads a raw message: headers, the first text part (or the only
// part) as Body, other parts as attachments.
func Parse(raw []byte) (*Fetched, error) {
	m, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return nil, host.WrapError(host.CodeChannelError, err, "the message cannot be parsed: "+err.Error())
	}
	dec := new(mime.WordDecoder)
	subj, err := dec.DecodeHeader(m.Header.Get("Subject"))
	if err != nil {
		subj = m.Header.Get("Subject")
	}
	out := &Fetched{
		MessageID: strings.Trim(strings.TrimSpace(m.Header.Get("Message-ID")), "<>"),
		From:      m.Header.Get("From"), To: m.Header.Get("To"), Subject: subj, Date: m.Header.Get("Date"),
		Headers: map[string]string{},
	}
	for k, v := range m.Header {
		if strings.HasPrefix(k, "X-Asyncgate-") && len(v) > 0 {
			out.Headers[k] = v[0]
		}
	}
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		mt = "text/plain"
	}
	if !strings.HasPrefix(mt, "multipart/") {
		out.Body, err = decodePart(m.Body, m.Header.Get("Content-Transfer-Encoding"))
		return out, err
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		part, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, host.WrapError(host.CodeChannelError, err, "the message's parts cannot be read: "+err.Error())
		}
		b, err := decodePart(part, part.Header.Get("Content-Transfer-Encoding"))
		if err != nil {
			return nil, err
		}
		ct := part.Header.Get("Content-Type")
		pmt, _, _ := mime.ParseMediaType(ct)
		if out.Body == nil && part.FileName() == "" && (pmt == "" || strings.HasPrefix(pmt, "text/") || pmt == "application/octet-stream") {
			out.Body = b
			continue
		}
		out.Attachments = append(out.Attachments, Attachment{Filename: part.FileName(), ContentType: ct, Content: b})
	}
	if out.Body == nil {
		out.Body = []byte{}
	}
	return out, nil
}

func decodePart(r io.Reader, cte string) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(cte)) {
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, &stripCRLF{r: r})
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxMessage+1))
	if err != nil {
		return nil, host.WrapError(host.CodeChannelError, err, "the message body cannot be decoded: "+err.Error())
	}
	return b, nil
}

// stripCRLF drops line breaks and spaces from base64 text.
type stripCRLF struct{ r io.Reader }

func (s *stripCRLF) Read(p []byte) (int, error) {
	for {
		n, err := s.r.Read(p)
		j := 0
		for _, c := range p[:n] {
			if c != '\r' && c != '\n' && c != ' ' && c != '\t' {
				p[j] = c
				j++
			}
		}
		if j > 0 || err != nil {
			return j, err
		}
	}
}
