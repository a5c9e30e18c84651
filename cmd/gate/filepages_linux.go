package main

import (
	"bufio"
	"debug/elf"
	"os"
	"strconv"
	"strings"
	"sync"
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
//
// Only a position-dependent executable is touched: in a position-independent
// one (-buildmode=pie, or external linking with -z relro) the loader
// relocates pages and then makes them read-only (PT_GNU_RELRO), and dropping
// those would bring back the unrelocated bytes of the file on the next
// access — a crash.
func dropExecutablePages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	droppableOnce.Do(func() { droppable = pagesDroppable("/proc/self/exe") })
	if !droppable {
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

var (
	droppableOnce sync.Once
	droppable     bool
)

// pagesDroppable reports whether the read-only mappings of the executable at
// path are clean copies of its file: a position-dependent ELF executable
// (ET_EXEC) with no segment the loader relocates and then protects
// (PT_GNU_RELRO). Anything it cannot read is not droppable.
func pagesDroppable(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		return false
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_RELRO {
			return false
		}
	}
	return true
}
