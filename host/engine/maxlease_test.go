package engine

import (
	"path/filepath"
	"testing"

	"github.com/asyncgate/asyncgate/host/sqlite"
)

// A lease cap whose expiry would overflow is refused at start, whatever the
// configuration let through: every lease would be dead on arrival.
func TestNewRefusesAMaxLeaseWhoseExpiryWouldOverflow(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if eng, err := New(Config{Store: st, MaxLeaseSeconds: 10_000_000_000}); err == nil {
		eng.Close()
		t.Fatal("New accepted MaxLeaseSeconds 10000000000")
	}
	eng, err := New(Config{Store: st, MaxLeaseSeconds: MaxLeaseSecondsLimit})
	if err != nil {
		t.Fatal(err)
	}
	eng.Close()
}
