package mcpapi_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
	"github.com/asyncgate/asyncgate/plugins"
)

// builtins is the real plugin registry every test's engine resolves its
// plugins through: the built-in plugins the gate embeds (plugins/dist, filled
// by `make plugins`; built from plugins/ when that is empty), loaded once per
// test binary on a shared compilation cache, with the file channel granted
// resultsDir as cmd/gate grants it the data folder's results folder.
var (
	builtins   *plugin.Registry
	resultsDir string
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "asyncgate-mcpapi-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	resultsDir = filepath.Join(tmp, "results")
	if err := os.MkdirAll(resultsDir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	src, err := builtinPlugins(filepath.Join(tmp, "built"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cache := filepath.Join(pluginbuild.DefaultCacheDir(), "..", "wasm-cache-test")
	rt, err := plugin.NewRuntime(plugin.Options{CacheDir: cache, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer rt.Close()
	builtins, err = plugin.NewRegistry(context.Background(), rt, plugin.RegistryOptions{
		Builtins: src, Grants: map[string]plugin.Grant{"file": {Dir: resultsDir}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer builtins.Close()
	for _, name := range []string{"inline", "file"} {
		if _, err := builtins.Channel(name); err != nil {
			fmt.Fprintf(os.Stderr, "built-in channel %s: %v\n", name, err)
			return 1
		}
	}
	return m.Run()
}

// builtinPlugins returns plugins/dist as the gate embeds it, or, when `make
// plugins` has not filled it, the same sources built into out.
func builtinPlugins(out string) (fs.FS, error) {
	dist := plugins.Builtins()
	if _, err := fs.Stat(dist, "inline.wasm"); err == nil {
		if _, err := fs.Stat(dist, "file.wasm"); err == nil {
			return dist, nil
		}
	}
	root, err := pluginbuild.ModuleRoot(".")
	if err != nil {
		return nil, err
	}
	srcs, err := pluginbuild.Sources(filepath.Join(root, "plugins"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := pluginbuild.BuildAll(ctx, srcs, out, ""); err != nil {
		return nil, err
	}
	return os.DirFS(out), nil
}

// registryPlugins resolves a task type's plugins through the registry, as
// cmd/gate's pluginSet does for the running gate.
type registryPlugins struct{ reg *plugin.Registry }

var _ engine.Plugins = registryPlugins{}

func (p registryPlugins) Policy(tt *host.TaskType) (host.RetryPolicy, error) {
	if tt.Policy == nil || tt.Policy.Name == "" {
		return nil, nil
	}
	return p.reg.Policy(tt.Policy.Name, tt.Policy.Config)
}

func (p registryPlugins) Validators(tt *host.TaskType) ([]host.Validator, error) {
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

func (p registryPlugins) Channel(name string) (host.Channel, error) { return p.reg.Channel(name) }
