package auth

import (
	"context"

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

type staleOKKey struct{}

// AllowStale returns a context under which Authenticator.Authenticate may
// answer a key from its cache past the TTL while the store is unavailable
// (StaleWhileUnavailable). Only a route that reads nothing from the store
// with the caller's authority sets it (/metrics): every other call waits for
// the store to say the key is still good.
func AllowStale(ctx context.Context) context.Context {
	return context.WithValue(ctx, staleOKKey{}, true)
}

func staleAllowed(ctx context.Context) bool {
	ok, _ := ctx.Value(staleOKKey{}).(bool)
	return ok
}
