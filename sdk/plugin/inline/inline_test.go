package inline

import (
	"bytes"
	"errors"
	"testing"
)

func TestPayloadOfPointer(t *testing.T) {
	for _, p := range [][]byte{nil, []byte("x"), []byte("{\"answer\":\"42\"}"), {0, 0xff, 0x10}} {
		got, err := Payload(Pointer(p))
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("Payload(Pointer(%q)) = %q, %v", p, got, err)
		}
	}
	for in, want := range map[string]error{
		"file:x":      ErrNotInline,
		"INLINE:eA==": ErrNotInline,
		"inline:eA":   ErrNotBase64, // unpadded
		"inline:e-A=": ErrNotBase64, // URL alphabet
	} {
		if _, err := Payload(in); !errors.Is(err, want) {
			t.Errorf("Payload(%q): %v, want %v", in, err, want)
		}
	}
}
