package oauth

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/asyncgate/asyncgate/host"
)

// Metadata is the protected resource metadata document (RFC 9728 §2).
type Metadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name"`
}

// Metadata returns the resource's metadata document.
func (c Config) Metadata() Metadata {
	m := Metadata{Resource: c.Resource, ScopesSupported: c.Scopes, BearerMethodsSupported: []string{"header"}, ResourceName: "AsyncGate"}
	for _, is := range c.Issuers {
		m.AuthorizationServers = append(m.AuthorizationServers, is.Issuer)
	}
	return m
}

// MetadataHandler serves the metadata document to GET and HEAD, to any
// origin (browser-based MCP clients read it across origins).
func (c Config) MetadataHandler() http.Handler {
	body, _ := json.Marshal(c.Metadata())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodOptions:
			w.Header().Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "*")
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			w.Header().Set("Allow", "GET, HEAD, OPTIONS")
			http.Error(w, `{"error":"bad_request","detail":"the metadata is read with GET"}`, http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(body)
	})
}

// Challenge is the WWW-Authenticate value that answers a request refused
// with err (nil: no credentials were sent): the resource metadata's URL and
// the required scopes, with error="invalid_token" for a token refused with
// 401, or error="insufficient_scope" for a valid token refused with 403 (a
// scope missing, or no mapping for it) (RFC 6750 §3.1, RFC 9728 §5.1).
func (c Config) Challenge(err error) string {
	var b strings.Builder
	b.WriteString(`Bearer realm="asyncgate", resource_metadata="` + c.MetadataURL() + `"`)
	if len(c.Scopes) > 0 {
		b.WriteString(`, scope="` + strings.Join(c.Scopes, " ") + `"`)
	}
	var te *tokenError
	if errors.As(err, &te) {
		// RFC 6750 §3.1 pairs invalid_token with 401 and
		// insufficient_scope with 403. A token refused with 403 is valid
		// but grants nothing here (a scope missing, or no mapping names
		// a principal for it): insufficient_scope. Every 401 refusal is
		// invalid_token.
		code := "invalid_token"
		if host.HTTPStatus(host.ErrorCode(err)) == http.StatusForbidden {
			code = "insufficient_scope"
		}
		b.WriteString(`, error="` + code + `", error_description="` + quoteSafe(capDescription(host.ErrorDetail(err))) + `"`)
	}
	return b.String()
}

// maxDescription bounds the challenge's error_description.
const maxDescription = 200

// capDescription shortens s to maxDescription bytes.
func capDescription(s string) string {
	if len(s) <= maxDescription {
		return s
	}
	return s[:maxDescription-3] + "..."
}

// quoteSafe keeps a description inside a quoted-string of the header:
// printable ASCII without '"' and '\' (RFC 6750 §3).
func quoteSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '\''
		}
		return r
	}, s)
}
