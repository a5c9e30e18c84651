package worker

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Pointer is a result the handler stored itself (in S3, a mailbox, a file
// share…): the gate records where it is and never sees the payload. Return it
// (or *Pointer) from a handler.
type Pointer struct {
	// Channel names where the result lives ("s3", "email", "file"…).
	Channel string
	// Pointer is how to fetch it (a URI, a message id, a path). Required.
	Pointer string
	// Checksum is optional, for example "sha256:…".
	Checksum string
	// Summary is a human-readable completion message.
	Summary string
	// Metadata is any JSON-encodable value (sizes, counts, durations).
	Metadata any
	// Artifacts lists further located outputs.
	Artifacts []Artifact
}

// completion turns a handler's return value into the completion body. A
// handler may return:
//   - nil: an empty JSON object is sent inline ({});
//   - Pointer or *Pointer: the result the handler stored itself;
//   - Completion or *Completion: the body as given (full control);
//   - []byte: sent inline as bytes (result_base64); empty bytes count as nil;
//   - json.RawMessage: sent inline as this JSON (it must be valid);
//   - anything else: encoded with encoding/json and sent inline.
//
// Inline results are stored by the gate through the task type's result
// channel.
func completion(v any) (Completion, error) {
	switch r := v.(type) {
	case nil:
		return Completion{Result: json.RawMessage(`{}`)}, nil
	case Completion:
		return r, nil
	case *Completion:
		if r == nil {
			return completion(nil)
		}
		return *r, nil
	case *Pointer:
		if r == nil {
			return completion(nil)
		}
		return completion(*r)
	case Pointer:
		if r.Pointer == "" {
			return Completion{}, Fatal(fmt.Errorf("worker.Pointer without a Pointer"))
		}
		c := Completion{Summary: r.Summary, ResultChannel: r.Channel, ResultPointer: r.Pointer, ResultChecksum: r.Checksum, Artifacts: r.Artifacts}
		if r.Metadata != nil {
			m, err := json.Marshal(r.Metadata)
			if err != nil {
				return Completion{}, Fatal(fmt.Errorf("encoding the result metadata: %w", err))
			}
			c.Metadata = m
		}
		return c, nil
	case []byte:
		if len(r) == 0 {
			return completion(nil)
		}
		s := base64.StdEncoding.EncodeToString(r)
		return Completion{ResultBase64: &s}, nil
	case json.RawMessage:
		if !json.Valid(r) {
			return Completion{}, Fatal(fmt.Errorf("the handler returned a json.RawMessage that is not valid JSON"))
		}
		if len(r) == 0 || string(r) == "null" {
			return completion(nil)
		}
		return Completion{Result: r}, nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return Completion{}, Fatal(fmt.Errorf("encoding the result: %w", err))
		}
		if string(b) == "null" {
			return completion(nil)
		}
		return Completion{Result: b}, nil
	}
}

// maxDataURI is the longest data: pointer the fallback writes (the gate
// caps result_pointer at 8192 bytes).
const maxDataURI = 8000

// dataURIFallback rewrites an inline completion as a self-contained data:
// URI pointer (RFC 2397) with a sha256 checksum, for gates that have no
// result channel. It reports false when c has no inline payload or the
// payload is too large.
func dataURIFallback(c Completion) (Completion, bool) {
	var payload []byte
	mime := "application/json"
	switch {
	case len(c.Result) > 0:
		payload = c.Result
	case c.ResultBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*c.ResultBase64)
		if err != nil {
			return c, false
		}
		payload, mime = b, "application/octet-stream"
	default:
		return c, false
	}
	uri := "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(payload)
	if len(uri) > maxDataURI {
		return c, false
	}
	sum := sha256.Sum256(payload)
	c.Result, c.ResultBase64 = nil, nil
	c.ResultChannel, c.ResultPointer = "data", uri
	c.ResultChecksum = "sha256:" + hex.EncodeToString(sum[:])
	return c, true
}
