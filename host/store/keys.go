package store

import (
	"context"
	"time"
)

// KeyReader reads API keys. Only hashes are stored; a secret never is.
type KeyReader interface {
	// GetKeyByHash returns the API key with the hash, revoked or not, or
	// host.CodeNotFound (storetest: KeysTypesWorkers).
	GetKeyByHash(ctx context.Context, hash string) (*Key, error)
	// ListKeys returns all API keys (hashes only).
	ListKeys(ctx context.Context) ([]Key, error)
	// PrincipalKeys returns a principal's API keys in a tenant, revoked or
	// not, oldest first (storetest: ScheduleOwnerRevokedStopsFiring).
	PrincipalKeys(ctx context.Context, tenant, principal string) ([]Key, error)
}

// KeyWriter creates and revokes API keys.
type KeyWriter interface {
	// PutKey creates an API key. A key whose id or hash exists is a
	// host.CodeConflict error (storetest: KeysTypesWorkers checks the id).
	PutKey(ctx context.Context, k Key) error
	// RevokeKey marks a key revoked at at; a key revoked before keeps its
	// first revocation time. host.CodeNotFound if there is none (storetest:
	// KeysTypesWorkers).
	RevokeKey(ctx context.Context, id string, at time.Time) error
}

// Key is an API key as stored: only the hash of the secret.
type Key struct {
	ID        string     `json:"key_id"`
	Hash      string     `json:"-"`
	Prefix    string     `json:"prefix"` // the first characters of the key, for operators
	Role      string     `json:"role"`
	Tenant    string     `json:"tenant"`
	Principal string     `json:"principal"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}
