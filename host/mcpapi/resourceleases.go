package mcpapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// Resource leases (KLIS-3) for agents: lock what you are about to change.

// AcquireArgs are the arguments of acquire_resource_leases.
type AcquireArgs struct {
	Intents     []engine.ResourceIntent `json:"intents"`
	TTLMs       int64                   `json:"ttl_ms,omitempty"`
	PriorityAt  *time.Time              `json:"priority_at,omitempty"`
	WaitSeconds float64                 `json:"wait_seconds,omitempty"`
	SessionID   string                  `json:"session_id,omitempty"`
}

// AcquireToolResult is acquire_resource_leases' answer: the granted manifest,
// or, when refused, the conflicting lease and the wait-die verdict.
type AcquireToolResult struct {
	Granted bool `json:"granted"`
	*engine.AcquireResult
	Error    string              `json:"error,omitempty"`
	Detail   string              `json:"detail,omitempty"`
	Conflict *host.ResourceLease `json:"conflict,omitempty"`
	// Ahead is the older waiter the request is behind, when no live lease
	// conflicts: waiters are served oldest first.
	Ahead      *host.ResourceWaiter `json:"ahead,omitempty"`
	WaitDie    string               `json:"wait_die,omitempty"`
	PriorityAt *time.Time           `json:"your_priority_at,omitempty"`
	// ServerTime is the gate's clock when the refusal was decided (a
	// granted answer carries it in the manifest).
	ServerTime time.Time `json:"server_time,omitzero"`
}

// LeaseIDsArgs name resource leases.
type LeaseIDsArgs struct {
	LeaseIDs []string `json:"lease_ids"`
	TTLMs    int64    `json:"ttl_ms,omitempty"`
}

// intentItem is the JSON Schema of one {resource, predicate} intent.
func intentItem() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"resource":  map[string]any{"type": "string", "description": "The resource name (at most 512 bytes)."},
			"predicate": map[string]any{"type": "string", "enum": []string{"READS", "MUTATES"}},
		},
		"required": []string{"resource", "predicate"},
	}
}

