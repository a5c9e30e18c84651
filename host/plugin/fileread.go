package plugin

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/asyncgate/asyncgate/host"
	"github.com/tetratelabs/wazero/sys"
)

// OpenResult streams a payload of the built-in file channel straight from its
// granted folder, so a large result is never copied into a plugin instance's
// memory and back: the host opens the file beneath the folder with os.Root
// (no path, link or ".." leads outside it) and the caller reads it as it
// sends it. ok is false when this channel cannot be read that way (another
// channel, a drop-in taking the name, no folder granted); the caller then
// uses Get.
//
// The pointer must be one the file channel hands out: "file:<task_id>/<sha256>"
// with task_id the task being read (an object belongs to its task), or the
// earlier shared layout "file:<sha256>".
func (a *ChannelAdapter) OpenResult(ctx context.Context, taskID, pointer string) (rc io.ReadCloser, size int64, ok bool, err error) {
	if a.b.name != "file" {
		return nil, 0, false, nil
	}
	p, err := a.b.plugin(ctx)
	if err != nil || p.Source != "builtin" || p.grant.Dir == "" {
		return nil, 0, false, nil
	}
	rel, err := fileChannelPath(taskID, pointer)
	if err != nil {
		return nil, 0, true, err
	}
	root, err := os.OpenRoot(p.grant.Dir)
	if err != nil {
		return nil, 0, true, host.WrapError(host.CodeChannelError, err, "result channel file: "+err.Error())
	}
	defer root.Close()
	// O_NONBLOCK: a FIFO planted in the folder must not block the open.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, true, host.Errorf(host.CodeNotFound, "no such result")
		}
		return nil, 0, true, host.WrapError(host.CodeChannelError, err, "result channel file: "+err.Error())
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, true, host.Errorf(host.CodeChannelError, "result channel file: %s is not a regular file", rel)
	}
	if sys.NewStat_t(st).Nlink > 1 {
		// A hard link planted from outside the folder, refused as the
		// plugin's own filesystem refuses it (rootfs.go).
		f.Close()
		return nil, 0, true, host.Errorf(host.CodeChannelError, "result channel file: %s has more than one link", rel)
	}
	return f, st.Size(), true, nil
}

// fileChannelPath maps a file channel pointer of task taskID to its path in
// the granted folder, in the layout plugins/channels/file writes.
func fileChannelPath(taskID, pointer string) (string, error) {
	data, ok := strings.CutPrefix(pointer, "file:")
	if !ok {
		return "", host.Errorf(host.CodeBadRequest, "pointer is not a file: pointer")
	}
	if isLowerHex64(data) {
		return data[:2] + "/" + data, nil // the earlier, shared layout
	}
	task, sum, ok := strings.Cut(data, "/")
	if !ok || !isLowerHex64(sum) || task == "" || strings.ContainsAny(task, `/\.`) || len(task) < 3 || len(task) > 64 {
		return "", host.Errorf(host.CodeBadRequest, "a file pointer is file:<task_id>/<64 lowercase hex>")
	}
	if task != taskID {
		return "", host.Errorf(host.CodeBadRequest, "the pointer names an object of another task")
	}
	return task[len(task)-2:] + "/" + task + "/" + sum, nil
}

func isLowerHex64(s string) bool {
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
