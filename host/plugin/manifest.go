package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Plugin kinds.
const (
	KindChannel   = "channel"
	KindValidator = "validator"
	KindPolicy    = "policy"
)

// ABIVersion is the plugin ABI version this host speaks. A module's
// asyncgate_abi_version export and its manifest's abi_version must both equal it.
const ABIVersion = 1

// Manifest describes a plugin; it is the parsed <name>.manifest.json, valid
// against schemas/plugin-manifest.schema.json.
type Manifest struct {
	Name         string          `json:"name"`
	Kind         string          `json:"kind"`
	Version      string          `json:"version"`
	ABIVersion   int             `json:"abi_version"`
	Description  string          `json:"description,omitempty"`
	WasmSHA256   string          `json:"wasm_sha256,omitempty"` // hex sha256 of the module this manifest belongs to
	ConfigSchema json.RawMessage `json:"config_schema,omitempty"`
	Capabilities Capabilities    `json:"capabilities"`
	Limits       ManifestLimits  `json:"limits"`

	config *jsonschema.Schema // compiled ConfigSchema; nil accepts any config
}

// Capabilities are what a plugin asks for beyond pure computation.
type Capabilities struct {
	FS    string `json:"fs,omitempty"`    // "dir": one operator-chosen directory at /data
	HTTP  bool   `json:"http,omitempty"`  // the asyncgate.http_request host function
	Clock bool   `json:"clock,omitempty"` // the real wall clock
	Mail  bool   `json:"mail,omitempty"`  // the asyncgate.mail_* host functions (the gate's mail server)
}

// ManifestLimits are a plugin's requests for resources; the operator's
// limits cap them.
type ManifestLimits struct {
	MemoryPages uint32 `json:"memory_pages,omitempty"`
	TimeoutMS   int    `json:"timeout_ms,omitempty"`
}

// Timeout returns the requested call timeout, or 0.
func (l ManifestLimits) Timeout() time.Duration { return time.Duration(l.TimeoutMS) * time.Millisecond }

// ParseManifest parses and validates a manifest: against the manifest schema,
// the supported ABI version, and its config schema (which must compile and be
// self-contained).
func ParseManifest(b []byte) (*Manifest, error) {
	set, err := loadSchemas()
	if err != nil {
		return nil, err
	}
	if err := validateJSON(set.manifest, b); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.ABIVersion != ABIVersion {
		return nil, fmt.Errorf("manifest: abi_version %d is not supported (this host speaks %d)", m.ABIVersion, ABIVersion)
	}
	if len(m.ConfigSchema) > 0 {
		c := newCompiler()
		url := "mem://plugin/" + m.Name + "/config.schema.json"
		if err := c.AddResource(url, bytes.NewReader(m.ConfigSchema)); err != nil {
			return nil, fmt.Errorf("manifest: config_schema: %w", err)
		}
		if m.config, err = c.Compile(url); err != nil {
			return nil, fmt.Errorf("manifest: config_schema: %w", err)
		}
	}
	return &m, nil
}

// ValidateConfig checks a config document against the manifest's config
// schema. An empty config is validated as {}.
func (m *Manifest) ValidateConfig(config json.RawMessage) error {
	if m.config == nil {
		return nil
	}
	if len(bytes.TrimSpace(config)) == 0 {
		config = json.RawMessage(`{}`)
	}
	if err := validateJSON(m.config, config); err != nil {
		return fmt.Errorf("config for plugin %s: %w", m.Name, err)
	}
	return nil
}
