package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mail"
	"github.com/asyncgate/asyncgate/host/mail/mailtest"
	"github.com/asyncgate/asyncgate/host/store"
)

// emailBundle is an engine with the gate's mail client on a real mailpit.
func emailBundle(t *testing.T, b *Bundle) (*engine.Engine, *mailtest.Server) {
	t.Helper()
	mp := mailtest.Start(t)
	mc, err := mail.New(mp.Config("*@example.com", "boss@corp.example.org", "*@"+mailtest.RefusingDomain))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{Store: b.Store, Clock: b.Clock, ExpiryJitter: -1,
		Delivery: engine.DeliveryConfig{Mail: mc, OutboxConfig: engine.OutboxConfig{MinBackoff: time.Second, MaxBackoff: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	return eng, mp
}

func (b *Bundle) outbox(t *testing.T, state store.OutboxState) []store.OutboxEntry {
	t.Helper()
	var es []store.OutboxEntry
	if err := b.Store.View(b.Ctx, func(r store.Reader) error {
		var err error
		es, err = r.ListOutbox(b.Ctx, state, 0, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return es
}

func (b *Bundle) round(t *testing.T, eng *engine.Engine, want int) {
	t.Helper()
	n, err := eng.OutboxRound(b.Ctx)
	if err != nil || n != want {
		t.Fatalf("OutboxRound = %d, %v; want %d claimed", n, err, want)
	}
}

// openEmail returns the gate's open email.queued obligations.
func (b *Bundle) openEmail(t *testing.T) []host.Obligation {
	t.Helper()
	var out []host.Obligation
	for _, o := range b.Open(t, engine.GatePrincipal) {
		if o.Type == host.ReceiptEmailQueued {
			out = append(out, o)
		}
	}
	return out
}

// receiptsOf returns the task's receipts of one type.
func receiptsOf(rs []*host.Receipt, typ host.ReceiptType) []*host.Receipt {
	var out []*host.Receipt
	for _, r := range rs {
		if r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// testEmailOutbox: send_email queues an outbox entry and an email.queued
// receipt in one transaction; the dispatcher sends it through a real SMTP
// server (email.sent, the obligation closed); a recipient the server
// refuses gives email.failed and the dead list at once; a server that is
// down leaves the entry pending with backoff until it is back, then it is
// delivered; bad input writes nothing.
func testEmailOutbox(t *testing.T, b *Bundle) {
	eng, mp := emailBundle(t, b)
	task := b.Enqueue(t, "work")

	// Bad input: a clear code and nothing written.
	before := b.Verify(t).Receipts
	for _, c := range []struct {
		req  engine.SendEmailRequest
		code string
	}{
		{engine.SendEmailRequest{To: "not an address", Subject: "s", Body: "b"}, host.CodeInvalidEmailAddress},
		{engine.SendEmailRequest{To: "Boss <boss@corp.example.org>", Subject: "s", Body: "b"}, host.CodeInvalidEmailAddress},
		{engine.SendEmailRequest{To: "someone@elsewhere.org", Subject: "s", Body: "b"}, host.CodeEmailRecipientNotAllowed},
		{engine.SendEmailRequest{To: "a@example.com", Subject: "hi\r\nBcc: victim@elsewhere.org", Body: "b"}, host.CodeBadRequest},
		{engine.SendEmailRequest{To: "a@example.com", Subject: "s", Body: "b", TaskID: "tsk_nope"}, host.CodeNotFound},
	} {
		if _, err := eng.SendEmail(b.Ctx, b.Agent, c.req); !host.IsCode(err, c.code) {
			t.Fatalf("SendEmail(%+v) = %v, want %s", c.req, err, c.code)
		}
	}
	if after := b.Verify(t).Receipts; after != before || len(b.outbox(t, store.OutboxPending)) != 0 {
		t.Fatalf("bad input wrote: receipts %d -> %d, outbox %d", before, after, len(b.outbox(t, store.OutboxPending)))
	}

	// Success.
	res, err := eng.SendEmail(b.Ctx, b.Agent, engine.SendEmailRequest{To: "Hexy@Example.com", Subject: "Report", Body: `{"ok": true}`, TaskID: task.TaskID})
	if err != nil || res.Status != "queued" || res.MessageID == "" {
		t.Fatalf("SendEmail: %+v %v", res, err)
	}
	if es := b.outbox(t, store.OutboxPending); len(es) != 1 || es[0].Kind != engine.OutboxKindEmail || es[0].Key != "email:"+res.MessageID {
		t.Fatalf("outbox %+v", es)
	}
	if _, ok := mp.Find(t, res.MessageID); ok {
		t.Fatal("the email went out before the dispatcher ran")
	}
	if open := b.openEmail(t); len(open) != 1 || open[0].ReceiptID != res.QueuedReceiptID {
		t.Fatalf("open obligations of the gate: %+v", open)
	}
	b.round(t, eng, 1)
	sum, ok := mp.Find(t, res.MessageID)
	if !ok || sum.Subject != "Report" || len(sum.To) != 1 || sum.To[0].Address != "Hexy@Example.com" {
		t.Fatalf("mailpit has %+v (%v)", sum, ok)
	}
	rs := b.Receipts(t, task.TaskID)
	sent := receiptsOf(rs, host.ReceiptEmailSent)
	if len(receiptsOf(rs, host.ReceiptEmailQueued)) != 1 || len(sent) != 1 || sent[0].Parents[0] != res.QueuedReceiptID ||
		!strings.Contains(string(sent[0].Body), res.MessageID) || sent[0].To != b.Agent.Principal {
		t.Fatalf("receipts %+v", rs)
	}
	if open := b.openEmail(t); len(open) != 0 {
		t.Fatalf("the sent email left obligations open: %+v", open)
	}
	if n := len(b.outbox(t, store.OutboxPending)); n != 0 {
		t.Fatalf("%d entries pending after delivery", n)
	}

	// A recipient the server refuses: email.failed and the dead list at once.
	ref, err := eng.SendEmail(b.Ctx, b.Agent, engine.SendEmailRequest{To: "x@" + mailtest.RefusingDomain, Subject: "s", Body: "b", TaskID: task.TaskID})
	if err != nil {
		t.Fatal(err)
	}
	b.round(t, eng, 1)
	dead := b.outbox(t, store.OutboxDead)
	if len(dead) != 1 || dead[0].Key != "email:"+ref.MessageID || !strings.Contains(dead[0].LastError, "550") {
		t.Fatalf("dead list %+v", dead)
	}
	failed := receiptsOf(b.Receipts(t, task.TaskID), host.ReceiptEmailFailed)
	if len(failed) != 1 || failed[0].Parents[0] != ref.QueuedReceiptID || !strings.Contains(string(failed[0].Body), "550") {
		t.Fatalf("email.failed receipts %+v", failed)
	}

	// The server is down: the entry stays pending, retried with backoff,
	// and goes out once the server is back.
	mp.Stop()
	down, err := eng.SendEmail(b.Ctx, b.Agent, engine.SendEmailRequest{To: "later@example.com", Subject: "while down", Body: "b"})
	if err != nil {
		t.Fatalf("queueing while the server is down: %v", err)
	}
	b.round(t, eng, 1)
	pend := b.outbox(t, store.OutboxPending)
	if len(pend) != 1 || pend[0].Attempts != 1 || pend[0].LastError == "" || !pend[0].NextAt.After(b.Clock.Now()) {
		t.Fatalf("pending after a failed attempt: %+v", pend)
	}
	b.round(t, eng, 0) // not due yet
	mp.Restart()
	b.Clock.Advance(time.Hour)
	b.round(t, eng, 1)
	if _, ok := mp.Find(t, down.MessageID); !ok {
		t.Fatal("the email queued while the server was down never arrived")
	}
	if n := len(b.outbox(t, store.OutboxPending)); n != 0 {
		t.Fatalf("%d entries pending after the server came back", n)
	}
	// gate outbox retry sends the refused one again; refused again, a new failure.
	if n, err := eng.RetryOutbox(b.Ctx, nil); err != nil || n != 1 {
		t.Fatalf("RetryOutbox = %d, %v", n, err)
	}
	b.round(t, eng, 1)
	if f := receiptsOf(b.Receipts(t, task.TaskID), host.ReceiptEmailFailed); len(f) != 2 {
		t.Fatalf("%d email.failed receipts after a retry refused again, want 2", len(f))
	}
	if open := b.openEmail(t); len(open) != 0 {
		t.Fatalf("obligations left open: %+v", open)
	}
	b.Verify(t)
}
