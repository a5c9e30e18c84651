package plugin

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// This file holds the SDK's small JSON reader and writer. The hot path of a
// plugin (decide on ~200 bytes) is dominated by the guest's own work, and
// encoding/json's reflection costs several times more than a hand-written
// scanner under wazero's termination checks, so the envelope and the typed
// inputs and outputs never go through encoding/json.

// Kind is the type of a JSON Value.
type Kind uint8

// JSON value kinds.
const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// Value is a parsed JSON value. Objects keep their keys in document order.
type Value struct {
	Kind  Kind
	Bool  bool     // for KindBool
	Str   string   // the text of a KindString, or the literal of a KindNumber
	Items []Value  // elements of a KindArray
	Keys  []string // keys of a KindObject
	Vals  []Value  // values of a KindObject, parallel to Keys
}

// Get returns the member key of an object, and whether it was there.
func (v Value) Get(key string) (Value, bool) {
	for i, k := range v.Keys {
		if k == key {
			return v.Vals[i], true
		}
	}
	return Value{}, false
}

// Float returns a number's value, or 0 for anything else.
func (v Value) Float() float64 {
	if v.Kind != KindNumber {
		return 0
	}
	f, _ := strconv.ParseFloat(v.Str, 64)
	return f
}

// ParseJSON parses one JSON document.
func ParseJSON(b []byte) (Value, error) {
	s := scanner{b: b}
	v, err := s.value(0)
	if err != nil {
		return Value{}, err
	}
	s.ws()
	if s.i != len(s.b) {
		return Value{}, s.err("trailing data")
	}
	return v, nil
}

const maxDepth = 64

var errSyntax = errors.New("json: syntax error")

type scanner struct {
	b []byte
	i int
}

func (s *scanner) err(msg string) error {
	return errors.New("json: " + msg + " at offset " + strconv.Itoa(s.i))
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.err("expected " + string(c))
	}
	s.i++
	return nil
}

func (s *scanner) lit(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.err("invalid literal")
	}
	s.i += len(word)
	return nil
}

func (s *scanner) value(depth int) (Value, error) {
	if depth > maxDepth {
		return Value{}, s.err("nesting too deep")
	}
	switch c := s.peek(); {
	case c == '{':
		s.i++
		v := Value{Kind: KindObject}
		if s.peek() == '}' {
			s.i++
			return v, nil
		}
		for {
			if s.peek() != '"' {
				return Value{}, s.err("expected key")
			}
			k, err := s.str()
			if err != nil {
				return Value{}, err
			}
			if err := s.expect(':'); err != nil {
				return Value{}, err
			}
			m, err := s.value(depth + 1)
			if err != nil {
				return Value{}, err
			}
			v.Keys, v.Vals = append(v.Keys, k), append(v.Vals, m)
			switch s.peek() {
			case ',':
				s.i++
			case '}':
				s.i++
				return v, nil
			default:
				return Value{}, s.err("expected , or }")
			}
		}
	case c == '[':
		s.i++
		v := Value{Kind: KindArray}
		if s.peek() == ']' {
			s.i++
			return v, nil
		}
		for {
			m, err := s.value(depth + 1)
			if err != nil {
				return Value{}, err
			}
			v.Items = append(v.Items, m)
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return v, nil
			default:
				return Value{}, s.err("expected , or ]")
			}
		}
	case c == '"':
		t, err := s.str()
		return Value{Kind: KindString, Str: t}, err
	case c == 't':
		return Value{Kind: KindBool, Bool: true}, s.lit("true")
	case c == 'f':
		return Value{Kind: KindBool}, s.lit("false")
	case c == 'n':
		return Value{}, s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		n, err := s.num()
		return Value{Kind: KindNumber, Str: n}, err
	default:
		return Value{}, s.err("unexpected character")
	}
}

