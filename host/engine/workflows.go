package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// Workflows (issue 39): one call submits a named graph of steps. Each step
// is a task, enqueued by the gate for the workflow, with the task
// dependencies of dependencies.go as its edges:
//
//   - SubmitWorkflow validates the whole graph before it writes anything
//     (names, edges, cycles, depth, every step's type and params), then
//     inserts the workflow row, every step's task with its edges and its
//     task.assigned receipt, and the workflow.submitted receipt in one
//     transaction. The steps' recipient is the workflow
//     (host.WorkflowRecipient), not the submitter: the submitter is owed
//     one outcome, the workflow's, and sees one obligation and one inbox
//     item for it; the steps' obligations are owed to the workflow.
//   - The workflow ends in the transaction that writes its final step's
//     terminal state (deliveryTx.UpdateTask notes it, endWorkflows ends it
//     once fn's writes are done): succeeded with the final step's result,
//     canceled when a cancel was asked, failed otherwise. The end is fenced
//     on the workflow's running state, so it happens once whatever the
//     number of writers, and it cancels the steps still unfinished.
//   - CancelWorkflow cancels every step not finished, waiting ones
//     included, in the canceler's name with the reason (a leased one is
//     flagged, as Cancel does), before any of them settles its waiters;
//     the final step's cancel ends the workflow, whose error and end
//     receipt keep who canceled it and why.
//
// Only the final step's end reads the workflow row: the final step's
// recipient says it is the final one, so the other steps' ends cost nothing
// beyond their dependencies' settling.

