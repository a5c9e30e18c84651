package httpapi

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// What the door takes in a request's path and query, checked in middleware
// before any handler or store call, so both stores answer alike:
//
//   - refuseBadURL (every request, before its key is read): a query that
//     does not decode (a malformed %-escape, a semicolon), and a path or query
//     whose decoded bytes are not UTF-8 or hold a control character. Every
//     path parameter and query value is an id, a name, an enum, a number or
//     a cursor, and none of those holds either: PostgreSQL would refuse the
//     bytes and SQLite look them up.
//   - checkQuery (after the key is resolved, in authMiddleware; on a route
//     that takes no key, in its keyless middleware): a query parameter the route's OpenAPI operation
//     does not declare (openapi.Op.Query), and a declared one given twice
//     unless it is a List. The operations are the one list of what each
//     route takes, for the document and for this check alike.

// maxEchoedName caps how much of a caller's parameter name an answer quotes.
const maxEchoedName = 64

// refuseBadURL refuses, with 400 bad_request, a request whose query does
// not decode or whose decoded path or query is not UTF-8 or holds a
// control character (NUL is refuseNUL's).
func refuseBadURL(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := c.Request().URL
		if err := textOK(u.Path); err != nil {
			return badRequest("the request's path %s, which no id or name does", err)
		}
		if u.RawQuery == "" {
			return next(c)
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return badRequest("the request's query does not decode: %s; escape %% as %%25, and separate parameters with & (not ;)", queryErr(err))
		}
		for k, vs := range q {
			if err := textOK(k); err != nil {
				return badRequest("a query parameter's name %s", err)
			}
			for _, v := range vs {
				if err := textOK(v); err != nil {
					return badRequest("query parameter %q %s, which no value the gate takes does", echoName(k), err)
				}
			}
		}
		return next(c)
	}
}

// queryErr is what url.ParseQuery refused, without echoing the caller's
// whole query.
func queryErr(err error) string {
	var ee url.EscapeError
	switch {
	case errors.As(err, &ee):
		s := string(ee)
		if len(s) > 16 {
			s = s[:16] + "…"
		}
		return "invalid %-escape " + strconv.Quote(s)
	case strings.Contains(err.Error(), "semicolon"):
		return "it holds a semicolon"
	default:
		return "malformed"
	}
}

// textOK returns why the decoded s is no id or name: bytes that are not
// UTF-8, or a control character (named, percent-escaped); nil when fine.
func textOK(s string) error {
	if !utf8.ValidString(s) {
		return textErr("decodes to bytes that are not UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return textErr("holds the control character " + strings.ToUpper(url.PathEscape(string(r))))
		}
	}
	return nil
}

// textErr is a textOK finding.
type textErr string

func (e textErr) Error() string { return string(e) }

// echoName is a caller's parameter name as an answer quotes it.
func echoName(k string) string {
	if len(k) > maxEchoedName {
		for i := maxEchoedName; i > 0; i-- { // cut on a rune's start
			if utf8.RuneStart(k[i]) {
				return k[:i] + "…"
			}
		}
	}
	return k
}

// keyless is checkQuery as a route's middleware, for the routes that take
// no key (/healthz, /readyz, /openapi.json, /metrics when public):
// authMiddleware, where the others' check runs, does not see them.
func keyless(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := checkQuery(c); err != nil {
			return err
		}
		return next(c)
	}
}

// checkQuery refuses, with 400 bad_request, a request whose query has a
// parameter its route's OpenAPI operation does not declare, or a declared
// one given more than once that is not a List: a misspelt parameter
// (stauts=), a foreign one (principal= on a route that takes recipient=) or
// a second limit= would otherwise be ignored and the caller answered as if
// it had not asked. A route without an operation (the dashboard, MCP, a
// route not found) is not checked here. ?tenant= is every route's outside
// /v1/admin (authMiddleware holds it to the key's tenant); on a /v1/admin
// route only where the operation declares it.
func checkQuery(c echo.Context) error {
	r := c.Request()
	if r.URL.RawQuery == "" {
		return nil
	}
	op, ok := openapi.Lookup(r.Method, c.Path())
	if !ok {
		return nil
	}
	q := c.QueryParams()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first in order, so an answer does not vary
	for _, k := range keys {
		i := slices.IndexFunc(op.Query, func(p openapi.Param) bool { return p.Name == k })
		if i < 0 {
			if k == "tenant" && keyTenant(c) {
				if len(q[k]) > 1 {
					return badRequest("query parameter %q is given %d times; it takes one value", k, len(q[k]))
				}
				continue
			}
			return badRequest("%s %s takes no query parameter %q; it takes %s", r.Method, openapi.OpenAPIPath(c.Path()), echoName(k), takes(op, keyTenant(c)))
		}
		if len(q[k]) > 1 && !op.Query[i].List {
			return badRequest("query parameter %q is given %d times; it takes one value", k, len(q[k]))
		}
		if err := inBounds(op.Query[i], q.Get(k)); err != nil {
			return err
		}
	}
	return nil
}

// inBounds refuses, with 400 bad_request, a value of a bounded count (p.Max
// set: a page's limit, a schedule's next_runs) that is not an integer in
// 1..p.Max: "limit must be 1..500, got 501". Never cut to the bound or
// replaced by the default: the caller would be answered as if it had asked
// for something else. A parameter left out is the handler's default.
func inBounds(p openapi.Param, v string) error {
	if p.Max <= 0 {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err == nil && n >= 1 && n <= p.Max {
		return nil
	}
	got := strconv.Quote(echoName(v))
	if err == nil || errors.Is(err, strconv.ErrRange) && strings.Trim(v, "+-0123456789") == "" {
		got = echoName(v) // a number, however big
	}
	return badRequest("%s must be 1..%d, got %s", p.Name, p.Max, got)
}

// keyTenant reports whether the request takes ?tenant= as its key's own
// tenant without its operation declaring it: it came with a key (checked by
// authMiddleware, which refuses another tenant) and is not to /v1/admin.
func keyTenant(c echo.Context) bool {
	_, keyed := c.Get(ctxKeyActor).(engine.Actor)
	return keyed && !strings.HasPrefix(c.Request().URL.Path, "/v1/admin/")
}

// takes names the query parameters op declares, for an answer, and
// ?tenant= when keyTenant.
func takes(op openapi.Op, keyTenant bool) string {
	var names []string
	for _, p := range op.Query {
		names = append(names, p.Name)
	}
	if keyTenant && !slices.Contains(names, "tenant") {
		names = append(names, "tenant (the key's own)")
	}
	if len(names) == 0 {
		return "no query parameters"
	}
	return "only " + strings.Join(names, ", ")
}
