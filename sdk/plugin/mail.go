package plugin

import (
	"encoding/binary"
	"sort"
	"strconv"
)

// MailMessage is a message a plugin asks the host to send through the
// gate's mail server. The host sends it only when the operator granted the
// plugin mail and To is on the gate's recipient allowlist; the server and
// its credentials never reach the plugin.
type MailMessage struct {
	To      string
	Subject string
	Body    []byte
	// MessageID (without angle brackets) is chosen by the host when empty.
	MessageID string
	// Attachment, when set, is sent as an application/json attachment
	// named AttachmentName.
	Attachment     []byte
	AttachmentName string
	// Headers are extra X-Asyncgate-* headers.
	Headers map[string]string
}

// MailAttachment is an attachment of a fetched message.
type MailAttachment struct {
	Filename    string
	ContentType string
	Content     []byte
}

// FetchedMail is a message read back from the gate's mailbox.
type FetchedMail struct {
	MessageID   string
	Subject     string
	From        string
	To          string
	Date        string
	Headers     map[string]string
	Body        []byte
	Attachments []MailAttachment
}

// Error codes of the mail host functions: mail_denied (not granted),
// mail_refused (the server's final refusal), mail_error (a retry may pass),
// mail_unavailable, not_found, bad_request, too_large,
// invalid_email_address, email_recipient_not_allowed.

func mailFrame(j []byte, tail ...[]byte) []byte {
	binary.LittleEndian.PutUint32(j, uint32(len(j)-4))
	for _, t := range tail {
		j = append(j, t...)
	}
	return j
}

// mailAnswer parses a response frame: its JSON and the bytes after it.
func mailAnswer(raw []byte, err error) (Value, []byte, error) {
	if err != nil {
		return Value{}, nil, err
	}
	if len(raw) < 4 {
		return Value{}, nil, Errorf("mail_error", "short response frame")
	}
	n := binary.LittleEndian.Uint32(raw)
	if uint64(n)+4 > uint64(len(raw)) {
		return Value{}, nil, Errorf("mail_error", "bad response frame")
	}
	v, err := ParseJSON(raw[4 : 4+n])
	if err != nil {
		return Value{}, nil, Errorf("mail_error", err.Error())
	}
	if e, ok := v.Get("error"); ok && e.Str != "" {
		code := "mail_error"
		if c, ok := v.Get("code"); ok && c.Str != "" {
			code = c.Str
		}
		return Value{}, nil, Errorf(code, e.Str)
	}
	return v, raw[4+n:], nil
}

func str(v Value, k string) string {
	x, _ := v.Get(k)
	return x.Str
}

func num(v Value, k string) int {
	x, _ := v.Get(k)
	n, _ := strconv.Atoi(x.Str)
	return n
}

// MailSend sends m through the host function asyncgate.mail_send and
// returns its Message-ID.
func MailSend(m MailMessage) (string, error) {
	j := AppendString(append(make([]byte, 4, 256), `{"to":`...), m.To)
	j = AppendString(append(j, `,"subject":`...), m.Subject)
	if m.MessageID != "" {
		j = AppendString(append(j, `,"message_id":`...), m.MessageID)
	}
	if m.AttachmentName != "" {
		j = AppendString(append(j, `,"attachment_name":`...), m.AttachmentName)
	}
	j = append(j, `,"headers":{`...)
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			j = append(j, ',')
		}
		j = append(AppendString(j, k), ':')
		j = AppendString(j, m.Headers[k])
	}
	j = append(j, `},"body_len":`...)
	j = strconv.AppendInt(j, int64(len(m.Body)), 10)
	j = append(j, '}')
	v, _, err := mailAnswer(mailCall(mailOpSend, mailFrame(j, m.Body, m.Attachment)))
	if err != nil {
		return "", err
	}
	return str(v, "message_id"), nil
}

func idFrame(id string) []byte {
	j := AppendString(append(make([]byte, 4, 64), `{"message_id":`...), id)
	return mailFrame(append(j, '}'))
}

// MailFetch reads the message with Message-ID id back from the gate's
// mailbox (asyncgate.mail_fetch). A missing message is an *Error with code
// not_found.
func MailFetch(id string) (FetchedMail, error) {
	v, tail, err := mailAnswer(mailCall(mailOpFetch, idFrame(id)))
	if err != nil {
		return FetchedMail{}, err
	}
	f := FetchedMail{MessageID: str(v, "message_id"), Subject: str(v, "subject"), From: str(v, "from"), To: str(v, "to"),
		Date: str(v, "date"), Headers: map[string]string{}}
	if h, ok := v.Get("headers"); ok {
		for i, k := range h.Keys {
			f.Headers[k] = h.Vals[i].Str
		}
	}
	bl := num(v, "body_len")
	if bl < 0 || bl > len(tail) {
		return FetchedMail{}, Errorf("mail_error", "bad response frame")
	}
	f.Body, tail = tail[:bl], tail[bl:]
	if as, ok := v.Get("attachments"); ok {
		for _, a := range as.Items {
			n := num(a, "size")
			if n < 0 || n > len(tail) {
				return FetchedMail{}, Errorf("mail_error", "bad response frame")
			}
			f.Attachments = append(f.Attachments, MailAttachment{Filename: str(a, "filename"), ContentType: str(a, "content_type"), Content: tail[:n]})
			tail = tail[n:]
		}
	}
	return f, nil
}

// MailDelete deletes the message with Message-ID id from the gate's mailbox
// (asyncgate.mail_delete); one that is not there is not an error.
func MailDelete(id string) error {
	_, _, err := mailAnswer(mailCall(mailOpDelete, idFrame(id)))
	return err
}

const (
	mailOpSend = iota
	mailOpFetch
	mailOpDelete
)
