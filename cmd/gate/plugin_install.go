package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
)

// readPluginFiles reads a built plugin and its manifest: NAME.manifest.json
// beside NAME.wasm, else manifest.json in the same folder.
func readPluginFiles(file string) (wasm, man []byte, manPath string, err error) {
	if wasm, err = os.ReadFile(file); err != nil {
		return nil, nil, "", err
	}
	manPath = strings.TrimSuffix(file, ".wasm") + ".manifest.json"
	if man, err = os.ReadFile(manPath); err != nil {
		manPath = filepath.Join(filepath.Dir(file), "manifest.json")
		if man, err = os.ReadFile(manPath); err != nil {
			return nil, nil, "", fmt.Errorf("no manifest beside %s (NAME.manifest.json or manifest.json)", file)
		}
	}
	return wasm, man, manPath, nil
}

// adminPlugins is the answer of GET /v1/admin/plugins.
type adminPlugins struct {
	Plugins []struct {
		Name     string    `json:"name"`
		Kind     string    `json:"kind"`
		Version  string    `json:"version"`
		SHA256   string    `json:"sha256"`
		State    string    `json:"state"`
		Refused  string    `json:"refused"`
		LoadedAt time.Time `json:"loaded_at"`
	} `json:"plugins"`
	PluginsDir string `json:"plugins_dir"`
}

func fetchAdminPlugins(c *http.Client, base, key string) (*adminPlugins, error) {
	req, err := http.NewRequest(http.MethodGet, strings.TrimRight(base, "/")+"/v1/admin/plugins", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/admin/plugins: %s: %s", res.Status, bytes.TrimSpace(b))
	}
	var out adminPlugins
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("GET /v1/admin/plugins: %w", err)
	}
	return &out, nil
}

