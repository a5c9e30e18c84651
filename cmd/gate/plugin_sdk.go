package main

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
	"github.com/asyncgate/asyncgate/schemas"
	sdkplugin "github.com/asyncgate/asyncgate/sdk/plugin"
)

// A scaffold made outside the repository is its own Go module that requires
// the plugin SDK through a replace to a copy of the SDK this binary carries
// (sdkplugin.Source), so `gate plugin build` and `go test` need no network
// and no checkout. The copy and a pin of what it is live in .asyncgate/.

// scaffoldFS holds the templates of `gate plugin new`, one folder per kind.
//
//go:embed scaffold
var scaffoldFS embed.FS

const (
	sdkModulePath = "github.com/asyncgate/asyncgate/sdk/plugin"
	// sdkPseudoVersion is the version a replaced, unpublished module is
	// required at (what `go mod tidy` writes for it).
	sdkPseudoVersion = "v0.0.0-00010101000000-000000000000"
	scaffoldMeta     = ".asyncgate"
	sdkCopyDir       = ".asyncgate/sdk/plugin"
	sdkPinFile       = ".asyncgate/sdk.json"
)

// sdkPin records which SDK a scaffold's copy is and which ABI it speaks.
type sdkPin struct {
	Module      string `json:"module"`
	GateVersion string `json:"gate_version"` // the gate that wrote the copy
	SDKSHA256   string `json:"sdk_sha256"`   // of the copy's files (see sdkHash)
	ABIVersion  int    `json:"abi_version"`
	// ABISHA256 covers the ABI version and the JSON Schemas of every
	// operation's input and output: it changes when the contract between a
	// plugin and the gate does, even if abi_version was not bumped.
	ABISHA256 string `json:"abi_sha256"`
}

var (
	sdkOnce  sync.Once
	sdkSrc   map[string][]byte // file name → content: go.mod and non-test .go files
	sdkPinV  sdkPin
	sdkGoVer string // the SDK go.mod's go line
	sdkErr   error
)

// embeddedSDK returns the SDK files this binary carries and their pin.
func embeddedSDK() (map[string][]byte, sdkPin, error) {
	sdkOnce.Do(func() {
		sdkSrc = map[string][]byte{}
		ents, err := fs.ReadDir(sdkplugin.Source, ".")
		if err != nil {
			sdkErr = err
			return
		}
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() || strings.HasSuffix(n, "_test.go") {
				continue
			}
			b, err := fs.ReadFile(sdkplugin.Source, n)
			if err != nil {
				sdkErr = err
				return
			}
			sdkSrc[n] = b
		}
		for _, l := range strings.Split(string(sdkSrc["go.mod"]), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
				sdkGoVer = v
			}
		}
		abi, err := abiHash()
		if err != nil {
			sdkErr = err
			return
		}
		sdkPinV = sdkPin{Module: sdkModulePath, GateVersion: version, SDKSHA256: sdkHash(sdkSrc),
			ABIVersion: sdkplugin.ABIVersion, ABISHA256: abi}
		if sdkplugin.ABIVersion != plugin.ABIVersion {
			sdkErr = fmt.Errorf("this gate's SDK speaks ABI %d but its host speaks %d", sdkplugin.ABIVersion, plugin.ABIVersion)
		}
	})
	return sdkSrc, sdkPinV, sdkErr
}

// sdkHash hashes a set of SDK files by name and content.
func sdkHash(files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s %d\n", n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// abiHash hashes the host's ABI version and its operation schemas (every
// plugin-*.schema.json but the manifest's).
func abiHash() (string, error) {
	names, err := fs.Glob(schemas.PluginFS, "plugin-*.schema.json")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "abi %d\n", plugin.ABIVersion)
	for _, n := range names {
		if n == "plugin-manifest.schema.json" {
			continue
		}
		b, err := fs.ReadFile(schemas.PluginFS, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// resolvesSDK reports whether the module governing dir already provides the
// plugin SDK: the AsyncGate repository itself, or a module that requires it.
func resolvesSDK(dir string) bool {
	d, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			s := string(b)
			return strings.Contains(s, "module github.com/asyncgate/asyncgate\n") || strings.Contains(s, sdkModulePath)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return false
		}
		d = parent
	}
}

// scaffoldGoMod is the go.mod of a scaffold that is its own module.
func scaffoldGoMod(name string) string {
	_, _, _ = embeddedSDK()
	goVer := sdkGoVer
	if goVer == "" {
		goVer = "1.24"
	}
	return "module " + name + "\n\ngo " + goVer + "\n\nrequire " + sdkModulePath + " " + sdkPseudoVersion + "\n\n" +
		"// The plugin SDK of the gate that made this scaffold, written by `gate plugin new`\n" +
		"// and kept in step with the building gate by `gate plugin build` (see " + sdkPinFile + ").\n" +
		"replace " + sdkModulePath + " => ./" + sdkCopyDir + "\n"
}

const sdkCopyReadme = `This folder is written by the gate: sdk/plugin is the AsyncGate plugin SDK
of the gate that last built this plugin, and sdk.json pins which one it is
(SDK and ABI hashes). go.mod points the SDK module here with a replace, so
"go test" and "gate plugin build" work offline. Do not edit it: "gate plugin
build" puts back the SDK of the gate running it, and says so when the ABI
changed. Commit it with the plugin.
`

// writeSDKCopy writes the embedded SDK into root/.asyncgate (a fresh folder
// renamed over the old one) and its pin.
func writeSDKCopy(root string) (sdkPin, error) {
	files, pin, err := embeddedSDK()
	if err != nil {
		return pin, err
	}
	meta := filepath.Join(root, scaffoldMeta)
	if err := os.MkdirAll(filepath.Join(meta, "sdk"), 0o755); err != nil {
		return pin, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(meta, "sdk"), ".plugin-")
	if err != nil {
		return pin, err
	}
	defer os.RemoveAll(tmp)
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(tmp, n), b, 0o644); err != nil {
			return pin, err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return pin, err
	}
	dst := filepath.Join(root, filepath.FromSlash(sdkCopyDir))
	if err := os.RemoveAll(dst); err != nil {
		return pin, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return pin, err
	}
	if err := os.WriteFile(filepath.Join(meta, "README"), []byte(sdkCopyReadme), 0o644); err != nil {
		return pin, err
	}
	b, _ := json.MarshalIndent(pin, "", "  ")
	return pin, pluginbuild.WriteFileAtomic(filepath.Join(root, filepath.FromSlash(sdkPinFile)), append(b, '\n'))
}

