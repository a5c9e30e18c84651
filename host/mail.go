package host

// The messages the gate sends and reads back through its mail server
// (host/mail is the client that speaks SMTP and POP3). They live in the
// domain root so the engine can queue and read mail through an interface
// it owns (engine.Mailer) without importing the client.

// MailMessage is one message the gate sends through its mail server.
type MailMessage struct {
	To      string
	Subject string
	Body    []byte // the text; sent base64-encoded so it comes back byte for byte
	// MessageID (without angle brackets) is generated when empty. Giving the
	// same one on a retry lets the receiver drop the repeat.
	MessageID string
	// Attachment, when set, is sent as a second part named AttachmentName
	// (default "attachment.json") of type application/json.
	Attachment     []byte
	AttachmentName string
	// Headers are extra X-Asyncgate-* headers (name → value).
	Headers map[string]string
	// BccSelf also delivers the message to the gate's own From address (an
	// envelope recipient only, not a header): the gate's archive copy. A
	// refusal of that copy does not fail the send.
	BccSelf bool
}

// FetchedMail is a message read back from the gate's mailbox.
type FetchedMail struct {
	MessageID   string
	From        string
	To          string
	Subject     string
	Date        string
	Headers     map[string]string // the X-Asyncgate-* headers
	Body        []byte            // the first text (or only) part, decoded
	Attachments []MailAttachment
}

// MailAttachment is one attachment of a fetched message.
type MailAttachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	Content     []byte `json:"content"`
}
