// Command file is the built-in content-addressed file channel. It stores each
// payload once under its sha256 in the one directory the operator granted
// (mounted at /data) and returns "file:<64 hex>". A pointer is accepted only
// if its data is exactly 64 lowercase hex characters, so no pointer can name
// a path; ack deletes the file unless keep_on_ack is set.
package main

import (
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

const root = "/data"

type config struct {
	MaxSizeBytes  int64 `json:"max_size_bytes"`
	RetentionDays int   `json:"retention_days"`
	KeepOnAck     bool  `json:"keep_on_ack"`
}

func (c *config) max() int64 {
	if c.MaxSizeBytes <= 0 {
		return 64 << 20
	}
	return c.MaxSizeBytes
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// path maps a pointer to its file: /data/ab/abcdef….
func path(pointer string) (string, error) {
	sum, ok := strings.CutPrefix(pointer, "file:")
	if !ok || !isHex64(sum) {
		return "", plugin.Errorf("bad_request", "a file pointer is file:<64 lowercase hex>")
	}
	return root + "/" + sum[:2] + "/" + sum, nil
}

func put(c *config, _ string, payload []byte) (plugin.PutResult, error) {
	if int64(len(payload)) > c.max() {
		return plugin.PutResult{}, plugin.Errorf("too_large", "payload exceeds max_size_bytes")
	}
	s := plugin.SHA256(payload)
	sum := hex.EncodeToString(s[:])
	dir := root + "/" + sum[:2]
	final := dir + "/" + sum
	if st, err := os.Stat(final); err == nil && st.Size() == int64(len(payload)) {
		return plugin.PutResult{Pointer: "file:" + sum}, nil // already stored
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return plugin.PutResult{}, err
	}
	// Durable before the pointer is handed out: the gate records the pointer
	// in a committed receipt, so the bytes must be on disk first.
	tmp := final + ".tmp"
	if err := writeSynced(tmp, payload); err != nil {
		return plugin.PutResult{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return plugin.PutResult{}, err
	}
	syncDir(dir)
	return plugin.PutResult{Pointer: "file:" + sum}, nil
}

// writeSynced writes b to name and fsyncs it.
func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir fsyncs a directory so a rename in it survives a crash. Where the
// platform cannot sync a directory the data itself is already synced.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

func get(_ *config, pointer string) ([]byte, error) {
	p, err := path(pointer)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, plugin.Errorf("not_found", "no such result")
	}
	return b, err
}

func ack(c *config, pointer string) error {
	p, err := path(pointer)
	if err != nil || c.KeepOnAck {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func init() {
	plugin.Channel(plugin.ChannelImpl[config]{
		Put: put, Get: get, Ack: ack,
		Capabilities: func(c *config) (plugin.Capabilities, error) {
			return plugin.Capabilities{MaxSizeBytes: c.max(), RetentionDays: c.RetentionDays}, nil
		},
	})
}

func main() {}
