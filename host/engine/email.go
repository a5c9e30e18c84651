package engine

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Mailer is how the engine reaches the gate's mail client (host/mail's
// *mail.Client, which cmd/gate passes in as Config.Delivery.Mail): its SMTP
// server, POP3 mailbox, credentials and recipient allowlist live in the
// gate's config. A final refusal of Send (the server will not take the
// message, however often asked) is an error with a Permanent method that
// returns true; any other error is retried.
type Mailer interface {
	Check(m *host.MailMessage) error
	Send(ctx context.Context, m host.MailMessage) (string, error)
	Fetch(ctx context.Context, id string) (*host.FetchedMail, error)
	// FetchWhere is Fetch of the newest message with that Message-ID that
	// accept takes, passing over others that carry the same id.
	FetchWhere(ctx context.Context, id string, accept func(*host.FetchedMail) bool) (*host.FetchedMail, error)
	Delete(ctx context.Context, id string) error
	CanRead() bool
	NewMessageID() string
	// CallBound is the longest one Send, Fetch or Delete may take.
	CallBound() time.Duration
}

// OutboxKindEmail is the outbox kind of a queued email: the mail sink
// delivers it, not the external ledger's.
const OutboxKindEmail = "email"

// EmailChannel is the name of the built-in email result channel.
const EmailChannel = "email"

// TaskHeader is the header naming the task a message was sent for: the
// email channel sets it on every result it sends, send_email on a message
// sent with task_id. fetch_task_email reads back only a message whose
// header names the task asked about.
const TaskHeader = "X-Asyncgate-Task-Id"

// MaxEmailBody bounds send_email's body (it waits in the outbox).
const MaxEmailBody = 1 << 20

// Event kinds of email.
const (
	EvEmailQueued EventKind = "email_queued"
)

// SendEmailRequest is send_email's input.
type SendEmailRequest struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
	TaskID  string `json:"task_id,omitempty"`
	// ArchiveCopy (default true) also sends the message to the gate's own
	// address, so a copy lands in the gate's mailbox.
	ArchiveCopy *bool `json:"archive_copy,omitempty"`
}

// SendEmailResult is send_email's answer.
type SendEmailResult struct {
	MessageID       string `json:"message_id"`
	To              string `json:"to"`
	Status          string `json:"status"` // "queued"
	QueuedReceiptID string `json:"queued_receipt_id"`
	TaskID          string `json:"task_id,omitempty"`
}

// emailEntry is the outbox body of a queued email.
type emailEntry struct {
	To          string `json:"to"`
	Subject     string `json:"subject"`
	Body        string `json:"body"`
	MessageID   string `json:"message_id"`
	TaskID      string `json:"task_id,omitempty"`
	ArchiveCopy bool   `json:"archive_copy"`
	Principal   string `json:"principal"`
	Queued      string `json:"queued_receipt_id"`
}

