package ai

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// Defaults of the loop's limits.
const (
	DefaultMaxIterations = 8
	DefaultMaxToolCalls  = 16
)

// Worker is the AI worker: it turns tasks into chat-completion loops with
// MCP tools. Register its handlers on a worker.Runner; Close ends its MCP
// sessions.
type Worker struct {
	cfg      Config
	profiles map[string]*Profile
	provider *Provider
	tools    *Toolbox
	log      *slog.Logger
}

// New builds a Worker from cfg and the profiles (see LoadProfiles). It
// checks that every task type names a loaded profile and that every profile
// allowlist names a configured MCP server; it connects to nothing yet.
func New(cfg Config, profiles map[string]*Profile, log *slog.Logger) (*Worker, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.validate(profiles); err != nil {
		return nil, err
	}
	tb, err := NewToolbox(cfg.MCPServers, log)
	if err != nil {
		return nil, err
	}
	for _, p := range profiles {
		for _, e := range p.Tools {
			if s, _, _ := strings.Cut(e, "/"); tb.servers[s].Name == "" {
				return nil, fmt.Errorf("profile %s allows %q but no mcp server %q is configured", p.Name, e, s)
			}
		}
	}
	if cfg.MaxToolResultBytes <= 0 {
		cfg.MaxToolResultBytes = 32 << 10
	}
	if cfg.MaxModels <= 0 {
		cfg.MaxModels = 8
	}
	return &Worker{cfg: cfg, profiles: profiles, provider: NewProvider(cfg.Provider, log), tools: tb, log: log}, nil
}

