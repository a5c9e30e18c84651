package mcpapi

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mail"
)

// emailTools registers seed 002's email tools: send_email,
// fetch_task_email and archive_task_email.
func (s *Server) emailTools() {
	s.add(tool("send_email", "Send an email",
		`Send an email for cross-AI communication or a notification, through the gate's mail server. The recipient must be one bare address (name@domain) on the gate's allowlist: invalid_email_address or email_recipient_not_allowed otherwise, and nothing is sent. The email is queued durably (status "queued", an email.queued receipt) and sent by the gate in the background: an email.sent receipt when the mail server takes it, email.failed when it refuses it for good; while the server is down it is retried and nothing is lost. task_id ties it (and its receipts) to one of your tasks. archive_copy (default true) also sends a copy to the gate's own mailbox. mail_unavailable means this gate has no mail server configured.`,
		returns[engine.SendEmailResult](), writes(false, false), props(
			mcp.WithString("to", mcp.Required(), mcp.Description("Recipient address, e.g. hexy@memorygate.ai.")),
			mcp.WithString("subject", mcp.Required(), mcp.MaxLength(mail.MaxSubject), mcp.Pattern(`^[^\r\n\x00]*$`), mcp.Description("One line: no line breaks (CR, LF) or NUL; at most 998 bytes.")),
			mcp.WithString("body", mcp.Required(), mcp.Description("Body text or JSON (at most 1 MiB).")),
			mcp.WithString("task_id", mcp.Description("A task of yours this email is about (its receipts join the task's).")),
			mcp.WithBoolean("archive_copy", mcp.Description("Keep a copy in the gate's mailbox (default true).")),
		)),
		agentRoles, s.sendEmail)

	s.add(tool("fetch_task_email", "Fetch a task's result email",
		`For a succeeded task whose result went out through the email channel, read the message back from the gate's mailbox: subject, body (parsed as JSON when it is JSON), attachments [{filename, content_type, size, content}] and message_id. Errors: not_email_channel (the result went through another channel: use fetch_task_result), not_found (the message is no longer in the mailbox, e.g. archived), mail_unavailable (no mailbox configured, or it cannot be reached now: try later).`,
		returns[engine.TaskEmail](), readOnly(), props(taskIDArg)),
		agentRoles, s.fetchTaskEmail)

	s.add(tool("archive_task_email", "Archive a task's result email",
		`Archive a task's emailed result once you have kept what you need: the email channel deletes the message from the gate's mailbox and the result is marked archived. Archiving twice is harmless. Errors as fetch_task_email.`,
		returns[api.ArchivedEmail](), writes(true, true), props(taskIDArg)),
		agentRoles, s.archiveTaskEmail)
}

func (s *Server) sendEmail(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in engine.SendEmailRequest
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if err := required("to", in.To); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.SendEmail(wctx, a, in)
	if err != nil {
		return nil, "", err
	}
	return res, "The email to " + res.To + " is queued as " + res.MessageID + "; an email.sent receipt follows when the mail server takes it.", nil
}

func (s *Server) fetchTaskEmail(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	taskID, err := taskIDOf(req)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.FetchTaskEmail(wctx, a, taskID)
	if err != nil {
		return nil, "", err
	}
	return res, "The result email of " + res.TaskID + ": " + res.Subject, nil
}

func (s *Server) archiveTaskEmail(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	taskID, err := taskIDOf(req)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	t, err := s.eng.ArchiveTaskEmail(wctx, a, taskID)
	if err != nil {
		return nil, "", err
	}
	out := api.ArchivedEmail{TaskID: t.ID, Status: "archived"}
	if t.Result != nil {
		out.ArchivedAt = t.Result.ArchivedAt
	}
	return out, "The result email of " + t.ID + " is archived.", nil
}
