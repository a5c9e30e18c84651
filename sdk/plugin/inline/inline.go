// Package inline is the format of the built-in inline channel's pointers,
// "inline:" and the payload in standard base64, in one place for the
// channel that writes and reads them, the gate that checks a worker's
// inline pointer without a plugin call, and clients that read one.
package inline

import (
	"encoding/base64"
	"errors"
	"strings"
)

// Prefix starts every inline pointer.
const Prefix = "inline:"

// Errors of Payload.
var (
	ErrNotInline = errors.New("not an inline: pointer")
	ErrNotBase64 = errors.New("inline pointer is not standard base64")
)

// Pointer is the inline pointer that holds payload.
func Pointer(payload []byte) string {
	return Prefix + base64.StdEncoding.EncodeToString(payload)
}

// Payload is the payload an inline pointer holds: ErrNotInline for a
// pointer without the prefix, ErrNotBase64 when the rest is not standard
// base64.
func Payload(pointer string) ([]byte, error) {
	data, ok := strings.CutPrefix(pointer, Prefix)
	if !ok {
		return nil, ErrNotInline
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, ErrNotBase64
	}
	return b, nil
}
