package plugin

import (
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// guestMapping says whether instances' linear memory is mapped apart
// (guestMemory); off Linux it is wazero's own, in the Go heap.
const guestMapping = true

// guestMemory is an allocator for one instance's linear memory and the
// mapping it made, which the instance releases when it closes.
//
// Each instance's memory is an anonymous mapping of its own, of the
// memory's maximum size (the plugin's MemoryPages), reserved but not
// committed (MAP_NORESERVE). wazero's own memory is a Go slice that each
// grow copies into a larger one: a guest touching 40 MiB made the Go heap
// allocate 225 MiB (its memory grew to 44 MiB a few MiB at a time), and the
// memory of pooled instances was live heap, which GOGC 400 lets the heap
// grow to five times of. Here a grow only lengthens the slice (no copy, no
// garbage), a page counts once the guest touches it, and the collector
// never sees the memory.
//
// The mapping is unmapped by the gate, in instance.close, never by wazero:
// wazero frees a module's memory whenever the module closes, and a module
// closes under code that still runs on it (a start function's proc_exit(0)
// closes it inside InstantiateModule, which then returns it; a call's
// deadline marks it closed from another goroutine, and a trap right after
// skips the free). The gate closes an instance only when no call runs on
// it, and always releases its mapping then (its memory only: on that
// deadline path wazero's other resources of the module wait for the
// collector); a dropped instance's mapping is released by a cleanup.
type guestMemory struct {
	mu sync.Mutex
	ms []*mappedMemory // one today: wazero makes one memory an instance
}

// allocator returns the allocator InstantiateModule is given.
func (g *guestMemory) allocator() experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		if max == 0 || max > 1<<32 {
			return &heapMemory{max: max}
		}
		b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
		if err != nil {
			return &heapMemory{max: max}
		}
		guestMapped.Add(int64(len(b)))
		m := &mappedMemory{b: b}
		g.mu.Lock()
		g.ms = append(g.ms, m)
		g.mu.Unlock()
		return m
	})
}

// release unmaps the instance's memory; later calls do nothing. Only when
// nothing runs on the instance any more.
func (g *guestMemory) release() {
	g.mu.Lock()
	ms := g.ms
	g.ms = nil
	g.mu.Unlock()
	for _, m := range ms {
		m.unmap()
	}
}

// guestMapped is the size of the guest memory mappings alive, in bytes.
var guestMapped atomic.Int64

// mappedMemory is a linear memory in a mapping of its maximum size.
type mappedMemory struct{ b []byte }

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if m.b == nil || size > uint64(len(m.b)) {
		return nil
	}
	return m.b[:size]
}

// Free is wazero's: it does nothing (see guestMemory); release unmaps.
func (m *mappedMemory) Free() {}

func (m *mappedMemory) unmap() {
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
