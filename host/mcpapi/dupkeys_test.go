package mcpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/store"
)

// dupMessages are messages with a duplicate key, or with a tool argument
// named but for case, each with what it must be refused with: a JSON-RPC
// error (its code) for a duplicate key, a tool error ("tool") for an
// argument's name. Every one would queue an echo task if a reader took the
// last value, or took the name for the argument it folds to.
var dupMessages = []struct{ msg, code, want string }{
	{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"queue_task","arguments":{"task_type":"nope","task_type":"echo"}}}`,
		"-32602", `duplicate key \"task_type\" in params.arguments`},
	{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"queue_task","arguments":{"task_type":"nope","TASK_TYPE":"echo"}}}`,
		"tool", `unknown field \\\"TASK_TYPE\\\" in arguments`},
	{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"n":"x","n":1}}}`,
		"-32602", `duplicate key \"n\" in params.arguments`},
	{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"queue_task","arguments":{"TASK_TYPE":"echo"}}}`,
		"tool", `unknown field \\\"TASK_TYPE\\\" in arguments`},
	{`{"jsonrpc":"2.0","id":5,"method":"tools/list","method":"tools/call","params":{"name":"echo","arguments":{"n":1}}}`,
		"-32600", `duplicate key \"method\" in the message`},
}

// refusedAs reports whether answer, a JSON-RPC answer, refuses as d says.
func refusedAs(answer string, d struct{ msg, code, want string }) bool {
	if d.code == "tool" {
		return strings.Contains(answer, `"isError":true`) && strings.Contains(answer, d.want)
	}
	return strings.Contains(answer, `"code":`+d.code) && strings.Contains(answer, d.want)
}

// TestDuplicateKeysRefused: the MCP door refuses a message with a
// duplicate key anywhere in it (the tool's arguments included) with a
// JSON-RPC error naming the key, before any tool runs, and a tool argument
// named but for case with a tool error naming it: on streamable HTTP and on
// stdio nothing is queued.
func TestDuplicateKeysRefused(t *testing.T) {
	b := setup(t, mcpapi.Config{})
	c := b.connectAt(t, b.agent, mcp.ProtocolVersion20251125)
	post := func(msg string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+mcpapi.Path, strings.NewReader(msg))
		req.Header.Set("Authorization", "Bearer "+b.agent)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", c.GetSessionId())
		req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20251125)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for i, d := range dupMessages {
		code, body := post(d.msg)
		if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"id":%d`, i+1)) || !refusedAs(body, d) {
			t.Errorf("HTTP %s:\n%d %s\nwant %s %s", d.msg, code, body, d.code, d.want)
		}
	}
	// A duplicated id leaves the request without one to answer.
	const dupID = `{"jsonrpc":"2.0","id":6,"id":7,"method":"tools/call","params":{"name":"echo","arguments":{"n":1}}}`
	if code, body := post(dupID); code != http.StatusBadRequest || !strings.Contains(body, `"id":null`) ||
		!strings.Contains(body, `duplicate key \"id\" in the message`) {
		t.Errorf("a duplicated id: %d %s", code, body)
	}
	// A notification gets no answer but is not acted on either.
	if code, body := post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":2}}`); code != http.StatusBadRequest ||
		!strings.Contains(body, `duplicate key \"requestId\" in params`) {
		t.Errorf("a notification: %d %s", code, body)
	}
	noTasks(t, b, "over HTTP")

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- b.mcp.ServeStdio(ctx, engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent}, inR, outW)
		outW.Close()
	}()
	answers := outputLines(outR)
	answer := func(id string) string {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case line, ok := <-answers:
				if !ok {
					t.Fatalf("stdio ended before answering id %s", id)
				}
				var m struct {
					ID json.RawMessage `json:"id"`
				}
				if json.Unmarshal([]byte(line), &m) == nil && string(m.ID) == id {
					return line
				}
			case <-timeout:
				t.Fatalf("no answer to id %s over stdio within 60 s", id)
			}
		}
	}
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":100,"method":"initialize","params":{"protocolVersion":"` + mcp.ProtocolVersion20251125 + `","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	answer("100")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, d := range dupMessages {
		send(d.msg)
		if got := answer(fmt.Sprint(i + 1)); !refusedAs(got, d) {
			t.Errorf("stdio %s:\n%s\nwant %s %s", d.msg, got, d.code, d.want)
		}
	}
	send(dupID)
	if got := answer("null"); !strings.Contains(got, `duplicate key \"id\" in the message`) {
		t.Errorf("stdio, a duplicated id: %s", got)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":2}}`)
	send(`{"jsonrpc":"2.0","id":101,"method":"ping"}`) // answered after everything before it
	answer("101")
	noTasks(t, b, "over stdio")
	inW.Close()
	if err := <-served; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	// Keys equal but for case are two keys of a task's free-form params,
	// as on the HTTP door.
	free := host.NewTaskType("free")
	free.Tenant = "default"
	if _, err := b.eng.PutTaskType(context.Background(), free); err != nil {
		t.Fatal(err)
	}
	if code, body := post(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"queue_task","arguments":{"task_type":"free","params":{"Name":1,"name":2}}}}`); code != http.StatusOK ||
		strings.Contains(body, `"isError":true`) || strings.Contains(body, `"error"`) {
		t.Errorf("params with keys equal but for case: %d %s", code, body)
	}
	ts, _, err := b.eng.ListTasks(context.Background(), engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent},
		store.TaskFilter{States: []host.TaskState{host.StateQueued}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Type != "free" || string(ts[0].Params) != `{"Name":1,"name":2}` {
		t.Errorf("queued %+v, want one free task with params {\"Name\":1,\"name\":2}", ts)
	}
}

// noTasks fails the test when agent.a has any task.
func noTasks(t *testing.T, b *testBundle, where string) {
	t.Helper()
	ts, _, err := b.eng.ListTasks(context.Background(), engine.Actor{Tenant: "default", Principal: "agent.a", Role: engine.RoleAgent},
		store.TaskFilter{States: []host.TaskState{host.StateQueued, host.StateLeased, host.StateSucceeded, host.StateCanceled, host.StateDeadLetter}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts {
		t.Errorf("%s: a message with duplicate keys queued %s (%s, params %s)", where, tk.ID, tk.Type, tk.Params)
	}
}
