//go:build unix

package private

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Check refuses a file or folder another user can write: group or other
// write permission (a sticky /tmp-like folder included), or an owner that
// is neither the gate's user nor root.
func Check(fi fs.FileInfo) error {
	if m := fi.Mode().Perm(); m&0o022 != 0 {
		return fmt.Errorf("it is writable by its group or by others (%v)", fi.Mode())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if uid := int(st.Uid); uid != os.Geteuid() && uid != 0 {
			return fmt.Errorf("it belongs to user %d, not to the gate's user %d", uid, os.Geteuid())
		}
	}
	return nil
}

// openNoFollow opens path for reading without following a final symlink,
// and without blocking on a FIFO put there meanwhile (its Stat then
// refuses it).
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}
