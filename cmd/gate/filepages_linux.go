package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// dropExecutablePages tells the kernel the process does not need the pages
// of its own executable's read-only mappings now (MADV_DONTNEED): the
// embedded plugin modules (~25 MB, read once per load) and code and data of
// the start. They are clean pages of a private file mapping, so nothing is
// lost: a page used again is read back from the page cache on its next
// access, and the resident set keeps only what the gate touches. (The
// kernel refuses writes to a running executable, so the file cannot change
// under the mapping.)
func dropExecutablePages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/gate
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), syscall.MADV_DONTNEED)
	}
}
