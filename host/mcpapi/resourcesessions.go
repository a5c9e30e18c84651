package mcpapi

import (
	"context"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
)

// Resource sessions and revocation for MCP clients (issue 43 item 4).

// adminRole may use the operators' tools.
var adminRole = []string{engine.RoleAdmin}

// SessionArgs are the arguments of the session tools.
type SessionArgs struct {
	SessionID string `json:"session_id,omitempty"`
	TTLMs     int64  `json:"ttl_ms,omitempty"`
}

// RevokeArgs are the arguments of revoke_resource_lease.
type RevokeArgs struct {
	LeaseID string `json:"lease_id"`
	Tenant  string `json:"tenant,omitempty"`
}

// resourceSessionTools registers the session tools (every role) and the
// operators' revoke tool (admins).
func (s *Server) resourceSessionTools() {
	sessionID := mcp.WithString("session_id", mcp.Required(), mcp.Description("The session_id from create_resource_session."))
	ttl := mcp.WithInteger("ttl_ms", mcp.Min(0), mcp.Description("TTL in milliseconds (default 60000; raised to the minimum and capped as a lease's)."))
	s.add(tool("create_resource_session", "Open a resource session",
		`Open a session to group your resource leases under one heartbeat: pass its session_id to acquire_resource_leases, then call heartbeat_resource_session (every ttl/3 is right) instead of heartbeating each lease. If you stop heartbeating, the session is lost at its expires_at with every lease in it; end_resource_session releases them all at once.`,
		returns[engine.ResourceSessionResult](), writes(false, false), props(ttl)),
		anyRole, s.createResourceSession)
	s.add(tool("heartbeat_resource_session", "Keep a resource session alive",
		`Extend the session and every lease in it to now + its TTL (or ttl_ms). session_ended means the session was lost or ended: none of its leases is held any more; stop changing those resources and start over.`,
		returns[engine.ResourceSessionResult](), writes(false, false), props(sessionID, ttl)),
		anyRole, s.heartbeatResourceSession)
	s.add(tool("end_resource_session", "End a resource session",
		`End the session and release every lease in it. Idempotent.`,
		returns[engine.ResourceSessionResult](), writes(true, false), props(sessionID)),
		anyRole, s.endResourceSession)
	s.add(tool("revoke_resource_lease", "Revoke a resource lease (operators)",
		`End a resource lease at once, in your tenant or (as an admin of the default tenant) in the one you name. Its holder's next heartbeat is refused with lease_revoked; whoever waits for the resource is woken.`,
		returns[engine.ResourceLeasesResult](), writes(true, true),
		props(mcp.WithString("lease_id", mcp.Required(), mcp.Description("The lease to revoke.")),
			mcp.WithString("tenant", mcp.Description("The lease's tenant (default: yours).")))),
		adminRole, s.revokeResourceLease)
}

func sessionTTLArg(in SessionArgs) (time.Duration, error) {
	if in.TTLMs < 0 {
		return 0, host.Errorf(host.CodeBadRequest, "ttl_ms must not be negative")
	}
	return time.Duration(min(in.TTLMs, int64(24*time.Hour/time.Millisecond))) * time.Millisecond, nil
}

func sessionSummary(res *engine.ResourceSessionResult) string {
	return fmt.Sprintf("Session %s is %s until %s with %s (server time %s).", res.Session.ID, res.Session.State,
		res.Session.ExpiresAt.Format(time.RFC3339Nano), plural(len(res.Leases), "lease", "leases"), res.ServerTime.Format(time.RFC3339Nano))
}

func (s *Server) createResourceSession(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in SessionArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if in.SessionID != "" {
		return nil, "", host.Errorf(host.CodeBadRequest, "session_id: a new session gets its own")
	}
	ttl, err := sessionTTLArg(in)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.CreateResourceSession(wctx, a, ttl)
	if err != nil {
		return nil, "", err
	}
	return res, sessionSummary(res), nil
}

func (s *Server) heartbeatResourceSession(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in SessionArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	ttl, err := sessionTTLArg(in)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.HeartbeatResourceSession(wctx, a, in.SessionID, ttl)
	if err != nil {
		return nil, "", err
	}
	return res, sessionSummary(res), nil
}

func (s *Server) endResourceSession(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in SessionArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	if in.TTLMs != 0 {
		return nil, "", host.Errorf(host.CodeBadRequest, "ttl_ms: ending a session takes none")
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.EndResourceSession(wctx, a, in.SessionID)
	if err != nil {
		return nil, "", err
	}
	return res, sessionSummary(res), nil
}

func (s *Server) revokeResourceLease(ctx context.Context, a engine.Actor, req mcp.CallToolRequest) (any, string, error) {
	var in RevokeArgs
	if err := bind(req, &in); err != nil {
		return nil, "", err
	}
	tenant := a.Tenant
	if in.Tenant != "" && in.Tenant != a.Tenant {
		if a.Tenant != auth.DefaultTenant {
			return nil, "", host.Errorf(host.CodeForbidden, "an admin of tenant %q cannot act on tenant %q", a.Tenant, in.Tenant)
		}
		tenant = in.Tenant
	}
	wctx, cancel := detached(ctx)
	defer cancel()
	res, err := s.eng.RevokeResourceLease(wctx, a, tenant, in.LeaseID)
	if err != nil {
		return nil, "", err
	}
	return res, fmt.Sprintf("Lease %s is %s (server time %s).", in.LeaseID, res.Leases[0].State, res.ServerTime.Format(time.RFC3339Nano)), nil
}