// SendEmail queues an email: it checks the address against the gate's
// allowlist and the subject for header injection, then writes, in one
// transaction, an outbox entry of kind email and an email.queued receipt.
// The mail sink sends it outside every transaction: email.sent on success,
// email.failed (and the dead list) on the server's final refusal, retries
// with backoff while the server is down. Nothing is written on bad input.
func (e *Engine) SendEmail(ctx context.Context, actor Actor, req SendEmailRequest) (*SendEmailResult, error) {
	m := e.cfg.Delivery.Mail
	if m == nil {
		return nil, host.Errorf(host.CodeMailUnavailable, "this gate has no mail server configured (mail.smtp)")
	}
	msg := host.MailMessage{To: req.To, Subject: req.Subject, Body: []byte(req.Body)}
	if err := m.Check(&msg); err != nil {
		return nil, err
	}
	if len(req.Body) > MaxEmailBody {
		return nil, host.Errorf(host.CodeTooLarge, "body is %d bytes, the limit is %d", len(req.Body), MaxEmailBody)
	}
	if !utf8.ValidString(req.Body) {
		return nil, host.Errorf(host.CodeBadRequest, "body must be UTF-8 text")
	}
	if req.TaskID != "" {
		if _, err := e.PeekTask(ctx, actor, req.TaskID); err != nil {
			return nil, err
		}
	}
	if err := e.emails.take(e.cfg.Delivery.EmailLimit, actor.Tenant, actor.Principal, e.now()); err != nil {
		return nil, err
	}
	queued := false
	defer func() {
		if !queued {
			e.emails.refund(e.cfg.Delivery.EmailLimit, actor.Tenant, actor.Principal, e.now())
		}
	}()
	ent := emailEntry{To: req.To, Subject: req.Subject, Body: req.Body, MessageID: m.NewMessageID(), TaskID: req.TaskID,
		ArchiveCopy: req.ArchiveCopy == nil || *req.ArchiveCopy, Principal: actor.Principal}
	rc := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: actor.Tenant, Type: host.ReceiptEmailQueued, From: GatePrincipal,
		To: actor.Principal, TaskID: req.TaskID, Parents: []string{},
		Body: mustJSON(map[string]any{"message_id": ent.MessageID, "to": ent.To, "subject": ent.Subject, "archive_copy": ent.ArchiveCopy})}
	if err := rc.Validate(); err != nil {
		return nil, err
	}
	ent.Queued = rc.ID
	err := e.update(ctx, func(tx store.Tx) error {
		rc.CreatedAt = e.now()
		if err := appendValid(ctx, tx, rc, nil); err != nil {
			return err
		}
		// No task_id on the row: an email never waits behind the task's
		// receipts for the external ledger (the outbox keeps per-task order).
		return tx.InsertOutbox(ctx, []store.OutboxEntry{{Tenant: actor.Tenant, Kind: OutboxKindEmail, Key: "email:" + ent.MessageID,
			Body: mustJSON(ent), NextAt: rc.CreatedAt, CreatedAt: rc.CreatedAt}})
	})
	if err != nil {
		return nil, err
	}
	queued = true
	e.wakeOutbox()
	e.emit(Event{Kind: EvEmailQueued, Tenant: actor.Tenant, Detail: ent.MessageID})
	return &SendEmailResult{MessageID: ent.MessageID, To: ent.To, Status: "queued", QueuedReceiptID: rc.ID, TaskID: req.TaskID}, nil
}

// deliverEmail sends a queued email. The Message-ID is fixed at queue time,
// so a message sent twice (a crash between the send and the bookkeeping)
// carries the same id and the receiver can drop the repeat.
func (e *Engine) deliverEmail(ctx context.Context, en store.OutboxEntry) error {
	m := e.cfg.Delivery.Mail
	if m == nil {
		return errors.New("this gate has no mail server configured; the email waits for one")
	}
	var ent emailEntry
	if err := json.Unmarshal(en.Body, &ent); err != nil {
		return &RefusedError{Reason: "the queued email is not valid: " + err.Error()}
	}
	msg := host.MailMessage{To: ent.To, Subject: ent.Subject, Body: []byte(ent.Body), MessageID: ent.MessageID, BccSelf: ent.ArchiveCopy}
	if ent.TaskID != "" {
		msg.Headers = map[string]string{TaskHeader: ent.TaskID}
	}
	_, err := m.Send(ctx, msg)
	var he *host.Error
	switch {
	case err == nil:
		return nil
	case permanentMailError(err):
		return &RefusedError{Reason: err.Error()}
	case errors.As(err, &he) && he.Code != host.CodeMailUnavailable:
		// The allowlist changed since it was queued, or the entry is bad.
		return &RefusedError{Reason: err.Error()}
	}
	return err
}

