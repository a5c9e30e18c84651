package mail

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/smtp"
	"net/textproto"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/asyncgate/asyncgate/host"
)

// Check validates m against the allowlist and the limits, without sending.
func (c *Client) Check(m *Message) error {
	if err := c.CheckRecipient(m.To); err != nil {
		return err
	}
	if err := CheckSubject(m.Subject); err != nil {
		return err
	}
	if len(m.Body) > MaxBody {
		return host.Errorf(host.CodeTooLarge, "body is %d bytes, the limit is %d", len(m.Body), MaxBody)
	}
	if len(m.Attachment) > MaxAttachment {
		return host.Errorf(host.CodeTooLarge, "attachment is %d bytes, the limit is %d", len(m.Attachment), MaxAttachment)
	}
	if m.MessageID != "" {
		if err := CheckMessageID(m.MessageID); err != nil {
			return err
		}
	}
	if strings.ContainsAny(m.AttachmentName, "\r\n\"\\/\x00") || len(m.AttachmentName) > 200 {
		return host.Errorf(host.CodeBadRequest, "attachment name must be a plain file name")
	}
	for k, v := range m.Headers {
		if !strings.HasPrefix(k, "X-Asyncgate-") || strings.ContainsAny(k, " :\r\n\x00") || strings.ContainsAny(v, "\r\n\x00") || len(v) > 900 {
			return host.Errorf(host.CodeBadRequest, "header %q is not an X-Asyncgate- header with a one-line value", clip(k, 60))
		}
	}
	return nil
}

// Send checks and sends m, returning its Message-ID. A *PermanentError is
// the server's final refusal (5xx); any other error (a server down or slow,
// a 4xx) may pass when tried again.
func (c *Client) Send(ctx context.Context, m Message) (string, error) {
	if m.MessageID == "" {
		m.MessageID = c.NewMessageID()
	}
	if err := c.Check(&m); err != nil {
		return "", err
	}
	raw := c.compose(&m, time.Now())
	return m.MessageID, c.smtpSend(ctx, m.To, m.BccSelf, raw)
}

func (c *Client) smtpSend(ctx context.Context, to string, self bool, raw []byte) error {
	conn, err := c.dial(ctx, c.cfg.SMTP)
	if err != nil {
		return fmt.Errorf("connecting to the SMTP server: %w", err)
	}
	defer conn.Close()
	// Close the connection when ctx ends, so a stuck server frees the caller.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	s := c.cfg.SMTP
	cl, err := smtp.NewClient(conn, s.Host)
	if err != nil {
		return classify(err)
	}
	defer cl.Close()
	if err := cl.Hello(c.domain); err != nil {
		return classify(err)
	}
	if s.TLS == TLSStartTLS {
		if ok, _ := cl.Extension("STARTTLS"); !ok {
			return errors.New("the SMTP server does not offer STARTTLS")
		}
		if err := cl.StartTLS(c.tlsConfig(s)); err != nil {
			return classify(err)
		}
	}
	if s.Username != "" {
		if err := cl.Auth(smtp.PlainAuth("", s.Username, s.Password, s.Host)); err != nil {
			return classify(err)
		}
	}
	if err := cl.Mail(c.cfg.From); err != nil {
		return classify(err)
	}
	if err := cl.Rcpt(to); err != nil {
		return classify(err)
	}
	if self && !strings.EqualFold(to, c.cfg.From) {
		_ = cl.Rcpt(c.cfg.From) // best effort: the archive copy
	}
	w, err := cl.Data()
	if err != nil {
		return classify(err)
	}
	if _, err := w.Write(raw); err != nil {
		return classify(err)
	}
	if err := w.Close(); err != nil {
		return classify(err)
	}
	_ = cl.Quit()
	return nil
}

// classify turns an SMTP 5xx answer into a *PermanentError.
func classify(err error) error {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 && te.Code < 600 {
		return &PermanentError{Code: te.Code, Msg: te.Msg}
	}
	return err
}

// encodeSubject is the Subject header's value for s: s itself when it is
// printable ASCII with no encoded-word opener in it and fits one header
// line; otherwise all of s as base64 encoded words (RFC 2047), one a
// line, so that what a mail client shows is s as given. (A subject
// holding "=?utf-8?q?…?=" would otherwise be decoded by the client, CR and
// LF included.)
func encodeSubject(s string) string {
	plain := !strings.Contains(s, "=?") && len("Subject: ")+len(s) <= 998
	for i := 0; plain && i < len(s); i++ {
		plain = s[i] >= ' ' && s[i] <= '~'
	}
	if plain {
		return s
	}
	// 39 bytes make 52 base64 characters: with "=?utf-8?b?" and "?=" a
	// word of 64, and the first line, after "Subject: ", 73: under the 76
	// RFC 2047 allows a line that holds encoded words. Words end on whole
	// UTF-8 characters, so each decodes alone.
	var words []string
	for len(s) > 0 {
		n := min(len(s), 39)
		for n < len(s) && n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		if n == 0 {
			n = min(len(s), 39)
		}
		words = append(words, "=?utf-8?b?"+base64.StdEncoding.EncodeToString([]byte(s[:n]))+"?=")
		s = s[n:]
	}
	return strings.Join(words, "\r\n ")
}

// compose builds the RFC 5322 message.
func (c *Client) compose(m *Message, now time.Time) []byte {
	var b bytes.Buffer
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("From", c.cfg.From)
	h("To", m.To)
	h("Subject", encodeSubject(m.Subject))
	h("Date", now.UTC().Format(time.RFC1123Z))
	h("Message-ID", "<"+m.MessageID+">")
	h("MIME-Version", "1.0")
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h(k, m.Headers[k])
	}
	ct := "text/plain; charset=utf-8"
	if !utf8.Valid(m.Body) {
		ct = "application/octet-stream"
	}
	if len(m.Attachment) == 0 {
		h("Content-Type", ct)
		h("Content-Transfer-Encoding", "base64")
		b.WriteString("\r\n")
		writeBase64(&b, m.Body)
		return b.Bytes()
	}
	boundary := "ag-" + strings.SplitN(m.MessageID, "@", 2)[0]
	h("Content-Type", `multipart/mixed; boundary="`+boundary+`"`)
	b.WriteString("\r\n--" + boundary + "\r\n")
	h("Content-Type", ct)
	h("Content-Transfer-Encoding", "base64")
	b.WriteString("\r\n")
	writeBase64(&b, m.Body)
	name := m.AttachmentName
	if name == "" {
		name = "attachment.json"
	}
	b.WriteString("--" + boundary + "\r\n")
	h("Content-Type", "application/json")
	h("Content-Disposition", `attachment; filename="`+name+`"`)
	h("Content-Transfer-Encoding", "base64")
	b.WriteString("\r\n")
	writeBase64(&b, m.Attachment)
	b.WriteString("--" + boundary + "--\r\n")
	return b.Bytes()
}

func writeBase64(b *bytes.Buffer, data []byte) {
	s := base64.StdEncoding.EncodeToString(data)
	for len(s) > 76 {
		b.WriteString(s[:76] + "\r\n")
		s = s[76:]
	}
	b.WriteString(s + "\r\n")
}