// TaskTypes returns the configured task types, sorted.
func (w *Worker) TaskTypes() []string {
	out := make([]string, 0, len(w.cfg.TaskTypes))
	for t := range w.cfg.TaskTypes {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Register registers a handler for every configured task type on r.
func (w *Worker) Register(r *worker.Runner) {
	for _, t := range w.TaskTypes() {
		r.Handle(t, w.Handler(t))
	}
}

// Tools returns the worker's MCP sessions.
func (w *Worker) Tools() *Toolbox { return w.tools }

// Close ends the MCP sessions (stdio servers are stopped).
func (w *Worker) Close() error { return w.tools.Close() }

// Params are an AI task's params.
type Params struct {
	// Prompt is the user message (required).
	Prompt string `json:"prompt"`
	// Model overrides the task type's model.
	Model string `json:"model,omitempty"`
	// Models fans the prompt out to each of these models concurrently.
	Models []string `json:"models,omitempty"`
}

// Usage counts a conversation's cost.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func (u *Usage) add(o Usage) {
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.TotalTokens += o.TotalTokens
}

// Answer is one model's outcome of a conversation.
type Answer struct {
	Model        string `json:"model"`
	Answer       string `json:"answer"`
	FinishReason string `json:"finish_reason,omitempty"`
	Steps        int    `json:"steps"`
	ToolCalls    int    `json:"tool_calls"`
	Usage        Usage  `json:"usage"`
	LatencyMS    int64  `json:"latency_ms"`
	// Error and Retryable are set for a model of a fan-out that failed.
	Error     string `json:"error,omitempty"`
	Retryable *bool  `json:"retryable,omitempty"`
}

// Conversation is what one chat-completion loop needs.
type Conversation struct {
	Profile       *Profile
	Model         string
	Prompt        string
	MaxIterations int
	// MaxToolCalls bounds the tool calls the conversation runs; the models
	// of a task's fan-out share one budget of MaxToolCalls.
	MaxToolCalls int
	// Tools are the tools offered (Toolbox.Allowed); those the profile does
	// not allow are left out, and a call is run only if the profile allows
	// the (server, tool) it is routed to.
	Tools []Tool
	// Progress, when set, is told before every step.
	Progress func(step, max int)

	// budget, when set, is the task's tool-call budget, shared with the
	// other conversations of a fan-out; else Converse gives the
	// conversation one of MaxToolCalls.
	budget *toolBudget
}

// toolBudget is the number of tool calls a task may still run. It is safe
// for concurrent use: a fan-out's conversations draw on one budget.
type toolBudget struct {
	max    int
	shared bool
	left   atomic.Int64
}

func newToolBudget(max int, shared bool) *toolBudget {
	b := &toolBudget{max: max, shared: shared}
	b.left.Store(int64(max))
	return b
}

// take uses one call of the budget; false when none is left.
func (b *toolBudget) take() bool {
	for {
		n := b.left.Load()
		if n <= 0 {
			return false
		}
		if b.left.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

var fnUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// maxFunctionName is the longest function name the API takes.
const maxFunctionName = 64

// offeredNames returns the names tools are offered to the model under, one
// for each of tools, which must be distinct (server, tool) pairs. A tool's
// name is server__tool with the characters the API refuses replaced by _,
// unless that is longer than 64 characters or is also another tool's name:
// then it is cut and ends in _ and 8 hex digits of a SHA-256 of the pair
// (16 when even that collides; a plain name that equals a hashed one is the
// one that changes). So names are distinct, fit the API, and depend only on
// the set of tools, not on their order. A tool that still has no name of
// its own gets "" (not offered); that takes two pairs whose hashes agree in
// 64 bits.
func offeredNames(tools []Tool) []string {
	base := make([]string, len(tools))
	digits := make([]int, len(tools)) // 0: the plain name; -1: no name
	for i, t := range tools {
		base[i] = fnUnsafe.ReplaceAllString(t.Server+"__"+t.Name, "_")
		if len(base[i]) > maxFunctionName {
			digits[i] = 8
		}
	}
	names := make([]string, len(tools))
	for {
		holders := map[string][]int{}
		for i, t := range tools {
			names[i] = hashedName(base[i], t, digits[i])
			if names[i] != "" {
				holders[names[i]] = append(holders[names[i]], i)
			}
		}
		changed := false
		for _, held := range holders {
			if len(held) < 2 {
				continue
			}
			// A plain name gives way to a hashed one: a tool named like
			// another's hashed name takes nothing from it.
			plain := slices.DeleteFunc(slices.Clone(held), func(i int) bool { return digits[i] != 0 })
			if len(plain) > 0 {
				held = plain
			}
			for _, i := range held {
				switch digits[i] {
				case 0:
					digits[i] = 8
				case 8:
					digits[i] = 16
				default:
					digits[i] = -1
				}
				changed = true
			}
		}
		if !changed {
			return names
		}
	}
}

// hashedName is base as it is (digits 0), or cut to end in _ and that
// many hex digits of a SHA-256 of t's server and name.
func hashedName(base string, t Tool, digits int) string {
	switch {
	case digits == 0:
		return base
	case digits < 0:
		return ""
	}
	sum := sha256.Sum256([]byte(t.Server + "\x00" + t.Name))
	if keep := maxFunctionName - 1 - digits; len(base) > keep {
		base = base[:keep]
	}
	return base + "_" + hex.EncodeToString(sum[:])[:digits]
}

// Converse runs the seed's loop ("Lease to Receipt flow"): before every
// step it checks cancellation (a cancelled ctx stops the loop at once with
// context.Cause(ctx)) and reports progress, then asks the model; tool calls
// are executed on their MCP servers (at most MaxToolCalls; errors, unknown
// tools and calls over the budget are answered to the model as tool
// results) and the loop goes on; a message without tool calls is the final
// answer. No final answer within MaxIterations steps is a fatal error.
func (w *Worker) Converse(ctx context.Context, c Conversation) (*Answer, error) {
	start := time.Now()
	out := &Answer{Model: c.Model}
	if c.budget == nil {
		c.budget = newToolBudget(c.MaxToolCalls, false)
	}
	log := w.log.With("model", c.Model, "profile", c.Profile.Name)
	if _, ok := worker.Lease(ctx); ok {
		log = worker.Logger(ctx).With("model", c.Model, "profile", c.Profile.Name)
	}
	var distinct []Tool
	seen := map[[2]string]bool{}
	for _, t := range c.Tools {
		if !c.Profile.Allows(t.Server, t.Name) {
			log.Warn("a tool the profile does not allow; not offered", "server", t.Server, "tool", t.Name)
			continue
		}
		if k := [2]string{t.Server, t.Name}; !seen[k] {
			seen[k] = true
			distinct = append(distinct, t)
		}
	}
	byName := map[string]Tool{}
	var tools []openai.ChatCompletionToolUnionParam
	for i, fn := range offeredNames(distinct) {
		t := distinct[i]
		if fn == "" {
			log.Warn("no name of its own for a tool; not offered", "server", t.Server, "tool", t.Name)
			continue
		}
		byName[fn] = t
		tools = append(tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        fn,
			Description: openai.String(truncate(t.Description, 1024)),
			Parameters:  shared.FunctionParameters(t.InputSchema),
		}))
	}
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(c.Profile.SystemPrompt),
		openai.UserMessage(c.Prompt),
	}
	for step := 1; step <= c.MaxIterations; step++ {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if c.Progress != nil {
			c.Progress(step, c.MaxIterations)
		}
		out.Steps = step
		p := openai.ChatCompletionNewParams{Model: shared.ChatModel(c.Model), Messages: msgs, Tools: tools}
		if c.Profile.Temperature != nil {
			p.Temperature = openai.Float(*c.Profile.Temperature)
		}
		if c.Profile.MaxCompletionTokens > 0 {
			p.MaxCompletionTokens = openai.Int(c.Profile.MaxCompletionTokens)
		}
		res, err := w.provider.Complete(ctx, p)
		if err != nil {
			return nil, err
		}
		out.Usage.add(Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens, TotalTokens: res.Usage.TotalTokens})
		choice := res.Choices[0]
		msg := choice.Message
		if len(msg.ToolCalls) == 0 {
			out.Answer = msg.Content
			if out.Answer == "" && msg.Refusal != "" {
				out.Answer = msg.Refusal
			}
			out.FinishReason = choice.FinishReason
			out.LatencyMS = time.Since(start).Milliseconds()
			log.Info("final answer", "steps", step, "tool_calls", out.ToolCalls, "total_tokens", out.Usage.TotalTokens)
			return out, nil
		}
		msgs = append(msgs, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			text := w.runTool(ctx, log, c, byName, tc, &out.ToolCalls)
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			msgs = append(msgs, openai.ToolMessage(text, tc.ID))
		}
	}
	return nil, worker.Fatalf("no final answer after %d steps (max_iterations); %d tool calls", c.MaxIterations, out.ToolCalls)
}

