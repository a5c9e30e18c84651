package ai_test

import (
	"context"
	"testing"

	"github.com/asyncgate/asyncgate/worker/ai"
	"github.com/asyncgate/asyncgate/worker/ai/aitest"
)

// benchLoop measures one conversation of two steps: a tool call on server,
// its result appended, then the final answer (a local scripted provider, so
// the figure is the worker's own cost per task).
func benchLoop(b *testing.B, server ai.MCPServer) {
	prov := aitest.NewServer(func(r aitest.Request) aitest.Reply {
		if r.Step() == 1 {
			return aitest.Calls(aitest.Call{Name: server.Name + "__add", Args: `{"a":1,"b":2}`})
		}
		return aitest.Answer("3")
	})
	defer prov.Close()
	p := ai.Profile{Name: "p", SystemPrompt: "s", Tools: []string{server.Name + "/add"}}
	w, err := ai.New(ai.Config{Provider: ai.ProviderConfig{BaseURL: prov.URL, Model: "m"}, MCPServers: []ai.MCPServer{server},
		TaskTypes: map[string]ai.TaskTypeConfig{"ai.test": {Profile: "p"}}}, map[string]*ai.Profile{"p": &p}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if _, err := run(w, context.Background(), map[string]any{"prompt": "warm up"}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := run(w, context.Background(), map[string]any{"prompt": "1+2"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoopToolOverStdio(b *testing.B) { benchLoop(b, stdioServer("calc")) }

func BenchmarkLoopToolOverHTTP(b *testing.B) { benchLoop(b, httpServer(b, "web")) }
