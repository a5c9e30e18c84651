package plugin

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mail"
	"github.com/tetratelabs/wazero/api"
)

// Mail is what the mail host functions need of the gate's mail client
// (*mail.Client): the server, its credentials and the recipient allowlist
// stay in the host.
type Mail interface {
	Send(ctx context.Context, m mail.Message) (string, error)
	Fetch(ctx context.Context, id string) (*mail.Fetched, error)
	Delete(ctx context.Context, id string) error
	// CallBound is the longest one of the calls above takes; a plugin
	// granted mail gets at least this long a call (see Runtime.Load).
	CallBound() time.Duration
}

// Mail host functions, for plugins whose manifest asks for "mail" and
// whose grant carries the gate's mail client (Grant.Mail). They use the
// frame pattern of http_request: the call returns the length of a pending
// response frame (u32 little-endian n, n bytes of JSON, then bytes) that
// mail_response copies into guest memory.
//
//	mail_send(req_ptr, req_len i32) -> resp_len i32
//	    req: frame of JSON {"to", "subject", "message_id"?, "attachment_name"?,
//	    "headers"?: {"X-Asyncgate-…": "…"}, "body_len": n}, then n bytes of
//	    body, then the attachment (if any). Answer: {"message_id": "…"}.
//	mail_fetch(req_ptr, req_len i32) -> resp_len i32
//	    req: frame of JSON {"message_id"}. Answer: {"message_id", "subject",
//	    "from", "to", "date", "headers", "body_len", "attachments":
//	    [{"filename", "content_type", "size"}]}, then the body, then each
//	    attachment's bytes in order.
//	mail_delete(req_ptr, req_len i32) -> resp_len i32
//	    req: frame of JSON {"message_id"}. Answer: {}.
//	mail_response(ptr, len i32) -> copied i32
//
// Every error answer is {"error": "…", "code": "…"}: mail_denied (no grant),
// mail_refused (the server's final refusal), mail_error (retry may pass),
// mail_unavailable, not_found, bad_request, too_large,
// invalid_email_address, email_recipient_not_allowed.
//
// They are defined in instantiateHostModule beside http_request.
// mailFunc wraps a mail operation as a host function of the frame pattern.
func (p *Plugin) mailFunc(op func(ctx context.Context, raw []byte) []byte) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		inst, _ := ctx.Value(instanceKey{}).(*instance)
		if inst == nil {
			stack[0] = 0
			return
		}
		ptr, n := uint32(stack[0]), uint32(stack[1])
		var resp []byte
		if raw, ok := mod.Memory().Read(ptr, n); !ok {
			resp = mailErrorFrame("bad_request", "request frame outside guest memory")
		} else {
			resp = p.mailCall(ctx, bytes.Clone(raw), op)
		}
		inst.pending = resp
		stack[0] = uint64(len(resp))
	}
}

// mailCall checks the grant and the frame, then runs op on raw.
func (p *Plugin) mailCall(ctx context.Context, raw []byte, op func(ctx context.Context, raw []byte) []byte) []byte {
	switch {
	case !p.Manifest.Capabilities.Mail || p.grant.Mail == nil:
		p.rt.log.Warn("plugin mail call denied", "plugin", p.Manifest.Name)
		return mailErrorFrame("mail_denied", "mail is not granted to this plugin")
	case len(raw) < 4 || uint64(binary.LittleEndian.Uint32(raw))+4 > uint64(len(raw)):
		return mailErrorFrame("bad_request", "malformed request frame")
	}
	return op(ctx, raw)
}

func mailErrorFrame(code, msg string) []byte {
	j, _ := json.Marshal(map[string]string{"error": msg, "code": code})
	return frame(j, nil)
}

// mailErr turns a mail client error into an error frame.
func mailErr(err error) []byte {
	var pe *mail.PermanentError
	if errors.As(err, &pe) {
		return mailErrorFrame("mail_refused", pe.Error())
	}
	var he *host.Error
	if errors.As(err, &he) {
		return mailErrorFrame(he.Code, he.Detail)
	}
	return mailErrorFrame("mail_error", err.Error())
}

// maxMailRequest caps a mail_send frame: body and attachment at their limits.
const maxMailRequest = mail.MaxBody + mail.MaxAttachment + 64<<10

func (p *Plugin) mailSend(ctx context.Context, raw []byte) []byte {
	if len(raw) > maxMailRequest {
		return mailErrorFrame("too_large", "the message is larger than the mail limits")
	}
	n := binary.LittleEndian.Uint32(raw)
	var req struct {
		To             string            `json:"to"`
		Subject        string            `json:"subject"`
		MessageID      string            `json:"message_id"`
		AttachmentName string            `json:"attachment_name"`
		Headers        map[string]string `json:"headers"`
		BodyLen        int               `json:"body_len"`
	}
	if err := json.Unmarshal(raw[4:4+n], &req); err != nil {
		return mailErrorFrame("bad_request", "malformed request: "+err.Error())
	}
	rest := raw[4+n:]
	if req.BodyLen < 0 || req.BodyLen > len(rest) {
		return mailErrorFrame("bad_request", "body_len does not match the frame")
	}
	m := mail.Message{To: req.To, Subject: req.Subject, MessageID: req.MessageID, Body: rest[:req.BodyLen],
		AttachmentName: req.AttachmentName, Headers: req.Headers}
	if len(rest) > req.BodyLen {
		m.Attachment = rest[req.BodyLen:]
	}
	id, err := p.grant.Mail.Send(ctx, m)
	if err != nil {
		p.rt.log.Info("plugin mail_send failed", "plugin", p.Manifest.Name, "err", err)
		return mailErr(err)
	}
	j, _ := json.Marshal(map[string]string{"message_id": id})
	return frame(j, nil)
}

func messageIDOf(raw []byte) (string, []byte) {
	n := binary.LittleEndian.Uint32(raw)
	var req struct {
		MessageID string `json:"message_id"`
	}
	if err := json.Unmarshal(raw[4:4+n], &req); err != nil {
		return "", mailErrorFrame("bad_request", "malformed request: "+err.Error())
	}
	if err := mail.CheckMessageID(req.MessageID); err != nil {
		return "", mailErr(err)
	}
	return req.MessageID, nil
}

func (p *Plugin) mailFetch(ctx context.Context, raw []byte) []byte {
	id, bad := messageIDOf(raw)
	if bad != nil {
		return bad
	}
	f, err := p.grant.Mail.Fetch(ctx, id)
	if err != nil {
		return mailErr(err)
	}
	type att struct {
		Filename    string `json:"filename"`
		ContentType string `json:"content_type"`
		Size        int    `json:"size"`
	}
	atts := make([]att, len(f.Attachments))
	tail := bytes.Clone(f.Body)
	for i, a := range f.Attachments {
		atts[i] = att{a.Filename, a.ContentType, len(a.Content)}
		tail = append(tail, a.Content...)
	}
	if len(tail) > maxHTTPBody {
		return mailErrorFrame("too_large", "the message is larger than a plugin may receive")
	}
	j, _ := json.Marshal(map[string]any{"message_id": f.MessageID, "subject": f.Subject, "from": f.From, "to": f.To,
		"date": f.Date, "headers": f.Headers, "body_len": len(f.Body), "attachments": atts})
	return frame(j, tail)
}

func (p *Plugin) mailDelete(ctx context.Context, raw []byte) []byte {
	id, bad := messageIDOf(raw)
	if bad != nil {
		return bad
	}
	if err := p.grant.Mail.Delete(ctx, id); err != nil {
		return mailErr(err)
	}
	return frame([]byte(`{}`), nil)
}
