package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host/mail/mailtest"
)

// emailGate starts a gate whose mail section points at a real mailpit.
func emailGate(t *testing.T) (*gateProc, *mailtest.Server) {
	t.Helper()
	mp := mailtest.Start(t)
	dir, cfg := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "gate.json")
	conf := map[string]any{
		"delivery": map[string]any{"retention_sweep_seconds": -1},
		"mail": map[string]any{
			"smtp":               map[string]any{"host": "127.0.0.1", "port": mp.SMTPPort},
			"pop3":               map[string]any{"host": "127.0.0.1", "port": mp.POP3Port, "username": mailtest.User, "password": mailtest.Password},
			"from":               "gate@asyncgate.example.com",
			"allowed_recipients": []string{"*@example.com", "*@" + mailtest.RefusingDomain},
			"timeout_seconds":    5,
			"channel":            map[string]any{"to": "results@example.com"},
		},
	}
	b, _ := json.Marshal(conf)
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return startGate(t, dir, "--config", cfg), mp
}

// mailConfigFile writes a config file whose mail section is the test mail
// server mp's (SMTP, POP3, *@example.com allowed, 5 s sessions) with the
// entries of with added, and returns its path.
func mailConfigFile(t *testing.T, mp *mailtest.Server, with map[string]any) string {
	t.Helper()
	m := map[string]any{
		"smtp":               map[string]any{"host": "127.0.0.1", "port": mp.SMTPPort},
		"pop3":               map[string]any{"host": "127.0.0.1", "port": mp.POP3Port, "username": mailtest.User, "password": mailtest.Password},
		"from":               "gate@asyncgate.example.com",
		"allowed_recipients": []string{"*@example.com"},
		"timeout_seconds":    5,
	}
	for k, v := range with {
		m[k] = v
	}
	b, _ := json.Marshal(map[string]any{"delivery": map[string]any{"retention_sweep_seconds": -1}, "mail": m})
	cfg := filepath.Join(t.TempDir(), "gate.json")
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// taskReceiptTypes lists the receipt types of a task.
func (g *gateProc) taskReceiptTypes(t *testing.T, key, id string) []string {
	t.Helper()
	var rl struct {
		Receipts []struct {
			Type string `json:"receipt_type"`
		} `json:"receipts"`
	}
	call(t, "GET", g.URL+"/v1/receipts?task_id="+id, key, nil).Into(t, &rl)
	var out []string
	for _, r := range rl.Receipts {
		out = append(out, r.Type)
	}
	return out
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestE2EEmailChannel: a task whose type delivers by email completes; the
// message arrives at the real mail server with the seed's subject; the
// result is fetched back through POP3 byte for byte, fetch_task_email's
// route parses its JSON body, archiving deletes it from the mailbox. With
// the mail server down a completion is refused (the worker keeps the lease
// and the payload) and succeeds once the server is back.
func TestE2EEmailChannel(t *testing.T) {
	t.Parallel()
	g, mp := emailGate(t)
	g.putType(t, "report", map[string]any{"default_result_channel": "email"}, "")
	g.putType(t, "plain", map[string]any{"default_result_channel": "inline"}, "")
	agent, worker := g.newKey(t, "agent", "agent.m", ""), g.newKey(t, "worker", "report.1", "")

	id := g.enqueue(t, agent, "report", nil)
	done := g.completeOne(t, worker, "report.1", id, map[string]any{"result": map[string]any{"rows": []int{1, 2, 3}, "title": "Q3"}})
	ptr, _ := done["result_pointer"].(string)
	var task struct {
		Result struct {
			Pointer string `json:"result_pointer"`
			Channel string `json:"result_channel"`
		} `json:"result"`
	}
	call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil).Into(t, &task)
	if ptr == "" {
		ptr = task.Result.Pointer
	}
	msgID, ok := strings.CutPrefix(ptr, "email:")
	if !ok {
		t.Fatalf("pointer %q (task %+v, completion %v)", ptr, task, done)
	}
	sum, found := mp.Find(t, msgID)
	if !found || sum.Subject != "Task Results - "+id || len(sum.To) != 1 || sum.To[0].Address != "results@example.com" {
		t.Fatalf("mailpit has %+v (%v)", sum, found)
	}
	var fetched struct {
		Content       map[string]any `json:"content"`
		ChecksumValid *bool          `json:"checksum_valid"`
	}
	r0 := call(t, "GET", g.URL+"/v1/tasks/"+id+"/result", agent, nil)
	want(t, r0, 200, "")
	r0.Into(t, &fetched)
	if fetched.Content["title"] != "Q3" || fetched.ChecksumValid == nil || !*fetched.ChecksumValid {
		t.Fatalf("result fetched back: %s", r0.Body)
	}
	var em struct {
		MessageID  string         `json:"message_id"`
		Subject    string         `json:"subject"`
		Body       map[string]any `json:"body"`
		BodyIsJSON bool           `json:"body_is_json"`
	}
	r := call(t, "GET", g.URL+"/v1/tasks/"+id+"/email", agent, nil)
	want(t, r, 200, "")
	r.Into(t, &em)
	if em.MessageID != msgID || em.Subject != "Task Results - "+id || !em.BodyIsJSON || em.Body["title"] != "Q3" {
		t.Fatalf("task email %s", r.Body)
	}
	want(t, call(t, "POST", g.URL+"/v1/tasks/"+id+"/email/archive", agent, nil), 200, "")
	if _, found := mp.Find(t, msgID); found {
		t.Fatal("archiving left the message in the mailbox")
	}
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+id+"/email", agent, nil), 404, "not_found")

	// A result that went through another channel.
	other := g.enqueue(t, agent, "plain", nil)
	g.completeOne(t, g.newKey(t, "worker", "plain.1", ""), "plain.1", other, map[string]any{"result": "x"})
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+other+"/email", agent, nil), 409, "not_email_channel")

	// The mail server is down: the completion is refused, the task stays
	// leased with the worker, and the same completion passes once it is back.
	mp.Stop()
	id = g.enqueue(t, agent, "report", nil)
	o := g.lease(t, worker, "report.1", nil)
	if len(o) != 1 || o[0].Task.ID != id {
		t.Fatalf("lease: %+v", o)
	}
	body := map[string]any{"result": map[string]any{"late": true}}
	r = call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, body)
	want(t, r, 502, "channel_error")
	if st := call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil).JSON(t)["status"]; st != "leased" {
		t.Fatalf("task is %v after the mail server refused the result", st)
	}
	want(t, call(t, "GET", g.URL+"/v1/tasks/"+other+"/email", agent, nil), 409, "not_email_channel")
	mp.Restart()
	want(t, call(t, "POST", g.URL+"/v1/leases/"+o[0].LeaseID+"/complete", worker, body), 200, "")
	call(t, "GET", g.URL+"/v1/tasks/"+id, agent, nil).Into(t, &task)
	if _, found := mp.Find(t, strings.TrimPrefix(task.Result.Pointer, "email:")); !found {
		t.Fatalf("the retried completion's email is not at the server (pointer %q)", task.Result.Pointer)
	}
}

