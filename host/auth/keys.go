package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"regexp"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// KeyPrefix starts every API key, as the spec spells them ("agw_abc123...").
const KeyPrefix = "agw_"

// DefaultTenant is the tenant of keys created without one.
const DefaultTenant = "default"

var keyEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// TenantPattern is what a tenant's name must match.
var TenantPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$`)

var principalPattern = host.PrincipalPattern

// keyLen is the length of a key: KeyPrefix and 32 bytes in base32.
var keyLen = len(KeyPrefix) + keyEncoding.EncodedLen(32)

// ContainsKey says whether s holds an API key anywhere: KeyPrefix and 52
// base32 characters, in any case ("Bearer agw_…", a quoted key). Forms that
// should never hold a key (the dashboard's filters, which go into URLs)
// refuse such a value instead of showing it back.
func ContainsKey(s string) bool {
	lower := strings.ToLower(s)
	for i := 0; ; {
		j := strings.Index(lower[i:], KeyPrefix)
		if j < 0 {
			return false
		}
		at := i + j + len(KeyPrefix)
		if end := at + keyLen - len(KeyPrefix); end <= len(s) {
			if _, err := keyEncoding.DecodeString(strings.ToUpper(s[at:end])); err == nil {
				return true
			}
		}
		i = i + j + 1
	}
}

// HashKey returns the stored form of an API key: the hex sha256 of the key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKeyRequest describes an API key to create.
type NewKeyRequest struct {
	Role      string `json:"role"`
	Principal string `json:"principal"`
	// Tenant is the key's tenant (the default one when empty). Over HTTP
	// the call's ?tenant= (else the admin's own) decides it, and a body
	// tenant may only repeat that (tenant_mismatch).
	Tenant string `json:"tenant,omitempty"`
}

// CreatedKey is a new key: its stored record and the secret, shown only once.
type CreatedKey struct {
	store.Key
	APIKey string `json:"api_key"`
}

// CreateKey makes a new API key "agw_" + 32 random bytes (base32), stores
// only its sha256 hash and returns the secret once. Roles are admin, agent
// and worker; a worker's principal is its worker id and must have the
// {type}.{instance} form.
func CreateKey(ctx context.Context, st store.Store, req NewKeyRequest) (*CreatedKey, error) {
	if req.Tenant == "" {
		req.Tenant = DefaultTenant
	}
	if err := CheckNewKey(req); err != nil {
		return nil, err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	secret := KeyPrefix + strings.ToLower(keyEncoding.EncodeToString(raw[:]))
	k := store.Key{
		ID: host.NewID(host.PrefixKey), Hash: HashKey(secret), Prefix: secret[:len(KeyPrefix)+6],
		Role: req.Role, Tenant: req.Tenant, Principal: req.Principal, CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
	err := st.Update(ctx, func(tx store.Tx) error {
		// A principal has one role in its tenant. Reads and receipts follow
		// the principal (what it queued, what is addressed to it, what it
		// issued), so a worker key named like an agent would read that
		// agent's inbox and write receipts in its name. Revoked keys count:
		// the ledger keeps what their principal did.
		keys, err := tx.ListKeys(ctx)
		if err != nil {
			return err
		}
		for _, o := range keys {
			if o.Tenant == k.Tenant && o.Principal == k.Principal && o.Role != k.Role {
				return host.Errorf(host.CodeConflict, "principal %q already has a key with role %s in tenant %q (key %s): a principal has one role; name this %s key another principal",
					k.Principal, o.Role, k.Tenant, o.ID, k.Role)
			}
		}
		return tx.PutKey(ctx, k)
	})
	if err != nil {
		return nil, storeErr(err)
	}
	return &CreatedKey{Key: k, APIKey: secret}, nil
}

// ListKeys returns every key (hashes are never shown).
func ListKeys(ctx context.Context, st store.Store) ([]store.Key, error) {
	var out []store.Key
	err := st.View(ctx, func(r store.Reader) error {
		var err error
		out, err = r.ListKeys(ctx)
		return err
	})
	return out, storeErr(err)
}

// RevokeKey revokes a key by id; a revoked key authenticates nothing.
func RevokeKey(ctx context.Context, st store.Store, id string) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	return storeErr(st.Update(ctx, func(tx store.Tx) error { return tx.RevokeKey(ctx, id, now) }))
}

// storeErr makes driver errors database_unavailable, as the engine does.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*host.Error); ok || host.ErrorCode(err) != host.CodeInternal {
		return err
	}
	return host.WrapError(host.CodeDatabaseUnavailable, err, "the store failed: "+err.Error())
}

// CheckNewKey reports what is wrong with req before anything is stored:
// its role, tenant and principal (the gate's own name holds no key; a
// worker's principal is its worker id). An empty tenant is the default
// one. The CLI checks its flags with it before it opens the data folder.
func CheckNewKey(req NewKeyRequest) error {
	if req.Tenant == "" {
		req.Tenant = DefaultTenant
	}
	switch req.Role {
	case engine.RoleAdmin, engine.RoleAgent, engine.RoleWorker:
	default:
		return host.Errorf(host.CodeBadRequest, "role must be admin, agent or worker, got %q", req.Role)
	}
	if !TenantPattern.MatchString(req.Tenant) {
		return host.Errorf(host.CodeBadRequest, "tenant must match %s", TenantPattern)
	}
	if !principalPattern.MatchString(req.Principal) {
		return host.Errorf(host.CodeBadRequest, "principal must match %s", principalPattern)
	}
	// The gate's own name is what its receipts (task.assigned, escalations,
	// checkpoints) come from: a key under it would read every receipt the
	// gate issued in its tenant and write words that read as the gate's.
	if strings.EqualFold(req.Principal, engine.GatePrincipal) {
		return host.Errorf(host.CodeForbidden, "principal %q is the gate's own and cannot hold a key", req.Principal)
	}
	if req.Role == engine.RoleWorker && !host.ValidWorkerID(req.Principal) {
		return host.Errorf(host.CodeInvalidWorkerID, "a worker key's principal is its worker id and must match pattern {type}.{instance}")
	}
	return nil
}
