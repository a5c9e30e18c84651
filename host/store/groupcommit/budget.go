package groupcommit

import (
	"strings"
	"sync"
	"time"
)

// The enqueue budget: the share rule over time (RATIONALE.md, "Completions
// first under overload"). The per-batch rule of Next bounds the bulk share
// of one batch, but serial workers keep few prompt requests in flight, so
// most batches find none waiting and fill with bulk ones. The budget holds
// bulk requests back before they are queued instead: while it is in force,
// each prompt request queued earns Ratio bulk tokens (up to Burst), and a
// bulk request waits for a token, in order, at most MaxHold.
//
// It is in force for a key only while that key has a backlog and
// completions arrive: the store's last claim of ready tasks for the key (a
// lease call) took all it asked for, within Window, and a prompt request
// was queued within Window. Otherwise a bulk request of the key passes at
// once, so a queue that only fills, a task type whose workers keep up, or
// a tenant beside another one's backlog enqueues at full speed. The tokens
// are shared: the writer they pace is one.
//
// Keys are scopes (the store's tenant) and their parts (Key(tenant, type)):
// a claim naming types finds a backlog of those parts, one naming none of
// the whole scope. A bulk request for a part is in force when that part or
// its scope is; one for a whole scope (its parts unknown) when the scope or
// any of its parts is. A claim that found no backlog ends its key's, and a
// scope's ends its parts' too.

// Budget constants. A bulk request waits at most MaxHold for a token; it
// is then queued as it would have been without the budget, and served by
// Next's per-batch rule.
const (
	// Ratio is the bulk tokens one prompt request earns.
	Ratio = 1.0
	// Burst is the most tokens saved; the budget starts full.
	Burst = 64
	// Window is how recent the backlog and the last prompt request must be
	// for the budget to be in force.
	Window = time.Second
	// MaxHold is the longest a bulk request waits for a token.
	MaxHold = 500 * time.Millisecond
)

// budget is the enqueue budget's state. Its methods take the time, so the
// rule is tested on a clock of the test's own.
type budget struct {
	mu         sync.Mutex
	tokens     float64
	lastPrompt time.Time // when a prompt request was last queued
	// backlogAt is when each key's last claim found a backlog; a key whose
	// last claim found none, or whose backlog is Window old, is absent.
	backlogAt map[string]time.Time
	// waiting are the held bulk requests in arrival order; a grant closes
	// the head's channel.
	waiting []hold
}

// hold is one held bulk request: its keys and the channel a grant closes.
type hold struct {
	keys []string
	ch   chan struct{}
}

// keySep joins a scope and its part in a key (Key); neither a tenant nor a
// task type holds it.
const keySep = "\x00"

// Key is the budget's key of part (a task type) within scope (a tenant);
// with no part, scope's own.
func Key(scope, part string) string {
	if part == "" {
		return scope
	}
	return scope + keySep + part
}

// scopeOf is the scope of a part's key, or "" for a scope's own key.
func scopeOf(key string) string {
	if i := strings.Index(key, keySep); i >= 0 {
		return key[:i]
	}
	return ""
}

// isPartOf reports whether key is a part's key within scope.
func isPartOf(key, scope string) bool {
	return len(key) > len(scope)+len(keySep) && strings.HasPrefix(key, scope+keySep)
}

// inForceLocked reports whether a bulk request for any of keys is under the
// budget: its key or its key's scope has a backlog, or, for a scope's own
// key, one of its parts has.
func (b *budget) inForceLocked(keys []string) bool {
	for _, k := range keys {
		if _, on := b.backlogAt[k]; on {
			return true
		}
		if sc := scopeOf(k); sc != "" {
			if _, on := b.backlogAt[sc]; on {
				return true
			}
			continue
		}
		for on := range b.backlogAt {
			if isPartOf(on, k) {
				return true
			}
		}
	}
	return false
}

func newBudget() *budget { return &budget{tokens: Burst, backlogAt: map[string]time.Time{}} }

// activeLocked reports whether the budget is in force for keys at now. It
// first forgets the backlogs older than Window and, when it forgot one,
// lets go the requests held for keys no longer in force (the held
// requests are walked only then, not on every call).
func (b *budget) activeLocked(now time.Time, keys []string) bool {
	prompt := now.Sub(b.lastPrompt) < Window
	forgot := false
	for k, at := range b.backlogAt {
		if !prompt || now.Sub(at) >= Window {
			delete(b.backlogAt, k)
			forgot = true
		}
	}
	if forgot {
		b.releaseLocked()
	}
	return b.inForceLocked(keys)
}

// releaseLocked lets go every held request whose key is not in force;
// when no key is in force, the tokens are refilled.
func (b *budget) releaseLocked() {
	if len(b.backlogAt) == 0 {
		b.tokens = Burst
	}
	kept := b.waiting[:0]
	for _, h := range b.waiting {
		if b.inForceLocked(h.keys) {
			kept = append(kept, h)
		} else {
			close(h.ch)
		}
	}
	clear(b.waiting[len(kept):])
	b.waiting = kept
}

// prompt records a prompt request queued at now: while some key is in
// force it earns Ratio tokens, which go to the held bulk requests first,
// oldest first.
func (b *budget) prompt(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastPrompt = now
	b.activeLocked(now, nil)
	if len(b.backlogAt) == 0 {
		return
	}
	b.tokens = min(b.tokens+Ratio, Burst)
	for len(b.waiting) > 0 && b.tokens >= 1 {
		b.tokens--
		close(b.waiting[0].ch)
		b.waiting[0] = hold{}
		b.waiting = b.waiting[1:]
	}
}

// claimed records a claim of ready tasks for keys at now: backlog is
// whether it took all it asked for (more may be ready). A claim that took
// fewer ends its keys' backlogs (a scope's, its parts' too) and lets every
// request held for them alone go.
func (b *budget) claimed(now time.Time, keys []string, backlog bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		if backlog {
			b.backlogAt[k] = now
			continue
		}
		delete(b.backlogAt, k)
		for on := range b.backlogAt {
			if isPartOf(on, k) {
				delete(b.backlogAt, on)
			}
		}
	}
	if backlog {
		return
	}
	b.activeLocked(now, nil)
	b.releaseLocked()
}

// admit is the arrival at now of a bulk request for keys. It returns nil
// when the request may be queued at once, else a channel closed when it is
// granted a token or let go; the caller stops waiting after MaxHold and
// then calls cancel.
func (b *budget) admit(now time.Time, keys []string) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.activeLocked(now, keys) {
		return nil
	}
	if len(b.waiting) == 0 && b.tokens >= 1 {
		b.tokens--
		return nil
	}
	ch := make(chan struct{})
	b.waiting = append(b.waiting, hold{keys: keys, ch: ch})
	return ch
}

// cancel withdraws a held request that stopped waiting (its hold passed or
// its context ended); one granted already keeps its token.
func (b *budget) cancel(ch <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, h := range b.waiting {
		if h.ch == ch {
			b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
			return
		}
	}
}

// held is how many bulk requests wait for a token.
func (b *budget) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}