// runTool executes one tool call and returns the text the model gets back.
func (w *Worker) runTool(ctx context.Context, log *slog.Logger, c Conversation, byName map[string]Tool, tc openai.ChatCompletionMessageToolCallUnion, n *int) string {
	if tc.Type != "" && tc.Type != "function" {
		return fmt.Sprintf("error: tool calls of type %q are not supported", tc.Type)
	}
	name := tc.Function.Name
	t, ok := byName[name]
	if !ok {
		log.Warn("the model called a tool it was not offered", "tool", name)
		return fmt.Sprintf("error: no tool named %q is offered; use one of the tools listed", name)
	}
	if !c.Profile.Allows(t.Server, t.Name) {
		log.Warn("the model called a tool the profile does not allow", "server", t.Server, "tool", t.Name)
		return fmt.Sprintf("error: the tool %q is not allowed", name)
	}
	if !c.budget.take() {
		log.Warn("tool-call budget used up", "tool", name, "max_tool_calls", c.budget.max, "shared", c.budget.shared)
		if c.budget.shared {
			return fmt.Sprintf("error: the tool-call budget (%d, shared by every model consulted) is used up; answer with what you have", c.budget.max)
		}
		return fmt.Sprintf("error: the tool-call budget (%d) is used up; answer with what you have", c.budget.max)
	}
	*n++
	args := json.RawMessage(tc.Function.Arguments)
	if strings.TrimSpace(tc.Function.Arguments) == "" {
		args = json.RawMessage(`{}`)
	}
	text, isErr, err := w.tools.Call(ctx, t.Server, t.Name, args)
	if err != nil {
		return "error: " + err.Error()
	}
	log.Info("tool called", "server", t.Server, "tool", t.Name, "is_error", isErr, "bytes", len(text))
	if isErr && !strings.HasPrefix(text, "error: ") {
		text = "error: " + text
	}
	if max := w.cfg.MaxToolResultBytes; len(text) > max {
		text = strings.ToValidUTF8(text[:max], "") + fmt.Sprintf("\n[cut: the result was %d bytes; %d shown]", len(text), max)
	}
	return text
}

