// Command rawgarbage is a test policy plugin that speaks the ABI without the
// SDK and answers decide with a frame that is not a valid envelope (or, for
// odd calls, a pointer outside its memory).
package main

import (
	"encoding/binary"
	"unsafe"
)

var keep = map[uintptr][]byte{}
var out []byte
var calls int

//go:wasmexport asyncgate_abi_version
func abi() int32 { return 1 }

//go:wasmexport asyncgate_alloc
func alloc(n int32) uint32 {
	b := make([]byte, n)
	p := uintptr(unsafe.Pointer(&b[0]))
	keep[p] = b
	return uint32(p)
}

//go:wasmexport decide
func decide(p, n, dp, dn uint32) uint64 {
	delete(keep, uintptr(p))
	calls++
	if calls%2 == 0 {
		return uint64(0xFFFFFFF0)<<32 | 1000 // outside memory
	}
	body := "this is not json"
	out = make([]byte, 4+len(body))
	binary.LittleEndian.PutUint32(out, uint32(len(body)))
	copy(out[4:], body)
	return uint64(uintptr(unsafe.Pointer(&out[0])))<<32 | uint64(len(out))
}

func main() {}