// skip passes over one value and returns its raw bytes.
func (s *scanner) skip() ([]byte, error) {
	s.ws()
	start := s.i
	depth := 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			if _, err := s.strBytes(); err != nil {
				return nil, err
			}
			if depth == 0 {
				return s.b[start:s.i], nil
			}
			continue
		case '{', '[':
			depth++
			if depth > maxDepth {
				return nil, s.err("nesting too deep")
			}
		case '}', ']':
			depth--
			if depth < 0 {
				return nil, s.err("unexpected close")
			}
			if depth == 0 {
				s.i++
				return s.b[start:s.i], nil
			}
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				if s.i == start {
					return nil, s.err("expected value")
				}
				return s.b[start:s.i], nil
			}
		}
		s.i++
	}
	if depth != 0 || s.i == start {
		return nil, errSyntax
	}
	return s.b[start:s.i], nil
}

func (s *scanner) num() (string, error) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := 0
	for s.i < len(s.b) {
		c := s.b[s.i]
		if (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			if c >= '0' && c <= '9' {
				digits++
			}
			s.i++
			continue
		}
		break
	}
	if digits == 0 {
		return "", s.err("invalid number")
	}
	return string(s.b[start:s.i]), nil
}

func (s *scanner) str() (string, error) {
	b, err := s.strBytes()
	return string(b), err
}

// strBytes reads a string at s.i (which must be '"'). It returns a slice of the
// input when there are no escapes, otherwise a fresh unescaped copy.
func (s *scanner) strBytes() ([]byte, error) {
	s.i++ // opening quote
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			s.i++
			return s.b[start : s.i-1], nil
		}
		if c == '\\' {
			return s.strSlow(start)
		}
		if c < 0x20 {
			return nil, s.err("control character in string")
		}
		s.i++
	}
	return nil, s.err("unterminated string")
}

func (s *scanner) strSlow(start int) ([]byte, error) {
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return out, nil
		case c < 0x20:
			return nil, s.err("control character in string")
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, s.err("invalid \\u escape")
			}
			if r >= 0xD800 && r < 0xDC00 && s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
				s.i += 2
				r2, ok := s.hex4()
				if !ok {
					return nil, s.err("invalid \\u escape")
				}
				r = (r-0xD800)<<10 + (r2 - 0xDC00) + 0x10000
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, s.err("invalid escape")
		}
	}
	return nil, s.err("unterminated string")
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// fields calls fn for each member of the object at the cursor; fn must consume
// the member's value (with one of the scanner's readers or skip).
func (s *scanner) fields(fn func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.err("expected key")
		}
		k, err := s.strBytes()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := fn(k); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.err("expected , or }")
		}
	}
}

func (s *scanner) readString() (string, error) {
	switch s.peek() {
	case '"':
		return s.str()
	case 'n':
		return "", s.lit("null")
	}
	return "", s.err("expected string")
}

func (s *scanner) readBool() (bool, error) {
	switch s.peek() {
	case 't':
		return true, s.lit("true")
	case 'f':
		return false, s.lit("false")
	case 'n':
		return false, s.lit("null")
	}
	return false, s.err("expected bool")
}

func (s *scanner) readInt() (int, error) {
	if s.peek() == 'n' {
		return 0, s.lit("null")
	}
	n, err := s.num()
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(n)
	if err != nil {
		f, ferr := strconv.ParseFloat(n, 64)
		if ferr != nil {
			return 0, s.err("invalid integer")
		}
		v = int(f)
	}
	return v, nil
}

func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.err("trailing data")
	}
	return nil
}

// AppendString appends s to b as a JSON string.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendValue appends v to b as compact JSON.
func AppendValue(b []byte, v Value) []byte {
	switch v.Kind {
	case KindBool:
		return strconv.AppendBool(b, v.Bool)
	case KindNumber:
		return append(b, v.Str...)
	case KindString:
		return AppendString(b, v.Str)
	case KindArray:
		b = append(b, '[')
		for i, it := range v.Items {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendValue(b, it)
		}
		return append(b, ']')
	case KindObject:
		b = append(b, '{')
		for i, k := range v.Keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, k)
			b = append(b, ':')
			b = AppendValue(b, v.Vals[i])
		}
		return append(b, '}')
	}
	return append(b, "null"...)
}

func appendFloat(b []byte, f float64) []byte {
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}
