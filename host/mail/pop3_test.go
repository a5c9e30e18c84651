package mail_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/mail"
)

// lateRemover is a POP3 server with one message that, like mailpit, answers
// QUIT before it removes the messages marked deleted, and closes the
// connection after. With hold it never closes the connection after QUIT.
type lateRemover struct {
	ln      net.Listener
	id      string
	hold    bool
	removed atomic.Bool
	quits   atomic.Int32
}

func startLateRemover(t *testing.T, id string, hold bool) *lateRemover {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &lateRemover{ln: ln, id: id, hold: hold}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.serve(c)
		}
	}()
	return s
}

func (s *lateRemover) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(c)
	fmt.Fprint(c, "+OK ready\r\n")
	marked := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "USER", "PASS":
			fmt.Fprint(c, "+OK\r\n")
		case "STAT":
			n := 1
			if s.removed.Load() {
				n = 0
			}
			fmt.Fprintf(c, "+OK %d 100\r\n", n)
		case "TOP":
			fmt.Fprintf(c, "+OK\r\nMessage-ID: <%s>\r\nSubject: x\r\n.\r\n", s.id)
		case "DELE":
			marked = true
			fmt.Fprint(c, "+OK marked\r\n")
		case "QUIT":
			s.quits.Add(1)
			fmt.Fprint(c, "+OK goodbye\r\n")
			if s.hold {
				// Keep the session open until the client goes.
				_, _ = r.ReadString('\n')
				return
			}
			if marked {
				// The removal takes a while, as a store's write may.
				time.Sleep(300 * time.Millisecond)
				s.removed.Store(true)
			}
			return
		default:
			fmt.Fprint(c, "-ERR unknown\r\n")
		}
	}
}

func (s *lateRemover) config(timeout time.Duration) mail.Config {
	_, port, _ := net.SplitHostPort(s.ln.Addr().String())
	p, _ := strconv.Atoi(port)
	return mail.Config{
		SMTP:              mail.Server{Host: "127.0.0.1", Port: 1},
		POP3:              &mail.Server{Host: "127.0.0.1", Port: p, Username: "u", Password: "p"},
		From:              "gate@example.com",
		AllowedRecipients: []string{"*@example.com"},
		Timeout:           timeout,
	}
}

// deleteFrom deletes the one message of a lateRemover (hold as given) and
// returns the server.
func deleteFrom(t *testing.T, hold bool) *lateRemover {
	t.Helper()
	const id = "m1@example.com"
	s := startLateRemover(t, id, hold)
	c, err := mail.New(s.config(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDeleteWaitsForTheServerToRemove: a server that answers QUIT before it
// removes the message (mailpit does) has removed it by the time Delete
// returns, because Delete waits for the server to end the session. Without
// that wait Delete returned on the +OK and a read right after it still found
// the message (a CI failure of the email channel's round trip).
func TestDeleteWaitsForTheServerToRemove(t *testing.T) {
	t.Parallel()
	s := deleteFrom(t, false)
	if s.quits.Load() != 1 || !s.removed.Load() {
		t.Fatalf("Delete returned before the server removed the message (quits %d, removed %v)", s.quits.Load(), s.removed.Load())
	}
}

// TestDeleteServerKeepsSessionAfterQuit: a server that answers QUIT and then
// keeps the connection open does not hold Delete: its +OK is taken, and
// Delete returns without an error.
func TestDeleteServerKeepsSessionAfterQuit(t *testing.T) {
	t.Parallel()
	s := deleteFrom(t, true)
	if s.quits.Load() != 1 {
		t.Fatalf("quits %d", s.quits.Load())
	}
}
