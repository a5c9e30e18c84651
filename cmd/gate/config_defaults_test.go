package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/mail"
	"github.com/asyncgate/asyncgate/host/postgres"
	"github.com/asyncgate/asyncgate/host/sqlite"
	"github.com/asyncgate/asyncgate/schemas"
)

// statedDefault finds the default a config field's description states:
// "Default 3600", "(default 768; 0: none)", "(0 or absent: 2)".
var statedDefault = regexp.MustCompile(`(?i)\bdefault (\S+?)[;.:,)]*(?:\s|$)|\bor absent: (\S+?)\)`)

// TestConfigSchemaDefaultsAreTheCodes: every default the config schema's
// descriptions state (schemas/config.schema.json, what an operator reads)
// is the one the code applies when the field is absent: the gate's own
// defaults (defaultServeConfig), the PostgreSQL store's writers, the
// engine's resource lease and retention settings, the mail client's
// timeout, each read from the code. A field whose stated default the test
// does not know fails it, as does one it knows whose description states
// none, so a default added to either side is compared.
func TestConfigSchemaDefaultsAreTheCodes(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng, err := engine.New(engine.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rl := eng.ResourceLeaseConfig()
	cfg := defaultServeConfig()
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	sec := func(d time.Duration) int64 { return int64(d / time.Second) }
	code := map[string]any{
		"listen":                                    cfg.Listen,
		"data":                                      cfg.Data,
		"db_writers":                                postgres.DefaultWriters,
		"db_timeout_seconds":                        cfg.DBTimeoutSeconds,
		"body_limit_bytes":                          cfg.BodyLimitBytes,
		"metrics_public":                            cfg.MetricsPublic,
		"max_lease_seconds":                         cfg.MaxLeaseSeconds,
		"expiry_jitter_ms":                          cfg.ExpiryJitterMS,
		"sweep_interval_ms":                         cfg.SweepIntervalMS,
		"auth_cache_seconds":                        cfg.AuthCacheSeconds,
		"shutdown_timeout_seconds":                  cfg.ShutdownTimeoutSeconds,
		"mcp_allow_any_host":                        cfg.MCPAllowAnyHost,
		"memory_limit_mib":                          cfg.MemoryLimitMiB,
		"gc_percent":                                cfg.GCPercent,
		"results_dir":                               resultsDir(serveConfig{Data: "<data>"}),
		"resource_leases.default_ttl_ms":            ms(rl.DefaultTTL),
		"resource_leases.max_ttl_ms":                ms(rl.MaxTTL),
		"resource_leases.min_ttl_ms":                ms(rl.MinTTL),
		"resource_leases.grace_ms":                  ms(rl.Grace),
		"resource_leases.max_intents":               rl.MaxIntents,
		"resource_leases.max_leases_per_holder":     rl.MaxLeasesPerHolder,
		"resource_leases.hold_quota_seconds":        sec(rl.HoldQuota),
		"resource_leases.quota_window_seconds":      sec(rl.QuotaWindow),
		"resource_leases.max_sessions_per_holder":   rl.MaxSessionsPerHolder,
		"resource_leases.session_retention_seconds": sec(rl.SessionRetention),
		"delivery.retention_days":                   host.DefaultRetentionDays,
		"delivery.dead_letter_retention_days":       engine.DefaultDeadLetterDays,
		"delivery.retention_sweep_seconds":          sec(engine.DefaultRetentionInterval),
		"mail.timeout_seconds":                      sec(mail.DefaultTimeout),
		"mail.send_limit.per_principal_per_hour":    engine.DefaultEmailsPerPrincipalHour,
		"mail.send_limit.per_tenant_per_hour":       engine.DefaultEmailsPerTenantHour,
		"oauth.http_api":                            false,
	}
	// Stated, not read from the code: folders the plugin runtime's start
	// derives from the data folder inline, and a default that is another
	// field's value.
	unchecked := map[string]bool{"wasm_cache_dir": true, "plugins_dir": true, "http_channel.base_url": true}

	var schema map[string]any
	if err := json.Unmarshal(schemas.ConfigSchema, &schema); err != nil {
		t.Fatal(err)
	}
	stated := map[string]string{}
	var walk func(s map[string]any, path string)
	walk = func(s map[string]any, path string) {
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			p, _ := p.(map[string]any)
			if p == nil {
				continue
			}
			if d, _ := p["description"].(string); d != "" {
				if m := statedDefault.FindStringSubmatch(d); m != nil {
					stated[path+name] = m[1] + m[2]
				}
			}
			if v, ok := p["default"]; ok {
				t.Errorf("%s%s: a default keyword (%v); state it in the description, which this test reads", path, name, v)
			}
			walk(p, path+name+".")
		}
	}
	walk(schema, "")
	defs, _ := schema["$defs"].(map[string]any)
	for name, d := range defs {
		if d, ok := d.(map[string]any); ok {
			walk(d, "$defs."+name+".")
		}
	}

	var fields []string
	for f := range stated {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	for _, f := range fields {
		if unchecked[f] {
			continue
		}
		v, ok := code[f]
		if !ok {
			t.Errorf("%s: the schema states default %s; add the code's default to this test", f, stated[f])
			continue
		}
		if got := fmt.Sprint(v); got != stated[f] {
			t.Errorf("%s: the schema states default %s, the code's is %s", f, stated[f], got)
		}
	}
	for f := range code {
		if _, ok := stated[f]; !ok {
			t.Errorf("%s: the schema's description states no default (the code's is %v)", f, code[f])
		}
	}
	if t.Failed() {
		t.Logf("stated defaults: %s", strings.Join(fields, ", "))
	}
}
