package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mail"
	"github.com/asyncgate/asyncgate/host/plugin"
)

// mailConfig is the config file's "mail" section: the gate's SMTP server,
// the POP3 mailbox it reads back from, the sender, the recipient allowlist
// and the email channel's recipient. The credentials live here only: the
// email channel plugin reaches the server through host functions.
type mailConfig struct {
	SMTP              mail.Server         `json:"smtp"`
	POP3              *mail.Server        `json:"pop3,omitempty"`
	From              string              `json:"from"`
	AllowedRecipients []string            `json:"allowed_recipients"`
	TimeoutSeconds    int                 `json:"timeout_seconds,omitempty"`
	Channel           *emailChannelConfig `json:"channel,omitempty"`
	// SendLimit bounds send_email per principal and per tenant (an hour's
	// budget each; defaults 100 and 1,000; -1 for none).
	SendLimit engine.EmailLimit `json:"send_limit,omitempty"`
}

// emailChannelConfig is the email channel plugin's config.
type emailChannelConfig struct {
	To           string `json:"to"`
	MaxSizeBytes int64  `json:"max_size_bytes,omitempty"`
}

// The engine reaches mail through its own interface; the client is it.
var _ engine.Mailer = (*mail.Client)(nil)

// client checks the section and returns the gate's mail client; nil
// without a section.
func (m *mailConfig) client() (*mail.Client, error) {
	if m == nil {
		return nil, nil
	}
	c, err := mail.New(mail.Config{SMTP: m.SMTP, POP3: m.POP3, From: m.From, AllowedRecipients: m.AllowedRecipients,
		Timeout: time.Duration(m.TimeoutSeconds) * time.Second})
	if err != nil {
		return nil, err
	}
	if m.Channel != nil {
		if err := c.CheckRecipient(m.Channel.To); err != nil {
			return nil, fmt.Errorf("mail.channel.to: %v", err)
		}
	}
	return c, nil
}

// emailGrant is the email channel's grant: the gate's mail client and the
// channel's recipient. ok is false when the channel is not configured (it
// is then refused, as the http channel is without http_channel).
func (m *mailConfig) emailGrant() (plugin.Grant, bool, error) {
	if m == nil || m.Channel == nil {
		return plugin.Grant{}, false, nil
	}
	c, err := m.client()
	if err != nil {
		return plugin.Grant{}, false, err
	}
	conf, err := json.Marshal(m.Channel)
	if err != nil {
		return plugin.Grant{}, false, err
	}
	return plugin.Grant{Mail: c, Config: conf}, true, nil
}
