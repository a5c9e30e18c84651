package mcpapi_test

import (
	"context"
	"testing"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mail"
	"github.com/asyncgate/asyncgate/host/mail/mailtest"
	"github.com/asyncgate/asyncgate/host/mcpapi"
)

// TestEmailTools drives send_email, fetch_task_email and archive_task_email
// with the official MCP client against a real mail server: bad addresses are
// refused with their codes, a good one is queued and (one outbox round
// later) at the server with an email.sent receipt; a result stored through
// another channel is not_email_channel.
func TestEmailTools(t *testing.T) {
	mp := mailtest.Start(t)
	mc, err := mail.New(mp.Config("*@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, mcpapi.Config{}, func(c *engine.Config) { c.Delivery.Mail = mc })
	agent := b.connect(t, b.agent)
	worker := b.connect(t, b.worker)

	fails(t, agent, "send_email", map[string]any{"to": "nobody", "subject": "s", "body": "b"}, "invalid_email_address")
	fails(t, agent, "send_email", map[string]any{"to": "x@elsewhere.org", "subject": "s", "body": "b"}, "email_recipient_not_allowed")
	fails(t, agent, "send_email", map[string]any{"to": "x@example.com", "subject": "a\nBcc: y@elsewhere.org", "body": "b"}, "bad_request")
	fails(t, agent, "send_email", map[string]any{"subject": "s", "body": "b"}, "bad_request")

	var ack struct {
		TaskID string `json:"task_id"`
	}
	ok(t, agent, "queue_task", map[string]any{"task_type": "echo", "params": map[string]any{"n": 1}}, &ack)
	var res struct {
		MessageID       string `json:"message_id"`
		Status          string `json:"status"`
		QueuedReceiptID string `json:"queued_receipt_id"`
	}
	ok(t, agent, "send_email", map[string]any{"to": "hexy@example.com", "subject": "Hello", "body": `{"x": 1}`, "task_id": ack.TaskID, "archive_copy": false}, &res)
	if res.Status != "queued" || res.MessageID == "" || res.QueuedReceiptID == "" {
		t.Fatalf("send_email: %+v", res)
	}
	if n, err := b.eng.OutboxRound(context.Background()); err != nil || n != 1 {
		t.Fatalf("OutboxRound = %d, %v", n, err)
	}
	if _, found := mp.Find(t, res.MessageID); !found {
		t.Fatal("the email is not at the mail server")
	}
	// The email.queued obligation is discharged by an email.sent receipt.
	var queued struct {
		Type         string `json:"receipt_type"`
		TerminatedBy string `json:"terminated_by"`
	}
	ok(t, agent, "get_receipt", map[string]any{"receipt_id": res.QueuedReceiptID}, &queued)
	var sent struct {
		Type string `json:"receipt_type"`
	}
	if queued.Type != "email.queued" || queued.TerminatedBy == "" {
		t.Fatalf("queued receipt %+v", queued)
	}
	ok(t, agent, "get_receipt", map[string]any{"receipt_id": queued.TerminatedBy}, &sent)
	if sent.Type != "email.sent" {
		t.Fatalf("terminator %+v", sent)
	}

	// A result that went through another channel.
	var lease struct {
		RunID string `json:"run_id"`
	}
	ok(t, worker, "worker_lease_task", map[string]any{"worker_id": "echo.w1"}, &lease)
	ok(t, worker, "worker_complete_task", map[string]any{"task_id": ack.TaskID, "run_id": lease.RunID, "result_pointer": "s3://b/k"}, nil)
	fails(t, agent, "fetch_task_email", map[string]any{"task_id": ack.TaskID}, "not_email_channel")
	fails(t, agent, "archive_task_email", map[string]any{"task_id": ack.TaskID}, "not_email_channel")
	fails(t, agent, "fetch_task_email", map[string]any{}, "bad_request")
}

// TestSendEmailBudgetNamesItsWait: past its send_email budget an agent's
// tool error is quota_exceeded with the budget's wait in
// retry_after_seconds (an hour over the budget, one message a hour here),
// as the HTTP door's Retry-After.
func TestSendEmailBudgetNamesItsWait(t *testing.T) {
	mp := mailtest.Start(t)
	mc, err := mail.New(mp.Config("*@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, mcpapi.Config{}, func(c *engine.Config) {
		c.Delivery.Mail = mc
		c.Delivery.EmailLimit = engine.EmailLimit{PerPrincipalPerHour: 1}
	})
	agent := b.connect(t, b.agent)
	args := map[string]any{"to": "x@example.com", "subject": "s", "body": "b"}
	ok(t, agent, "send_email", args, nil)
	var body mcpapi.ErrorBody
	res := call(t, agent, "send_email", args, &body)
	if !res.IsError || body.Error != "quota_exceeded" || body.RetryAfterSeconds < 3500 || body.RetryAfterSeconds > 3600 {
		t.Fatalf("the second send: %s; want quota_exceeded with retry_after_seconds in [3500, 3600]", text(res))
	}
}

// TestSendEmailWithoutMail: a gate without a mail server answers
// mail_unavailable.
func TestSendEmailWithoutMail(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	fails(t, b.connect(t, b.agent), "send_email", map[string]any{"to": "x@example.com", "subject": "s", "body": "b"}, "mail_unavailable")
}
