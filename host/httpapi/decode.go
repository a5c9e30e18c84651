package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/jsonkeys"
)

// decodeMode says how strictly a body is decoded.
type decodeMode int

const (
	strict  decodeMode = iota // unknown fields are a bad_request
	lenient                   // unknown fields are ignored (seed-compatible routes)
)

// readBody reads the whole request body; the body limit middleware has
// already wrapped it in http.MaxBytesReader.
func readBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, badRequest("could not read the request body: %v", err)
	}
	return b, nil
}

// bind decodes the request body, a JSON object, into v. An empty body leaves v
// as it is (every field optional); the handler checks required fields.
func bind(c echo.Context, v any, mode decodeMode) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	return decodeBody(b, v, mode)
}

// decodeBody is bind without the request: it is what the fuzz tests drive.
func decodeBody(b []byte, v any, mode decodeMode) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if b[0] != '{' {
		return badRequest("the request body must be a JSON object")
	}
	if !utf8.Valid(b) {
		return badRequest("the request body is not valid UTF-8")
	}
	// A lone surrogate escape reads as U+FFFD in a decoded field; in a raw
	// value (params) it would be kept and handed back unreadable.
	b = jsonkeys.FixLoneSurrogates(b)
	dec := json.NewDecoder(bytes.NewReader(b))
	if mode == strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonError(err, b, v, mode)
	}
	if dec.More() {
		return badRequest("the request body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("unexpected data after the JSON object")
	}
	// encoding/json keeps the last of duplicate keys and matches field
	// names case-insensitively; the walk refuses both (case only when
	// strict), over the whole body, params included.
	var typ reflect.Type
	if mode == strict {
		typ = reflect.TypeOf(v)
	}
	return checkKeys(b, typ)
}

// checkKeys refuses a body with a duplicate key, or with typ a key that
// names no field exactly (jsonkeys.Check), as a bad_request.
func checkKeys(b []byte, typ reflect.Type) error {
	if err := jsonkeys.Check(b, typ); err != nil {
		return badRequest("%s", err.Error())
	}
	return nil
}

// jsonError turns an error decoding b into v into a bad_request that names
// the field where it is, array indexes included ("entries[1].lease_id"):
// encoding/json's own names leave them out.
func jsonError(err error, b []byte, v any, mode decodeMode) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if te.Offset > 0 && te.Offset <= int64(len(b)) {
			// The offset is past the value (a scalar) or its opening
			// bracket: the value holds the byte before it.
			field = jsonkeys.PathAt(b, te.Offset-1, "")
		}
		if field == "" {
			field = "(body)"
		}
		return badRequest("field %s must be %s, not a JSON %s", field, typeName(te.Type.String()), te.Value)
	case errors.As(err, &se):
		return badRequest("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("malformed JSON: the body ends early")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		// encoding/json names the key alone; the key walk names the
		// object it is in (unknown field "bogus" in entries[1]).
		if mode == strict {
			if kerr := checkKeys(b, reflect.TypeOf(v)); kerr != nil {
				return kerr
			}
		}
		return badRequest("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	var he *host.Error
	if errors.As(err, &he) {
		return err
	}
	// A value of a type that decodes itself (a time) refused its bytes:
	// encoding/json does not say where; the walk finds it.
	if path, raw, verr := jsonkeys.BadValue(b, reflect.TypeOf(v), "the body"); verr != nil {
		return badValue(path, raw, verr)
	}
	return badRequest("malformed JSON: %v", err)
}

// badValue is the bad_request for the value raw at path, which its type
// refused with err: a time names the form it takes.
func badValue(path string, raw []byte, err error) error {
	var pe *time.ParseError
	if errors.As(err, &pe) || strings.HasPrefix(err.Error(), "Time.") {
		what := "a JSON " + jsonKind(raw)
		if len(raw) > 0 && raw[0] == '"' {
			what = string(raw)
			if len(what) > 80 {
				n := 77
				for n > 0 && !utf8.RuneStart(what[n]) {
					n--
				}
				what = what[:n] + "…\""
			}
		}
		return badRequest("field %s must be an RFC 3339 time such as \"2026-12-01T09:30:00Z\", not %s", path, what)
	}
	return badRequest("field %s: %v", path, err)
}

// jsonKind names the kind of the JSON value raw: a string, a number, …
func jsonKind(raw []byte) string {
	if len(raw) == 0 {
		return "value"
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func typeName(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	case strings.HasPrefix(t, "map["), strings.Contains(t, "."):
		return "an object"
	}
	return t
}

// rawObject is a json.RawMessage that must hold a JSON object (or null).
type rawObject json.RawMessage

// UnmarshalJSON implements json.Unmarshaler.
func (r *rawObject) UnmarshalJSON(b []byte) error {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || (t[0] != '{' && string(t) != "null") {
		return host.Errorf(host.CodeBadRequest, "expected a JSON object")
	}
	if string(t) == "null" {
		*r = nil
		return nil
	}
	*r = append((*r)[:0], t...)
	return nil
}

// payload decodes an inline result: "result" (any JSON value, stored as its
// JSON text) or "result_base64" (raw bytes). Both at once is a bad_request.
func payload(result json.RawMessage, b64 *string) ([]byte, error) {
	hasResult := len(result) > 0 && string(result) != "null"
	switch {
	case hasResult && b64 != nil:
		return nil, badRequest("give result or result_base64, not both")
	case hasResult:
		return []byte(result), nil
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, badRequest("result_base64 is not valid base64: %v", err)
		}
		if len(b) == 0 {
			return nil, badRequest("result_base64 is empty")
		}
		return b, nil
	}
	return nil, nil
}
