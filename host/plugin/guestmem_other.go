//go:build !linux

package plugin

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// guestMapping is false off Linux: instances keep wazero's own memory, in
// the Go heap (see guestmem_linux.go).
const guestMapping = false

// guestMemory gives no allocator off Linux.
type guestMemory struct{}

func (*guestMemory) allocator() experimental.MemoryAllocator { return nil }
func (*guestMemory) release()                                {}

// guestMapped stays 0 off Linux.
var guestMapped atomic.Int64
