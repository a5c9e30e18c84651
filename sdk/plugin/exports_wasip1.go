//go:build wasip1

package plugin

import (
	"runtime"
	"unsafe"
)

// pinned keeps the (at most two) buffers handed to the host reachable until
// an operation takes them back; Go's collector does not move objects, so the
// addresses stay valid. A slice, not a map: see the note on the handlers.
var pinned [][]byte

//go:wasmexport asyncgate_abi_version
func exportABIVersion() int32 { return ABIVersion }

//go:wasmexport asyncgate_alloc
func exportAlloc(size int32) uint32 {
	if size <= 0 {
		return 0
	}
	b := make([]byte, size)
	if len(pinned) >= 8 {
		pinned = pinned[:0] // a host that never calls an op; don't grow forever
	}
	pinned = append(pinned, b)
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// take unpins the buffer at p and returns its first n bytes.
func take(p, n uint32) []byte {
	if n == 0 {
		return nil
	}
	for i, b := range pinned {
		if uint32(uintptr(unsafe.Pointer(&b[0]))) == p && uint32(len(b)) >= n {
			pinned[i] = pinned[len(pinned)-1]
			pinned[len(pinned)-1] = nil
			pinned = pinned[:len(pinned)-1]
			return b[:n]
		}
	}
	panic("plugin: host passed a buffer it did not allocate")
}

// call runs h; the frame it returns lives in frameBuf until the next call.
//
// It yields once before returning. An export call runs only its own
// goroutine, and the guest has no other thread, so without a yield the
// garbage collector's background mark workers never run: a cycle that has
// started never finishes and the heap grows until the instance runs out of
// memory (measured: ~17,000 4 KiB puts in a 16 MiB instance). Gosched lets
// the scheduler run a pending GC worker; when none is pending it costs about
// a microsecond.
func call(h handler, p, n, dp, dn uint32) uint64 {
	f := dispatch(h, take(p, n), take(dp, dn))
	runtime.Gosched()
	return uint64(uintptr(unsafe.Pointer(&f[0])))<<32 | uint64(len(f))
}

//go:wasmexport decide
func exportDecide(p, n, dp, dn uint32) uint64 { return call(hDecide, p, n, dp, dn) }

//go:wasmexport validate
func exportValidate(p, n, dp, dn uint32) uint64 { return call(hValidate, p, n, dp, dn) }

//go:wasmexport put
func exportPut(p, n, dp, dn uint32) uint64 { return call(hPut, p, n, dp, dn) }

//go:wasmexport get
func exportGet(p, n, dp, dn uint32) uint64 { return call(hGet, p, n, dp, dn) }

//go:wasmexport ack
func exportAck(p, n, dp, dn uint32) uint64 { return call(hAck, p, n, dp, dn) }

//go:wasmexport capabilities
func exportCapabilities(p, n, dp, dn uint32) uint64 { return call(hCapabilities, p, n, dp, dn) }

//go:wasmimport asyncgate http_request
func hostHTTPRequest(p, n uint32) uint32

//go:wasmimport asyncgate http_response
func hostHTTPResponse(p, n uint32) uint32

func roundTrip(frame []byte) ([]byte, error) {
	n := hostHTTPRequest(uint32(uintptr(unsafe.Pointer(&frame[0]))), uint32(len(frame)))
	if n == 0 {
		return nil, Errorf("http_error", "host returned no response")
	}
	out := make([]byte, n)
	hostHTTPResponse(uint32(uintptr(unsafe.Pointer(&out[0]))), n)
	return out, nil
}

//go:wasmimport asyncgate sha256
func hostSHA256(p, n, out uint32) uint32

// SHA256 returns the SHA-256 of b, computed by the host (asyncgate.sha256).
func SHA256(b []byte) [32]byte {
	var sum [32]byte
	var p uint32
	if len(b) > 0 {
		p = uint32(uintptr(unsafe.Pointer(&b[0])))
	}
	if hostSHA256(p, uint32(len(b)), uint32(uintptr(unsafe.Pointer(&sum[0])))) != 1 {
		panic("plugin: host sha256 failed")
	}
	return sum
}

//go:wasmimport asyncgate mail_send
func hostMailSend(p, n uint32) uint32

//go:wasmimport asyncgate mail_fetch
func hostMailFetch(p, n uint32) uint32

//go:wasmimport asyncgate mail_delete
func hostMailDelete(p, n uint32) uint32

//go:wasmimport asyncgate mail_response
func hostMailResponse(p, n uint32) uint32

// mailCall calls one of the mail host functions with frame and copies its
// pending answer out.
func mailCall(op int, frame []byte) ([]byte, error) {
	p, l := uint32(uintptr(unsafe.Pointer(&frame[0]))), uint32(len(frame))
	var n uint32
	switch op {
	case mailOpSend:
		n = hostMailSend(p, l)
	case mailOpFetch:
		n = hostMailFetch(p, l)
	default:
		n = hostMailDelete(p, l)
	}
	if n == 0 {
		return nil, Errorf("mail_error", "host returned no response")
	}
	out := make([]byte, n)
	hostMailResponse(uint32(uintptr(unsafe.Pointer(&out[0]))), n)
	return out, nil
}
