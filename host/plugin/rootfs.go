package plugin

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// rootFS is the guest's filesystem for a plugin granted a folder: every path
// is resolved by an os.Root opened on that folder, so no path the guest can
// form — "..", absolute or relative symlinks, links planted in the folder
// before the plugin ran — reaches a file outside it. wazero's own directory
// mount joins paths onto the host folder and lets the kernel follow links;
// it is not a sandbox (wazero#2321).
//
// The guest cannot create links: Symlink and Link answer EPERM, so a link can
// only exist if someone with host access put it there, and even then it is
// followed only while it stays beneath the folder. A regular file with more
// than one hard link is refused on open, so a hard link planted into the
// folder from outside does not hand the guest the file it points at.
type rootFS struct {
	experimentalsys.UnimplementedFS
	root *os.Root
}

// newRootFS opens dir as the guest's filesystem root.
func newRootFS(dir string) (*rootFS, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &rootFS{root: r}, nil
}

// String implements fmt.Stringer.
func (r *rootFS) String() string { return r.root.Name() }

// close releases the root's directory handle.
func (r *rootFS) close() error { return r.root.Close() }

// rel turns a guest path (relative to the mount, as wazero passes it) into a
// path for os.Root.
func rel(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return p
}

// errno maps an error to a WASI errno. An escape refused by os.Root (not a
// syscall error) is EPERM.
func errno(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		return experimentalsys.UnwrapOSError(se)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return experimentalsys.ENOENT
	case errors.Is(err, fs.ErrExist):
		return experimentalsys.EEXIST
	case errors.Is(err, fs.ErrInvalid):
		return experimentalsys.EINVAL
	case errors.Is(err, fs.ErrClosed):
		return experimentalsys.EBADF
	}
	return experimentalsys.EPERM
}

func osFlags(flag experimentalsys.Oflag) int {
	var f int
	switch flag & (experimentalsys.O_RDONLY | experimentalsys.O_RDWR | experimentalsys.O_WRONLY) {
	case experimentalsys.O_RDWR:
		f = os.O_RDWR
	case experimentalsys.O_WRONLY:
		f = os.O_WRONLY
	default:
		f = os.O_RDONLY
	}
	if flag&experimentalsys.O_APPEND != 0 {
		f |= os.O_APPEND
	}
	if flag&experimentalsys.O_CREAT != 0 {
		f |= os.O_CREATE
	}
	if flag&experimentalsys.O_EXCL != 0 {
		f |= os.O_EXCL
	}
	if flag&experimentalsys.O_TRUNC != 0 {
		f |= os.O_TRUNC
	}
	if flag&experimentalsys.O_SYNC != 0 {
		f |= os.O_SYNC
	}
	if flag&experimentalsys.O_DSYNC != 0 {
		f |= syscall.O_DSYNC
	}
	if flag&experimentalsys.O_NOFOLLOW != 0 {
		f |= syscall.O_NOFOLLOW
	}
	if flag&experimentalsys.O_DIRECTORY != 0 {
		f |= syscall.O_DIRECTORY
	}
	return f
}

// OpenFile implements experimentalsys.FS.
func (r *rootFS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	p := rel(path)
	if flag&experimentalsys.O_DIRECTORY != 0 && flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR) != 0 {
		return nil, experimentalsys.EISDIR
	}
	// O_TRUNC waits until the link count is checked: truncating at open
	// would empty a planted hard link's target before it is refused.
	// O_NONBLOCK: opening a FIFO planted in the folder would otherwise
	// wait for a writer, in host code no call deadline interrupts; it has
	// no effect on the regular files and folders that are let through.
	// perm&0o700: what a plugin creates (results) is its owner's only.
	f, err := r.root.OpenFile(p, osFlags(flag&^experimentalsys.O_TRUNC)|syscall.O_NONBLOCK, perm&0o700)
	if err != nil {
		return nil, errno(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, errno(err)
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		// A FIFO, socket or device someone put in the folder.
		f.Close()
		return nil, experimentalsys.EPERM
	}
	st := sys.NewStat_t(fi)
	if fi.Mode().IsRegular() && st.Nlink > 1 {
		// A hard link planted from outside the folder: refuse it.
		f.Close()
		return nil, experimentalsys.EPERM
	}
	if flag&experimentalsys.O_DIRECTORY != 0 && !fi.IsDir() {
		f.Close()
		return nil, experimentalsys.ENOTDIR
	}
	if flag&experimentalsys.O_TRUNC != 0 && fi.Mode().IsRegular() && flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR) != 0 {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, errno(err)
		}
	}
	return r.wrap(p, flag, f, fi.IsDir())
}

// Lstat implements experimentalsys.FS.
func (r *rootFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Lstat(rel(path))
	if err != nil {
		return sys.Stat_t{}, errno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Stat implements experimentalsys.FS.
func (r *rootFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Stat(rel(path))
	if err != nil {
		return sys.Stat_t{}, errno(err)
	}
	return sys.NewStat_t(fi), 0
}

// Mkdir implements experimentalsys.FS.
func (r *rootFS) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	e := errno(r.root.Mkdir(rel(path), perm&0o700))
	if e == experimentalsys.ENOTDIR {
		e = experimentalsys.ENOENT
	}
	return e
}

// Chmod implements experimentalsys.FS.
func (r *rootFS) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	return errno(r.root.Chmod(rel(path), perm&0o700))
}

// Rename implements experimentalsys.FS. Both names resolve beneath the root.
func (r *rootFS) Rename(from, to string) experimentalsys.Errno {
	return errno(r.root.Rename(rel(from), rel(to)))
}

