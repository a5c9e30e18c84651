package host

import "testing"

func TestSettleDependencies(t *testing.T) {
	const (
		ok   = StateSucceeded
		dead = StateDeadLetter
		gone = StateCanceled
		open = TaskState("")
	)
	cases := []struct {
		rule   DependencyRule
		states []TaskState
		want   DependencyVerdict
		at     int
	}{
		{RuleAllSucceeded, []TaskState{ok, ok}, VerdictReady, -1},
		{RuleAllSucceeded, []TaskState{ok, open}, VerdictWait, -1},
		{RuleAllSucceeded, []TaskState{open, dead}, VerdictCancel, 1},
		{RuleAllSucceeded, []TaskState{gone, open}, VerdictCancel, 0},
		{RuleAnySucceeded, []TaskState{dead, open}, VerdictWait, -1},
		{RuleAnySucceeded, []TaskState{dead, ok}, VerdictReady, -1},
		{RuleAnySucceeded, []TaskState{open, ok}, VerdictReady, -1},
		{RuleAnySucceeded, []TaskState{dead, gone}, VerdictCancel, 1},
		{RuleAllFinished, []TaskState{dead, gone, ok}, VerdictReady, -1},
		{RuleAllFinished, []TaskState{dead, open}, VerdictWait, -1},
	}
	for _, c := range cases {
		v, at := SettleDependencies(c.rule, c.states)
		if v != c.want || at != c.at {
			t.Errorf("%s %v = %d at %d, want %d at %d", c.rule, c.states, v, at, c.want, c.at)
		}
	}
}

func TestFinishedAs(t *testing.T) {
	for _, c := range []struct {
		t    Task
		want TaskState
	}{
		{Task{State: StateLeased}, ""},
		{Task{State: StateWaiting}, ""},
		{Task{State: StateDeadLetter}, StateDeadLetter},
		{Task{State: StateArchived, Result: &Result{Pointer: "x"}}, StateSucceeded},
		{Task{State: StateArchived, DeadReason: ReasonFatalError}, StateDeadLetter},
		{Task{State: StateArchived}, StateCanceled},
	} {
		if got := FinishedAs(&c.t); got != c.want {
			t.Errorf("FinishedAs(%s) = %q, want %q", c.t.State, got, c.want)
		}
	}
}

func TestWaitingTransitions(t *testing.T) {
	if !CanTransition(StateWaiting, EventReady, StateQueued) || !CanTransition(StateWaiting, EventCancel, StateCanceled) {
		t.Fatal("a waiting task can neither become ready nor be canceled")
	}
	if CanApply(StateWaiting, EventLease) || StateWaiting.Terminal() || !StateWaiting.Valid() {
		t.Fatal("a waiting task is leasable, terminal or unknown")
	}
}

// The creator's share of a task's waiter bound: a tenth, none under ten,
// and the others' share never empty.
func TestCreatorWaiterReserve(t *testing.T) {
	for _, c := range []struct{ bound, want int }{{MaxWaiters, 100}, {10, 1}, {9, 0}, {3, 0}, {1, 0}, {1001, 100}} {
		if got := CreatorWaiterReserve(c.bound); got != c.want || c.bound-got < 1 {
			t.Errorf("CreatorWaiterReserve(%d) = %d, want %d", c.bound, got, c.want)
		}
	}
}
