package main

import (
	"net/http"
	"net/smtp"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/mail/mailtest"
)

// TestE2EEmailResultForgedCopyIgnored: the gate's mailbox takes mail from
// anyone, so a message carrying a task's result Message-ID and
// X-Asyncgate-Task-Id may arrive from someone who read the pointer (the
// task's creator when it is owed to another agent, a reader of the results
// address). fetch_task_email reads back the message the gate sent, whose
// body has the result's checksum, never a later one that only copies its
// headers. On SQLite and PostgreSQL.
func TestE2EEmailResultForgedCopyIgnored(t *testing.T) {
	for _, sc := range bothStores() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			mp := mailtest.Start(t)
			cfg := mailConfigFile(t, mp, map[string]any{"channel": map[string]any{"to": "results@example.com"}})
			g := startGate(t, filepath.Join(t.TempDir(), "data"), append([]string{"--config", cfg}, sc.args(t)...)...)
			g.putType(t, "report", map[string]any{"default_result_channel": "email"}, "")
			agent, worker := g.newKey(t, "agent", "agent.m", ""), g.newKey(t, "worker", "report.1", "")

			id := g.enqueue(t, agent, "report", nil)
			done := g.completeOne(t, worker, "report.1", id, map[string]any{"result": map[string]any{"figure": "genuine"}})
			msgID, ok := strings.CutPrefix(done["result_pointer"].(string), "email:")
			if !ok {
				t.Fatalf("completion %v", done)
			}
			genuine, found := mp.Find(t, msgID)
			if !found {
				t.Fatalf("message %s is not at the server", msgID)
			}
			// Someone outside the gate mails its mailbox a message with the
			// same Message-ID and task header, and a body of its own. Its
			// Date is a minute ahead, so a mailbox that orders by date lists
			// it as the newest.
			forge := func() {
				t.Helper()
				msg := "From: gate@asyncgate.example.com\r\nTo: results@example.com\r\n" +
					"Date: " + time.Now().Add(time.Minute).Format(time.RFC1123Z) + "\r\n" +
					"Subject: Task Results - " + id + "\r\nMessage-ID: <" + msgID + ">\r\n" +
					"X-Asyncgate-Task-Id: " + id + "\r\nMIME-Version: 1.0\r\n" +
					"Content-Type: text/plain; charset=utf-8\r\n\r\n{\"figure\": \"forged\"}\r\n"
				if err := smtp.SendMail("127.0.0.1:"+strconv.Itoa(mp.SMTPPort), nil, "someone@example.com",
					[]string{"gate@asyncgate.example.com"}, []byte(msg)); err != nil {
					t.Fatal(err)
				}
			}
			var em struct {
				MessageID string         `json:"message_id"`
				Body      map[string]any `json:"body"`
			}

			// Beside the gate's own message, the copy is passed over.
			forge()
			if n := len(mp.Messages(t)); n != 2 {
				t.Fatalf("mailpit holds %d messages, want the gate's and the copy", n)
			}
			r := call(t, "GET", g.URL+"/v1/tasks/"+id+"/email", agent, nil)
			want(t, r, 200, "")
			r.Into(t, &em)
			if em.MessageID != msgID || em.Body["figure"] != "genuine" {
				t.Fatalf("fetch_task_email answered a message the gate did not send: %s", r.Body)
			}

			// The gate's own message is gone (deleted, or past the messages
			// a lookup reads): the copy is not served in its place.
			req, _ := http.NewRequest("DELETE", "http://127.0.0.1:"+strconv.Itoa(mp.HTTPPort)+"/api/v1/messages",
				strings.NewReader(`{"IDs":["`+genuine.ID+`"]}`))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if _, found := mp.Find(t, msgID); !found {
				t.Fatal("the copy is not in the mailbox")
			}
			if n := len(mp.Messages(t)); n != 1 {
				t.Fatalf("mailpit holds %d messages, want only the copy", n)
			}
			r = call(t, "GET", g.URL+"/v1/tasks/"+id+"/email", agent, nil)
			if r.Status == 200 {
				t.Fatalf("fetch_task_email served a message the gate did not send: %s", r.Body)
			}
			want(t, r, 404, "not_found")
		})
	}
}
