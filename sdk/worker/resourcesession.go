package worker

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"
)

// Resource sessions (issue 43 item 4): group leases under one heartbeat.
// Create a session, acquire with AcquireRequest.SessionID, heartbeat the
// session (every TTL/3) instead of each lease; losing the session (no
// heartbeat before its expiry) loses every lease in it, and EndSession
// releases them all.

// ResourceSession is a session as the gate reports it.
type ResourceSession struct {
	ID        string     `json:"session_id"`
	Holder    string     `json:"holder"`
	State     string     `json:"state"` // active, ended or expired
	TTLMs     int64      `json:"ttl_ms"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// SessionState answers a session call: the session and the leases granted in it.
type SessionState struct {
	Session    ResourceSession `json:"session"`
	Leases     []ResourceLease `json:"leases"`
	ServerTime time.Time       `json:"server_time"`
}

// CreateSession opens a session with ttl (0: the gate's default).
func (c *Client) CreateSession(ctx context.Context, ttl time.Duration) (*SessionState, error) {
	return c.sessionCall(ctx, "/v1/resource-sessions", ttl)
}

// HeartbeatSession extends the session and every lease in it to the gate's
// now + its TTL (ttl, when not 0, becomes the new TTL). A lost or ended
// session is an error IsSessionEnded reports.
func (c *Client) HeartbeatSession(ctx context.Context, id string, ttl time.Duration) (*SessionState, error) {
	return c.sessionCall(ctx, "/v1/resource-sessions/"+url.PathEscape(id)+"/heartbeat", ttl)
}

// EndSession ends the session and releases every lease in it (idempotent).
func (c *Client) EndSession(ctx context.Context, id string) (*SessionState, error) {
	return c.sessionCall(ctx, "/v1/resource-sessions/"+url.PathEscape(id)+"/end", 0)
}

func (c *Client) sessionCall(ctx context.Context, path string, ttl time.Duration) (*SessionState, error) {
	body := map[string]any{}
	if ttl > 0 {
		body["ttl_ms"] = ttl.Milliseconds()
	}
	var out SessionState
	if _, _, err := c.do(ctx, http.MethodPost, path, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// IsSessionEnded reports whether err says a session was lost or ended (409
// session_ended): none of its leases is held any more.
func IsSessionEnded(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == "session_ended"
}

// IsLeaseRevoked reports whether err says an operator revoked the lease
// (409 lease_revoked): it is no longer held.
func IsLeaseRevoked(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == "lease_revoked"
}

// RevokeResourceLease ends a lease at once, as an operator (an admin key;
// tenant "" is the key's own). Its holder's next heartbeat fails with
// IsLeaseRevoked.
func (c *Client) RevokeResourceLease(ctx context.Context, tenant, leaseID string) (*ResourceLeases, error) {
	path := "/v1/admin/resource-leases/" + url.PathEscape(leaseID) + "/revoke"
	if tenant != "" {
		path += "?tenant=" + url.QueryEscape(tenant)
	}
	var out ResourceLeases
	if _, _, err := c.do(ctx, http.MethodPost, path, map[string]any{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
