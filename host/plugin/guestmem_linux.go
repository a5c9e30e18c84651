package plugin

import (
	"sync/atomic"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// guestMemory backs every instance's linear memory with an anonymous
// mapping of its own, of the memory's maximum size (the plugin's
// MemoryPages), reserved but not committed (MAP_NORESERVE). wazero's own
// memory is a Go slice that each grow copies into a larger one: a guest
// touching 40 MiB made the Go heap allocate 225 MiB (its memory grew to 44
// MiB a few MiB at a time), and the memory of pooled instances was live
// heap, which GOGC 400 lets the heap grow to five times of. Here a grow
// only lengthens the slice (no copy, no garbage), a page counts once the
// guest touches it, the collector never sees the memory, and munmap gives
// it all back when the instance closes (wazero frees it on the goroutine
// that ran the call, never under a running guest).
var guestMemory experimental.MemoryAllocator = experimental.MemoryAllocatorFunc(mapGuestMemory)

// guestMapped is the size of the guest memory mappings alive, in bytes.
var guestMapped atomic.Int64

func mapGuestMemory(_, max uint64) experimental.LinearMemory {
	if max == 0 || max > 1<<32 {
		return &heapMemory{max: max}
	}
	b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return &heapMemory{max: max}
	}
	guestMapped.Add(int64(len(b)))
	return &mappedMemory{b: b}
}

// mappedMemory is a linear memory in a mapping of its maximum size.
type mappedMemory struct{ b []byte }

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if m.b == nil || size > uint64(len(m.b)) {
		return nil
	}
	return m.b[:size]
}

func (m *mappedMemory) Free() {
	if m.b != nil {
		_ = syscall.Munmap(m.b)
		guestMapped.Add(-int64(len(m.b)))
		m.b = nil
	}
}

// heapMemory is a linear memory in the Go heap, as wazero's own: what
// guestMemory falls back to when it cannot map one.
type heapMemory struct {
	b   []byte
	max uint64
}

func (m *heapMemory) Reallocate(size uint64) []byte {
	if m.max > 0 && size > m.max {
		return nil
	}
	if size <= uint64(cap(m.b)) {
		m.b = m.b[:size]
	} else {
		m.b = append(m.b, make([]byte, size-uint64(len(m.b)))...)
	}
	return m.b
}

func (m *heapMemory) Free() { m.b = nil }
