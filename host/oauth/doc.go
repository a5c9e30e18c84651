// Package oauth makes the gate an OAuth 2.1 protected resource, as the MCP
// specification's authorization model asks of an HTTP MCP server: it serves
// the protected resource metadata of RFC 9728, names it in the
// WWW-Authenticate challenge of a 401, and accepts access tokens (JWTs) of
// the configured issuers beside the gate's own agw_ keys.
//
// A token is accepted when its signature verifies against its issuer's
// JWKS (fetched from the issuer's discovery document or a configured
// jwks_uri, cached, and read again when a token names a key id it does not
// hold), its iss is a configured issuer, its aud names the gate's resource
// identifier, it has not expired, and it carries every required scope.
//
// Tokens and keys are equals: a token's claims map, by configuration, to a
// tenant, principal and role, and the token acts through that principal's
// live API key of that role in that tenant. Revoking the key (gate keys
// revoke) refuses the principal's tokens too, its MCP sessions end as a
// revoked key's do, and its receipts, quotas and tasks are the principal's.
// A token whose claims match no mapping is refused with token_not_mapped.
package oauth