// resourceLeaseTools registers the resource lease tools, for every role.
func (s *Server) resourceLeaseTools() {
	leaseIDs := mcp.WithArray("lease_ids", mcp.Required(), mcp.WithStringItems(), mcp.MaxItems(engine.MaxResourceLeaseIDs), mcp.Description("The lease_id values from acquire_resource_leases (at most 100)."))
	s.add(tool("acquire_resource_leases", "Lock resources before changing them",
		`Acquire leases on the resources you are about to read or change (KLIS-3), all together or none: intents is a list of {resource, predicate}, predicate READS (shared with other readers) or MUTATES (exclusive). Resources are strings such as "FILE:/repo/src/x.go" or "REPO:github.com/a/b".
Granted: keep every lease_id; heartbeat_resource_leases before expires_at (every ttl/3 is right), and release_resource_leases when done. Each lease has a fencing_token, larger than every earlier grant's on that resource: pass it with every change you make to the resource (a header, a column, a conditional write) so that the system holding it can refuse a change from a holder whose lease already ended. A lease you stop heartbeating expires: from then on assume you no longer hold it.
While you hold leases your priority_at is bound to theirs: send none (or the one you were given); an older one is refused.
Refused (granted=false): conflict names the lease in the way, or ahead the older request waiting for it (waiters are served oldest first: a waiting writer goes before new readers, a queued task that needs the resource before you). wait_die "die" means you are younger than its holder: do not wait; retry later, keeping your priority_at (your_priority_at) to keep your seniority. wait_die "wait" means you are older: call again with the same priority_at and wait_seconds to wait for it.`,
		returns[AcquireToolResult](), writes(false, false),
		props(
			mcp.WithArray("intents", mcp.Required(), mcp.Items(intentItem()), mcp.Description("The (resource, predicate) pairs to lease together.")),
			mcp.WithInteger("ttl_ms", mcp.Min(1), mcp.Description("Lease TTL in milliseconds. Default 60000; raised to the minimum (100 ms unless configured) and capped (5 minutes unless configured).")),
			mcp.WithString("priority_at", dateTime(), mcp.Description("Your request's wait-die timestamp (RFC 3339). Default: now. Send the same value again when you retry.")),
			mcp.WithNumber("wait_seconds", mcp.Min(0), mcp.Description(fmt.Sprintf("When you are older than every conflicting holder, wait up to this long (at most %d).", int(s.cfg.MaxLeaseWait.Seconds())))),
			mcp.WithString("session_id", mcp.Description("Acquire in your session (create_resource_session): the leases follow the session's heartbeats and end with it; ttl_ms is then the session's.")),
		)),
		anyRole, s.acquireResourceLeases)

	s.add(tool("list_resource_holders", "Who holds resources now",
		`Ask who holds resources without trying to take them: the leases honoured now on each named resource in your tenant (holder, predicate, expires_at, fencing_token). Nothing is acquired; an acquire a moment later may still find them changed.
With wait_seconds, wait until nothing in the way of taking them (predicate: what you mean to take, default MUTATES) is held, or the wait ends: the answer lists what is still in the way (none: free). This is how to wait after a refusal with wait_die "die": you hold nothing while you wait, then acquire again with your priority_at. To hear of releases without a call waiting, subscribe to asyncgate://resource-leases/{resource} (resources/subscribe).`,
		returns[engine.ResourceLeasesResult](), readOnly(),
		props(mcp.WithArray("resources", mcp.Required(), mcp.WithStringItems(), mcp.Description("Resource names, as you would acquire them (at most 64).")),
			mcp.WithNumber("wait_seconds", mcp.Min(0), mcp.Description(fmt.Sprintf("Wait up to this long (at most %d) until nothing in the way of taking them is held.", int(s.cfg.MaxLeaseWait.Seconds())))),
			mcp.WithString("predicate", mcp.Enum("READS", "MUTATES"), mcp.Description("With wait_seconds: what you mean to take (default MUTATES: wait for every lease; READS: for MUTATES leases only).")))),
		anyRole, s.listResourceHolders)

	s.add(tool("heartbeat_resource_leases", "Keep resource leases alive",
		`Extend your resource leases by their TTL (or ttl_ms) from the server's now: all of them, or none. A lease that already expired or was released is a lease_expired error: stop changing that resource and acquire it again. verify_required means you declared a restart: call verify_resource_leases first.`,
		returns[engine.ResourceLeasesResult](), writes(false, false),
		props(leaseIDs, mcp.WithInteger("ttl_ms", mcp.Min(1), mcp.Description("A new TTL in milliseconds from now on (raised to the minimum, capped); the expiry becomes now + this TTL, so a shorter one shortens the lease. Default: the lease's own.")))),
		anyRole, s.heartbeatResourceLeases)

	s.add(tool("release_resource_leases", "Release resource leases",
		`Release resource leases you hold. Idempotent: releasing a lease that is already released or expired succeeds and reports its state.`,
		returns[engine.ResourceLeasesResult](), writes(true, false), props(leaseIDs)),
		anyRole, s.releaseResourceLeases)

	s.add(tool("verify_resource_leases", "Verify resource leases (VERIFY_ALL)",
		`The reality check after a restart: the current state of your leases by the server clock (active, released or expired). Name lease_ids, or none for every lease you hold. Leases you declared a restart for resume: heartbeats are accepted again. Trust this answer over anything you remember.`,
		returns[engine.ResourceLeasesResult](), writes(true, false),
		props(mcp.WithArray("lease_ids", mcp.WithStringItems(), mcp.MaxItems(engine.MaxResourceLeaseIDs), mcp.Description("Lease ids to check (at most 100). Default: every active lease you hold.")))),
		anyRole, s.verifyResourceLeases)
	s.resourceLeaseResources()
	s.resourceSessionTools()
}

