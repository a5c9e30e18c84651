package mcpapi

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// DefaultWatchInterval is how often the tasks connected sessions care about
// are read again for status notifications; task types are read every fourth
// time for notifications/tools/list_changed.
const DefaultWatchInterval = 500 * time.Millisecond

// sessionIdle is how long an HTTP session without requests and without an
// open event stream is remembered.
const sessionIdle = time.Hour

// The live HTTP sessions are bounded, as the dashboard's are: an
// initialize past a cap ends the least recently used session of the key
// (MaxSessionsPerKey), else of its tenant (maxSessionsPerTenant), else,
// with the whole table full (maxSessions), of the tenant holding the most —
// never another key's while its own are over. An ended session's next
// request is 404, and its client starts a new one, as after a restart. One
// key initializing over and over (20,000 sessions were all kept for an
// hour) churns only its own sessions.
const (
	maxSessions = 10000
	// MaxSessionsPerKey is how many live HTTP sessions one key keeps.
	MaxSessionsPerKey    = 64
	maxSessionsPerTenant = maxSessions / 4
)

// maxWatched bounds the tasks watched for notifications.
const maxWatched = 10000

// DefaultKeyCheckInterval is how long a session's key, found valid, is
// believed before it is read again: a revoked key's event stream ends, and
// hears nothing more, within about this long.
const DefaultKeyCheckInterval = 5 * time.Second

// Answers of touchSession that refuse a session.
var (
	errForeignSession = errors.New("the session belongs to another key")
	errKeyRevoked     = errors.New("the key was revoked")
	errUnknownSession = errors.New("no live session has this id")
)

// session is a connected MCP session: who it acts as, how to send it a
// notification, and the resources it subscribed to. Tasks do not belong to
// sessions; a session only hears about the tasks of its principal.
type session struct {
	id    string
	actor engine.Actor
	// keyHash is the stored hash of the key that opened the session, read
	// again (keyValid) while the session lives; empty for a stdio session
	// served as a principal without a key (ServeStdio).
	keyHash string
	send    func(method string, params map[string]any) error
	// gone is done once the session is dropped: its open event streams end.
	gone context.Context
	end  context.CancelFunc

	mu   sync.Mutex
	subs map[string]bool // subscribed resource URIs
	// watches ends the watch of each subscribed leased resource by URI
	// (resourcewatch.go): called on unsubscribe, and its context ends with
	// the session.
	watches map[string]context.CancelFunc

	// guarded by Server.sessMu
	seen    time.Time
	streams int // open GET event streams
}

// watched is a task whose changes are notified, as last seen.
type watched struct {
	tenant, createdBy, recipient string
	version                      int64
	status                       string
	msg                          string
}

// openSession registers session id, which the gate has just issued in
// answer to actor's initialize, who came with the key of hash keyHash: from
// then on the session is actor's, and every other principal's request on it
// is refused. It is called before the answer (and the id) leaves the gate,
// so nobody can use the id first.
func (s *Server) openSession(id string, a engine.Actor, keyHash string, send func(string, map[string]any) error) *session {
	sess := &session{id: id, actor: a, keyHash: keyHash, send: send, seen: time.Now()}
	sess.gone, sess.end = context.WithCancel(context.Background())
	s.sessMu.Lock()
	var ended []*session
	if old := s.sessions[id]; old != nil { // an id is issued once; never keep two sessions under one
		s.forgetLocked(old)
		ended = append(ended, old)
	}
	if !sess.stdio() {
		ended = append(ended, s.makeRoomLocked(keyHash, a.Tenant)...)
	}
	s.sessions[id] = sess
	if !sess.stdio() {
		if s.byKey[keyHash] == nil {
			s.byKey[keyHash] = map[string]*session{}
		}
		s.byKey[keyHash][id] = sess
		s.perTenant[a.Tenant]++
	}
	s.sessMu.Unlock()
	for _, o := range ended {
		o.end()
	}
	return sess
}

// makeRoomLocked forgets the sessions a new one of key hash in tenant
// takes the place of under the caps (MaxSessionsPerKey and the others),
// and returns them to be ended.
func (s *Server) makeRoomLocked(keyHash, tenant string) []*session {
	var ended []*session
	drop := func(o *session) {
		if o != nil {
			s.forgetLocked(o)
			ended = append(ended, o)
		}
	}
	if own := s.byKey[keyHash]; len(own) >= MaxSessionsPerKey {
		drop(leastRecent(own, nil))
		return ended
	}
	if s.perTenant[tenant] >= maxSessionsPerTenant {
		drop(leastRecent(s.sessions, func(o *session) bool { return o.actor.Tenant == tenant && !o.stdio() }))
		return ended
	}
	if len(s.sessions) >= maxSessions {
		big := ""
		for t, n := range s.perTenant {
			if big == "" || n > s.perTenant[big] {
				big = t
			}
		}
		drop(leastRecent(s.sessions, func(o *session) bool { return o.actor.Tenant == big && !o.stdio() }))
	}
	return ended
}