// permanentMailError reports whether err is the mail server's final
// refusal (see Mailer).
func permanentMailError(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// emailOutcomes appends email.sent or email.failed for the email entries of
// a round that are done or dead, in the transaction that records them. A
// receipt already written (another dispatcher got there first) is not
// written again.
func (e *Engine) emailOutcomes(ctx context.Context, tx store.Tx, es []store.OutboxEntry) error {
	for _, en := range es {
		if en.Kind != OutboxKindEmail || en.State == store.OutboxPending || en.State == store.OutboxReclaimed {
			continue
		}
		var ent emailEntry
		if json.Unmarshal(en.Body, &ent) != nil {
			continue
		}
		typ, body := host.ReceiptEmailSent, map[string]any{"message_id": ent.MessageID, "to": ent.To, "attempts": en.Attempts + 1}
		if en.State == store.OutboxDead {
			typ, body = host.ReceiptEmailFailed, map[string]any{"message_id": ent.MessageID, "to": ent.To, "attempts": en.Attempts,
				"error": en.LastError, "outbox_id": en.ID}
		}
		key := string(typ) + ":" + ent.MessageID
		if en.State == store.OutboxDead && en.ClaimedTill != nil {
			// gate outbox retry sends it again: a new refusal is a new failure.
			key += ":" + strconv.FormatInt(en.ClaimedTill.UnixMicro(), 10)
		}
		if prev, err := tx.GetReceiptByDedupe(ctx, en.Tenant, "", key); err != nil {
			return err
		} else if prev != nil {
			continue
		}
		parents := []string{}
		types := map[string]host.ReceiptType{}
		if ent.Queued != "" {
			parents = append(parents, ent.Queued)
			types[ent.Queued] = host.ReceiptEmailQueued
		}
		rc := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: en.Tenant, Type: typ, From: GatePrincipal, To: ent.Principal,
			TaskID: ent.TaskID, Parents: parents, Body: mustJSON(body), DedupeKey: key, CreatedAt: e.now()}
		if err := appendReceipt(ctx, tx, rc, types); err != nil {
			return err
		}
	}
	return nil
}

// TaskEmail is fetch_task_email's answer: the message a task's result went
// out as, read back from the gate's mailbox.
type TaskEmail struct {
	TaskID    string `json:"task_id"`
	MessageID string `json:"message_id"`
	Subject   string `json:"subject"`
	From      string `json:"from"`
	To        string `json:"to"`
	Date      string `json:"date,omitempty"`
	// Body is the body parsed as JSON when it is JSON, else its text.
	Body        any               `json:"body"`
	BodyIsJSON  bool              `json:"body_is_json"`
	Attachments []EmailAttachment `json:"attachments"`
}