// Handler returns the worker.HandlerFunc of a configured task type.
func (w *Worker) Handler(taskType string) worker.HandlerFunc {
	return func(ctx context.Context, t *worker.Task) (any, error) {
		return w.handle(ctx, taskType, t)
	}
}

func (w *Worker) handle(ctx context.Context, taskType string, t *worker.Task) (any, error) {
	tt, ok := w.cfg.TaskTypes[taskType]
	if !ok {
		return nil, worker.Fatalf("task type %s is not configured", taskType)
	}
	var p Params
	if err := t.Bind(&p); err != nil {
		return nil, worker.Fatal(err)
	}
	if strings.TrimSpace(p.Prompt) == "" {
		return nil, worker.Fatalf("params.prompt is required")
	}
	prof := w.profiles[tt.Profile]
	prompt := p.Prompt
	if len(t.Dependencies) > 0 {
		prompt += "\n\n" + DependencyContext(t.Dependencies, func(id string) ([]byte, error) { return worker.DependencyResult(ctx, id) })
	}
	conv := Conversation{Profile: prof, Prompt: prompt, MaxIterations: DefaultMaxIterations, MaxToolCalls: DefaultMaxToolCalls}
	if prof.MaxIterations > 0 {
		conv.MaxIterations = prof.MaxIterations
	}
	if tt.MaxIterations > 0 {
		conv.MaxIterations = tt.MaxIterations
	}
	if prof.MaxToolCalls != nil {
		conv.MaxToolCalls = *prof.MaxToolCalls
	}
	if tt.MaxToolCalls != nil {
		conv.MaxToolCalls = *tt.MaxToolCalls
	}
	models := p.Models
	if len(models) == 0 && p.Model == "" && len(tt.Models) > 1 {
		models = tt.Models
	}
	typeModel := tt.Model
	if typeModel == "" && len(tt.Models) == 1 {
		typeModel = tt.Models[0]
	}
	single := firstNonEmpty(p.Model, typeModel, prof.Model, w.cfg.Provider.Model)
	if len(models) == 0 && single == "" {
		return nil, worker.Fatalf("no model: the task, its type, profile %s and the provider name none", prof.Name)
	}
	if len(models) > w.cfg.MaxModels {
		return nil, worker.Fatalf("params.models lists %d models; at most %d", len(models), w.cfg.MaxModels)
	}
	for _, m := range models {
		if strings.TrimSpace(m) == "" {
			return nil, worker.Fatalf("params.models has an empty name")
		}
	}
	// A task names only models the profile allows (or the config's own):
	// a model is a cost and a data destination the operator chooses.
	configured := []string{tt.Model, prof.Model, w.cfg.Provider.Model}
	configured = append(configured, tt.Models...)
	asked := slices.Clone(p.Models)
	if p.Model != "" {
		asked = append(asked, p.Model)
	}
	for _, m := range asked {
		if !slices.Contains(configured, m) && !prof.AllowsModel(m) {
			return nil, worker.Fatalf("params names model %q, which profile %s does not allow (allowed_models)", m, prof.Name)
		}
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	// The seed reports RUNNING as soon as the job starts, before the profile's
	// tools are gathered (which may open MCP sessions).
	_ = worker.Progress(ctx, 0, "RUNNING")
	tools, err := w.tools.Allowed(ctx, prof)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, worker.Retryable(fmt.Errorf("tools: %w", err))
	}
	conv.Tools = tools
	if len(models) > 0 {
		return w.fanOut(ctx, conv, models)
	}
	conv.Model = single
	conv.Progress = func(step, max int) {
		_ = worker.Progress(ctx, float64(100*(step-1))/float64(max), fmt.Sprintf("RUNNING, step %d of %d", step, max))
	}
	a, err := w.Converse(ctx, conv)
	if err != nil {
		return nil, err
	}
	return completion(a, prof.Name, a.Usage, a.Steps, a.ToolCalls, a)
}

