package main

import (
	"encoding/json"
	"testing"
	"time"
)

// The config file's resource_leases object reaches the engine, min_ttl_ms
// included; an omitted field keeps the engine's default (zero here).
func TestResourceLeaseConfigMinTTL(t *testing.T) {
	var c resourceLeaseConfig
	if err := json.Unmarshal([]byte(`{"min_ttl_ms": 250, "max_ttl_ms": 60000}`), &c); err != nil {
		t.Fatal(err)
	}
	e := c.engine()
	if e.MinTTL != 250*time.Millisecond || e.MaxTTL != time.Minute || e.DefaultTTL != 0 {
		t.Fatalf("engine config = %+v", e)
	}
}
