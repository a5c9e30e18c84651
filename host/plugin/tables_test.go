package plugin

import (
	"context"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// A policy module written by hand, byte by byte: what a Go build would
// never produce.

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func wasmSection(id byte, body []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
}

func wasmVec(items ...[]byte) []byte {
	out := uleb(uint64(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func wasmName(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func wasmBody(code ...byte) []byte { return append(uleb(uint64(len(code))), code...) }

// handPolicy is a policy module whose decide answers a valid retry decision.
// table is its table section's one entry (reference type and limits); when
// grow > 0, decide first grows that table by grow entries, each a reference
// to a function (table.grow: a reference-types instruction).
func handPolicy(table []byte, grow uint32) []byte {
	js := `{"ok":true,"result":{"action":"retry","delay_seconds":1}}`
	frame := append([]byte{byte(len(js)), 0, 0, 0}, js...)
	packed := int64(16)<<32 | int64(len(frame))
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	m = append(m, wasmSection(1, wasmVec(
		[]byte{0x60, 0, 0},
		[]byte{0x60, 0, 1, 0x7f},
		[]byte{0x60, 1, 0x7f, 1, 0x7f},
		[]byte{0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7e},
	))...)
	m = append(m, wasmSection(3, wasmVec([]byte{0}, []byte{1}, []byte{2}, []byte{3}))...)
	m = append(m, wasmSection(4, wasmVec(table))...)
	m = append(m, wasmSection(5, wasmVec([]byte{0, 1}))...)
	m = append(m, wasmSection(7, wasmVec(
		append(wasmName("memory"), 2, 0),
		append(wasmName("_initialize"), 0, 0),
		append(wasmName("asyncgate_abi_version"), 0, 1),
		append(wasmName("asyncgate_alloc"), 0, 2),
		append(wasmName("decide"), 0, 3),
	))...)
	dec := []byte{0}
	if grow > 0 {
		// ref.func 0; i32.const grow; table.grow 0; drop
		dec = append(dec, 0xd2, 0, 0x41)
		dec = append(dec, sleb(int64(int32(grow)))...)
		dec = append(dec, 0xfc, 0x0f, 0, 0x1a)
	}
	dec = append(dec, 0x42) // i64.const packed
	dec = append(dec, sleb(packed)...)
	dec = append(dec, 0x0b)
	m = append(m, wasmSection(10, wasmVec(
		wasmBody(0, 0x0b),
		wasmBody(0, 0x41, 1, 0x0b),
		wasmBody(0, 0x41, 0x80, 0x08, 0x0b),
		wasmBody(dec...),
	))...)
	seg := append([]byte{0, 0x41, 16, 0x0b}, uleb(uint64(len(frame)))...)
	seg = append(seg, frame...)
	m = append(m, wasmSection(11, wasmVec(seg))...)
	return m
}

// funcrefTable is a table type: funcref, minimum min, and maximum max when max >= 0.
func funcrefTable(min uint32, max int64) []byte {
	if max < 0 {
		return append([]byte{0x70, 0}, uleb(uint64(min))...)
	}
	return append(append([]byte{0x70, 1}, uleb(uint64(min))...), uleb(uint64(max))...)
}

const handManifest = `{"name":"tbl","kind":"policy","version":"0.0.1","abi_version":1}`

func decideOnce(p *Plugin) error {
	in := encodeFailureRecord(host.FailureInput{TaskID: "t", TaskType: "x", Kind: host.FailureError, Attempts: 1}, nil)
	_, err := p.run(context.Background(), "decide", in, nil, false, nil)
	return err
}

// TestTableGrowRefusedAtLoad: a wasm table lives in the gate's heap, not in
// the instance's capped memory, and table.grow runs in host code the call
// deadline cannot stop; a module that grows its table is refused at load
// (reference types are off). The growth here is small (20,000 entries); the
// same module may ask for 2^32-2.
func TestTableGrowRefusedAtLoad(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, Limits{MemoryPages: 2})
	p, err := rt.Load(context.Background(), handPolicy(funcrefTable(1, -1), 20_000), []byte(handManifest), Grant{}, "test")
	if err == nil {
		defer p.Close()
		t.Fatalf("a module that grows its table by 20,000 entries per call loaded (decide: %v)", decideOnce(p))
	}
	if !strings.Contains(err.Error(), "reference-types") {
		t.Fatalf("got %v, want a refusal naming reference-types", err)
	}
}

// TestTableDeclaredTooLargeRefusedAtLoad: a module may not declare a table
// (minimum or maximum) beyond maxTableEntries; one that stays within loads.
func TestTableDeclaredTooLargeRefusedAtLoad(t *testing.T) {
	t.Parallel()
	rt := newTestRuntime(t, Limits{MemoryPages: 2})
	for _, c := range []struct {
		name  string
		table []byte
		want  string
	}{
		{"minimum", funcrefTable(maxTableEntries+1, -1), "minimum of 100001 entries"},
		{"maximum", funcrefTable(1, 1<<31), "maximum of 2147483648 entries"},
		{"within", funcrefTable(maxTableEntries, maxTableEntries), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := rt.Load(context.Background(), handPolicy(c.table, 0), []byte(handManifest), Grant{}, "test")
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				if err := decideOnce(p); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				p.Close()
				t.Fatalf("a module declaring a table %s beyond %d entries loaded", c.name, maxTableEntries)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
