//go:build !linux

package plugin

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// guestMemory is nil off Linux: instances keep wazero's own memory, in the
// Go heap (see guestmem_linux.go).
var guestMemory experimental.MemoryAllocator

// guestMapped stays 0 off Linux.
var guestMapped atomic.Int64