// WorkflowRequest submits a workflow.
type WorkflowRequest struct {
	// Name names the workflow (not unique: it is a label).
	Name  string                `json:"name"`
	Steps []WorkflowStepRequest `json:"steps"`
	// FinalStep is the step whose outcome is the workflow's; by default the
	// one step no other step waits on (refused when there are several).
	FinalStep      string `json:"final_step,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// WorkflowStepRequest is one step of a submitted workflow.
type WorkflowStepRequest struct {
	// Name is the step's name, unique in the workflow.
	Name     string          `json:"name"`
	TaskType string          `json:"task_type"`
	Params   json.RawMessage `json:"params,omitempty"`
	// Priority 1..10 (10 first); 0 means the task type's default.
	Priority   int    `json:"priority,omitempty"`
	MaxRetries *int   `json:"max_retries,omitempty"`
	Summary    string `json:"task_summary,omitempty"`
	// After names the steps this one waits on; AfterRule is all_succeeded
	// (the default), any_succeeded or all_finished. The step's worker
	// receives their outcomes with the offer.
	After     []string            `json:"after,omitempty"`
	AfterRule host.DependencyRule `json:"after_rule,omitempty"`
	// DelaySeconds and NotBefore delay the step's first offer, and
	// ResourceIntents are resource leases its task needs besides its
	// type's, exactly as an enqueue's (taskStart): the delay is counted
	// from the submission, not from the end of the steps in After; a step
	// with both is offered when both its rule is met and its time has come.
	DelaySeconds    int                   `json:"delay_seconds,omitempty"`
	NotBefore       *time.Time            `json:"not_before,omitempty"`
	ResourceIntents []host.ResourceIntent `json:"resource_intents,omitempty"`

	pos int // place in the submitted list (planWorkflow)
}

// start is the step's taskStart.
func (s WorkflowStepRequest) start() taskStart {
	return taskStart{DelaySeconds: s.DelaySeconds, NotBefore: s.NotBefore, ResourceIntents: s.ResourceIntents}
}

// WorkflowResult acknowledges a submission.
type WorkflowResult struct {
	Workflow    *host.Workflow `json:"-"`
	WorkflowID  string         `json:"workflow_id"`
	Status      string         `json:"status"`
	IsDuplicate bool           `json:"is_duplicate"`
	ReceiptID   string         `json:"receipt_id"`
	// Steps maps each step's name to its task id.
	Steps map[string]string `json:"steps"`
}

// WorkflowView is a workflow with its steps, as a read answers it.
type WorkflowView struct {
	*host.Workflow
	Steps []WorkflowStepView `json:"steps"`
}

// WorkflowStepView is one step and its task's state. Status is the task's
// as a read of the task shows it: a queued step whose time has not come
// (delay_seconds, not_before, a retry's backoff) is scheduled; a step whose
// dependencies have not settled is waiting, whatever its time.
// AvailableAt is when a step not yet running may first be offered, given
// while that is ahead.
type WorkflowStepView struct {
	Name        string              `json:"name"`
	TaskID      string              `json:"task_id"`
	TaskType    string              `json:"task_type"`
	Status      host.TaskState      `json:"status"`
	AvailableAt *time.Time          `json:"available_at,omitempty"`
	After       []string            `json:"after,omitempty"`
	AfterRule   host.DependencyRule `json:"after_rule,omitempty"`
	Final       bool                `json:"final,omitempty"`
	CompletedAt *time.Time          `json:"completed_at,omitempty"`
	Result      *host.Result        `json:"result,omitempty"`
	Error       string              `json:"error_message,omitempty"`
}

// workflowVisible reports whether actor may read or cancel w: its submitter
// and the tenant's admins. Anyone else is answered as for an unknown id.
func workflowVisible(a Actor, w *host.Workflow) bool {
	return w != nil && w.Tenant == a.Tenant && (a.Role == RoleAdmin || w.CreatedBy == a.Principal)
}

// plannedStep is a validated step, ready to insert.
type plannedStep struct {
	req   WorkflowStepRequest
	task  *host.Task
	rule  host.DependencyRule
	depth int // 0 for a step without after; else 1 + its deepest after
	deps  []host.Dependency
	rcpt  *host.Receipt
}

// SubmitWorkflow validates and submits a workflow for actor.
func (e *Engine) SubmitWorkflow(ctx context.Context, actor Actor, req WorkflowRequest) (*WorkflowResult, error) {
	if actor.Tenant == "" || actor.Principal == "" {
		return nil, host.Errorf(host.CodeBadRequest, "the caller has no tenant or principal")
	}
	if actor.Role == RoleWorker {
		return nil, host.Errorf(host.CodeForbidden, "workers do not submit workflows")
	}
	plan, final, err := e.planWorkflow(ctx, actor, &req)
	if err != nil {
		if req.IdempotencyKey != "" && !host.LongerThan(req.IdempotencyKey, 200) {
			return e.replayWorkflow(ctx, actor, req, err)
		}
		return nil, err
	}
	hash, err := workflowHash(req)
	if err != nil {
		return nil, err
	}
	now := e.now()
	wf := &host.Workflow{ID: host.NewID(host.PrefixWorkflow), Tenant: actor.Tenant, Name: req.Name, CreatedBy: actor.Principal,
		State: host.WorkflowRunning, FinalStep: plan[final].req.Name, StepCount: len(plan),
		IdempotencyKey: req.IdempotencyKey, RequestHash: hash, CreatedAt: now, UpdatedAt: now}
	byName := make(map[string]*plannedStep, len(plan))
	for i := range plan {
		byName[plan[i].req.Name] = &plan[i]
	}
	// Tasks and receipts, in the steps' topological order (planWorkflow
	// sorted them): a step's edges name tasks made before it.
	steps := make([]host.WorkflowStep, len(plan))
	for i := range plan {
		p := &plan[i]
		t := p.task
		t.ID = host.NewID(host.PrefixTask)
		t.Recipient = host.WorkflowRecipient(wf.ID)
		if i == final {
			t.Recipient = host.WorkflowFinalRecipient(wf.ID)
			wf.FinalTaskID = t.ID
		}
		t.CreatedAt, t.UpdatedAt = now, now
		t.AvailableAt = p.req.start().availableAt(now)
		if t.Summary == "" {
			// Lists of tasks show which workflow and step a task is.
			t.Summary = clip("workflow "+wf.Name+", step "+p.req.Name, 990)
		}
		keepTrace(ctx, t)
		for j, name := range p.req.After {
			dep := byName[name]
			dep.task.HasWaiters = true // born marked: its end settles this step
			p.deps = append(p.deps, host.Dependency{Tenant: t.Tenant, Waiter: t.ID, DependsOn: dep.task.ID, Rule: p.rule, Position: j, Depth: p.depth})
		}
		if len(p.deps) > 0 {
			t.State = host.StateWaiting
		}
		body := map[string]any{"task_type": t.Type, "priority": t.Priority, "queued_by": t.CreatedBy,
			"task_summary": t.Summary, "available_at": t.AvailableAt, "workflow_id": wf.ID, "step": p.req.Name}
		if len(p.req.After) > 0 {
			body["after_rule"] = p.rule
			afterStepsInReceipt(body, p.req.After)
		}
		p.rcpt = &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: t.Tenant, Type: host.ReceiptAssigned,
			From: GatePrincipal, To: t.Recipient, TaskID: t.ID, Parents: []string{}, Body: mustJSON(body), CreatedAt: now}
		if err := p.rcpt.Validate(); err != nil {
			return nil, err
		}
		t.AssignReceipt = p.rcpt.ID
		steps[i] = host.WorkflowStep{Tenant: t.Tenant, WorkflowID: wf.ID, Name: p.req.Name, TaskID: t.ID,
			Position: p.req.position(), After: p.req.After, AfterRule: p.rule}
	}
	submitted := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: wf.Tenant, Type: host.ReceiptWorkflowSubmitted,
		From: GatePrincipal, To: wf.CreatedBy, TaskID: wf.ID, Parents: []string{},
		Body: mustJSON(map[string]any{"workflow_id": wf.ID, "name": wf.Name, "steps": wf.StepCount,
			"final_step": wf.FinalStep, "final_task_id": wf.FinalTaskID}), CreatedAt: now}
	if err := submitted.Validate(); err != nil {
		return nil, err
	}
	wf.SubmitReceipt = submitted.ID
	res := &WorkflowResult{}
	duplicateOf := func(r store.Reader, old *host.Workflow) error {
		if old.RequestHash != hash {
			return host.Errorf(host.CodeIdempotencyConflict,
				"idempotency_key %q was used for workflow %s with a different request; use a new key for a different workflow", req.IdempotencyKey, old.ID)
		}
		res.Workflow, res.IsDuplicate = old, true
		return nil
	}
	// The steps' types are what the workflow adds (the enqueue budget's
	// keys, store.BulkUpdate).
	var types []string
	for i := range plan {
		if !slices.Contains(types, plan[i].task.Type) {
			types = append(types, plan[i].task.Type)
		}
	}
	err = e.update(store.BulkUpdate(ctx, actor.Tenant, types...), func(tx store.Tx) error {
		res.Workflow, res.IsDuplicate = nil, false
		if wf.IdempotencyKey != "" {
			old, err := tx.FindWorkflowByIdempotency(ctx, wf.Tenant, wf.CreatedBy, wf.IdempotencyKey)
			if err != nil {
				return err
			}
			if old != nil {
				return duplicateOf(tx, old)
			}
		}
		if err := tx.InsertWorkflow(ctx, wf, steps); err != nil {
			return err
		}
		for i := range plan {
			p := &plan[i]
			if err := tx.InsertTask(ctx, p.task); err != nil {
				return err
			}
			if err := tx.InsertDependencies(ctx, p.deps); err != nil {
				return err
			}
			if err := appendValid(ctx, tx, p.rcpt, nil); err != nil {
				return err
			}
		}
		if err := appendValid(ctx, tx, submitted, nil); err != nil {
			return err
		}
		res.Workflow = wf
		return nil
	})
	if err != nil && wf.IdempotencyKey != "" && host.IsCode(err, host.CodeConflict) {
		// A concurrent submission with the same key committed first.
		var derr error
		if verr := e.view(ctx, func(r store.Reader) error {
			old, err := r.FindWorkflowByIdempotency(ctx, wf.Tenant, wf.CreatedBy, wf.IdempotencyKey)
			if err != nil || old == nil {
				return err
			}
			derr = duplicateOf(r, old)
			return nil
		}); verr == nil && (derr != nil || res.IsDuplicate) {
			err = derr
		}
	}
	if err != nil {
		return nil, err
	}
	if res.IsDuplicate {
		return e.duplicateWorkflow(ctx, res.Workflow)
	}
	res.WorkflowID = res.Workflow.ID
	res.Status = string(res.Workflow.State)
	res.ReceiptID = res.Workflow.SubmitReceipt
	res.Steps = make(map[string]string, len(plan))
	ready := map[string]int{}
	for _, p := range plan {
		res.Steps[p.req.Name] = p.task.ID
		if p.task.State == host.StateQueued && !p.task.AvailableAt.After(now) {
			ready[p.task.Type]++
		}
		e.emit(Event{Kind: EvEnqueued, Tenant: p.task.Tenant, TaskType: p.task.Type})
	}
	for typ, n := range ready {
		e.waiters.wake(actor.Tenant, typ, n)
	}
	return res, nil
}

// replayWorkflow answers a keyed submission that planWorkflow refused
// (refusal): when its key already holds a workflow, by the same rule as a
// submission that passes (the same request is its duplicate, a different
// one idempotency_conflict), whatever changed since that workflow was
// accepted (a step's type disabled, deleted or given another schema, a
// recipient left with worker keys only), as an enqueue's replay does. When
// the key holds no workflow, the refusal stands.
func (e *Engine) replayWorkflow(ctx context.Context, actor Actor, req WorkflowRequest, refusal error) (*WorkflowResult, error) {
	req.Name = strings.TrimSpace(req.Name) // as planWorkflow keeps it
	hash, err := workflowHash(req)
	if err != nil {
		return nil, refusal
	}
	var old *host.Workflow
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		old, err = r.FindWorkflowByIdempotency(ctx, actor.Tenant, actor.Principal, req.IdempotencyKey)
		return err
	}); err != nil || old == nil {
		return nil, refusal
	}
	if old.RequestHash != hash {
		return nil, host.Errorf(host.CodeIdempotencyConflict,
			"idempotency_key %q was used for workflow %s with a different request; use a new key for a different workflow", req.IdempotencyKey, old.ID)
	}
	return e.duplicateWorkflow(ctx, old)
}

// duplicateWorkflow is the answer to a submission whose key holds wf: wf
// with its steps' tasks.
func (e *Engine) duplicateWorkflow(ctx context.Context, wf *host.Workflow) (*WorkflowResult, error) {
	res := &WorkflowResult{Workflow: wf, IsDuplicate: true, WorkflowID: wf.ID, Status: string(wf.State), ReceiptID: wf.SubmitReceipt}
	var steps []host.WorkflowStep
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		steps, err = r.WorkflowSteps(ctx, wf.Tenant, wf.ID)
		return err
	}); err != nil {
		return nil, err
	}
	res.Steps = make(map[string]string, len(steps))
	for _, s := range steps {
		res.Steps[s.Name] = s.TaskID
	}
	return res, nil
}

// position is the step's place in the submitted list, kept in its request
// by planWorkflow (the plan itself is in topological order).
func (s WorkflowStepRequest) position() int { return s.pos }

// workflowHash identifies a submission for its idempotency key: the same
// request (key aside) has the same hash. Every field of every step counts,
// its start (delay_seconds, not_before, resource_intents) among them, each
// as it is meant rather than as it is spelled: params as canonical JSON,
// not_before as an instant, resource_intents normalized (names, one per
// resource, sorted). Fields a request leaves out add nothing, so the hash
// of a workflow without them is what it was before steps took them.
func workflowHash(req WorkflowRequest) (string, error) {
	req.IdempotencyKey = ""
	req.Steps = slices.Clone(req.Steps) // the caller's steps stay as given
	for i := range req.Steps {
		s := &req.Steps[i]
		if c, err := canonicalJSON(s.Params); err == nil {
			s.Params = c
		}
		if s.NotBefore != nil {
			nb := s.NotBefore.UTC().Truncate(time.Microsecond)
			s.NotBefore = &nb
		}
		if n, err := host.NormalizeIntents("resource_intents", s.ResourceIntents); err == nil {
			s.ResourceIntents = n
		}
	}
	b, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// cycleSteps returns, in step order, the steps that lie on a cycle of the
// after lists: those in a strongly connected component of more than one
// step, or after themselves. Only the steps a topological order left out
// (pending > 0) are searched; a step among them that waits on a cycle
// without being on one is not returned. Tarjan's algorithm, once over each
// step and edge.
func cycleSteps(steps []WorkflowStepRequest, index map[string]int, pending []int) []int {
	n := len(steps)
	num := make([]int, n) // visit order from 1; 0 is not visited
	low := make([]int, n)
	onStack := make([]bool, n)
	onCycle := make([]bool, n)
	var stack []int
	visits := 0
	var visit func(v int)
	visit = func(v int) {
		visits++
		num[v], low[v] = visits, visits
		stack = append(stack, v)
		onStack[v] = true
		for _, a := range steps[v].After {
			w := index[a]
			switch {
			case w == v:
				onCycle[v] = true
			case pending[w] == 0:
				// ordered: on no cycle
			case num[w] == 0:
				visit(w)
				low[v] = min(low[v], low[w])
			case onStack[w]:
				low[v] = min(low[v], num[w])
			}
		}
		if low[v] != num[v] {
			return
		}
		k := len(stack) - 1
		for stack[k] != v {
			k--
		}
		component := stack[k:]
		for _, w := range component {
			onStack[w] = false
			if len(component) > 1 {
				onCycle[w] = true
			}
		}
		stack = stack[:k]
	}
	var on []int
	for v := range n {
		if pending[v] > 0 && num[v] == 0 {
			visit(v)
		}
	}
	for v := range n {
		if onCycle[v] {
			on = append(on, v)
		}
	}
	return on
}

// stepErr is err with the step it concerns named in its detail, its code
// kept.
func stepErr(i int, name string, err error) error {
	return host.WrapError(host.ErrorCode(err), err, fmt.Sprintf("steps[%d] (%s): %s", i, name, host.ErrorDetail(err)))
}

// planWorkflow validates req and returns its steps in topological order
// (each after the steps it waits on) with the index of the final step in
// that order. Nothing is written.
func (e *Engine) planWorkflow(ctx context.Context, actor Actor, req *WorkflowRequest) ([]plannedStep, int, error) {
	req.Name = strings.TrimSpace(req.Name)
	switch {
	case req.Name == "":
		return nil, 0, host.Errorf(host.CodeInvalidWorkflow, "name is required")
	case host.LongerThan(req.Name, 200) || !printable(req.Name):
		return nil, 0, host.Errorf(host.CodeInvalidWorkflow, "name must be at most 200 printable characters")
	case len(req.Steps) == 0:
		return nil, 0, host.Errorf(host.CodeInvalidWorkflow, "a workflow needs at least one step")
	case len(req.Steps) > host.MaxWorkflowSteps:
		return nil, 0, host.Errorf(host.CodeTooManySteps, "the workflow has %d steps, the limit is %d", len(req.Steps), host.MaxWorkflowSteps)
	case host.LongerThan(req.IdempotencyKey, 200):
		return nil, 0, host.Errorf(host.CodeBadRequest, "idempotency_key is longer than 200 characters")
	}
	index := make(map[string]int, len(req.Steps))
	for i := range req.Steps {
		s := &req.Steps[i]
		s.pos = i
		if !host.StepNamePattern.MatchString(s.Name) {
			return nil, 0, host.Errorf(host.CodeInvalidWorkflow, "steps[%d]: name %q must be 1-100 letters, digits, '_', '.' or '-', starting with a letter or digit", i, s.Name)
		}
		if j, dup := index[s.Name]; dup {
			return nil, 0, host.Errorf(host.CodeDuplicateStep, "steps[%d] and steps[%d] are both named %q", j, i, s.Name)
		}
		index[s.Name] = i
	}
	// Edges: every after names a step, once, and not itself.
	waiters := make([]int, len(req.Steps)) // how many steps wait on each
	for i := range req.Steps {
		s := &req.Steps[i]
		if len(s.After) > host.MaxDependencies {
			return nil, 0, host.Errorf(host.CodeTooLarge, "steps[%d] (%s): after names %d steps, the limit is %d", i, s.Name, len(s.After), host.MaxDependencies)
		}
		if len(s.After) == 0 && s.AfterRule != "" {
			return nil, 0, host.Errorf(host.CodeBadRequest, "steps[%d] (%s): after_rule is given without after", i, s.Name)
		}
		if s.AfterRule != "" && !s.AfterRule.Valid() {
			return nil, 0, host.Errorf(host.CodeBadRequest, "steps[%d] (%s): after_rule must be all_succeeded, any_succeeded or all_finished, got %q", i, s.Name, s.AfterRule)
		}
		seen := make(map[string]bool, len(s.After))
		for _, a := range s.After {
			j, ok := index[a]
			if !ok {
				return nil, 0, host.Errorf(host.CodeUnknownStep, "steps[%d] (%s): after names %q, which is no step of this workflow", i, s.Name, a)
			}
			if j == i {
				return nil, 0, host.Errorf(host.CodeWorkflowCycle, "steps[%d] (%s) waits on itself", i, s.Name)
			}
			if seen[a] {
				return nil, 0, host.Errorf(host.CodeBadRequest, "steps[%d] (%s): after names %q twice", i, s.Name, a)
			}
			seen[a] = true
			waiters[j]++
		}
	}
	maxWaiters := e.cfg.MaxWaiters
	if maxWaiters <= 0 {
		maxWaiters = host.MaxWaiters
	}
	for j, n := range waiters {
		if n > maxWaiters {
			return nil, 0, host.Errorf(host.CodeInvalidWorkflow, "steps[%d] (%s): %d steps wait on it, the limit is %d", j, req.Steps[j].Name, n, maxWaiters)
		}
	}
	// Topological order (Kahn): what is left when no step is free is a cycle.
	pending := make([]int, len(req.Steps))
	next := make([][]int, len(req.Steps))
	for i, s := range req.Steps {
		pending[i] = len(s.After)
		for _, a := range s.After {
			next[index[a]] = append(next[index[a]], i)
		}
	}
	order := make([]int, 0, len(req.Steps))
	for i := range req.Steps {
		if pending[i] == 0 {
			order = append(order, i)
		}
	}
	for k := 0; k < len(order); k++ {
		for _, n := range next[order[k]] {
			if pending[n]--; pending[n] == 0 {
				order = append(order, n)
			}
		}
	}
	if len(order) < len(req.Steps) {
		// What is left holds a cycle and the steps that only wait on one
		// (or lie between two): name the first only.
		var in []string
		for _, i := range cycleSteps(req.Steps, index, pending) {
			in = append(in, req.Steps[i].Name)
		}
		return nil, 0, host.Errorf(host.CodeWorkflowCycle, "the steps' after lists make a cycle among: %s", clip(strings.Join(in, ", "), 500))
	}
	// Depth: a waiting step's depth is 1 + the deepest waiting step it
	// waits on, bounded as for any task (placeAfter).
	maxDepth := e.cfg.MaxDependencyDepth
	depth := make([]int, len(req.Steps))
	for _, i := range order {
		for _, a := range req.Steps[i].After {
			if d := depth[index[a]] + 1; d > depth[i] {
				depth[i] = d
			}
		}
		if depth[i] > maxDepth {
			return nil, 0, host.Errorf(host.CodeInvalidWorkflow, "steps[%d] (%s) is %d steps deep, the deepest a chain of waiting steps may be is %d", i, req.Steps[i].Name, depth[i], maxDepth)
		}
	}
	// The final step: named, or the one step nothing waits on.
	final := -1
	if req.FinalStep != "" {
		j, ok := index[req.FinalStep]
		if !ok {
			return nil, 0, host.Errorf(host.CodeUnknownStep, "final_step %q is no step of this workflow", req.FinalStep)
		}
		final = j
	} else {
		var sinks []string
		for j, n := range waiters {
			if n == 0 {
				sinks = append(sinks, req.Steps[j].Name)
				final = j
			}
		}
		if len(sinks) > 1 {
			return nil, 0, host.Errorf(host.CodeInvalidWorkflow, "%d steps end the graph (%s): name the one whose outcome is the workflow's in final_step", len(sinks), clip(strings.Join(sinks, ", "), 500))
		}
	}
	// Every step's task: its type, params and options, as an enqueue checks them.
	plan := make([]plannedStep, len(order))
	finalAt := 0
	for k, i := range order {
		s := req.Steps[i]
		t, err := e.stepTask(ctx, actor, s)
		if err != nil {
			return nil, 0, stepErr(i, s.Name, err)
		}
		rule := s.AfterRule
		if rule == "" && len(s.After) > 0 {
			rule = host.RuleAllSucceeded
		}
		plan[k] = plannedStep{req: s, task: t, rule: rule, depth: depth[i]}
		if i == final {
			finalAt = k
		}
	}
	return plan, finalAt, nil
}

// stepTask checks one step as Enqueue checks a task and returns its task,
// with its resource intents, without id, recipient or times.
func (e *Engine) stepTask(ctx context.Context, actor Actor, s WorkflowStepRequest) (*host.Task, error) {
	f := taskFields{TaskType: s.TaskType, Params: s.Params, Priority: s.Priority, Summary: s.Summary, MaxRetries: s.MaxRetries}
	if err := checkTaskFields("", &f); err != nil {
		return nil, err
	}
	start := s.start()
	if err := start.check(e.now()); err != nil {
		return nil, err
	}
	tt, err := e.checkTaskType(ctx, actor.Tenant, "", &f)
	if err != nil {
		return nil, err
	}
	t := f.task(tt, actor.Tenant, actor.Principal)
	start.addIntents(t, tt)
	return t, nil
}

// GetWorkflow returns a workflow the actor may read, with its steps.
func (e *Engine) GetWorkflow(ctx context.Context, actor Actor, id string) (*WorkflowView, error) {
	var wf *host.Workflow
	var steps []host.WorkflowStep
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		if wf, err = r.GetWorkflow(ctx, actor.Tenant, id); err != nil {
			return err
		}
		if !workflowVisible(actor, wf) {
			return host.Errorf(host.CodeNotFound, "no workflow %s", id)
		}
		steps, err = r.WorkflowSteps(ctx, actor.Tenant, id)
		return err
	})
	if err != nil {
		if host.IsCode(err, host.CodeNotFound) {
			return nil, host.Errorf(host.CodeNotFound, "no workflow %s", id)
		}
		return nil, err
	}
	now := e.now()
	v := &WorkflowView{Workflow: wf, Steps: make([]WorkflowStepView, len(steps))}
	for i, s := range steps {
		sv := WorkflowStepView{Name: s.Name, TaskID: s.TaskID, After: s.After, AfterRule: s.AfterRule, Final: s.TaskID == wf.FinalTaskID}
		if t := s.Task; t != nil {
			sv.TaskType, sv.Status, sv.CompletedAt, sv.Result, sv.Error = t.Type, t.Presented(now), t.CompletedAt, t.Result, t.LastError
			if (t.State == host.StateWaiting || t.State == host.StateQueued) && t.AvailableAt.After(now) {
				sv.AvailableAt = ptr(t.AvailableAt)
			}
		}
		v.Steps[i] = sv
	}
	return v, nil
}

// ListWorkflows lists workflows newest first: an admin's every workflow of
// the tenant (or one principal's), anyone else's only their own.
// A cursor that is not a workflow id is a bad_request.
func (e *Engine) ListWorkflows(ctx context.Context, actor Actor, f store.WorkflowFilter) ([]*host.Workflow, string, error) {
	f.Tenant = actor.Tenant
	if actor.Role != RoleAdmin {
		f.CreatedBy = actor.Principal
	}
	for _, st := range f.AllStates() {
		if !st.Valid() {
			return nil, "", host.Errorf(host.CodeBadRequest, "status must be running, succeeded, failed, canceled or archived (or a comma list of them), got %q", st)
		}
	}
	var err error
	if f.Limit, err = pageSize(f.Limit, MaxPage); err != nil {
		return nil, "", err
	}
	if f.Cursor != "" && !host.IsID(host.PrefixWorkflow, f.Cursor) {
		// The cursor is the last workflow id of the previous page.
		return nil, "", host.Errorf(host.CodeBadRequest, "bad cursor %q", f.Cursor)
	}
	var out []*host.Workflow
	var cur string
	err = e.view(ctx, func(r store.Reader) error {
		var err error
		out, cur, err = r.ListWorkflows(ctx, f)
		return err
	})
	return out, cur, err
}

// CancelWorkflow cancels a workflow: every step not finished is canceled
// by actor with reason (a leased one is flagged, and its worker learns it
// from its next heartbeat), a waiting one too whatever its rule
// (cancelSteps). The final step's cancel ends the workflow canceled in the
// same transaction; when the final step is leased the workflow ends with
// it. Either way its error_message is "canceled by <principal>: <reason>"
// ("canceled by <principal>" without a reason) and its workflow.canceled
// receipt names canceled_by and reason. Canceling a canceled workflow is
// a no-op; one that ended otherwise is a conflict.
func (e *Engine) CancelWorkflow(ctx context.Context, actor Actor, id, reason string) (*host.Workflow, error) {
	if host.LongerThan(reason, 1000) {
		return nil, host.Errorf(host.CodeBadRequest, "reason is longer than 1000 characters")
	}
	// Lock order: the steps' task rows (by id, as a dependency's end locks
	// its waiters), then the workflow row, which is the order of a
	// completion that ends the workflow (the final step's row, then the
	// workflow's in endWorkflow). Locking the workflow first met such a
	// completion in a deadlock on PostgreSQL. So the workflow is read
	// without a lock first, and locked, checked again and flagged after
	// its steps.
	check := func(wf *host.Workflow, err error) (done bool, _ error) {
		if err != nil || !workflowVisible(actor, wf) {
			if err == nil || host.IsCode(err, host.CodeNotFound) {
				return false, host.Errorf(host.CodeNotFound, "no workflow %s", id)
			}
			return false, err
		}
		switch {
		case wf.Ended() == host.WorkflowCanceled: // archived too
			return true, nil
		case wf.State.Terminal():
			return false, host.Errorf(host.CodeConflict, "workflow %s is %s and can no longer be canceled", id, wf.State)
		}
		return false, nil
	}
	var out *host.Workflow
	verr := e.view(ctx, func(r store.Reader) error {
		var err error
		out, err = r.GetWorkflow(ctx, actor.Tenant, id)
		return err
	})
	if done, err := check(out, verr); err != nil {
		return nil, err
	} else if done {
		return out, nil
	}
	if reason == "" {
		reason = workflowCancelReason(id)
	}
	err := e.update(ctx, func(tx store.Tx) error {
		if err := e.cancelSteps(ctx, tx, out, nil, actor.Principal, reason); err != nil {
			return err
		}
		wf, err := tx.GetWorkflow(ctx, actor.Tenant, id) // locks it
		if done, err := check(wf, err); err != nil || done {
			return err // a conflict rolls the steps' cancels back
		}
		if !wf.CancelRequested {
			wf.CancelRequested, wf.UpdatedAt = true, e.now()
			if err := tx.UpdateWorkflow(ctx, wf, host.WorkflowRunning); err != nil {
				return err
			}
		}
		out = wf
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The update may have ended it: read what it is now.
	var now *host.Workflow
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		now, err = r.GetWorkflow(ctx, actor.Tenant, id)
		return err
	}); err == nil {
		out = now
	}
	return out, nil
}

// workflowCancelReason is the reason a workflow's cancel gives its steps
// when the canceler gave none; the workflow's own error then names who
// canceled it alone (canceledError).
func workflowCancelReason(id string) string { return "workflow " + id + " canceled" }

// canceledError is the error_message of a workflow canceled by by (when
// known) for reason (when given): "canceled by agent.a: not needed".
func canceledError(by, reason string) string {
	msg := "canceled"
	if by != "" {
		msg += " by " + by
	}
	if reason != "" {
		msg += ": " + reason
	}
	return msg
}

// cancelSteps cancels wf's unfinished steps in tx: a waiting or queued one
// at once (task.canceled from by, with reason, workflow_id and step), a
// leased one flagged (task.cancel_requested from by to its worker). It
// locks them in task id order, the order in which a dependency's end locks
// its waiters. steps are wf's steps as tx read them, or nil for
// cancelSteps to read them.
//
// The waiters of the steps it ends are settled once every step is
// written (holdSettling), not after each: a waiting step is the
// canceler's to cancel like the others, whatever its rule, and settling
// as it went would let the cancel of a step it waits on get there first,
// canceling it in the gate's name for a dependency (all_succeeded,
// any_succeeded) or readying it (all_finished). The settling that follows
// finds the steps no longer waiting and passes them over; it still
// records the steps' ends on their edges and settles waiters outside the
// workflow, within the update's budget like any cascade, the rest left
// pending (settlements.go).
func (e *Engine) cancelSteps(ctx context.Context, tx store.Tx, wf *host.Workflow, steps []host.WorkflowStep, by, reason string) error {
	if steps == nil {
		var err error
		if steps, err = tx.WorkflowSteps(ctx, wf.Tenant, wf.ID); err != nil {
			return err
		}
	}
	steps = slices.Clone(steps)
	slices.SortFunc(steps, func(a, b host.WorkflowStep) int { return strings.Compare(a.TaskID, b.TaskID) })
	d, _ := tx.(*deliveryTx)
	return d.holdSettling(ctx, func() error { return e.cancelStepsNow(ctx, tx, d, wf, steps, by, reason) })
}

// cancelStepsNow is cancelSteps' loop over steps, in the order given; d
// is tx as a deliveryTx, or nil.
func (e *Engine) cancelStepsNow(ctx context.Context, tx store.Tx, d *deliveryTx, wf *host.Workflow, steps []host.WorkflowStep, by, reason string) error {
	now := e.now()
	for _, s := range steps {
		if s.Task != nil && s.Task.State.Terminal() {
			continue
		}
		t, err := tx.GetTask(ctx, wf.Tenant, s.TaskID) // locks it, as it is now
		if err != nil {
			return err
		}
		switch t.State {
		case host.StateQueued, host.StateWaiting:
			fence := store.Fence{State: t.State}
			parents, types := taskParents(t)
			r := &host.Receipt{Type: host.ReceiptCanceled, From: by, Parents: parents,
				Body:      mustJSON(map[string]any{"reason": reason, "canceled_by": by, "workflow_id": wf.ID, "step": s.Name}),
				DedupeKey: cancelDedupe(t.ID)}
			fillTaskReceipt(r, t, "", now)
			t.State, t.CompletedAt, t.UpdatedAt, t.LastError = host.StateCanceled, ptr(now), now, reason
			if d != nil {
				// The end its waiters' settling carries, who asked
				// included: the settling comes after every receipt.
				d.cause = &endCause{tenant: t.Tenant, task: t.ID, state: host.StateCanceled, canceled: true, by: by}
			}
			err := tx.UpdateTask(ctx, t, fence)
			if d != nil {
				d.cause = nil
			}
			if err != nil {
				return err
			}
			if err := appendReceipt(ctx, tx, r, types); err != nil {
				return err
			}
			if d != nil {
				d.canceled = append(d.canceled, t)
			}
		case host.StateLeased:
			if t.CancelRequested {
				continue
			}
			fence := store.Fence{State: host.StateLeased, LeaseID: t.LeaseID}
			t.CancelRequested, t.UpdatedAt = true, now
			if err := tx.UpdateTask(ctx, t, fence); err != nil {
				return err
			}
			r := cancelRequest(t, by, reason, map[string]any{"workflow_id": wf.ID, "step": s.Name}, now)
			if err := appendReceipt(ctx, tx, r, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// workflowEnd is a final step whose terminal write an update made.
type workflowEnd struct {
	tenant, workflow string
	step             *host.Task
	// errorBy is who wrote the step's error_message (step.LastError), when
	// a receipt the update appended for the step says so (noteErrorBy).
	errorBy string
	// cause is the end that ended the step: its own, or, when the gate
	// canceled it because a step it needed ended (the dependency rule,
	// through any chain of waiting steps), that step's end. A step
	// canceled as a task (by the submitter or an admin, at once or at
	// the end of the lease the cancel flagged) ends the workflow
	// canceled, not failed.
	cause *endCause
}

// noteErrorBy notes, for the final step a failed or canceled receipt r of
// this update ends, who wrote the step's error_message: the worker whose
// own failure r records (its error_message is the step's), or the gate
// when r gives the gate's reason for a cancel (a dependency's end). The
// task row no longer names its worker once its lease is cleared, and its
// error may be an earlier attempt's: without such a receipt the writer
// stays unknown. A cancel's receipt of the task that caused a final
// step's end names who canceled it (canceled_by).
func (d *deliveryTx) noteErrorBy(r *host.Receipt) {
	if len(d.pending) > 0 {
		d.notePendingBy(r)
	}
	for i := range d.ends {
		end := &d.ends[i]
		cause := end.cause
		ofCause := cause != nil && cause.task == r.TaskID && cause.tenant == r.Tenant
		if !ofCause && (end.step.ID != r.TaskID || end.step.Tenant != r.Tenant) {
			continue
		}
		var b struct {
			Error      string `json:"error_message"`
			Reason     string `json:"reason"`
			CanceledBy string `json:"canceled_by"`
			Dependency string `json:"dependency"`
		}
		if json.Unmarshal(r.Body, &b) != nil {
			continue
		}
		if ofCause && cause.canceled && r.Type == host.ReceiptCanceled && b.Dependency == "" && b.CanceledBy != "" {
			cause.by = b.CanceledBy
		}
		if end.step.ID != r.TaskID || end.step.LastError == "" {
			continue
		}
		switch {
		case r.From != GatePrincipal && b.Error == end.step.LastError:
			end.errorBy = r.From
		case r.From == GatePrincipal && b.Reason == end.step.LastError:
			end.errorBy = GatePrincipal
		}
	}
}

// endWorkflows ends, once the update's own writes are done and in its
// transaction, the workflows whose final step the update finished: the
// workflow row (fenced on running), its end receipt terminating the
// submitter's obligation, and the cancel of the steps still unfinished.
func (d *deliveryTx) endWorkflows(ctx context.Context) error {
	for len(d.ends) > 0 {
		end := d.ends[0]
		d.ends = d.ends[1:]
		if err := d.endWorkflow(ctx, end); err != nil {
			return err
		}
	}
	return nil
}

func (d *deliveryTx) endWorkflow(ctx context.Context, end workflowEnd) error {
	wf, err := d.Tx.GetWorkflow(ctx, end.tenant, end.workflow)
	if host.IsCode(err, host.CodeNotFound) {
		return nil // a step task without its workflow row: nothing to end
	}
	if err != nil {
		return err
	}
	t := end.step
	if wf.State != host.WorkflowRunning || wf.FinalTaskID != t.ID {
		return nil
	}
	cause := end.cause
	if cause == nil {
		cause = &endCause{tenant: t.Tenant, task: t.ID, state: host.FinishedAs(t)}
	}
	var steps []host.WorkflowStep // read when the end needs a step's name
	now := d.e.now()
	state := host.FinishedAs(t)
	body := map[string]any{"workflow_id": wf.ID, "name": wf.Name, "final_step": wf.FinalStep, "final_task_id": t.ID,
		"final_step_status": state}
	var typ host.ReceiptType
	switch {
	case state == host.StateSucceeded:
		wf.State, typ = host.WorkflowSucceeded, host.ReceiptWorkflowCompleted
		wf.Result = t.Result
		if t.Result != nil {
			body["result_pointer"], body["summary"] = t.Result.Pointer, t.Result.Summary
		}
		if t.WorkerID != "" {
			body["worker_id"] = t.WorkerID // who completed the final step: its summary is that worker's words
		}
	case state == host.StateCanceled && wf.CancelRequested:
		// Who canceled the workflow and why: its steps' cancels name
		// them, and the final step's end passes them on (an admin's
		// cancel of an agent's workflow is the admin's act): the
		// final step's error is the cancel's reason, at once or at
		// the end of the lease the cancel flagged.
		wf.State, typ = host.WorkflowCanceled, host.ReceiptWorkflowCanceled
		var by, reason string
		if cause.canceled {
			by = cause.by
		}
		if cause.task == t.ID && t.LastError != workflowCancelReason(wf.ID) {
			reason = t.LastError
		}
		wf.Error = canceledError(by, reason)
		if by != "" {
			body["canceled_by"] = by
		}
		if reason != "" {
			body["reason"] = reason
		}
	case state == host.StateCanceled && cause.canceled && cause.task == t.ID:
		// The final step canceled as a task (by the submitter or an
		// admin), not by the gate for a step it needed: the workflow
		// is canceled as if it had been, and makes no inbox item.
		wf.State, typ = host.WorkflowCanceled, host.ReceiptWorkflowCanceled
		wf.Error = canceledError(cause.by, t.LastError)
		body["final_step_canceled"] = true
		if cause.by != "" {
			body["canceled_by"] = cause.by
		}
		if t.LastError != "" {
			body["reason"] = t.LastError
		}
	case state == host.StateCanceled && cause.canceled:
		// A step the final step needed was canceled as a task, and the
		// gate canceled the final step for it: the submitter's (or an
		// admin's) act, as a cancel of the workflow would be.
		if steps, err = d.Tx.WorkflowSteps(ctx, wf.Tenant, wf.ID); err != nil {
			return err
		}
		name := stepName(steps, cause.task)
		wf.State, typ = host.WorkflowCanceled, host.ReceiptWorkflowCanceled
		wf.Error = "step " + name + " was canceled"
		if cause.by != "" {
			wf.Error += " by " + cause.by
			body["canceled_by"] = cause.by
		}
		wf.Error += ", so final step " + wf.FinalStep + " could not run"
		body["canceled_step"] = name
	case state == host.StateCanceled && cause.task != t.ID:
		// The gate canceled the final step because a step it needed
		// failed (through any chain of waiting steps): the error is the
		// gate's, and names that step.
		if steps, err = d.Tx.WorkflowSteps(ctx, wf.Tenant, wf.ID); err != nil {
			return err
		}
		name := stepName(steps, cause.task)
		wf.State, typ = host.WorkflowFailed, host.ReceiptWorkflowFailed
		wf.Error = "step " + name + " finished " + string(cause.state) + ", so final step " + wf.FinalStep + " could not run"
		body["error_by"], body["failed_step"] = GatePrincipal, name
	default:
		wf.State, typ = host.WorkflowFailed, host.ReceiptWorkflowFailed
		wf.Error = t.LastError
		if end.errorBy != "" {
			body["error_by"] = end.errorBy
		}
		if wf.Error == "" {
			wf.Error = "final step " + wf.FinalStep + " finished " + string(state)
			body["error_by"] = GatePrincipal
		}
		if t.DeadReason != "" {
			body["dead_reason"] = t.DeadReason
		}
	}
	if wf.Error != "" {
		wf.Error = clip(wf.Error, 2000)
		body["error_message"] = wf.Error
	}
	r := &host.Receipt{ID: host.NewID(host.PrefixReceipt), Tenant: wf.Tenant, Type: typ, From: GatePrincipal, To: wf.CreatedBy,
		TaskID: wf.ID, Parents: []string{wf.SubmitReceipt}, Body: mustJSON(body), CreatedAt: now}
	wf.Outcome = wf.State // kept when retention archives it
	wf.EndReceipt, wf.UpdatedAt, wf.CompletedAt = r.ID, now, ptr(now)
	if err := d.Tx.UpdateWorkflow(ctx, wf, host.WorkflowRunning); err != nil {
		return err
	}
	last := d.last
	d.last = nil
	err = appendReceipt(ctx, d, r, map[string]host.ReceiptType{wf.SubmitReceipt: host.ReceiptWorkflowSubmitted})
	d.last = last
	if err != nil {
		return err
	}
	// Steps still unfinished (side branches, or steps an any_succeeded
	// final step did not wait for) end with their workflow.
	return d.e.cancelSteps(ctx, d, wf, steps, GatePrincipal, "workflow "+wf.ID+" ended "+string(wf.State))
}

// stepName is the name of the step of task id among steps, or the task id
// when none is (a workflow's steps all have one).
func stepName(steps []host.WorkflowStep, id string) string {
	for _, s := range steps {
		if s.TaskID == id {
			return s.Name
		}
	}
	return id
}

// maxAfterStepsInReceipt bounds the step names a step's task.assigned
// receipt lists (JSON bytes): a fan-in of 999 steps named with 100
// characters each would pass the receipt body limit (host.MaxReceiptBody)
// and refuse a workflow the limits allow.
const maxAfterStepsInReceipt = 16 << 10

// afterStepsInReceipt puts the names of the steps a step waits on into its
// receipt body: as "after_steps" while they fit maxAfterStepsInReceipt,
// else as their count and the SHA-256 (hex) of their JSON array as sent
// ("after_steps_count", "after_steps_sha256"), which the workflow's stored
// steps (GET /v1/workflows/{id}) answer to.
func afterStepsInReceipt(body map[string]any, after []string) {
	names, _ := json.Marshal(after)
	if len(names) <= maxAfterStepsInReceipt {
		body["after_steps"] = after
		return
	}
	sum := sha256.Sum256(names)
	body["after_steps_count"], body["after_steps_sha256"] = len(after), hex.EncodeToString(sum[:])
}
