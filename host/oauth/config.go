package oauth

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// Config is the gate's OAuth configuration (the config file's "oauth"
// object). The zero Config, without issuers, turns OAuth off.
type Config struct {
	// Resource is the gate's resource identifier (RFC 8707): the URL of
	// its MCP endpoint as clients reach it, e.g.
	// "https://gate.example.com/mcp". Tokens must name it in aud; the
	// metadata URL is derived from it.
	Resource string `json:"resource"`
	// Scopes are the scopes every token must carry (all of them), and the
	// metadata's scopes_supported.
	Scopes []string `json:"scopes,omitempty"`
	// HTTPAPI accepts tokens on the HTTP API (/v1/…) as well as on /mcp.
	HTTPAPI bool `json:"http_api,omitempty"`
	// Issuers are the authorization servers whose tokens are accepted.
	Issuers []Issuer `json:"issuers"`
	// Dashboard, when set, signs people in to the dashboard through one
	// of the issuers (login.go).
	Dashboard *Dashboard `json:"dashboard,omitempty"`
}

// Issuer is one trusted authorization server.
type Issuer struct {
	// Issuer is the iss of its tokens, exactly, and where its discovery
	// document is read (Issuer + "/.well-known/openid-configuration").
	Issuer string `json:"issuer"`
	// JWKSURI, when set, is where its signing keys are read, without
	// discovery.
	JWKSURI string `json:"jwks_uri,omitempty"`
	// Map maps a token's claims to a principal; the first rule that
	// matches wins.
	Map []Rule `json:"map"`
}

// Rule maps the tokens whose Claim holds Value (a string claim equal to
// it, or an array claim containing it; any value when Value is empty) to a
// principal of Tenant with Role: Principal, or PrincipalPrefix followed by
// the value of the claim PrincipalClaim.
type Rule struct {
	Claim     string `json:"claim"`
	Value     string `json:"value,omitempty"`
	Principal string `json:"principal,omitempty"`
	// PrincipalClaim names the claim a principal is taken from. It should
	// be one the provider never lets its users change (sub), not a name
	// they may pick or rename (preferred_username, a UPN, an unverified
	// email).
	PrincipalClaim string `json:"principal_claim,omitempty"`
	// PrincipalPrefix, required with PrincipalClaim, goes before the
	// claim's value ("kc:" + sub), so the principals one issuer's tokens
	// name stay apart from fixed principals and from other issuers'. A
	// worker rule's prefix must begin a worker id ({type}.{instance}):
	// "echo.kc:" + sub.
	PrincipalPrefix string `json:"principal_prefix,omitempty"`
	// Tenant defaults to "default".
	Tenant string `json:"tenant,omitempty"`
	Role   string `json:"role"`
}

// DefaultTenant is the tenant of a rule that names none, as of a key.
const DefaultTenant = "default"

var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$`)

// prefixPattern is a principal_prefix: principal characters ending in ':'.
var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@\-]{0,62}:$`)

// Enabled reports whether any issuer is configured.
func (c Config) Enabled() bool { return len(c.Issuers) > 0 }

// Validate checks the configuration, naming the first field at fault.
func (c Config) Validate() error {
	if !c.Enabled() {
		if c.Resource != "" || len(c.Scopes) > 0 || c.HTTPAPI {
			return fmt.Errorf("oauth: no issuers: name at least one authorization server in oauth.issuers")
		}
		return nil
	}
	u, err := url.Parse(c.Resource)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" || u.RawQuery != "" {
		return fmt.Errorf("oauth.resource %q: must be the absolute http(s) URL of the gate's /mcp as clients reach it, without query or fragment", c.Resource)
	}
	for _, s := range c.Scopes {
		if s == "" || strings.ContainsAny(s, " \"\\") {
			return fmt.Errorf("oauth.scopes: %q is not a scope token", s)
		}
	}
	seen := map[string]bool{}
	prefixes := map[string]string{} // principal_prefix -> the issuer that uses it
	for i, is := range c.Issuers {
		at := fmt.Sprintf("oauth.issuers[%d]", i)
		if iu, err := url.Parse(is.Issuer); err != nil || (iu.Scheme != "https" && iu.Scheme != "http") || iu.Host == "" {
			return fmt.Errorf("%s.issuer %q: must be an absolute http(s) URL", at, is.Issuer)
		}
		if seen[is.Issuer] {
			return fmt.Errorf("%s.issuer %q: named twice", at, is.Issuer)
		}
		seen[is.Issuer] = true
		if is.JWKSURI != "" {
			if ju, err := url.Parse(is.JWKSURI); err != nil || (ju.Scheme != "https" && ju.Scheme != "http") || ju.Host == "" {
				return fmt.Errorf("%s.jwks_uri %q: must be an absolute http(s) URL", at, is.JWKSURI)
			}
		}
		if len(is.Map) == 0 {
			return fmt.Errorf("%s.map: no rules: a token of this issuer would map to no principal", at)
		}
		for j, r := range is.Map {
			if err := r.validate(); err != nil {
				return fmt.Errorf("%s.map[%d]: %w", at, j, err)
			}
			if r.PrincipalPrefix == "" {
				continue
			}
			if other, ok := prefixes[r.PrincipalPrefix]; ok && other != is.Issuer {
				return fmt.Errorf("%s.map[%d].principal_prefix %q: issuer %q uses it too; give each issuer its own", at, j, r.PrincipalPrefix, other)
			}
			prefixes[r.PrincipalPrefix] = is.Issuer
		}
	}
	return c.Dashboard.validate(c)
}