// EmailAttachment is an attachment of a fetched message: Content when it
// is UTF-8 text, else ContentBase64.
type EmailAttachment struct {
	Filename      string `json:"filename"`
	ContentType   string `json:"content_type"`
	Size          int    `json:"size"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
}

// emailPointer returns the Message-ID of a task whose result went through
// the email channel: the gate records the channel with every payload it
// stores, and a worker may not give an email: pointer (checkWorkerPointer),
// so a pointer without the recorded channel is not the gate's.
func emailPointer(t *host.Task) (string, error) {
	if t.State != host.StateSucceeded || t.Result == nil {
		return "", host.Errorf(host.CodeConflict, "task %s is %s and has no result%s", t.ID, t.State, resultYet(t.State))
	}
	if t.Result.Channel == EmailChannel && t.Result.PurgedAt != nil {
		return "", archivedResultErr(t)
	}
	id, ok := strings.CutPrefix(t.Result.Pointer, EmailChannel+":")
	if !ok || t.Result.Channel != EmailChannel {
		ch := t.Result.Channel
		if ch == "" {
			ch, _, _ = strings.Cut(t.Result.Pointer, ":")
		}
		return "", host.Errorf(host.CodeNotEmailChannel, "task %s's result went through the %q channel, not email", t.ID, ch)
	}
	if t.Result.FromWorker {
		// A message the worker mailed itself, on a gate that had no mailbox
		// then: the gate reads back only what it sent (pointerChannel).
		return "", host.Errorf(host.CodeConflict, "task %s's result is %s, a message the worker sent itself, not one the gate's mailbox holds for it", t.ID, t.Result.Pointer)
	}
	return id, nil
}

// FetchTaskEmail reads the message a succeeded task's result was sent as
// back from the gate's POP3 mailbox: subject, body (parsed as JSON when it
// is), attachments and Message-ID.
func (e *Engine) FetchTaskEmail(ctx context.Context, actor Actor, taskID string) (*TaskEmail, error) {
	t, err := e.PeekTask(ctx, actor, taskID)
	if err != nil {
		return nil, err
	}
	id, err := emailPointer(t)
	if err != nil {
		return nil, err
	}
	m := e.cfg.Delivery.Mail
	if m == nil || !m.CanRead() {
		return nil, host.Errorf(host.CodeMailUnavailable, "this gate has no mailbox configured (mail.pop3) to read the message back")
	}
	// The mailbox takes mail from anyone: a message that copies this one's
	// Message-ID and task header but not its body is not the one the gate
	// sent, and is passed over for the gate's own.
	f, err := m.FetchWhere(ctx, id, func(f *host.FetchedMail) bool {
		return f.Headers[TaskHeader] == t.ID && sentBody(f, t.Result.Checksum)
	})
	if err != nil {
		switch host.ErrorCode(err) {
		case host.CodeNotFound:
			return nil, host.Errorf(host.CodeNotFound, "message %s of task %s is no longer in the mailbox (archived or deleted)", id, t.ID)
		case host.CodeMailUnavailable, host.CodeInternal:
			return nil, host.WrapError(host.CodeMailUnavailable, err, "the mailbox cannot be read now: "+host.ErrorDetail(err))
		}
		return nil, err
	}
	if f.Headers[TaskHeader] != t.ID {
		// The message is not the one the gate sent for this task (a pointer
		// recorded before issue 37, naming another task's or another
		// tenant's mail): answered as a message that is not there.
		return nil, host.Errorf(host.CodeNotFound, "message %s of task %s is no longer in the mailbox (archived or deleted)", id, t.ID)
	}
	out := &TaskEmail{TaskID: t.ID, MessageID: f.MessageID, Subject: f.Subject, From: f.From, To: f.To, Date: f.Date,
		Attachments: []EmailAttachment{}}
	if json.Valid(f.Body) {
		out.Body, out.BodyIsJSON = json.RawMessage(f.Body), true
	} else {
		out.Body = string(f.Body)
	}
	for _, a := range f.Attachments {
		ea := EmailAttachment{Filename: a.Filename, ContentType: a.ContentType, Size: len(a.Content)}
		if utf8.Valid(a.Content) {
			ea.Content = string(a.Content)
		} else {
			ea.ContentBase64 = base64.StdEncoding.EncodeToString(a.Content)
		}
		out.Attachments = append(out.Attachments, ea)
	}
	return out, nil
}

// ArchiveTaskEmail archives a task's emailed result: the email channel's
// ack deletes the message from the gate's mailbox, and the result is marked
// archived (ArchiveResult).
func (e *Engine) ArchiveTaskEmail(ctx context.Context, actor Actor, taskID string) (*host.Task, error) {
	t, err := e.PeekTask(ctx, actor, taskID)
	if err != nil {
		return nil, err
	}
	if _, err := emailPointer(t); err != nil && !(t.Result != nil && t.Result.PurgedAt != nil && t.Result.Channel == EmailChannel) {
		return nil, err // archived and purged already: a no-op below
	}
	return e.archiveResult(ctx, actor, t)
}

// sentBody says whether a fetched message carries the payload whose
// checksum the gate recorded when the email channel sent it: the body is
// the payload, and the channel sends no attachments. A result recorded
// without a sha256 checksum is not checked.
func sentBody(f *host.FetchedMail, checksum string) bool {
	want, ok := strings.CutPrefix(checksum, "sha256:")
	if !ok {
		return true
	}
	if len(f.Attachments) > 0 {
		return false
	}
	sum := sha256.Sum256(f.Body)
	return strings.EqualFold(hex.EncodeToString(sum[:]), want)
}