// pluginInstall drops a built plugin into a running gate's plugins folder
// and waits until the gate reports it loaded, or why it refused it.
func pluginInstall(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	gateURL := fs.String("url", envOr("ASYNCGATE_URL", "http://127.0.0.1:8080"), "the running gate's base URL (env ASYNCGATE_URL)")
	key := fs.String("key", os.Getenv("ASYNCGATE_ADMIN_KEY"), "admin key of that gate (env ASYNCGATE_ADMIN_KEY)")
	dir := fs.String("dir", "", "the gate's plugins folder (default: the folder the gate reports)")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the gate to load the plugin")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: gate plugin install [-url URL] [-key ADMIN_KEY] [-dir PLUGINS_DIR] FILE.wasm")
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gate plugin install: "+format+"\n", a...)
		return 1
	}
	wasm, man, manPath, err := readPluginFiles(pos[0])
	if err != nil {
		return fail("%v", err)
	}
	// Refuse here what the gate would refuse for its manifest.
	m, err := plugin.ParseManifest(man)
	if err != nil {
		return fail("%s: %v", manPath, err)
	}
	sum := sha256.Sum256(wasm)
	digest := hex.EncodeToString(sum[:])
	if *key == "" && *dir == "" {
		return fail("give the gate's admin key (-key or ASYNCGATE_ADMIN_KEY) to wait for the load, or -dir to only copy the files")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	refusedBefore := ""
	if *key != "" {
		if u, err := url.Parse(*gateURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fail("-url %q is not an http(s) URL", *gateURL)
		}
		list, err := fetchAdminPlugins(client, *gateURL, *key)
		if err != nil {
			return fail("asking the gate for its plugins: %v", err)
		}
		for _, p := range list.Plugins {
			if p.Name == m.Name {
				refusedBefore = p.Refused
			}
		}
		if *dir == "" {
			if list.PluginsDir == "" {
				return fail("the gate at %s does not report its plugins folder: give -dir", *gateURL)
			}
			*dir = list.PluginsDir
		}
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		return fail("plugins folder %s is not a folder here (is the gate on another machine? copy the files there)", *dir)
	}
	man, sha := manifestWithDigest(man, digest)
	manDst, wasmDst := filepath.Join(*dir, m.Name+".manifest.json"), filepath.Join(*dir, m.Name+".wasm")
	// Copying the very files the folder holds changes nothing the gate
	// would reload: then it is enough that the gate serves them.
	oldMan, err1 := os.ReadFile(manDst)
	oldWasm, err2 := os.ReadFile(wasmDst)
	same := err1 == nil && err2 == nil && bytes.Equal(oldMan, man) && bytes.Equal(oldWasm, wasm)
	before := time.Now()
	// The folder's rule (schemas/plugin-abi.md, "Files and loading"): each
	// file is written under a temp name and renamed in, the module first and
	// the manifest last, so the gate never loads half a plugin; a manifest
	// that names its module's sha256 makes the pair unambiguous.
	if err := pluginbuild.WriteFileAtomic(wasmDst, wasm); err != nil {
		return fail("%v", err)
	}
	if err := pluginbuild.WriteFileAtomic(manDst, man); err != nil {
		return fail("%v", err)
	}
	written := time.Now()
	where := wasmDst
	if sha {
		where += " (manifest names its sha256)"
	}
	fmt.Fprintf(stdout, "copied %s %s v%s (sha256 %.16s) to %s\n", m.Kind, m.Name, m.Version, digest, where)
	if *key == "" {
		fmt.Fprintln(stdout, "not waiting for the load: no admin key (GET /v1/admin/plugins shows it)")
		return 0
	}
	// Wait for the gate to serve this very module (its sha256), or to refuse
	// it. The gate does not say which module a refusal was about, so a new
	// refusal counts once it has stood for a second (while the two files
	// change the gate may see a passing mix of old and new), and the same
	// refusal as before the copy only after staleAfter.
	const settle, staleAfter = time.Second, 10 * time.Second
	deadline := written.Add(*timeout)
	var lastErr error
	last, seen := "", ""
	var seenAt time.Time
	for {
		list, err := fetchAdminPlugins(client, *gateURL, *key)
		lastErr = err
		if err == nil {
			state, refused, serving := "not listed", "", ""
			for _, p := range list.Plugins {
				if p.Name != m.Name {
					continue
				}
				state, refused, serving = p.State, p.Refused, p.SHA256
				// This copy is loaded when the gate serves its module and
				// version, loaded after the copy began.
				if p.State == "ready" && p.SHA256 == digest && p.Version == m.Version && p.Refused == "" &&
					(same || !p.LoadedAt.Before(before)) {
					fmt.Fprintf(stdout, "loaded %s v%s (sha256 %.16s) in %v\n", m.Name, p.Version, digest, time.Since(written).Round(time.Millisecond))
					return 0
				}
			}
			last = "state " + state
			if refused != seen {
				seen, seenAt = refused, time.Now()
			}
			if refused != "" {
				last += ", " + refused
				if (refused != refusedBefore && time.Since(seenAt) >= settle) || time.Since(written) >= staleAfter {
					fmt.Fprintf(stdout, "the gate refused %s: %s\n", m.Name, strings.TrimPrefix(refused, "refused: "))
					if state == "ready" && serving != "" {
						fmt.Fprintf(stdout, "it keeps serving the previous module (sha256 %.16s)\n", serving)
					}
					return 1
				}
			}
		}
		if time.Now().After(deadline) {
			if lastErr != nil && last == "" {
				return fail("the gate did not answer within %v: %v", *timeout, lastErr)
			}
			return fail("the gate did not report %s loaded within %v (last: %s)", m.Name, *timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// manifestWithDigest adds "wasm_sha256" to the manifest when this gate's
// manifest schema has the field (a gate that reads it loads only the module
// the manifest names); otherwise it returns the manifest unchanged.
func manifestWithDigest(man []byte, digest string) ([]byte, bool) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(man, &doc); err != nil {
		return man, false
	}
	doc["wasm_sha256"] = json.RawMessage(`"` + digest + `"`)
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return man, false
	}
	if _, err := plugin.ParseManifest(b); err != nil {
		return man, false
	}
	return append(b, '\n'), true
}
