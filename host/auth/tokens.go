package auth

import (
	"context"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// TokenVerifier resolves bearer credentials that are not API keys: OAuth
// access tokens (host/oauth). A token acts through a key of its principal,
// whose stored hash VerifyToken returns, so whatever re-reads a caller's
// key (an MCP session, AuthenticateHash) notices its revocation.
type TokenVerifier interface {
	// Covers reports whether tokens are accepted on a request path.
	Covers(path string) bool
	// VerifyToken returns the actor a token stands for, the hash of the
	// key it acts through, and when the token expires.
	VerifyToken(ctx context.Context, token string) (engine.Actor, string, time.Time, error)
	// Challenge is the WWW-Authenticate value of a refusal on a covered
	// path (err without a token error: no token was refused).
	Challenge(err error) string
	// Forget drops remembered tokens, as Authenticator.Forget drops keys.
	Forget()
}

// SetTokens accepts the access tokens of t beside API keys, on the paths t
// covers. Call it before the Authenticator is used.
func (a *Authenticator) SetTokens(t TokenVerifier) { a.tokens = t }

// AuthenticateRequest resolves the bearer credential of a request to path:
// an access token where tokens are accepted, else an API key (through the
// cache). It also returns the stored hash of the key the caller acts
// through, and when the credential expires: an access token's exp, zero
// for an API key (which lasts until it is revoked).
func (a *Authenticator) AuthenticateRequest(ctx context.Context, path, bearer string) (engine.Actor, string, time.Time, error) {
	key := BearerKey(bearer)
	if a.tokens != nil && key != "" && !strings.HasPrefix(key, KeyPrefix) && a.tokens.Covers(path) {
		return a.tokens.VerifyToken(ctx, key)
	}
	actor, err := a.Authenticate(ctx, bearer)
	return actor, HashKey(key), time.Time{}, err
}

// Challenge is the WWW-Authenticate value that answers a refusal with err
// on path, or "" when it needs none: where tokens are accepted it names
// the protected resource metadata (RFC 9728), elsewhere the realm.
func (a *Authenticator) Challenge(path string, err error) string {
	covered := a.tokens != nil && a.tokens.Covers(path)
	refused := host.IsCode(err, host.CodeUnauthorized) || host.IsCode(err, host.CodeInsufficientScope) || host.IsCode(err, host.CodeTokenNotMapped)
	switch {
	case covered && refused:
		return a.tokens.Challenge(err)
	case host.IsCode(err, host.CodeUnauthorized):
		return `Bearer realm="asyncgate"`
	}
	return ""
}
