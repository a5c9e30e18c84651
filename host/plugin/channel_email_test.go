package plugin

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mail"
	"github.com/asyncgate/asyncgate/host/mail/mailtest"
)

// TestEmailChannelRoundTrip: put sends the payload through a real SMTP
// server (seen in mailpit's API with the seed's subject), get reads it back
// through POP3 byte for byte, ack deletes it from the mailbox.
func TestEmailChannelRoundTrip(t *testing.T) {
	t.Parallel()
	mp := mailtest.Start(t)
	ch := emailChannel(t, mp.Config("*@example.com"))
	ctx := context.Background()
	payload := []byte(`{"summary": "done", "rows": [1, 2, 3]}`)
	ptr, proof, err := ch.(*ChannelAdapter).PutWithProof(ctx, "tsk_email1", payload)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := strings.CutPrefix(ptr, "email:")
	if !ok {
		t.Fatalf("pointer %q", ptr)
	}
	var pr struct {
		MessageID string `json:"message_id"`
		To        string `json:"to"`
		Size      int    `json:"size"`
	}
	if err := json.Unmarshal(proof, &pr); err != nil || pr.MessageID != id || pr.To != "agent@example.com" || pr.Size != len(payload) {
		t.Fatalf("proof %s (%v)", proof, err)
	}
	sum, ok := mp.Find(t, id)
	if !ok || sum.Subject != "Task Results - tsk_email1" || len(sum.To) != 1 || sum.To[0].Address != "agent@example.com" {
		t.Fatalf("mailpit has %+v (found %v)", sum, ok)
	}
	got, err := ch.Get(ctx, ptr)
	if err != nil || string(got) != string(payload) {
		t.Fatalf("Get: %q %v", got, err)
	}
	if err := ch.Ack(ctx, ptr); err != nil {
		t.Fatal(err)
	}
	if _, ok := mp.Find(t, id); ok {
		t.Fatal("ack left the message in the mailbox")
	}
	if _, err := ch.Get(ctx, ptr); !host.IsCode(err, host.CodeNotFound) {
		t.Fatalf("Get after ack: %v, want not_found", err)
	}
	for _, bad := range []string{"email:", "email:no-at-sign", "email:a@b\r\nX: y", "file:a@b"} {
		if _, err := ch.Get(ctx, bad); !host.IsCode(err, host.CodeBadRequest) {
			t.Errorf("Get(%q): %v, want bad_request", bad, err)
		}
	}
}

// TestEmailChannelSlowServer: a mail server slower than the runtime's
// default call deadline (2 s) still gets its message: a plugin granted mail
// gets a call as long as a mail session may take (the mail client's
// timeout), not the default. The server here is mailpit behind a proxy that
// holds each connection 3 s before it passes it on; before the plugin's
// deadline followed the mail client's, that deadline cut the SMTP session
// and the put failed with mail_error.
func TestEmailChannelSlowServer(t *testing.T) {
	t.Parallel()
	mp := mailtest.Start(t)
	cfg := mp.Config("*@example.com")
	cfg.SMTP.Port = slowProxy(t, mp.SMTPPort, 3*time.Second)
	ptr, err := emailChannel(t, cfg).Put(context.Background(), "tsk_slow", []byte(`{"ok": true}`))
	if err != nil {
		t.Fatalf("put through a slow server: %v", err)
	}
	id, _ := strings.CutPrefix(ptr, "email:")
	if sum, ok := mp.Find(t, id); !ok || sum.Subject != "Task Results - tsk_slow" {
		t.Fatalf("mailpit has %+v (found %v)", sum, ok)
	}
}

// emailChannel loads the email channel with the runtime's default limits,
// granted a mail client of cfg, sending to agent@example.com.
func emailChannel(t *testing.T, cfg mail.Config) host.Channel {
	t.Helper()
	mc, err := mail.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, map[string]Grant{"email": {Mail: mc, Config: json.RawMessage(`{"to": "agent@example.com"}`)}}, Limits{}, "email")
	ch, err := b.reg.Channel("email")
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// slowProxy listens on a free port and passes each connection to
// 127.0.0.1:port after holding it for delay; it returns its port.
func slowProxy(t *testing.T, port int, delay time.Duration) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				time.Sleep(delay)
				up, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestEmailChannelFailures: a recipient the server refuses, one outside the
// gate's allowlist and a server that is down each fail the put with a
// channel error naming the cause; nothing is sent.
func TestEmailChannelFailures(t *testing.T) {
	t.Parallel()
	mp := mailtest.Start(t)
	mc, err := mail.New(mp.Config("*@example.com", "*@"+mailtest.RefusingDomain))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	off := setup(t, map[string]Grant{"email": {Mail: mc, Config: json.RawMessage(`{"to": "x@elsewhere.com"}`)}}, Limits{}, "email")
	ch, err := off.reg.Channel("email")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Put(ctx, "tsk_1", []byte("x")); !host.IsCode(err, host.CodeChannelError) || !strings.Contains(err.Error(), host.CodeEmailRecipientNotAllowed) {
		t.Fatalf("recipient off the allowlist: %v", err)
	}
	b := setup(t, map[string]Grant{"email": {Mail: mc, Config: json.RawMessage(`{"to": "x@` + mailtest.RefusingDomain + `"}`)}}, Limits{}, "email")
	if ch, err = b.reg.Channel("email"); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Put(ctx, "tsk_1", []byte("x")); !host.IsCode(err, host.CodeChannelError) || !strings.Contains(err.Error(), "mail_refused") || !strings.Contains(err.Error(), "550") {
		t.Fatalf("refused recipient: %v", err)
	}
	if n := len(mp.Messages(t)); n != 0 {
		t.Fatalf("mailpit stored %d messages", n)
	}
	mp.Stop()
	if _, err := ch.Put(ctx, "tsk_1", []byte("x")); !host.IsCode(err, host.CodeChannelError) || !strings.Contains(err.Error(), "mail_error") {
		t.Fatalf("server down: %v", err)
	}
}

// TestMailNotGrantedIsRefused: a plugin that asks for mail without the
// operator's grant, or imports the mail functions without asking for mail,
// is refused at load and never reaches the mail server.
func TestMailNotGrantedIsRefused(t *testing.T) {
	t.Parallel()
	wasm, man := readBuilt(t, "email")
	rt := newTestRuntime(t, Limits{})
	ctx := context.Background()
	cfg := json.RawMessage(`{"to": "agent@example.com"}`)
	if _, err := rt.Load(ctx, wasm, man, Grant{Config: cfg}, "test"); err == nil || !strings.Contains(err.Error(), "asks for mail but the operator granted none") {
		t.Fatalf("no grant: %v", err)
	}
	var m map[string]any
	_ = json.Unmarshal(man, &m)
	m["capabilities"] = map[string]any{}
	noCap, _ := json.Marshal(m)
	mc, _ := mail.New(mail.Config{SMTP: mail.Server{Host: "127.0.0.1", Port: 1}, From: "gate@example.com", AllowedRecipients: []string{"*@example.com"}})
	if _, err := rt.Load(ctx, wasm, noCap, Grant{Config: cfg, Mail: mc}, "test"); err == nil || !strings.Contains(err.Error(), "does not ask for mail") {
		t.Fatalf("imports without the capability: %v", err)
	}
}
