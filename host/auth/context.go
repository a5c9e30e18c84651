package auth

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/asyncgate/asyncgate/host/engine"
)

type actorKey struct{}

// WithActor returns a context that carries actor.
func WithActor(ctx context.Context, actor engine.Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFromContext returns the Actor a door's middleware stored in a
// request's context (for handlers mounted on the HTTP door, e.g. the MCP
// door's).
func ActorFromContext(ctx context.Context) (engine.Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(engine.Actor)
	return a, ok
}

type keyHashKey struct{}

// WithKeyHash returns a context that carries hash, the stored hash of the
// key its caller was authenticated with.
func WithKeyHash(ctx context.Context, hash string) context.Context {
	return context.WithValue(ctx, keyHashKey{}, hash)
}

// KeyHashFromContext returns the stored hash of the key a door's middleware
// authenticated a request's caller with (for handlers that hold on to a
// caller beyond one request, e.g. the MCP door's event streams, and check
// again with AuthenticateHash that the key was not revoked since).
func KeyHashFromContext(ctx context.Context) (string, bool) {
	h, ok := ctx.Value(keyHashKey{}).(string)
	return h, ok && h != ""
}

type expiryKey struct{}

// WithExpiry returns a context that carries exp, when the credential its
// caller was authenticated with expires (an access token's exp).
func WithExpiry(ctx context.Context, exp time.Time) context.Context {
	return context.WithValue(ctx, expiryKey{}, exp)
}

// ExpiryFromContext returns when the credential a door's middleware
// authenticated a request's caller with expires, if it does (an access
// token; an API key lasts until it is revoked). A handler that serves the
// caller beyond one moment (an MCP event stream, a long-poll) ends by then,
// so the client authenticates again.
func ExpiryFromContext(ctx context.Context) (time.Time, bool) {
	exp, ok := ctx.Value(expiryKey{}).(time.Time)
	return exp, ok && !exp.IsZero()
}

type staleOKKey struct{}

// staleMark is the value AllowStale puts in a context: whether the
// Authenticator answered the request's key from its cache past the TTL.
type staleMark struct{ served atomic.Bool }

// AllowStale returns a context under which Authenticator.Authenticate may
// answer a key from its cache past the TTL while the store is unavailable
// (StaleWhileUnavailable). Only a route that reads nothing from the store
// with the caller's authority once it knows the key was taken that way
// (ServedStale) sets it: /metrics, which then serves no store-backed
// series. Every other call waits for the store to say the key is good.
func AllowStale(ctx context.Context) context.Context {
	return context.WithValue(ctx, staleOKKey{}, &staleMark{})
}

// ServedStale reports whether the key of the request whose context (from
// AllowStale) ctx derives from was answered from the cache past its TTL,
// the store not confirming it.
func ServedStale(ctx context.Context) bool {
	m, _ := ctx.Value(staleOKKey{}).(*staleMark)
	return m != nil && m.served.Load()
}

func staleAllowed(ctx context.Context) bool {
	m, _ := ctx.Value(staleOKKey{}).(*staleMark)
	return m != nil
}

func markServedStale(ctx context.Context) {
	if m, _ := ctx.Value(staleOKKey{}).(*staleMark); m != nil {
		m.served.Store(true)
	}
}
