package httpapi

import (
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
)

// authMiddleware returns echo middleware that requires a valid bearer
// credential, resolved by a, and stores the caller's Actor in the echo
// context and the request's context (auth.ActorFromContext).
func authMiddleware(a *auth.Authenticator) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			// One credential a request: with two Authorization headers a
			// proxy that checks one and the gate that acts on the other
			// would disagree on who is calling.
			if n := len(c.Request().Header.Values(echo.HeaderAuthorization)); n > 1 {
				return badRequest("the request has %d Authorization headers; send one", n)
			}
			bearer := c.Request().Header.Get(echo.HeaderAuthorization)
			path := c.Request().URL.Path
			actor, keyHash, exp, err := a.AuthenticateRequest(c.Request().Context(), path, bearer)
			if err != nil {
				if ch := a.Challenge(path, err); ch != "" {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, ch)
				}
				return err
			}
			// The key chooses the tenant; ?tenant= lets an operator pick another
			// only on the admin routes. Elsewhere it is refused, never ignored.
			if c.QueryParams().Has("tenant") && !strings.HasPrefix(c.Request().URL.Path, "/v1/admin/") &&
				c.QueryParam("tenant") != actor.Tenant {
				return badRequest("?tenant= applies to /v1/admin routes only; this key acts in tenant %q", actor.Tenant)
			}
			c.Set(ctxKeyActor, actor)
			ctx := auth.WithKeyHash(auth.WithActor(c.Request().Context(), actor), keyHash)
			if !exp.IsZero() {
				ctx = auth.WithExpiry(ctx, exp)
			}
			c.SetRequest(c.Request().WithContext(ctx))
			if err := checkQuery(c); err != nil { // after the key: a caller without one is told 401 first
				return err
			}
			return next(c)
		}
	}
}

const ctxKeyActor = "asyncgate.actor"

// ActorOf returns the caller of an authenticated echo request.
func ActorOf(c echo.Context) engine.Actor {
	a, _ := c.Get(ctxKeyActor).(engine.Actor)
	return a
}

// requireOperator admits only admins of the default tenant, the gate's
// operators. The routes it guards act on the whole gate, across tenants (the
// outbox to the external ledger holds every tenant's receipts and results;
// a retention sweep archives every tenant's due tasks), so no other tenant's
// admin may read or drive them.
func requireOperator(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a := ActorOf(c); a.Role != engine.RoleAdmin || a.Tenant != auth.DefaultTenant {
			return host.Errorf(host.CodeForbidden, "this route acts on every tenant's data and needs an admin key of the %q tenant; yours has role %s in tenant %q",
				auth.DefaultTenant, a.Role, a.Tenant)
		}
		return next(c)
	}
}

// requireRole refuses callers whose role is not in roles.
func requireRole(roles ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			a := ActorOf(c)
			for _, r := range roles {
				if a.Role == r {
					return next(c)
				}
			}
			return host.Errorf(host.CodeForbidden, "this route needs a key with role %s; yours is %s", strings.Join(roles, " or "), a.Role)
		}
	}
}
