package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// sendErrMailer is a Mailer whose Send answers err.
type sendErrMailer struct{ err error }

func (m sendErrMailer) Check(*host.MailMessage) error { return nil }
func (m sendErrMailer) Send(context.Context, host.MailMessage) (string, error) {
	return "", m.err
}
func (m sendErrMailer) Fetch(context.Context, string) (*host.FetchedMail, error) { return nil, nil }
func (m sendErrMailer) FetchWhere(context.Context, string, func(*host.FetchedMail) bool) (*host.FetchedMail, error) {
	return nil, nil
}
func (m sendErrMailer) Delete(context.Context, string) error { return nil }
func (m sendErrMailer) CanRead() bool                        { return false }
func (m sendErrMailer) NewMessageID() string                 { return "m-1" }
func (m sendErrMailer) CallBound() time.Duration             { return time.Second }

// finalRefusal is a mail server's final refusal, as host/mail's
// PermanentError reports one: by its Permanent method.
type finalRefusal struct{}

func (finalRefusal) Error() string   { return "the mail server refused: 550 no such user" }
func (finalRefusal) Permanent() bool { return true }

// TestDeliverEmailTellsRefusalFromOutage: a final refusal of the mail
// server (an error whose Permanent method says so, wrapped or not) sends
// the queued email to the dead list at once; an outage is retried.
func TestDeliverEmailTellsRefusalFromOutage(t *testing.T) {
	en := store.OutboxEntry{Kind: OutboxKindEmail, Key: "email:m-1",
		Body: mustJSON(emailEntry{To: "a@example.com", Subject: "s", Body: "b", MessageID: "m-1"})}
	for _, c := range []struct {
		err     error
		refused bool
	}{
		{finalRefusal{}, true},
		{fmt.Errorf("smtp: %w", finalRefusal{}), true},
		{errors.New("dial tcp: connection refused"), false},
		{host.Errorf(host.CodeMailUnavailable, "the mail server is down"), false},
	} {
		e := &Engine{cfg: Config{Delivery: DeliveryConfig{Mail: sendErrMailer{c.err}}}}
		err := e.deliverEmail(context.Background(), en)
		var r *RefusedError
		if err == nil || errors.As(err, &r) != c.refused {
			t.Errorf("Send error %v: deliverEmail = %v, want refused %v", c.err, err, c.refused)
		}
	}
}
