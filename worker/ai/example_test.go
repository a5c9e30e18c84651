package ai_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/asyncgate/asyncgate/sdk/worker"
	"github.com/asyncgate/asyncgate/worker/ai"
)

// An AI worker of your own: the config and profiles from files, the
// handlers on a worker.Runner of the Go worker SDK.
func Example() {
	cfg, err := ai.LoadConfig("ai.json") // provider, profiles_dir, mcp_servers, task_types
	if err != nil {
		log.Fatal(err)
	}
	profiles, err := ai.LoadProfiles(cfg.ProfilesDir) // validated against schemas/ai-profile.schema.json
	if err != nil {
		log.Fatal(err)
	}
	w, err := ai.New(cfg, profiles, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	r := worker.NewRunner(worker.NewClient("http://127.0.0.1:8080", os.Getenv("ASYNCGATE_KEY")), worker.Config{Concurrency: 4})
	w.Register(r) // one handler per configured task type
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// One conversation without the gate: the loop as a function.
func ExampleWorker_Converse() {
	p := &ai.Profile{Name: "helper", SystemPrompt: "You answer briefly.", Tools: []string{"files/read_*"}}
	w, err := ai.New(ai.Config{
		Provider:   ai.ProviderConfig{BaseURL: "http://127.0.0.1:8081/v1", Model: "qwen2.5-7b-instruct"},
		MCPServers: []ai.MCPServer{{Name: "files", Command: "mcp-files", Args: []string{"/srv/docs"}}},
		TaskTypes:  map[string]ai.TaskTypeConfig{"ask": {Profile: "helper"}},
	}, map[string]*ai.Profile{"helper": p}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	tools, err := w.Tools().Allowed(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	a, err := w.Converse(ctx, ai.Conversation{Profile: p, Model: "qwen2.5-7b-instruct", Prompt: "What is in README?",
		MaxIterations: 4, MaxToolCalls: 8, Tools: tools})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%s (%d steps, %d tool calls, %d tokens)", a.Answer, a.Steps, a.ToolCalls, a.Usage.TotalTokens)
}
