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

// TestConformanceSeveralWriters runs the suite on a store with several
// writer connections, each batching on its own, as a busy host runs.
func TestConformanceSeveralWriters(t *testing.T) {
	storetest.Run(t, func(t testing.TB) store.Store { return openIn(t, newSchema(t), Options{Writers: 3}) })
}

// TestFaults fails each write path at each step through a fault-injecting
// wrapper and checks nothing diverges (storetest.RunFaults).
func TestFaults(t *testing.T) {
	storetest.RunFaults(t, func(t testing.TB) store.Store { return openTest(t) })
}