// readSDKCopy hashes the SDK copy on disk (empty if it is missing).
func readSDKCopy(root string) string {
	dir := filepath.Join(root, filepath.FromSlash(sdkCopyDir))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	files := map[string][]byte{}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return ""
		}
		files[e.Name()] = b
	}
	return sdkHash(files)
}

// syncSDK makes the SDK copy of the scaffold module at root the one this
// gate carries, before a build. It says what changed: a different SDK, and
// loudly a different ABI. It fails if manifest.json names an ABI version
// this gate does not speak. A folder without a pin is left alone.
func syncSDK(root, srcDir string, w io.Writer) error {
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(sdkPinFile)))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var old sdkPin
	if err := json.Unmarshal(b, &old); err != nil {
		return fmt.Errorf("%s: %w", sdkPinFile, err)
	}
	_, cur, err := embeddedSDK()
	if err != nil {
		return err
	}
	onDisk := readSDKCopy(root)
	if old == cur && onDisk == cur.SDKSHA256 {
		return checkManifestABI(srcDir, cur)
	}
	switch {
	case old.ABIVersion != cur.ABIVersion || old.ABISHA256 != cur.ABISHA256:
		fmt.Fprintf(w, "ABI changed: %s was built against abi_version %d (abi %.12s, gate %s); this gate speaks abi_version %d (abi %.12s, gate %s).\n"+
			"  Rebuilding against this gate's SDK: gates that speak the old ABI will refuse the new module. Review schemas/plugin-abi.md and re-run go test.\n",
			root, old.ABIVersion, old.ABISHA256, old.GateVersion, cur.ABIVersion, cur.ABISHA256, cur.GateVersion)
	case old.SDKSHA256 != cur.SDKSHA256:
		fmt.Fprintf(w, "sdk: updating %s from the SDK of gate %s (%.12s) to this gate's %s (%.12s); the ABI is unchanged (abi_version %d)\n",
			sdkCopyDir, old.GateVersion, old.SDKSHA256, cur.GateVersion, cur.SDKSHA256, cur.ABIVersion)
	case onDisk != cur.SDKSHA256:
		fmt.Fprintf(w, "sdk: %s differs from its pin (edited or missing): restoring it\n", sdkCopyDir)
	}
	if _, err := writeSDKCopy(root); err != nil {
		return fmt.Errorf("writing the SDK copy: %w", err)
	}
	return checkManifestABI(srcDir, cur)
}

// checkManifestABI refuses a manifest whose abi_version the SDK does not
// speak: the gate would refuse the module.
func checkManifestABI(srcDir string, cur sdkPin) error {
	b, err := os.ReadFile(filepath.Join(srcDir, "manifest.json"))
	if err != nil {
		return nil // Build reports it
	}
	var m struct {
		ABIVersion int `json:"abi_version"`
	}
	if json.Unmarshal(b, &m) == nil && m.ABIVersion != cur.ABIVersion {
		return fmt.Errorf("%s: abi_version is %d but this gate's SDK speaks %d: set it to %d once the plugin is updated for the new ABI",
			filepath.Join(srcDir, "manifest.json"), m.ABIVersion, cur.ABIVersion, cur.ABIVersion)
	}
	return nil
}

// scaffoldFiles renders the templates of kind for a plugin called name.
func scaffoldFiles(kind, name string) (map[string][]byte, error) {
	switch kind {
	case plugin.KindPolicy, plugin.KindValidator, plugin.KindChannel:
	default:
		return nil, fmt.Errorf("unknown kind %q (policy, validator, channel)", kind)
	}
	ents, err := fs.ReadDir(scaffoldFS, path.Join("scaffold", kind))
	if err != nil {
		return nil, err
	}
	r := strings.NewReplacer("{{NAME}}", name, "{{KIND}}", kind, "{{ABI}}", fmt.Sprint(plugin.ABIVersion))
	out := map[string][]byte{}
	read := func(p, as string) error {
		b, err := fs.ReadFile(scaffoldFS, p)
		if err != nil {
			return err
		}
		out[as] = []byte(r.Replace(string(b)))
		return nil
	}
	for _, e := range ents {
		if err := read(path.Join("scaffold", kind, e.Name()), strings.TrimSuffix(e.Name(), ".tmpl")); err != nil {
			return nil, err
		}
	}
	if err := read("scaffold/gitignore.tmpl", ".gitignore"); err != nil {
		return nil, err
	}
	return out, nil
}
