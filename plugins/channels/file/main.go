// Command file is the built-in file channel. It stores each payload in the
// one directory the operator granted (mounted at /data), owned by the task it
// belongs to: /data/<shard>/<task_id>/<sha256>, where shard is the task id's
// last two characters, and returns "file:<task_id>/<sha256>". Objects are
// never shared between tasks, so equal results of two tasks (or tenants) are
// two files, and ack removes only its own task's folder. A pointer is
// accepted only if it is exactly that shape, so no pointer can name a path.
//
// Pointers of the earlier layout, "file:<sha256>" (one file shared by every
// task with the same content), are still read; ack leaves such a file alone,
// since it cannot know who else refers to it.
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

// validTaskID reports whether id is a task id that is safe as one path
// element: letters, digits, '-' and '_', not starting with '-' or '_'.
func validTaskID(id string) bool {
	if len(id) < 3 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (i > 0 && (c == '-' || c == '_'))
		if !ok {
			return false
		}
	}
	return true
}

// taskDir is the folder that holds a task's objects.
func taskDir(taskID string) string {
	return root + "/" + taskID[len(taskID)-2:] + "/" + taskID
}

// object is what a pointer names: a task's object, or a legacy shared file.
type object struct {
	taskID string // "" for a legacy pointer
	sum    string
}

func (o object) path() string {
	if o.taskID == "" {
		return root + "/" + o.sum[:2] + "/" + o.sum
	}
	return taskDir(o.taskID) + "/" + o.sum
}

// parse maps a pointer to the object it names.
func parse(pointer string) (object, error) {
	data, ok := strings.CutPrefix(pointer, "file:")
	if ok {
		if isHex64(data) {
			return object{sum: data}, nil
		}
		if task, sum, ok := strings.Cut(data, "/"); ok && validTaskID(task) && isHex64(sum) {
			return object{taskID: task, sum: sum}, nil
		}
	}
	return object{}, plugin.Errorf("bad_request", "a file pointer is file:<task_id>/<64 lowercase hex>")
}

func put(c *config, taskID string, payload []byte) (plugin.PutResult, error) {
	if int64(len(payload)) > c.max() {
		return plugin.PutResult{}, plugin.Errorf("too_large", "payload exceeds max_size_bytes")
	}
	if !validTaskID(taskID) {
		return plugin.PutResult{}, plugin.Errorf("bad_request", "task_id is not a valid path element")
	}
	s := plugin.SHA256(payload)
	o := object{taskID: taskID, sum: hex.EncodeToString(s[:])}
	pointer := "file:" + taskID + "/" + o.sum
	final := o.path()
	if st, err := os.Stat(final); err == nil && st.Size() == int64(len(payload)) {
		return plugin.PutResult{Pointer: pointer}, nil // this task stored it already
	}
	dir := taskDir(taskID)
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
	syncDir(root + "/" + taskID[len(taskID)-2:])
	return plugin.PutResult{Pointer: pointer}, nil
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
	o, err := parse(pointer)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(o.path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, plugin.Errorf("not_found", "no such result")
	}
	return b, err
}

// ack removes the task's folder: its result and any object an earlier,
// unfinished attempt of the same task left behind. Nothing outside the
// task's folder is touched.
func ack(c *config, pointer string) error {
	o, err := parse(pointer)
	if err != nil || c.KeepOnAck || o.taskID == "" {
		return err
	}
	if err := os.RemoveAll(taskDir(o.taskID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
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
