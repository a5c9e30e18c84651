package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/plugins"
	"github.com/labstack/echo/v4"
)

// pluginSet resolves a task type's plugins through the registry, so a plugin
// dropped into the plugins folder (or a new version of one) serves the next
// call without a restart.
type pluginSet struct{ reg *plugin.Registry }

var _ engine.Plugins = pluginSet{}

// Policy implements engine.Plugins.
func (p pluginSet) Policy(tt *host.TaskType) (host.RetryPolicy, error) {
	if tt.Policy == nil || tt.Policy.Name == "" {
		return nil, nil
	}
	return p.reg.Policy(tt.Policy.Name, tt.Policy.Config)
}

// Validators implements engine.Plugins.
func (p pluginSet) Validators(tt *host.TaskType) ([]host.Validator, error) {
	out := make([]host.Validator, 0, len(tt.Validators))
	for _, ref := range tt.Validators {
		v, err := p.reg.Validator(ref.Name, ref.Config)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Channel implements engine.Plugins.
func (p pluginSet) Channel(name string) (host.Channel, error) { return p.reg.Channel(name) }

var _ engine.PluginStates = pluginSet{}

// PluginState implements engine.PluginStates: the retry_policy view says
// who decides while a type's policy plugin does not serve.
func (p pluginSet) PluginState(name string) (state, kind, detail string) { return p.reg.State(name) }

// pluginGrants are the operator's grants: the file channel gets exactly the
// results folder; the http channel, when configured, may reach only URLs
// under its endpoint and its base_url (scheme, host, port and path), and
// redirects that leave them are refused, so its headers go nowhere else.
// They name no module digest, so they are the built-ins' only: a plugin
// dropped into the plugins folder under the name "file" or "http" gets none
// of them (see plugin.RegistryOptions.Grants).
func pluginGrants(cfg serveConfig) (map[string]plugin.Grant, error) {
	results := resultsDir(cfg)
	if err := os.MkdirAll(results, 0o700); err != nil {
		return nil, fmt.Errorf("results folder: %w", err)
	}
	grants := map[string]plugin.Grant{"file": {Dir: results}}
	if h := cfg.HTTPChannel; h != nil && h.Endpoint != "" {
		prefixes := []string{h.Endpoint}
		if h.BaseURL != "" && h.BaseURL != h.Endpoint {
			prefixes = append(prefixes, h.BaseURL)
		}
		var hosts []string
		for _, p := range prefixes {
			u, err := url.Parse(p)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
				return nil, fmt.Errorf("http_channel: %q is not an http(s) URL", p)
			}
			hosts = append(hosts, u.Host)
		}
		c := map[string]any{"endpoint": h.Endpoint}
		if h.BaseURL != "" {
			c["base_url"] = h.BaseURL
		}
		if len(h.Headers) > 0 {
			c["headers"] = h.Headers
		}
		if h.MaxSizeBytes > 0 {
			c["max_size_bytes"] = h.MaxSizeBytes
		}
		conf, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		grants["http"] = plugin.Grant{HTTPHosts: hosts, HTTPPrefixes: prefixes, Config: conf}
	}
	if g, ok, err := cfg.Mail.emailGrant(); err != nil {
		return nil, fmt.Errorf("mail: %w", err)
	} else if ok {
		grants["email"] = g
	}
	return grants, nil
}

// resultsDir is the file channel's folder.
func resultsDir(cfg serveConfig) string {
	if cfg.ResultsDir != "" {
		return cfg.ResultsDir
	}
	return filepath.Join(cfg.Data, "results")
}

// httpChannelConfig is the operator's config of the http push channel.
type httpChannelConfig struct {
	Endpoint string `json:"endpoint"`
	// BaseURL is where results are fetched from (default Endpoint): the
	// channel reaches nothing outside Endpoint and BaseURL.
	BaseURL string            `json:"base_url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// AllowedHosts is no longer used: the channel reaches only URLs under
	// Endpoint and BaseURL. It is still accepted so old config files load.
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	MaxSizeBytes int64    `json:"max_size_bytes,omitempty"`
}

// pluginWiring is what the plugin runtime adds to a running gate.
// tenantPlugin is what an admin of a tenant other than the operators' sees
// of a plugin: what it is and whether it can be named in a task type. The
// gate-wide parts (call counts and errors of every tenant's tasks, the
// operator's file paths, refusal details) are the operators' alone.
type tenantPlugin struct {
	Name         string              `json:"name"`
	Kind         string              `json:"kind,omitempty"`
	Version      string              `json:"version,omitempty"`
	Digest       string              `json:"sha256,omitempty"`
	State        string              `json:"state"`
	Capabilities plugin.Capabilities `json:"capabilities"`
}

func tenantPluginView(in []plugin.Info) []tenantPlugin {
	out := make([]tenantPlugin, len(in))
	for i, p := range in {
		out[i] = tenantPlugin{Name: p.Name, Kind: p.Kind, Version: p.Version, Digest: p.Digest, State: p.State, Capabilities: p.Capabilities}
	}
	return out
}

type pluginWiring struct {
	Plugins engine.Plugins
	Routes  httpapi.Option
	Info    func() (ready bool, list []plugin.Info) // the plugin list for the dashboard
	Pending httpapi.Option                          // /readyz's plugins reason
	Close   func()
	// Ready reports whether every plugin finished its first load; until
	// then a call that needs one still loading waits for it (up to 10 s,
	// then 503 plugin_not_ready with Retry-After).
	Ready func() bool
	// WaitReady blocks until Ready or ctx ends.
	WaitReady func(ctx context.Context) error
}

// startPlugins starts the plugin runtime with the built-ins embedded in the
// binary and the data folder's plugins folder, watched for drop-ins, and adds
// GET /v1/admin/plugins. It returns at once: plugins load in the background,
// each served from wazero's interpreter within about a second of a start
// while it compiles (seconds to a minute on a fresh data folder, ~50 ms from
// the compilation cache), and /readyz answers plugin_not_ready until every
// plugin serves.
func startPlugins(cfg serveConfig, log *slog.Logger) (*pluginWiring, error) {
	cache := cfg.WasmCacheDir
	if cache == "" && cfg.Data != "" {
		cache = filepath.Join(cfg.Data, "wasm-cache")
	}
	// The compilation cache is code the gate runs, and wazero checks its
	// entries with a CRC only: a cache another user can write is refused.
	if cache != "" {
		if err := ensurePrivateDir(cache, "wasm cache", true); err != nil {
			return nil, err
		}
	}
	rt, err := plugin.NewRuntime(plugin.Options{CacheDir: cache, Logger: log, Released: nudgeRelease})
	if err != nil {
		return nil, err
	}
	grants, err := pluginGrants(cfg)
	if err != nil {
		rt.Close()
		return nil, err
	}
	dir := cfg.PluginsDir
	if dir == "" {
		dir = filepath.Join(cfg.Data, "plugins")
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // reported to `gate plugin install`
	}
	// Drop-in plugins are code the gate runs, too.
	if err := ensurePrivateDir(dir, "plugins folder", true); err != nil {
		rt.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	reg, err := plugin.NewRegistry(ctx, rt, plugin.RegistryOptions{Dir: dir, Builtins: plugins.Builtins(), Grants: grants, Background: true})
	if err != nil {
		cancel()
		rt.Close()
		return nil, err
	}
	go reg.Run(ctx)
	log.Info("plugins loading in the background", "folder", dir, "wasm_cache", cache)
	return &pluginWiring{
		Plugins: pluginSet{reg},
		Routes: httpapi.WithRoutes(func(e *echo.Echo, authn echo.MiddlewareFunc) {
			e.GET("/v1/admin/plugins", func(c echo.Context) error {
				a := httpapi.ActorOf(c)
				if a.Role != engine.RoleAdmin {
					return host.Errorf(host.CodeForbidden, "listing plugins needs an admin key")
				}
				// Plugins are the gate's, not a tenant's; ?tenant= is still
				// held to the rule of every /v1/admin route.
				if _, err := httpapi.AdminTenant(c); err != nil {
					return err
				}
				if a.Tenant == auth.DefaultTenant {
					return c.JSON(http.StatusOK, map[string]any{"ready": reg.Ready(), "plugins": reg.List(), "plugins_dir": dir})
				}
				return c.JSON(http.StatusOK, map[string]any{"ready": reg.Ready(), "plugins": tenantPluginView(reg.List())})
			}, authn)
		}),
		Info:    func() (bool, []plugin.Info) { return reg.Ready(), reg.List() },
		Pending: httpapi.WithPluginsPending(reg.Pending),
		Close: func() {
			cancel()
			reg.Close()
			rt.Close()
		},
		Ready:     reg.Ready,
		WaitReady: reg.WaitReady,
	}, nil
}