// leastRecent is the session of m (among those keep takes, when it is
// not nil) used longest ago, preferring one without an open event stream;
// nil when there is none.
func leastRecent(m map[string]*session, keep func(*session) bool) *session {
	var best *session
	for _, o := range m {
		if keep != nil && !keep(o) {
			continue
		}
		if best == nil || (o.streams == 0) != (best.streams == 0) && o.streams == 0 ||
			(o.streams == 0) == (best.streams == 0) && o.seen.Before(best.seen) {
			best = o
		}
	}
	return best
}

// forgetLocked removes sess from the session table and its indexes, when
// it is the session under its id.
func (s *Server) forgetLocked(sess *session) {
	if s.sessions[sess.id] != sess {
		return
	}
	delete(s.sessions, sess.id)
	if own := s.byKey[sess.keyHash]; own[sess.id] == sess {
		delete(own, sess.id)
		if len(own) == 0 {
			delete(s.byKey, sess.keyHash)
		}
		if s.perTenant[sess.actor.Tenant]--; s.perTenant[sess.actor.Tenant] <= 0 {
			delete(s.perTenant, sess.actor.Tenant)
		}
	}
}

// touchSession returns session id for actor, who came with the key of hash
// keyHash. Only sessions the gate issued (openSession) and that are still
// live are served: an id it never issued, or one that ended (DELETE, idle,
// its key revoked, a restart), is errUnknownSession, and another principal's
// session errForeignSession; both are answered alike (404), so a caller
// learns nothing of other principals' sessions. A revoked key gets
// errKeyRevoked; a session whose own key was revoked is ended (the client
// starts a new one with its current key).
func (s *Server) touchSession(id string, a engine.Actor, keyHash string) (*session, error) {
	if !s.keyValid(keyHash) {
		return nil, errKeyRevoked
	}
	s.sessMu.Lock()
	sess := s.sessions[id]
	s.sessMu.Unlock()
	switch {
	case sess == nil:
		return nil, errUnknownSession
	case sess.actor != a:
		return nil, errForeignSession
	case sess.keyHash != keyHash && !s.keyValid(sess.keyHash):
		s.endSession(sess)
		return nil, errUnknownSession
	}
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if s.sessions[id] != sess {
		return nil, errUnknownSession
	}
	sess.seen = time.Now()
	return sess, nil
}

// dropSession forgets session id.
func (s *Server) dropSession(id string) {
	s.sessMu.Lock()
	sess := s.sessions[id]
	if sess != nil {
		s.forgetLocked(sess)
	}
	s.sessMu.Unlock()
	if sess != nil {
		sess.end()
	}
}

// dropSessionOf ends session id for a, its owner, and reports false (and
// keeps it) when it is another principal's or no live session.
func (s *Server) dropSessionOf(id string, a engine.Actor) bool {
	s.sessMu.Lock()
	sess, ok := s.sessions[id]
	if !ok || sess.actor != a {
		s.sessMu.Unlock()
		return false
	}
	s.forgetLocked(sess)
	s.sessMu.Unlock()
	sess.end()
	return true
}

// endSession forgets sess (not a later session of the same id) and ends its
// open event streams.
func (s *Server) endSession(sess *session) {
	s.sessMu.Lock()
	s.forgetLocked(sess)
	s.sessMu.Unlock()
	sess.end()
}

// keyCheck is what the store last said of a key.
type keyCheck struct {
	valid bool
	at    time.Time
}

// keyValid says whether the key of hash is still valid, reading the store at
// most once per KeyCheckInterval for each key (a revocation is final, so it
// is not read again). An empty hash is a session without a key to check. A
// store that does not answer leaves the last answer standing.
func (s *Server) keyValid(hash string) bool {
	if hash == "" {
		return true
	}
	now := time.Now()
	s.keyMu.Lock()
	c, known := s.keyChecks[hash]
	s.keyMu.Unlock()
	if known && (!c.valid || now.Sub(c.at) < s.cfg.KeyCheckInterval) {
		return c.valid
	}
	ctx, cancel := context.WithTimeout(s.drain, 5*time.Second)
	_, err := auth.AuthenticateHash(ctx, s.eng.Store(), hash)
	cancel()
	valid := err == nil
	if err != nil && !host.IsCode(err, host.CodeUnauthorized) {
		s.log.Debug("mcp: a session's key could not be read again", "err", err)
		valid = !known || c.valid
	}
	s.keyMu.Lock()
	if len(s.keyChecks) >= 10000 { // bound the map; a full reset only costs reads
		s.keyChecks = map[string]keyCheck{}
	}
	s.keyChecks[hash] = keyCheck{valid: valid, at: now}
	s.keyMu.Unlock()
	return valid
}

