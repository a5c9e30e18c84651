//go:build !wasip1

package plugin

import "crypto/sha256"

// SHA256 returns the SHA-256 of b. Inside the host it is computed by the
// host function asyncgate.sha256, which is much faster than hashing in wasm.
func SHA256(b []byte) [32]byte { return sha256.Sum256(b) }

// roundTrip is only available inside the host (GOOS=wasip1); elsewhere HTTP
// reports an error so plugin code still compiles and unit-tests natively.
func roundTrip([]byte) ([]byte, error) {
	return nil, Errorf("http_error", "http is only available to a plugin running in the host")
}

// mailCall is only available inside the host (GOOS=wasip1).
func mailCall(int, []byte) ([]byte, error) {
	return nil, Errorf("mail_error", "mail is only available to a plugin running in the host")
}
