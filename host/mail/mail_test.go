package mail_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/smtp"
	"strconv"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mail"
	"github.com/asyncgate/asyncgate/host/mail/mailtest"
)

func TestCheckRecipientAllowlistAndSyntax(t *testing.T) {
	c, err := mail.New(mail.Config{SMTP: mail.Server{Host: "127.0.0.1", Port: 25}, From: "gate@example.com",
		AllowedRecipients: []string{"boss@corp.example.com", "*@team.example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"boss@corp.example.com", "BOSS@corp.example.com", "a@team.example.org", "x.y@TEAM.example.org"} {
		if err := c.CheckRecipient(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for addr, code := range map[string]string{
		"":                               host.CodeInvalidEmailAddress,
		"not an address":                 host.CodeInvalidEmailAddress,
		"Boss <boss@corp.example.com>":   host.CodeInvalidEmailAddress,
		"a@team.example.org\r\nBcc: x@y": host.CodeInvalidEmailAddress,
		"a@team.example.org,b@evil.com":  host.CodeInvalidEmailAddress,
		"a@b":                            host.CodeInvalidEmailAddress,
		"other@corp.example.com":         host.CodeEmailRecipientNotAllowed,
		"a@sub.team.example.org":         host.CodeEmailRecipientNotAllowed,
		"a@evil.com":                     host.CodeEmailRecipientNotAllowed,
		// A relay route through an allowed domain to another one.
		"victim%evil.com@team.example.org": host.CodeInvalidEmailAddress,
		"evil.com!victim@team.example.org": host.CodeInvalidEmailAddress,
	} {
		if err := c.CheckRecipient(addr); host.ErrorCode(err) != code {
			t.Errorf("%q: got %v, want %s", addr, err, code)
		}
	}
	if err := mail.CheckSubject("Hi\r\nBcc: victim@example.com"); !host.IsCode(err, host.CodeBadRequest) {
		t.Errorf("subject with CRLF: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]mail.Config{
		"no host":       {SMTP: mail.Server{Port: 25}, From: "a@example.com"},
		"bad tls":       {SMTP: mail.Server{Host: "h", Port: 25, TLS: "ssl3"}, From: "a@example.com"},
		"pop3 starttls": {SMTP: mail.Server{Host: "h", Port: 25}, POP3: &mail.Server{Host: "h", Port: 110, TLS: "starttls"}, From: "a@example.com"},
		"bad from":      {SMTP: mail.Server{Host: "h", Port: 25}, From: "nobody"},
		"bad pattern":   {SMTP: mail.Server{Host: "h", Port: 25}, From: "a@example.com", AllowedRecipients: []string{"*@"}},
	} {
		if _, err := mail.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSendFetchDeleteAgainstMailpit sends through a real SMTP server, sees
// the message in its HTTP API, reads it back over POP3 byte for byte with its
// attachment, deletes it and finds it gone.
func TestSendFetchDeleteAgainstMailpit(t *testing.T) {
	mp := mailtest.Start(t)
	c, err := mail.New(mp.Config("*@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	body := []byte("{\"answer\": 42,\n \"text\": \"trailing space \\u00e9 \"}  \n")
	id, err := c.Send(ctx, mail.Message{To: "agent@example.com", Subject: "Task Results - tsk_1 é", Body: body,
		Attachment: []byte(`{"a":1}`), AttachmentName: "result.json", Headers: map[string]string{"X-Asyncgate-Task-Id": "tsk_1"}})
	if err != nil {
		t.Fatal(err)
	}
	sum, ok := mp.Find(t, id)
	if !ok || sum.Subject != "Task Results - tsk_1 é" || len(sum.To) != 1 || sum.To[0].Address != "agent@example.com" {
		t.Fatalf("mailpit has %+v (found %v)", sum, ok)
	}
	f, err := c.Fetch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Body, body) || f.MessageID != id || f.Subject != "Task Results - tsk_1 é" || f.Headers["X-Asyncgate-Task-Id"] != "tsk_1" {
		t.Fatalf("fetched %+v", f)
	}
	if len(f.Attachments) != 1 || f.Attachments[0].Filename != "result.json" || string(f.Attachments[0].Content) != `{"a":1}` {
		t.Fatalf("attachments %+v", f.Attachments)
	}
	// The archive copy goes to the gate's own address, as an envelope
	// recipient only.
	arch, err := c.Send(ctx, mail.Message{To: "agent@example.com", Subject: "copy", Body: []byte("b"), BccSelf: true})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := mp.Find(t, arch); !ok || len(s.Bcc) != 1 || s.Bcc[0].Address != "gate@asyncgate.example.com" {
		t.Fatalf("archive copy: %+v (%v)", s, ok)
	}
	if f, err := c.Fetch(ctx, arch); err != nil || strings.Contains(f.To, "gate@") {
		t.Fatalf("the archive copy's address leaked into the headers: %+v %v", f, err)
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, id); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("fetch after delete: %v", err)
	}
	if _, ok := mp.Find(t, id); ok {
		t.Fatal("mailpit still has the deleted message")
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
}

// TestSubjectShownAsGiven: a subject is what mail clients show, as the
// agent wrote it: one holding an encoded word is not decoded by the reader
// (into a CR LF here), and a long one with non-ASCII text comes back whole.
func TestSubjectShownAsGiven(t *testing.T) {
	mp := mailtest.Start(t)
	c, err := mail.New(mp.Config("*@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, subj := range []string{
		"=?utf-8?q?a=0D=0ABcc:_x@evil.com?=",
		"plain =?= text",
		strings.Repeat("Résultat é 😀 ", 40),
		"ASCII only",
		strings.Repeat("long ascii ", 90), // 990 bytes: past one header line
	} {
		id, err := c.Send(ctx, mail.Message{To: "agent@example.com", Subject: subj, Body: []byte("b")})
		if err != nil {
			t.Fatal(err)
		}
		if sum, ok := mp.Find(t, id); !ok || sum.Subject != subj {
			t.Errorf("mailpit shows subject %q, want %q", sum.Subject, subj)
		}
		if f, err := c.Fetch(ctx, id); err != nil || f.Subject != subj {
			t.Errorf("fetched subject %q (%v), want %q", f.Subject, err, subj)
		}
	}
}

// TestSendOutcomes: a recipient the server refuses is a permanent error; a
// server that is down is a transient one; an address off the allowlist never
// reaches the server.
func TestSendOutcomes(t *testing.T) {
	mp := mailtest.Start(t)
	c, err := mail.New(mp.Config("*@example.com", "*@"+mailtest.RefusingDomain))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = c.Send(ctx, mail.Message{To: "x@" + mailtest.RefusingDomain, Subject: "s", Body: []byte("b")})
	if !mail.IsPermanent(err) || !strings.Contains(err.Error(), "550") {
		t.Fatalf("refused recipient: %v", err)
	}
	_, err = c.Send(ctx, mail.Message{To: "x@elsewhere.com", Subject: "s", Body: []byte("b")})
	if !host.IsCode(err, host.CodeEmailRecipientNotAllowed) {
		t.Fatalf("off the allowlist: %v", err)
	}
	_, err = c.Send(ctx, mail.Message{To: "x@example.com", Subject: "s\r\nBcc: y@example.com", Body: []byte("b")})
	if !host.IsCode(err, host.CodeBadRequest) {
		t.Fatalf("header injection: %v", err)
	}
	if n := len(mp.Messages(t)); n != 0 {
		t.Fatalf("mailpit stored %d messages of refused sends", n)
	}
	mp.Stop()
	_, err = c.Send(ctx, mail.Message{To: "x@example.com", Subject: "s", Body: []byte("b")})
	if err == nil || mail.IsPermanent(err) {
		t.Fatalf("server down: %v (want a transient error)", err)
	}
	if _, err := c.Fetch(ctx, "x@y.com"); !host.IsCode(err, host.CodeMailUnavailable) {
		t.Fatalf("fetch with the server down: %v", err)
	}
}

// TestTLSModes: SMTP with STARTTLS and authentication, POP3 over TLS, against
// a mailpit that requires them.
func TestTLSModes(t *testing.T) {
	mp := mailtest.Start(t, mailtest.WithTLS())
	cfg := mp.Config("*@example.com")
	c, err := mail.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := c.Send(ctx, mail.Message{To: "a@example.com", Subject: "over TLS", Body: []byte("secret")})
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Fetch(ctx, id)
	if err != nil || string(f.Body) != "secret" {
		t.Fatalf("fetch over TLS: %+v %v", f, err)
	}
	// Plain SMTP to a server that requires STARTTLS is refused, not sent.
	cfg.SMTP.TLS = mail.TLSNone
	plain, err := mail.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Send(ctx, mail.Message{To: "a@example.com", Subject: "plain", Body: []byte("x")}); err == nil {
		t.Fatal("plain SMTP to a STARTTLS-only server succeeded")
	}
}

// TestPermanentErrorSaysSo: the engine, which does not import this package,
// tells a final refusal from an outage by the error's Permanent method.
func TestPermanentErrorSaysSo(t *testing.T) {
	err := fmt.Errorf("send: %w", &mail.PermanentError{Code: 550, Msg: "no such user"})
	var p interface{ Permanent() bool }
	if !errors.As(err, &p) || !p.Permanent() || !mail.IsPermanent(err) {
		t.Fatalf("%v does not say it is permanent", err)
	}
}

// TestDeleteRemovesEveryCopy: archiving a message removes every message
// under its Message-ID — a second send of it (a crash between the send and
// its bookkeeping) and a copy someone else mailed under the id — not only
// the newest, which would leave the gate's own message behind a deleted
// copy.
func TestDeleteRemovesEveryCopy(t *testing.T) {
	mp := mailtest.Start(t)
	c, err := mail.New(mp.Config("*@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := c.Send(ctx, mail.Message{To: "agent@example.com", Subject: "result", Body: []byte("genuine")})
	if err != nil {
		t.Fatal(err)
	}
	copyOf := "From: someone@example.com\r\nTo: agent@example.com\r\nSubject: result\r\nMessage-ID: <" + id + ">\r\n\r\ncopy\r\n"
	for i := 0; i < 2; i++ {
		if err := smtp.SendMail("127.0.0.1:"+strconv.Itoa(mp.SMTPPort), nil, "someone@example.com", []string{"agent@example.com"}, []byte(copyOf)); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		n := 0
		for _, m := range mp.Messages(t) {
			if m.MessageID == id {
				n++
			}
		}
		return n
	}
	if n := count(); n != 3 {
		t.Fatalf("the mailbox holds %d messages under the id, want 3", n)
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d messages under the id are left after the delete", n)
	}
}