// sessionStarted records the tenant's task types (so a later change is
// noticed) and watches the principal's tasks in flight.
func (s *Server) sessionStarted(a engine.Actor) {
	ctx, cancel := context.WithTimeout(s.drain, 5*time.Second)
	defer cancel()
	if a.Role == engine.RoleAgent || a.Role == engine.RoleAdmin {
		s.sessMu.Lock()
		_, known := s.typeFP[a.Tenant]
		s.sessMu.Unlock()
		if !known {
			if tts, err := s.eng.ListTaskTypes(ctx, a.Tenant); err == nil {
				s.sessMu.Lock()
				if _, known := s.typeFP[a.Tenant]; !known {
					s.typeFP[a.Tenant] = typesFingerprint(tts)
				}
				s.sessMu.Unlock()
			}
		}
	}
	ts, _, err := s.eng.ListTasks(ctx, a, store.TaskFilter{States: []host.TaskState{host.StateWaiting, host.StateQueued, host.StateScheduled, host.StateLeased}, Limit: 100})
	if err != nil {
		return
	}
	for _, t := range ts {
		s.watch(t)
	}
}

// watch notes t so that its next changes are notified.
func (s *Server) watch(t *host.Task) {
	st, msg := mapStatus(t)
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if _, ok := s.watched[t.ID]; ok || len(s.watched) >= maxWatched {
		return
	}
	if t.State.Terminal() {
		return
	}
	s.watched[t.ID] = &watched{tenant: t.Tenant, createdBy: t.CreatedBy, recipient: t.Recipient, version: t.Version, status: string(st), msg: msg}
}

// watchLoop notifies connected sessions of task changes and of task-type
// changes until Close.
func (s *Server) watchLoop() {
	defer close(s.watchDone)
	tick := time.NewTicker(s.cfg.WatchInterval)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-s.drain.Done():
			return
		case <-tick.C:
		}
		s.tick(n)
	}
}

// tick is one round of the watcher; a bug in it is logged, not fatal.
func (s *Server) tick(n int) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("mcp: panic in the notification watcher", "panic", r)
		}
	}()
	s.pollTasks()
	if n%4 == 0 {
		s.pollTypes()
		s.pruneSessions()
	}
}

// pollTasks reads the watched tasks again and notifies the changes. A task
// no connected session hears about is dropped (a session that starts later
// watches its principal's tasks in flight again).
func (s *Server) pollTasks() {
	listeners := map[string]bool{} // tenant \x00 principal, and subscribed task URIs
	for _, sess := range s.sessionList() {
		listeners[sess.actor.Tenant+"\x00"+sess.actor.Principal] = true
		sess.mu.Lock()
		for uri := range sess.subs {
			listeners[uri] = true
		}
		sess.mu.Unlock()
	}
	s.watchMu.Lock()
	ids := make(map[string]*watched, len(s.watched))
	for id, w := range s.watched {
		if listeners[w.tenant+"\x00"+w.createdBy] || listeners[w.tenant+"\x00"+w.recipient] || listeners[TaskURIPrefix+id] {
			ids[id] = w
		} else {
			delete(s.watched, id)
		}
	}
	s.watchMu.Unlock()
	for id, w := range ids {
		ctx, cancel := context.WithTimeout(s.drain, 5*time.Second)
		t, err := s.eng.PeekTask(ctx, engine.Actor{Tenant: w.tenant, Role: engine.RoleAdmin}, id)
		cancel()
		if err != nil {
			if host.ErrorCode(err) == host.CodeNotFound {
				s.unwatch(id)
			}
			continue
		}
		if t.Version == w.version {
			continue
		}
		mt := mcpTask(t, s.pollSuggestion(s.drain, t))
		s.watchMu.Lock()
		changed := string(mt.Status) != w.status || mt.StatusMessage != w.msg
		w.version, w.status, w.msg = t.Version, string(mt.Status), mt.StatusMessage
		if t.State.Terminal() {
			delete(s.watched, id)
		}
		s.watchMu.Unlock()
		if changed {
			s.notifyTask(t, mt)
		}
	}
}

func (s *Server) unwatch(id string) {
	s.watchMu.Lock()
	delete(s.watched, id)
	s.watchMu.Unlock()
}

// notifyTask sends notifications/tasks/status to the sessions of the task's
// requester and recipient, and notifications/resources/updated to the
// sessions subscribed to it; only to sessions whose key may read the task
// (a worker key named as an agent is neither).
func (s *Server) notifyTask(t *host.Task, mt mcp.Task) {
	params := toParams(mt)
	uri := TaskURIPrefix + t.ID
	for _, sess := range s.sessionList() {
		a := sess.actor
		if !engine.Visible(a, t) {
			continue
		}
		if a.Principal == t.CreatedBy || a.Principal == t.Recipient {
			s.send(sess, "notifications/tasks/status", params)
		}
		sess.mu.Lock()
		sub := sess.subs[uri]
		sess.mu.Unlock()
		if sub {
			s.send(sess, "notifications/resources/updated", map[string]any{"uri": uri})
		}
	}
}

