package plugin

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/mail"
	sdk "github.com/asyncgate/asyncgate/sdk/plugin"
)

// le32 prefixes b with its length as the ABI frames do.
func le32(j []byte, rest ...byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(j)))
	return append(append(out, j...), rest...)
}

// FuzzParseFrame feeds arbitrary result frames to the parser of what a guest
// returns (length prefix, envelope, fast path for the SDK's success prefix).
// It must never panic; a success with schemas on must carry a result that is
// valid JSON, and the data after the envelope must be the frame's tail.
func FuzzParseFrame(f *testing.F) {
	ops := []string{"decide", "validate", "put", "get", "ack", "capabilities"}
	for _, s := range []string{
		`{"ok":true,"result":{"action":"retry","delay_seconds":1}}`,
		`{"ok":true,"result":{"action":"retry"}`,
		`{"ok":true,"result":}`,
		`{"ok":false,"error":{"code":"boom","message":"m","panic":true}}`,
		`{"ok":false}`,
		`{"ok":true,"result":{"pointer":"inline:aGk="}} `,
	} {
		f.Add(le32([]byte(s)), uint8(0))
		f.Add(le32([]byte(s), 'd', 'a', 't', 'a'), uint8(2))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'}, uint8(1))
	f.Add([]byte{1, 0}, uint8(3))
	if _, err := loadSchemas(); err != nil {
		f.Fatal(err)
	}
	p := &Plugin{}
	f.Fuzz(func(t *testing.T, frame []byte, opi uint8) {
		op := ops[int(opi)%len(ops)]
		for _, schemas := range []bool{false, true} {
			res, fault := p.parseFrame(op, frame, schemas)
			if fault != nil {
				if fault.Kind == "" || fault.Message == "" {
					t.Fatalf("fault without kind or message: %+v", fault)
				}
				continue
			}
			if len(frame) < 4 {
				t.Fatalf("accepted a %d-byte frame", len(frame))
			}
			n := binary.LittleEndian.Uint32(frame)
			if !bytes.Equal(res.Data, frame[4+n:]) {
				t.Fatalf("data %q is not the frame's tail %q", res.Data, frame[4+n:])
			}
			if schemas && !json.Valid(res.JSON) {
				t.Fatalf("op %s: accepted a result that is not JSON: %q", op, res.JSON)
			}
		}
	})
}

// FuzzDecodeDecision feeds arbitrary bytes to the strict decoder of a
// policy's decision. Whatever it accepts satisfies the output schema's rules,
// and re-encoding it decodes to the same decision.
func FuzzDecodeDecision(f *testing.F) {
	for _, s := range []string{
		`{"action":"retry","delay_seconds":30}`,
		`{"action":"escalate","escalate_to":"ops","reason":"r"}`,
		`{"action":"dead_letter","reason":"max_retries_exceeded"}`,
		`{"action":"retry","extra":1}`,
		`{"action":"retry"} {}`,
		`{"action":"escalate"}`,
		`{"action":"retry","delay_seconds":-1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := decodeDecision(raw)
		if err != nil {
			return
		}
		if !validDecisionForFuzz(d) {
			t.Fatalf("accepted %q as %+v, which breaks the output schema", raw, d)
		}
		m := map[string]any{"action": d.Action, "delay_seconds": d.DelaySeconds}
		if d.Reason != "" {
			m["reason"] = d.Reason
		}
		if d.EscalateTo != "" {
			m["escalate_to"] = d.EscalateTo
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := decodeDecision(again)
		if err != nil || d2 != d {
			t.Fatalf("%q decoded to %+v; re-encoded as %s it decodes to %+v, %v", raw, d, again, d2, err)
		}
	})
}

func validDecisionForFuzz(d host.Decision) bool {
	switch d.Action {
	case host.ActionRetry, host.ActionDeadLetter:
	case host.ActionEscalate:
		if d.EscalateTo == "" {
			return false
		}
	default:
		return false
	}
	return d.DelaySeconds >= 0 && d.DelaySeconds <= 31536000
}

// FuzzFailureRecord checks that what the host encodes for decide is what the
// guest SDK decodes, field for field.
func FuzzFailureRecord(f *testing.F) {
	f.Add("T-1", "work", "boom", []byte(`{"base_seconds":10}`), uint32(1), uint32(3), uint32(0), true, false)
	f.Add("", "", "", []byte(nil), uint32(0), uint32(0), uint32(7), false, true)
	f.Fuzz(func(t *testing.T, id, typ, msg string, config []byte, attempts, maxRetries, expiries uint32, retryable, expiry bool) {
		in := host.FailureInput{TaskID: id, TaskType: typ, Error: msg, Retryable: retryable, Kind: host.FailureError,
			Attempts: int(attempts), MaxRetries: int(maxRetries), LeaseExpiries: int(expiries)}
		if expiry {
			in.Kind = host.FailureExpiry
		}
		got, err := sdk.DecodeFailureRecord(encodeFailureRecord(in, config))
		if err != nil {
			t.Fatalf("the SDK refused the host's record for %+v: %v", in, err)
		}
		wantKind := "failure"
		if expiry {
			wantKind = "expiry"
		}
		if got.TaskID != id || got.TaskType != typ || got.Error != msg || got.Kind != wantKind || got.Retryable != retryable ||
			got.Attempts != int(attempts) || got.MaxRetries != int(maxRetries) || got.LeaseExpiries != int(expiries) ||
			!bytes.Equal(got.Config, config) {
			t.Fatalf("host sent %+v (config %q), the SDK read %+v", in, config, got)
		}
	})
}

// FuzzHTTPHostCall feeds arbitrary request frames to the http_request host
// function of a plugin allowed to reach one local test server. It must never
// panic, and always answer a well-formed frame: {"status", "headers"} or
// {"error", "code": http_denied|http_error}.
func FuzzHTTPHostCall(f *testing.F) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Method", r.Method)
		_, _ = w.Write(b)
	}))
	defer ts.Close()
	u, _ := url.Parse(ts.URL)
	p := &Plugin{Manifest: &Manifest{Name: "fuzz", Capabilities: Capabilities{HTTP: true}},
		grant: Grant{HTTPHosts: []string{u.Host}}, rt: &Runtime{log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	f.Add(le32([]byte(`{"method":"POST","url":"`+ts.URL+`/x","headers":{"A":"b"}}`), 'h', 'i'))
	f.Add(le32([]byte(`{"url":"http://example.com/"}`)))
	f.Add(le32([]byte(`{"url":"file:///etc/passwd"}`)))
	f.Add(le32([]byte(`{"method":"BAD METHOD","url":"` + ts.URL + `"}`)))
	f.Add([]byte{9, 0, 0, 0, '{'})
	f.Fuzz(func(t *testing.T, raw []byte) {
		resp := p.doHTTP(context.Background(), raw)
		head, sent := frameHead(t, resp)
		if _, ok := head["status"]; ok {
			return
		}
		code, _ := head["code"].(string)
		if code != "http_denied" && code != "http_error" || head["error"] == nil {
			keys := make([]string, 0, len(head))
			for k := range head {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			t.Fatalf("response head has neither status nor a known error code: %v %s", keys, sent)
		}
	})
}

// TestFailureRecordFields pins the record layout the fuzzers rely on.
func TestFailureRecordFields(t *testing.T) {
	in := host.FailureInput{TaskID: "T-1", TaskType: "work", Error: "e", Kind: host.FailureExpiry, Attempts: 2, MaxRetries: 3, LeaseExpiries: 4}
	got, err := sdk.DecodeFailureRecord(encodeFailureRecord(in, []byte(`{}`)))
	want := sdk.FailureInput{TaskID: "T-1", TaskType: "work", Error: "e", Kind: "expiry", Attempts: 2, MaxRetries: 3, LeaseExpiries: 4, Config: []byte(`{}`)}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v %v, want %+v", got, err, want)
	}
}

// checkingMail is a Mail that checks messages as the gate's client does and
// sends nothing.
type checkingMail struct{ c *mail.Client }

func (m checkingMail) Send(_ context.Context, msg mail.Message) (string, error) {
	if msg.MessageID == "" {
		msg.MessageID = m.c.NewMessageID()
	}
	return msg.MessageID, m.c.Check(&msg)
}
func (m checkingMail) Fetch(_ context.Context, id string) (*mail.Fetched, error) {
	return &mail.Fetched{MessageID: id, Body: []byte("body"), Attachments: []mail.Attachment{{Filename: "a", Content: []byte("x")}}}, nil
}
func (m checkingMail) Delete(context.Context, string) error { return nil }
func (m checkingMail) CallBound() time.Duration             { return m.c.CallBound() }

// FuzzMailHostCall: whatever frame a guest hands mail_send, mail_fetch or
// mail_delete, the answer is a well-formed frame, and a plugin without the
// grant is always denied.
func FuzzMailHostCall(f *testing.F) {
	mc, err := mail.New(mail.Config{SMTP: mail.Server{Host: "127.0.0.1", Port: 1}, From: "gate@example.com", AllowedRecipients: []string{"*@example.com"}})
	if err != nil {
		f.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &Plugin{Manifest: &Manifest{Name: "fuzz", Capabilities: Capabilities{Mail: true}}, grant: Grant{Mail: checkingMail{mc}}, rt: &Runtime{log: log}}
	denied := &Plugin{Manifest: &Manifest{Name: "fuzz"}, grant: Grant{Mail: checkingMail{mc}}, rt: &Runtime{log: log}}
	f.Add(uint8(0), append(le32([]byte(`{"to":"a@example.com","subject":"s","body_len":2}`)), 'h', 'i', '{', '}'))
	f.Add(uint8(0), le32([]byte(`{"to":"a@example.com\r\nBcc: x@evil.com","subject":"s","body_len":0}`)))
	f.Add(uint8(0), le32([]byte(`{"to":"a@example.com","subject":"s","body_len":9}`)))
	f.Add(uint8(1), le32([]byte(`{"message_id":"a@b.com"}`)))
	f.Add(uint8(2), le32([]byte(`{"message_id":"a b"}`)))
	f.Add(uint8(1), []byte{9, 0, 0, 0, '{'})
	ops := []func(*Plugin) func(context.Context, []byte) []byte{
		func(p *Plugin) func(context.Context, []byte) []byte { return p.mailSend },
		func(p *Plugin) func(context.Context, []byte) []byte { return p.mailFetch },
		func(p *Plugin) func(context.Context, []byte) []byte { return p.mailDelete },
	}
	f.Fuzz(func(t *testing.T, op uint8, raw []byte) {
		fn := ops[int(op)%len(ops)]
		for _, pl := range []*Plugin{p, denied} {
			head, _ := frameHead(t, pl.mailCall(context.Background(), raw, fn(pl)))
			if pl == denied && head["code"] != "mail_denied" {
				t.Fatalf("a plugin without the grant got %v", head)
			}
		}
	})
}

// frameHead checks a host call's response frame (a little-endian length,
// then that many bytes of JSON head, then any body) and returns the head,
// decoded and as sent.
func frameHead(t *testing.T, resp []byte) (map[string]any, []byte) {
	t.Helper()
	if len(resp) < 4 {
		t.Fatalf("response frame of %d bytes", len(resp))
	}
	n := binary.LittleEndian.Uint32(resp)
	if uint64(n) > uint64(len(resp)-4) {
		t.Fatalf("response frame length %d exceeds the frame (%d)", n, len(resp)-4)
	}
	var head map[string]any
	if err := json.Unmarshal(resp[4:4+n], &head); err != nil {
		t.Fatalf("response head is not JSON: %q", resp[4:4+n])
	}
	return head, resp[4 : 4+n]
}
