// Package pluginbuild builds AsyncGate plugins from Go source with the
// standard toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath
//
// and caches the result by a hash of the sources, so tests, `gate plugin
// build` and `make plugins` rebuild only what changed. A plugin source folder
// holds a main package and a manifest.json; the output is the flat layout
// the plugin registry loads: <name>.wasm and <name>.manifest.json.
package pluginbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// Build compiles the plugin in srcDir into outDir and returns its name (the
// manifest's). cacheDir holds built modules by source hash; empty means
// DefaultCacheDir().
func Build(ctx context.Context, srcDir, outDir, cacheDir string) (string, error) {
	man, err := os.ReadFile(filepath.Join(srcDir, "manifest.json"))
	if err != nil {
		return "", fmt.Errorf("plugin source %s: %w", srcDir, err)
	}
	var m struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(man, &m); err != nil || m.Name == "" {
		return "", fmt.Errorf("plugin source %s: manifest.json has no name", srcDir)
	}
	if cacheDir == "" {
		cacheDir = DefaultCacheDir()
	}
	key, err := sourceKey(srcDir)
	if err != nil {
		return "", err
	}
	cached := filepath.Join(cacheDir, m.Name+"-"+key[:24]+".wasm")
	if _, err := os.Stat(cached); err != nil {
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return "", err
		}
		tmp := cached + ".tmp" + fmt.Sprint(os.Getpid())
		cmd := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-trimpath", "-o", tmp, ".")
		cmd.Dir = srcDir
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			os.Remove(tmp)
			return "", fmt.Errorf("building plugin %s: %w\n%s", m.Name, err, out.String())
		}
		if err := os.Rename(tmp, cached); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	wasm, err := os.ReadFile(cached)
	if err != nil {
		return "", err
	}
	if man, err = StampManifest(man, wasm); err != nil {
		return "", fmt.Errorf("plugin source %s: %w", srcDir, err)
	}
	// Write the module first and the manifest last under temp names, then
	// rename: a watching registry never sees half a plugin, and loads the
	// pair only once the manifest's wasm_sha256 matches the module.
	if err := WriteFileAtomic(filepath.Join(outDir, m.Name+".wasm"), wasm); err != nil {
		return "", err
	}
	if err := WriteFileAtomic(filepath.Join(outDir, m.Name+".manifest.json"), man); err != nil {
		return "", err
	}
	return m.Name, nil
}

// StampManifest returns the manifest with "wasm_sha256" set to the hex
// sha256 of wasm: the plugin registry loads a dropped-in pair only when the
// two agree, so a module is never run under another version's manifest.
func StampManifest(manifest, wasm []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(manifest, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	sum := sha256.Sum256(wasm)
	m["wasm_sha256"], _ = json.Marshal(hex.EncodeToString(sum[:]))
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// WriteFileAtomic writes b to a hidden temporary file of its own beside
// path, syncs it and renames it over path, so that a reader (or a watching
// plugin registry) sees the old content or the new, never half, and two
// writers of one path at once (two test binaries building the plugins) never
// rename each other's file.
func WriteFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// BuildAll builds every plugin source folder in srcDirs into outDir, two at a
// time, and returns the names built.
func BuildAll(ctx context.Context, srcDirs []string, outDir, cacheDir string) ([]string, error) {
	var (
		mu    sync.Mutex
		names []string
		errs  []string
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 2)
	)
	for _, d := range srcDirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name, err := Build(ctx, d, outDir, cacheDir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
				return
			}
			names = append(names, name)
		}()
	}
	wg.Wait()
	sort.Strings(names)
	if len(errs) > 0 {
		return names, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return names, nil
}

// Sources lists the plugin source folders (those with a manifest.json) under
// root, e.g. the repository's plugins/ folder.
func Sources(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "dist" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "manifest.json" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	sort.Strings(dirs)
	return dirs, err
}

// DefaultCacheDir is <user cache dir>/asyncgate/plugin-builds, or a folder in
// the temp dir when there is no user cache dir.
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "asyncgate", "plugin-builds")
	}
	return filepath.Join(os.TempDir(), "asyncgate-plugin-builds")
}

// ModuleRoot returns the folder of the go.mod that governs dir.
func ModuleRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		d = parent
	}
}

// sourceKey hashes what a build depends on: the Go version, the plugin's
// files, go.mod/go.sum and the SDK's sources (the module's sdk/plugin or
// .asyncgate/sdk/plugin, when it has one).
func sourceKey(srcDir string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version())
	root, err := ModuleRoot(srcDir)
	if err != nil {
		return "", err
	}
	// The SDK: the repository's, or the copy a `gate plugin new` scaffold
	// carries (its go.mod replaces the SDK module with it).
	dirs := []string{srcDir, filepath.Join(root, "sdk", "plugin"), filepath.Join(root, ".asyncgate", "sdk", "plugin")}
	for _, f := range []string{"go.mod", "go.sum"} {
		if b, err := os.ReadFile(filepath.Join(root, f)); err == nil {
			h.Write(b)
		}
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() || !(strings.HasSuffix(e.Name(), ".go") || e.Name() == "manifest.json") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "%s %d\n", e.Name(), len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
