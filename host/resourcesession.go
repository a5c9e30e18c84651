package host

import "time"

// PrefixResourceSession starts a resource session's id.
const PrefixResourceSession = "rsess-"

// ResourceSessionState is where a resource session is in its life.
type ResourceSessionState string

// Resource session states.
const (
	ResourceSessionActive  ResourceSessionState = "active"
	ResourceSessionEnded   ResourceSessionState = "ended"
	ResourceSessionExpired ResourceSessionState = "expired"
)

// ResourceSession groups a holder's resource leases under one heartbeat
// (issue 43 item 4, as Consul sessions and etcd leases with attached keys):
// a lease acquired in a session expires with it, a heartbeat of the session
// extends every lease in it, and ending or losing the session ends them all.
type ResourceSession struct {
	ID        string               `json:"session_id"`
	Tenant    string               `json:"-"`
	Holder    string               `json:"holder"`
	State     ResourceSessionState `json:"state"`
	TTLMs     int64                `json:"ttl_ms"`
	CreatedAt time.Time            `json:"created_at"`
	ExpiresAt time.Time            `json:"expires_at"`
	EndedAt   *time.Time           `json:"ended_at,omitempty"`
}

// LiveAt reports whether the session is honoured at now: active and not
// past its expiry.
func (s *ResourceSession) LiveAt(now time.Time) bool {
	return s.State == ResourceSessionActive && now.Before(s.ExpiresAt)
}

// StateAt is the session's state by the clock at now.
func (s *ResourceSession) StateAt(now time.Time) ResourceSessionState {
	if s.State == ResourceSessionActive && !now.Before(s.ExpiresAt) {
		return ResourceSessionExpired
	}
	return s.State
}
