package plugin

import (
	"errors"
	"fmt"
)

// maxTableEntries bounds the tables a plugin module may declare. A wasm
// table lives in the gate's own heap, outside the instance's memory cap
// (8 bytes an entry in wazero), and wazero allocates a table's minimum when
// it starts an instance. A Go wasip1 module declares one funcref table of
// its function count and no maximum (the built-ins declare 6,300 to 6,600
// entries), so this leaves ample room; 100,000 entries are 800 KB.
const maxTableEntries = 100_000

// checkTables refuses a module that declares a table larger than
// maxTableEntries, by its minimum or its maximum. It reads only the module's
// table section (an imported table cannot be satisfied: neither host module
// exports one); the rest of the module is wazero's to validate.
func checkTables(wasm []byte) error {
	r := wasmReader{b: wasm}
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return errors.New("not a wasm module")
	}
	r.i = 8
	for r.i < len(r.b) {
		id := r.byte()
		size := r.u32()
		if r.err != nil || uint64(size) > uint64(len(r.b)-r.i) {
			return errors.New("malformed section header")
		}
		end := r.i + int(size)
		if id != 4 { // not the table section
			r.i = end
			continue
		}
		n := r.u32()
		for t := uint32(0); t < n && r.err == nil; t++ {
			b := r.byte()
			if b == 0x40 {
				// A table with an initializer expression: not something a Go
				// module declares, and its expression is not worth decoding here.
				return fmt.Errorf("table %d has an initializer expression", t)
			}
			if b == 0x63 || b == 0x64 { // (ref null? heaptype)
				r.s33()
			}
			flags := r.byte()
			var minimum, maximum uint32
			hasMax := false
			switch flags {
			case 0x00, 0x02:
				minimum = r.u32()
			case 0x01, 0x03:
				minimum, maximum, hasMax = r.u32(), r.u32(), true
			default:
				return fmt.Errorf("table %d: limits flags %#x", t, flags)
			}
			if r.err != nil {
				break
			}
			if minimum > maxTableEntries {
				return fmt.Errorf("table %d declares a minimum of %d entries; at most %d are allowed", t, minimum, maxTableEntries)
			}
			if hasMax && maximum > maxTableEntries {
				return fmt.Errorf("table %d declares a maximum of %d entries; at most %d are allowed", t, maximum, maxTableEntries)
			}
		}
		if r.err != nil || r.i > end {
			return errors.New("malformed table section")
		}
		return nil
	}
	return nil
}

// wasmReader reads LEB128 numbers from a module; the first error sticks.
type wasmReader struct {
	b   []byte
	i   int
	err error
}

var errShort = errors.New("unexpected end of module")

func (r *wasmReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.i >= len(r.b) {
		r.err = errShort
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *wasmReader) u32() uint32 {
	var v uint64
	for shift := uint(0); shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			if v > 0xffffffff {
				r.err = errors.New("u32 out of range")
				return 0
			}
			return uint32(v)
		}
	}
	r.err = errors.New("u32 too long")
	return 0
}

// s33 skips a signed 33-bit LEB128 number (a heap type).
func (r *wasmReader) s33() {
	for n := 0; n < 5; n++ {
		if c := r.byte(); r.err != nil || c&0x80 == 0 {
			return
		}
	}
	r.err = errors.New("s33 too long")
}
