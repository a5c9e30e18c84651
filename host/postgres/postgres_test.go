package postgres

import (
	"testing"

	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/host/store/storetest"
)

// TestConformance runs the store conformance suite against PostgreSQL, each
// case on a schema of its own holding only what the migrations leave in a
// new one (pooledSchema).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t testing.TB) store.Store { return openPooled(t, Options{}) })
}

// TestConformanceSeveralWriters runs the suite on a store with several
// writer connections, each batching on its own, as a busy host runs.
func TestConformanceSeveralWriters(t *testing.T) {
	storetest.Run(t, func(t testing.TB) store.Store { return openPooled(t, Options{Writers: 3}) })
}

// TestFaults fails each write path at each step through a fault-injecting
// wrapper and checks nothing diverges (storetest.RunFaults).
func TestFaults(t *testing.T) {
	storetest.RunFaults(t, func(t testing.TB) store.Store { return openPooled(t, Options{}) })
}