// pollTypes sends notifications/tools/list_changed to a tenant's agent
// sessions when its task types changed.
func (s *Server) pollTypes() {
	tenants := map[string]bool{}
	for _, sess := range s.sessionList() {
		if r := sess.actor.Role; r == engine.RoleAgent || r == engine.RoleAdmin {
			tenants[sess.actor.Tenant] = true
		}
	}
	for tenant := range tenants {
		ctx, cancel := context.WithTimeout(s.drain, 5*time.Second)
		tts, err := s.eng.ListTaskTypes(ctx, tenant)
		cancel()
		if err != nil {
			continue
		}
		fp := typesFingerprint(tts)
		s.sessMu.Lock()
		old, known := s.typeFP[tenant]
		s.typeFP[tenant] = fp
		s.sessMu.Unlock()
		if !known || old == fp {
			continue
		}
		for _, sess := range s.sessionList() {
			if r := sess.actor.Role; sess.actor.Tenant == tenant && (r == engine.RoleAgent || r == engine.RoleAdmin) {
				s.send(sess, "notifications/tools/list_changed", nil)
			}
		}
	}
}

// pruneSessions forgets HTTP sessions idle for sessionIdle without an open
// event stream (a client that went away without DELETE), and drops the
// sessions whose key was revoked, ending their open event streams.
func (s *Server) pruneSessions() {
	cut := time.Now().Add(-sessionIdle)
	var keyed []*session
	s.sessMu.Lock()
	for _, sess := range s.sessions {
		if sess.streams == 0 && sess.seen.Before(cut) && !sess.stdio() {
			s.forgetLocked(sess)
			sess.end()
			continue
		}
		if sess.keyHash != "" {
			keyed = append(keyed, sess)
		}
	}
	s.sessMu.Unlock()
	for _, sess := range keyed {
		if !s.keyValid(sess.keyHash) {
			s.endSession(sess)
		}
	}
}

// sessionKey carries a request's session in its context.
type sessionKey struct{}

// withSession is ctx carrying sess.
func withSession(ctx context.Context, sess *session) context.Context {
	return context.WithValue(ctx, sessionKey{}, sess)
}

// sessionFrom is the session ctx carries, or nil.
func sessionFrom(ctx context.Context) *session {
	sess, _ := ctx.Value(sessionKey{}).(*session)
	return sess
}

// bound is ctx, also done once sess is dropped (its key revoked, its
// client gone) or, for a request that has no session of its own (protocol
// 2026-07-28), once its key is revoked: a request still running then (a
// lease call's long-poll, a tasks/result wait) ends instead of acting for a
// key that no longer holds.
func (s *Server) bound(ctx context.Context, sess *session) (context.Context, context.CancelFunc) {
	if sess == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	switch {
	case sess.gone != nil:
		stop := context.AfterFunc(sess.gone, cancel)
		return ctx, func() { stop(); cancel() }
	case sess.keyHash != "":
		go func() {
			tick := time.NewTicker(s.cfg.KeyCheckInterval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if !s.keyValid(sess.keyHash) {
						cancel()
						return
					}
				}
			}
		}()
	}
	return ctx, cancel
}

// untilExpiry is d, how long a call may wait (a long-poll), cut to the time
// left before the caller's credential expires (auth.ExpiryFromContext): a
// wait opened with an access token answers by its exp as if its time had
// run out, and the client calls again with its fresh token. A request's
// work other than a wait is not cut short.
func untilExpiry(ctx context.Context, d time.Duration) time.Duration {
	if exp, ok := auth.ExpiryFromContext(ctx); ok {
		d = min(d, max(time.Until(exp), 0))
	}
	return d
}

func (sess *session) stdio() bool { return len(sess.id) > 6 && sess.id[:6] == "stdio-" }

func (s *Server) sessionList() []*session {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	out := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		out = append(out, sess)
	}
	return out
}

// send delivers a notification; a session without a way to receive one now
// (an HTTP session without an open event stream) misses it, and a session
// whose key was revoked is dropped instead.
func (s *Server) send(sess *session, method string, params map[string]any) {
	if sess.send == nil {
		return
	}
	if !s.keyValid(sess.keyHash) {
		s.endSession(sess)
		return
	}
	if err := sess.send(method, params); err != nil {
		s.log.Debug("mcp notification not delivered", "session", sess.id, "method", method, "err", err)
	}
}

// toParams is v as notification params.
func toParams(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}