// TestE2ESendEmail: POST /v1/email refuses a bad or disallowed address with
// a 400 and writes nothing; a good one is queued (202) and sent (email.sent);
// a recipient the server refuses gives email.failed and the dead list; an
// email queued while the server is down is delivered once it is back.
func TestE2ESendEmail(t *testing.T) {
	t.Parallel()
	g, mp := emailGate(t)
	g.putType(t, "plain", map[string]any{"default_result_channel": "inline"}, "")
	agent := g.newKey(t, "agent", "agent.s", "")
	id := g.enqueue(t, agent, "plain", nil)
	before := len(g.taskReceiptTypes(t, agent, id))

	want(t, call(t, "POST", g.URL+"/v1/email", agent, map[string]any{"to": "not-an-address", "subject": "s", "body": "b", "task_id": id}), 400, "invalid_email_address")
	want(t, call(t, "POST", g.URL+"/v1/email", agent, map[string]any{"to": "x@elsewhere.org", "subject": "s", "body": "b", "task_id": id}), 400, "email_recipient_not_allowed")
	want(t, call(t, "POST", g.URL+"/v1/email", agent, map[string]any{"to": "x@example.com", "subject": "s\r\nBcc: y@elsewhere.org", "body": "b", "task_id": id}), 400, "bad_request")
	want(t, call(t, "POST", g.URL+"/v1/email", agent, map[string]any{"to": "x@example.com", "subject": "s", "body": "b", "cc": "y@example.com"}), 400, "")
	if n := len(g.taskReceiptTypes(t, agent, id)); n != before {
		t.Fatalf("refused sends wrote receipts: %d -> %d", before, n)
	}
	outbox := func() (pending, dead int) {
		var st struct {
			Pending int `json:"pending"`
			Dead    int `json:"dead"`
		}
		call(t, "GET", g.URL+"/v1/admin/outbox", g.Admin, nil).Into(t, &st)
		return st.Pending, st.Dead
	}
	if p, d := outbox(); p != 0 || d != 0 {
		t.Fatalf("refused sends queued: pending %d dead %d", p, d)
	}

	var res struct {
		MessageID string `json:"message_id"`
		Status    string `json:"status"`
	}
	r := call(t, "POST", g.URL+"/v1/email", agent, map[string]any{"to": "hexy@example.com", "subject": "hello", "body": `{"hi": 1}`, "task_id": id})
	want(t, r, 202, "")
	r.Into(t, &res)
	if res.Status != "queued" || res.MessageID == "" {
		t.Fatalf("send_email answer %s", r.Body)
	}
	waitDelivery(t, "email.sent", func() bool { return has(g.taskReceiptTypes(t, agent, id), "email.sent") })
	if _, found := mp.Find(t, res.MessageID); !found {
		t.Fatal("email.sent but not at the mail server")
	}

	want(t, call(t, "POST", g.URL+"/v1/email", agent, map[string]any{"to": "x@" + mailtest.RefusingDomain, "subject": "s", "body": "b", "task_id": id}), 202, "")
	waitDelivery(t, "email.failed", func() bool { return has(g.taskReceiptTypes(t, agent, id), "email.failed") })
	if _, d := outbox(); d != 1 {
		t.Fatalf("dead list has %d entries, want the refused email", d)
	}

	mp.Stop()
	r = call(t, "POST", g.URL+"/v1/email", agent, map[string]any{"to": "later@example.com", "subject": "while down", "body": "b"})
	want(t, r, 202, "")
	r.Into(t, &res)
	// The lease engine does not wait for the mail server.
	g.completeOne(t, g.newKey(t, "worker", "plain.1", ""), "plain.1", id, map[string]any{"result": "done"})
	mp.Restart()
	waitDelivery(t, "the email queued while the server was down", func() bool {
		_, found := mp.Find(t, res.MessageID)
		return found
	})
	waitDelivery(t, "an empty outbox", func() bool { p, _ := outbox(); return p == 0 })
}
