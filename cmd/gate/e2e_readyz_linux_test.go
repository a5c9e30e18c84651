//go:build linux

package main

import (
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// setFileSizeLimit sets RLIMIT_FSIZE of process pid (prlimit(2)): past that
// offset every write to a regular file fails with EFBIG, as on a full disk.
func setFileSizeLimit(t *testing.T, pid int, limit uint64) {
	t.Helper()
	var old syscall.Rlimit
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_FSIZE, 0, uintptr(unsafe.Pointer(&old)), 0, 0); e != 0 {
		t.Fatalf("prlimit: %v", e)
	}
	lim := syscall.Rlimit{Cur: min(limit, old.Max), Max: old.Max}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_FSIZE, uintptr(unsafe.Pointer(&lim)), 0, 0, 0); e != 0 {
		t.Fatalf("prlimit: %v", e)
	}
}

// TestE2EReadyzWhenWritesFail: /readyz answers 503 when the store cannot
// commit a write (issue 17 item 4), though reads still work, and 200 again
// once writes do.
func TestE2EReadyzWhenWritesFail(t *testing.T) {
	t.Parallel()
	g := startGate(t, t.TempDir())
	want(t, call(t, "GET", g.URL+"/readyz", "", nil), 200, "")
	setFileSizeLimit(t, g.cmd.Process.Pid, 1) // no file of the gate can grow or be written past byte 1
	var last resp
	waitFor(t, 30*time.Second, "/readyz still answers 200 while no write can commit", func() bool {
		last = call(t, "GET", g.URL+"/readyz", "", nil)
		return last.Status != 200
	})
	want(t, last, 503, "database_unavailable")
	// The probe agrees with a real write, and reads still work.
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/probe", g.Admin, map[string]any{}), 503, "database_unavailable")
	want(t, call(t, "GET", g.URL+"/v1/tasks", g.Admin, nil), 200, "")

	setFileSizeLimit(t, g.cmd.Process.Pid, ^uint64(0))
	waitFor(t, 30*time.Second, "/readyz did not recover after writes work again", func() bool {
		last = call(t, "GET", g.URL+"/readyz", "", nil)
		return last.Status == 200
	})
	want(t, call(t, "PUT", g.URL+"/v1/admin/task-types/probe", g.Admin, map[string]any{}), 200, "")
}
