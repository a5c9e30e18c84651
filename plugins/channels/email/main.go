// Command email is the built-in email channel. put sends the payload as the
// body of a message "Task Results - <task_id>" to the configured recipient,
// through the host's mail_send (the gate's SMTP server and recipient
// allowlist; the plugin never sees a server or a credential), and returns
// "email:<message-id>" with a delivery proof (message id, recipient,
// sha256, size). get reads the message back from the gate's POP3 mailbox by
// its Message-ID and returns its body; ack deletes it from the mailbox.
package main

import (
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

type config struct {
	To           string `json:"to"`
	MaxSizeBytes int64  `json:"max_size_bytes"`
}

func (c *config) max() int64 {
	if c.MaxSizeBytes <= 0 {
		return 10 << 20
	}
	return c.MaxSizeBytes
}

func put(c *config, taskID string, payload []byte) (plugin.PutResult, error) {
	if c.To == "" {
		return plugin.PutResult{}, plugin.Errorf("invalid_config", "no recipient (to) configured")
	}
	id, err := plugin.MailSend(plugin.MailMessage{
		To: c.To, Subject: "Task Results - " + taskID, Body: payload,
		Headers: map[string]string{"X-Asyncgate-Task-Id": taskID},
	})
	if err != nil {
		return plugin.PutResult{}, err
	}
	sum := plugin.SHA256(payload)
	proof, _ := json.Marshal(map[string]any{"message_id": id, "to": c.To, "sha256": hex.EncodeToString(sum[:]), "size": len(payload)})
	return plugin.PutResult{Pointer: "email:" + id, Proof: proof}, nil
}

// messageID returns the Message-ID a pointer names.
func messageID(pointer string) (string, error) {
	id, ok := strings.CutPrefix(pointer, "email:")
	if !ok || !strings.Contains(id, "@") || strings.ContainsAny(id, " <>\r\n") {
		return "", plugin.Errorf("bad_request", "an email pointer is email:<message-id>")
	}
	return id, nil
}

func get(_ *config, pointer string) ([]byte, error) {
	id, err := messageID(pointer)
	if err != nil {
		return nil, err
	}
	m, err := plugin.MailFetch(id)
	if err != nil {
		return nil, err
	}
	return m.Body, nil
}

func ack(_ *config, pointer string) error {
	id, err := messageID(pointer)
	if err != nil {
		return err
	}
	return plugin.MailDelete(id)
}

func init() {
	plugin.Channel(plugin.ChannelImpl[config]{
		Put: put, Get: get, Ack: ack,
		Capabilities: func(c *config) (plugin.Capabilities, error) {
			return plugin.Capabilities{MaxSizeBytes: c.max(), SupportsAttachments: true, HumanReadable: true}, nil
		},
	})
}

func main() {}
