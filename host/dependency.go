package host

import "time"

// DependencyRule says when a task that waits on others (its after list) may
// run.
type DependencyRule string

// Dependency rules.
const (
	// RuleAllSucceeded (the default): run when every dependency succeeded;
	// canceled as soon as one dead-letters or is canceled.
	RuleAllSucceeded DependencyRule = "all_succeeded"
	// RuleAnySucceeded: run as soon as one dependency succeeded; canceled
	// when every one finished without success.
	RuleAnySucceeded DependencyRule = "any_succeeded"
	// RuleAllFinished: run when every dependency finished, however it
	// finished; the worker sees each one's outcome.
	RuleAllFinished DependencyRule = "all_finished"
)

// MaxDependencies is the most tasks one task may wait on.
const MaxDependencies = 1000

// MaxWaiters is the most tasks that may wait on one unfinished task by
// default (engine.Config.MaxWaiters).
const MaxWaiters = 1000

// CreatorWaiterReserve is the part of a task's waiter bound (maxWaiters)
// kept for the principal that created the task: any other principal (its
// recipient, an admin) may bring the task's open waiters up to maxWaiters
// minus it, only the creator up to maxWaiters. So another principal that
// may read a task cannot use up the room its creator's own fan-in needs:
// of the default 1,000, 100 are the creator's. A bound under 10 keeps
// nothing back.
func CreatorWaiterReserve(maxWaiters int) int { return maxWaiters / 10 }

// MaxDependencyDepth is the deepest a chain of waiting tasks may be: a task
// naming a waiting dependency of this depth is refused, so one terminal
// write settles a chain of bounded depth.
const MaxDependencyDepth = 32

// Valid reports whether r is a known rule.
func (r DependencyRule) Valid() bool {
	return r == RuleAllSucceeded || r == RuleAnySucceeded || r == RuleAllFinished
}

// Dependency is one edge: Waiter waits on DependsOn under Rule. DepState is
// the state DependsOn finished in, "" while it has not; the transaction
// that writes a dependency's terminal state records it on each of its
// edges.
type Dependency struct {
	Tenant    string
	Waiter    string
	DependsOn string
	Rule      DependencyRule
	// Position is the dependency's place in the waiter's after list.
	Position int
	DepState TaskState
	// Depth is the waiter's depth: 1 + the largest depth of its
	// dependencies that are waiting themselves (1 when none is), at most
	// MaxDependencyDepth.
	Depth int
}

// DependencyVerdict is what a waiter's dependencies decide.
type DependencyVerdict int

// Verdicts of SettleDependencies.
const (
	// VerdictWait: the rule is neither met nor broken yet.
	VerdictWait DependencyVerdict = iota
	// VerdictReady: the rule is met; the waiter may be offered.
	VerdictReady
	// VerdictCancel: the rule can no longer be met; the waiter is canceled.
	VerdictCancel
)

// finishedUnsuccessfully reports whether s ends a task without success.
// An archived dependency finished before it was archived; its recorded
// DepState is the state it finished in, so archived is not seen here.
func finishedUnsuccessfully(s TaskState) bool {
	return s == StateDeadLetter || s == StateCanceled
}

// DependencyTally counts a waiter's dependencies by how they finished.
type DependencyTally struct {
	Rule      DependencyRule
	Pending   int // not finished
	Succeeded int
	Failed    int // dead letter or canceled
}

// Decide is the verdict of t's rule on its counts.
func (t DependencyTally) Decide() DependencyVerdict {
	switch t.Rule {
	case RuleAnySucceeded:
		if t.Succeeded > 0 {
			return VerdictReady
		}
		if t.Pending == 0 {
			return VerdictCancel
		}
	case RuleAllFinished:
		if t.Pending == 0 {
			return VerdictReady
		}
	default: // all_succeeded
		if t.Failed > 0 {
			return VerdictCancel
		}
		if t.Pending == 0 {
			return VerdictReady
		}
	}
	return VerdictWait
}

// Add counts n dependencies that finished in s ("" while they have not).
func (t *DependencyTally) Add(s TaskState, n int) {
	switch {
	case s == StateSucceeded:
		t.Succeeded += n
	case finishedUnsuccessfully(s):
		t.Failed += n
	default:
		t.Pending += n
	}
}

// SettleDependencies decides a waiter's fate from the finishing states of
// its dependencies ("" for one not finished) under rule. With VerdictCancel
// it also returns the index of a dependency that decided it: the first
// failure under all_succeeded, the last under any_succeeded.
func SettleDependencies(rule DependencyRule, states []TaskState) (DependencyVerdict, int) {
	t := DependencyTally{Rule: rule}
	at := -1
	for i, s := range states {
		t.Add(s, 1)
		if finishedUnsuccessfully(s) && (at < 0 || rule != RuleAllSucceeded) {
			at = i
		}
	}
	v := t.Decide()
	if v != VerdictCancel {
		at = -1
	}
	return v, at
}

// DependencyOutcome is what a worker is given, with its offer, of one task
// its task waited on: how it finished and where its result is.
type DependencyOutcome struct {
	TaskID      string     `json:"task_id"`
	TaskType    string     `json:"task_type"`
	Status      TaskState  `json:"status"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Result is the dependency's result (pointer, checksum, summary,
	// artifacts) when it succeeded.
	Result *Result `json:"result,omitempty"`
	// Error and DeadReason say why it failed, when it did.
	Error      string `json:"error_message,omitempty"`
	DeadReason string `json:"dead_reason,omitempty"`
	// Truncated is set when the offer's outcomes had reached
	// MaxOutcomeBytes before this one: it keeps its id, type, status and
	// completed_at, but not its result, error_message or dead_reason
	// (read them with the task).
	Truncated bool `json:"truncated,omitempty"`
}

// MaxOutcomeBytes bounds the encoded dependency outcomes of one offer.
// Outcomes after the bound keep their status but drop their result and
// errors, marked Truncated, so a lease of many tasks with many dependencies
// with large results stays small.
const MaxOutcomeBytes = 1 << 20

// Truncate drops what may be large in o (result, error, dead reason) and
// marks it Truncated.
func (o *DependencyOutcome) Truncate() {
	o.Result, o.Error, o.DeadReason, o.Truncated = nil, "", "", true
}

// OutcomeOf is the outcome a waiter's worker sees of dependency t.
func OutcomeOf(t *Task) DependencyOutcome {
	return DependencyOutcome{TaskID: t.ID, TaskType: t.Type, Status: t.State, CompletedAt: t.CompletedAt,
		Result: t.Result, Error: t.LastError, DeadReason: t.DeadReason}
}

// FinishedAs is the state a task finished in, "" when it has not finished:
// an archived task finished as succeeded (it has a result), dead_letter (it
// has a dead reason) or canceled.
func FinishedAs(t *Task) TaskState {
	switch {
	case t.State == StateArchived && t.Result != nil:
		return StateSucceeded
	case t.State == StateArchived && t.DeadReason != "":
		return StateDeadLetter
	case t.State == StateArchived:
		return StateCanceled
	case t.State.Terminal():
		return t.State
	}
	return ""
}
