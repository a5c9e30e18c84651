package main

import (
	"time"

	"github.com/asyncgate/asyncgate/host/engine"
)

// resourceLeaseConfig is the config file's resource_leases object
// (schemas/config.schema.json). Omitted fields keep the engine's defaults.
type resourceLeaseConfig struct {
	DefaultTTLMs       int64 `json:"default_ttl_ms"`
	MaxTTLMs           int64 `json:"max_ttl_ms"`
	MinTTLMs           int64 `json:"min_ttl_ms"`
	GraceMs            int64 `json:"grace_ms"`
	MaxIntents         int   `json:"max_intents"`
	MaxLeasesPerHolder int   `json:"max_leases_per_holder"`
	HoldQuotaSeconds   int64 `json:"hold_quota_seconds"`
	QuotaWindowSeconds int64 `json:"quota_window_seconds"`
	// MaxSessionsPerHolder caps a holder's open sessions (-1: no cap).
	MaxSessionsPerHolder int `json:"max_sessions_per_holder"`
	// SessionRetentionSeconds is how long an ended session is kept.
	SessionRetentionSeconds int64 `json:"session_retention_seconds"`
}

// engine returns the engine's settings; a nil config is all defaults.
func (c *resourceLeaseConfig) engine() engine.ResourceLeaseConfig {
	if c == nil {
		return engine.ResourceLeaseConfig{}
	}
	return engine.ResourceLeaseConfig{
		DefaultTTL:           time.Duration(c.DefaultTTLMs) * time.Millisecond,
		MaxTTL:               time.Duration(c.MaxTTLMs) * time.Millisecond,
		MinTTL:               time.Duration(c.MinTTLMs) * time.Millisecond,
		Grace:                time.Duration(c.GraceMs) * time.Millisecond,
		MaxIntents:           c.MaxIntents,
		MaxLeasesPerHolder:   c.MaxLeasesPerHolder,
		HoldQuota:            time.Duration(c.HoldQuotaSeconds) * time.Second,
		QuotaWindow:          time.Duration(c.QuotaWindowSeconds) * time.Second,
		MaxSessionsPerHolder: c.MaxSessionsPerHolder,
		SessionRetention:     time.Duration(c.SessionRetentionSeconds) * time.Second,
	}
}
