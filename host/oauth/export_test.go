package oauth

import (
	"net/http"
	"time"
)

// SetJWKSRefetch sets how often key sets made from now on may be read again
// for an unknown key, until the returned function restores it.
func SetJWKSRefetch(d time.Duration) (restore func()) {
	old := jwksRefetch
	jwksRefetch = d
	return func() { jwksRefetch = old }
}

// SetJWKSAges sets, for key sets made from now on, the bounds of a key
// set's freshness (minAge, maxAge), its freshness without a Cache-Control
// max-age (def), and how long past it a set that cannot be read again is
// still served (limit), until the returned function restores them.
func SetJWKSAges(minAge, def, maxAge, limit time.Duration) (restore func()) {
	o1, o2, o3, o4 := jwksMinAge, jwksDefaultAge, jwksMaxAge, jwksStaleLimit
	jwksMinAge, jwksDefaultAge, jwksMaxAge, jwksStaleLimit = minAge, def, maxAge, limit
	return func() { jwksMinAge, jwksDefaultAge, jwksMaxAge, jwksStaleLimit = o1, o2, o3, o4 }
}

// KeySetAge is how long a key set read with header h stays fresh under
// the current bounds.
func KeySetAge(h http.Header) time.Duration { return newKeySet(nil, "").age(cacheMaxAge(h)) }