func (r Rule) validate() error {
	if r.Claim == "" {
		return fmt.Errorf("claim is required")
	}
	if (r.Principal == "") == (r.PrincipalClaim == "") {
		return fmt.Errorf("give principal or principal_claim, one of them")
	}
	if r.PrincipalClaim != "" && r.PrincipalPrefix == "" {
		return fmt.Errorf("principal_claim needs a principal_prefix (e.g. \"kc:\"), so the principals its tokens name stay apart from fixed ones and other issuers'")
	}
	if r.PrincipalPrefix != "" && r.PrincipalClaim == "" {
		return fmt.Errorf("principal_prefix goes with principal_claim only")
	}
	if r.PrincipalPrefix != "" && !prefixPattern.MatchString(r.PrincipalPrefix) {
		return fmt.Errorf("principal_prefix must match %s", prefixPattern)
	}
	if r.Principal != "" && !host.ValidPrincipal(r.Principal) {
		return fmt.Errorf("principal must match %s", host.PrincipalPattern)
	}
	if strings.EqualFold(r.Principal, engine.GatePrincipal) {
		return fmt.Errorf("principal %q is the gate's own", r.Principal)
	}
	if r.Tenant != "" && !tenantPattern.MatchString(r.Tenant) {
		return fmt.Errorf("tenant must match %s", tenantPattern)
	}
	switch r.Role {
	case engine.RoleAdmin, engine.RoleAgent, engine.RoleWorker:
	default:
		return fmt.Errorf("role must be admin, agent or worker, got %q", r.Role)
	}
	// A worker's principal is its worker id, and only a worker id holds a
	// worker key (auth.CreateKey): a rule that cannot name one would map
	// every token to a principal that can never hold the key it needs.
	if r.Role == engine.RoleWorker {
		if r.Principal != "" && !host.ValidWorkerID(r.Principal) {
			return fmt.Errorf("a worker's principal is its worker id ({type}.{instance}): principal %q is not one, so no worker key can hold it", r.Principal)
		}
		if r.PrincipalPrefix != "" && !host.ValidWorkerID(r.PrincipalPrefix+"x") {
			return fmt.Errorf("a worker's principal is its worker id ({type}.{instance}): principal_prefix %q cannot begin one, so no worker key could ever match the rule; start it with the worker type and a dot, e.g. \"echo.kc:\"", r.PrincipalPrefix)
		}
	}
	return nil
}

// MetadataPath is the path of the resource's metadata (RFC 9728 §3.1): the
// well-known prefix followed by the resource identifier's path, e.g.
// /.well-known/oauth-protected-resource/mcp.
func (c Config) MetadataPath() string {
	u, _ := url.Parse(c.Resource)
	if u == nil || u.Path == "" || u.Path == "/" {
		return WellKnown
	}
	return WellKnown + u.Path
}

// MetadataURL is the absolute URL of the metadata, as the 401 challenge's
// resource_metadata names it.
func (c Config) MetadataURL() string {
	u, _ := url.Parse(c.Resource)
	if u == nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + c.MetadataPath()
}

// WellKnown is the protected resource metadata's well-known path.
const WellKnown = "/.well-known/oauth-protected-resource"
