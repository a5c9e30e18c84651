//go:build !wasip1

package plugin

// roundTrip is only available inside the host (GOOS=wasip1); elsewhere HTTP
// reports an error so plugin code still compiles and unit-tests natively.
func roundTrip([]byte) ([]byte, error) {
	return nil, Errorf("http_error", "http is only available to a plugin running in the host")
}