// Rmdir implements experimentalsys.FS.
func (r *rootFS) Rmdir(path string) experimentalsys.Errno {
	p := rel(path)
	fi, err := r.root.Lstat(p)
	if err != nil {
		return errno(err)
	}
	if !fi.IsDir() {
		return experimentalsys.ENOTDIR
	}
	return errno(r.root.Remove(p))
}

// Unlink implements experimentalsys.FS.
func (r *rootFS) Unlink(path string) experimentalsys.Errno {
	p := rel(path)
	fi, err := r.root.Lstat(p)
	if err != nil {
		return errno(err)
	}
	if fi.IsDir() {
		return experimentalsys.EISDIR
	}
	return errno(r.root.Remove(p))
}

// Link implements experimentalsys.FS: the guest may not create hard links.
func (r *rootFS) Link(_, _ string) experimentalsys.Errno { return experimentalsys.EPERM }

// Symlink implements experimentalsys.FS: the guest may not create symlinks.
func (r *rootFS) Symlink(_, _ string) experimentalsys.Errno { return experimentalsys.EPERM }

// Readlink implements experimentalsys.FS.
func (r *rootFS) Readlink(path string) (string, experimentalsys.Errno) {
	s, err := r.root.Readlink(rel(path))
	if err != nil {
		return "", errno(err)
	}
	return s, 0
}

// Utimens implements experimentalsys.FS.
func (r *rootFS) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	p := rel(path)
	if atim == experimentalsys.UTIME_OMIT && mtim == experimentalsys.UTIME_OMIT {
		return 0
	}
	var st sys.Stat_t
	if atim == experimentalsys.UTIME_OMIT || mtim == experimentalsys.UTIME_OMIT {
		fi, err := r.root.Stat(p)
		if err != nil {
			return errno(err)
		}
		st = sys.NewStat_t(fi)
	}
	if atim == experimentalsys.UTIME_OMIT {
		atim = st.Atim
	}
	if mtim == experimentalsys.UTIME_OMIT {
		mtim = st.Mtim
	}
	return errno(r.root.Chtimes(p, time.Unix(0, atim), time.Unix(0, mtim)))
}

// rootFile is a file opened through a rootFS. Reads, seeks, directory
// listing, stat and close go through wazero's adapter for an fs.File (which
// reopens a rewound directory through the same root); writes go to the
// *os.File directly.
type rootFile struct {
	experimentalsys.File
	fs     *rootFS
	path   string
	flag   experimentalsys.Oflag
	file   *os.File // the regular file open for writing (nil for a directory)
	closed bool
}

// reopenFS hands wazero's adapter the file already opened, then reopens the
// same path through the root (a directory rewind).
type reopenFS struct {
	root  *os.Root
	path  string
	first *os.File
}

// Open implements fs.FS.
func (o *reopenFS) Open(string) (fs.File, error) {
	if f := o.first; f != nil {
		o.first = nil
		return f, nil
	}
	return o.root.Open(o.path)
}

func (r *rootFS) wrap(p string, flag experimentalsys.Oflag, f *os.File, isDir bool) (experimentalsys.File, experimentalsys.Errno) {
	aflag := experimentalsys.O_RDONLY
	if isDir {
		aflag |= experimentalsys.O_DIRECTORY
	}
	inner, e := (&sysfs.AdaptFS{FS: &reopenFS{root: r.root, path: p, first: f}}).OpenFile(".", aflag, 0)
	if e != 0 {
		f.Close()
		return nil, e
	}
	rf := &rootFile{File: inner, fs: r, path: p, flag: flag}
	if !isDir {
		rf.file = f
	}
	return rf, 0
}

// IsAppend implements experimentalsys.File.
func (f *rootFile) IsAppend() bool { return f.flag&experimentalsys.O_APPEND != 0 }

// SetAppend implements experimentalsys.File. The append mode is fixed at open.
func (f *rootFile) SetAppend(enable bool) experimentalsys.Errno {
	if enable == f.IsAppend() {
		return 0
	}
	return experimentalsys.ENOSYS
}

func (f *rootFile) writable() experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if f.file == nil {
		return experimentalsys.EISDIR
	}
	return 0
}

// Write implements experimentalsys.File.
func (f *rootFile) Write(buf []byte) (int, experimentalsys.Errno) {
	if e := f.writable(); e != 0 {
		return 0, e
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.file.Write(buf)
	return n, errno(err)
}

// Pwrite implements experimentalsys.File.
func (f *rootFile) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	if e := f.writable(); e != 0 {
		return 0, e
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.file.WriteAt(buf, off)
	return n, errno(err)
}

// Truncate implements experimentalsys.File.
func (f *rootFile) Truncate(size int64) experimentalsys.Errno {
	if e := f.writable(); e != 0 {
		return e
	}
	if size < 0 {
		return experimentalsys.EINVAL
	}
	return errno(f.file.Truncate(size))
}

// Sync implements experimentalsys.File. A directory is synced through a
// fresh handle from the root (the adapter does not expose its own).
func (f *rootFile) Sync() experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	if f.file == nil {
		d, err := f.fs.root.Open(f.path)
		if err != nil {
			return errno(err)
		}
		defer d.Close()
		return errno(d.Sync())
	}
	return errno(f.file.Sync())
}

// Datasync implements experimentalsys.File.
func (f *rootFile) Datasync() experimentalsys.Errno { return f.Sync() }

// Utimens implements experimentalsys.File.
func (f *rootFile) Utimens(atim, mtim int64) experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	return f.fs.Utimens(f.path, atim, mtim)
}

// Close implements experimentalsys.File.
func (f *rootFile) Close() experimentalsys.Errno {
	if f.closed {
		return 0
	}
	f.closed = true
	return f.File.Close()
}