func (s *Server) acquireResourceLeases(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in AcquireArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if in.WaitSeconds < 0 || in.WaitSeconds != in.WaitSeconds {
		return nil, "", host.Errorf(host.CodeBadRequest, "wait_seconds must not be negative")
	}
	if in.TTLMs < 0 {
		return nil, "", host.Errorf(host.CodeBadRequest, "ttl_ms must not be negative")
	}
	// Capped before it becomes a Duration: a huge wait_seconds would
	// overflow to a negative one, that is no wait at all.
	wait := s.cfg.MaxLeaseWait
	if in.WaitSeconds < wait.Seconds() {
		wait = time.Duration(in.WaitSeconds * float64(time.Second))
	}
	wait = untilExpiry(ctx, wait)
	ttl := time.Duration(min(in.TTLMs, int64(24*time.Hour/time.Millisecond))) * time.Millisecond
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.drain, cancel)
	defer stop()
	res, err := s.eng.AcquireResources(lctx, engine.AcquireRequest{Tenant: a.Tenant, Holder: a.Principal, Intents: in.Intents,
		TTL: ttl, PriorityAt: in.PriorityAt, Wait: wait, SessionID: in.SessionID})
	var ce *engine.ResourceConflictError
	if errors.As(err, &ce) {
		// A refusal is an answer the agent acts on, not a failure of the tool.
		wd := "die"
		if ce.MayWait {
			wd = "wait"
		}
		prio := ce.PriorityAt
		holder, ahead := s.eng.ConflictSeenBy(ctx, a, ce)
		return AcquireToolResult{Error: ce.Err.Code, Detail: ce.Err.Detail, Conflict: holder, Ahead: ahead, WaitDie: wd, PriorityAt: &prio, ServerTime: ce.ServerTime},
			"Refused: " + ce.Err.Detail, nil
	}
	if err != nil {
		return nil, "", err
	}
	return AcquireToolResult{Granted: true, AcquireResult: res},
		fmt.Sprintf("Granted %s until %s. Heartbeat before then; release when done.", plural(len(res.Leases), "lease", "leases"),
			res.Leases[0].ExpiresAt.Format(time.RFC3339Nano)), nil
}

func (s *Server) heartbeatResourceLeases(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in LeaseIDsArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if in.TTLMs < 0 {
		return nil, "", host.Errorf(host.CodeBadRequest, "ttl_ms must not be negative")
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	ttl := time.Duration(min(in.TTLMs, int64(24*time.Hour/time.Millisecond))) * time.Millisecond
	res, err := s.eng.HeartbeatResources(wctx, a, in.LeaseIDs, ttl)
	if err != nil {
		return nil, "", err
	}
	return res, fmt.Sprintf("Extended %s.", plural(len(res.Leases), "lease", "leases")), nil
}

func (s *Server) releaseResourceLeases(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in LeaseIDsArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if in.TTLMs != 0 {
		return nil, "", host.Errorf(host.CodeBadRequest, "ttl_ms is for heartbeats")
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.ReleaseResources(wctx, a, in.LeaseIDs)
	if err != nil {
		return nil, "", err
	}
	return res, fmt.Sprintf("Released %s.", plural(len(res.Leases), "lease", "leases")), nil
}

func (s *Server) verifyResourceLeases(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		LeaseIDs []string `json:"lease_ids,omitempty"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.VerifyResources(wctx, a, engine.VerifyRequest{IDs: in.LeaseIDs})
	if err != nil {
		return nil, "", err
	}
	held := 0
	for _, l := range res.Leases {
		if l.State == host.ResourceLeaseActive {
			held++
		}
	}
	return res, fmt.Sprintf("%d of %s still held (server time %s).", held, plural(len(res.Leases), "lease", "leases"),
		res.ServerTime.Format(time.RFC3339Nano)), nil
}

func (s *Server) listResourceHolders(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in struct {
		Resources   []string            `json:"resources"`
		WaitSeconds *float64            `json:"wait_seconds"`
		Predicate   host.LeasePredicate `json:"predicate"`
	}
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	var res *engine.ResourceLeasesResult
	var err error
	if in.WaitSeconds == nil && in.Predicate == "" {
		res, err = s.eng.ResourceHolders(ctx, a, in.Resources)
	} else {
		var wait time.Duration
		if in.WaitSeconds != nil {
			if *in.WaitSeconds < 0 {
				return nil, "", host.Errorf(host.CodeBadRequest, "wait_seconds: must not be negative")
			}
			wait = time.Duration(min(*in.WaitSeconds, s.cfg.MaxLeaseWait.Seconds()) * float64(time.Second))
		}
		wait = untilExpiry(ctx, wait)
		res, err = s.eng.AwaitResources(ctx, a, engine.AwaitRequest{Resources: in.Resources, Predicate: in.Predicate, Wait: wait})
	}
	if err != nil {
		return nil, "", err
	}
	if len(res.Leases) == 0 {
		return res, "Nobody holds them now (server time " + res.ServerTime.Format(time.RFC3339Nano) + ").", nil
	}
	return res, fmt.Sprintf("%s held now (server time %s).", plural(len(res.Leases), "lease", "leases"), res.ServerTime.Format(time.RFC3339Nano)), nil
}
