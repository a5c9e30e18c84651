package oauth

import "time"

// SetJWKSRefetch sets how often key sets made from now on may be read again
// for an unknown key, until the returned function restores it.
func SetJWKSRefetch(d time.Duration) (restore func()) {
	old := jwksRefetch
	jwksRefetch = d
	return func() { jwksRefetch = old }
}