// FanOut is a fan-out task's result: every model's answer, in the order
// asked, and the totals.
type FanOut struct {
	Answers   []Answer `json:"answers"`
	Usage     Usage    `json:"usage"`
	LatencyMS int64    `json:"latency_ms"`
}

// fanOut runs the same conversation with every model concurrently. It
// succeeds when at least one model answered; each failed model carries its
// error. When all fail, the failure is retryable if any model's was.
func (w *Worker) fanOut(ctx context.Context, conv Conversation, models []string) (any, error) {
	start := time.Now()
	out := FanOut{Answers: make([]Answer, len(models))}
	// max_tool_calls bounds the task: the models draw on one budget, first
	// come, first served.
	conv.budget = newToolBudget(conv.MaxToolCalls, true)
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for i, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := conv
			c.Model = m
			t0 := time.Now()
			a, err := w.Converse(ctx, c)
			if err != nil {
				r := worker.IsRetryable(err)
				a = &Answer{Model: m, Error: err.Error(), Retryable: &r, LatencyMS: time.Since(t0).Milliseconds()}
			}
			mu.Lock()
			out.Answers[i] = *a
			done++
			n := done
			mu.Unlock()
			_ = worker.Progress(ctx, float64(100*n)/float64(len(models)+1), fmt.Sprintf("RUNNING, %d of %d models answered", n, len(models)))
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	out.LatencyMS = time.Since(start).Milliseconds()
	steps, calls, ok, retryable := 0, 0, 0, false
	var errs []string
	for _, a := range out.Answers {
		out.Usage.add(a.Usage)
		steps += a.Steps
		calls += a.ToolCalls
		if a.Error == "" {
			ok++
		} else {
			errs = append(errs, a.Model+": "+a.Error)
			retryable = retryable || *a.Retryable
		}
	}
	if ok == 0 {
		err := errors.New("every model failed: " + strings.Join(errs, "; "))
		if retryable {
			return nil, worker.Retryable(err)
		}
		return nil, worker.Fatal(err)
	}
	return completion(out, conv.Profile.Name, out.Usage, steps, calls, nil)
}

// completion builds the completion: the result inline (the gate stores it
// through the task type's result channel, the file channel when it is too
// large for the default one) and the usage in the metadata.
func completion(result any, profile string, u Usage, steps, calls int, single *Answer) (worker.Completion, error) {
	b, err := json.Marshal(result)
	if err != nil {
		return worker.Completion{}, worker.Fatal(err)
	}
	meta := map[string]any{"profile": profile, "usage": u, "steps": steps, "tool_calls": calls}
	summary := ""
	if single != nil {
		meta["model"] = single.Model
		meta["latency_ms"] = single.LatencyMS
		summary = truncate(strings.TrimSpace(single.Answer), 200)
	} else if f, ok := result.(FanOut); ok {
		models := make([]string, len(f.Answers))
		for i, a := range f.Answers {
			models[i] = a.Model
		}
		meta["models"] = models
		meta["latency_ms"] = f.LatencyMS
		summary = fmt.Sprintf("%d models consulted", len(f.Answers))
	}
	mb, _ := json.Marshal(meta)
	return worker.Completion{Summary: summary, Result: b, Metadata: mb}, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
