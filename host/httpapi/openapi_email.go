package httpapi

import (
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// The email API's operations in the OpenAPI document.
func init() {
	agents := []string{"agent", "admin"}
	anyKey := []string{"agent", "admin", "worker"}
	openapi.Add(
		openapi.Op{Method: "POST", Path: "/v1/email", Tag: "email", Roles: agents, Strict: true, Body: engine.SendEmailRequest{}, BodyRequired: true,
			Summary:   "Queue an email durably (send_email): email.queued now, email.sent or email.failed when the mail server answers; 400 invalid_email_address or email_recipient_not_allowed writes nothing; 429 quota_exceeded past the sender's or its tenant's hourly budget (mail.send_limit)",
			Responses: map[int]any{202: engine.SendEmailResult{}}},
		openapi.Op{Method: "GET", Path: "/v1/tasks/:id/email", Tag: "email", Roles: anyKey,
			Summary:   "Read back the email a task's result was sent as (fetch_task_email): subject, body (JSON when it is), attachments, message_id",
			Responses: map[int]any{200: engine.TaskEmail{}}},
		openapi.Op{Method: "POST", Path: "/v1/tasks/:id/email/archive", Tag: "email", Roles: agents,
			Summary:   "Archive a task's emailed result: delete the message from the gate's mailbox and mark the result archived",
			Responses: map[int]any{200: api.ArchivedEmail{}}},
	)
}
