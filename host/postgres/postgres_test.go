package postgres

import (
	"testing"

	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// TestConformance runs the store conformance suite against PostgreSQL, each
// case on a fresh schema of its own.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t testing.TB) store.Store { return openTest(t) })
}
