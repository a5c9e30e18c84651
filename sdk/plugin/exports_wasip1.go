//go:build wasip1

package plugin

import "unsafe"

// pinned keeps buffers handed to the host reachable until an operation takes
// them back; Go's collector does not move objects, so the addresses stay valid.
var pinned = map[uintptr][]byte{}

// lastFrame keeps the previous result frame reachable until the next call, so
// the host can read it after the export returns.
var lastFrame []byte

//go:wasmexport asyncgate_abi_version
func exportABIVersion() int32 { return ABIVersion }

//go:wasmexport asyncgate_alloc
func exportAlloc(size int32) uint32 {
	if size <= 0 {
		return 0
	}
	b := make([]byte, size)
	p := uintptr(unsafe.Pointer(&b[0]))
	pinned[p] = b
	return uint32(p)
}

// take unpins the buffer at p and returns its first n bytes.
func take(p, n uint32) []byte {
	if n == 0 {
		return nil
	}
	b, ok := pinned[uintptr(p)]
	if !ok || uint32(len(b)) < n {
		panic("plugin: host passed a buffer it did not allocate")
	}
	delete(pinned, uintptr(p))
	return b[:n]
}

func call(op string, p, n, dp, dn uint32) uint64 {
	lastFrame = nil
	f := Dispatch(op, take(p, n), take(dp, dn))
	lastFrame = f
	return uint64(uintptr(unsafe.Pointer(&f[0])))<<32 | uint64(len(f))
}

//go:wasmexport decide
func exportDecide(p, n, dp, dn uint32) uint64 { return call("decide", p, n, dp, dn) }

//go:wasmexport validate
func exportValidate(p, n, dp, dn uint32) uint64 { return call("validate", p, n, dp, dn) }

//go:wasmexport put
func exportPut(p, n, dp, dn uint32) uint64 { return call("put", p, n, dp, dn) }

//go:wasmexport get
func exportGet(p, n, dp, dn uint32) uint64 { return call("get", p, n, dp, dn) }

//go:wasmexport ack
func exportAck(p, n, dp, dn uint32) uint64 { return call("ack", p, n, dp, dn) }

//go:wasmexport capabilities
func exportCapabilities(p, n, dp, dn uint32) uint64 { return call("capabilities", p, n, dp, dn) }

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
