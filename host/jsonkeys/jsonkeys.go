// Package jsonkeys refuses JSON objects whose keys JSON readers disagree
// on: encoding/json keeps the last of duplicate keys (other readers the
// first, or both) and matches field names case-insensitively, so a body
// checked on one value may be acted on with another. Both doors use it: the
// HTTP door on every body, the MCP door on every JSON-RPC message.
package jsonkeys

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// Error is a key Check or CheckFolded refused.
type Error struct {
	// Problem is "duplicate key" or "unknown field".
	Problem string
	// Key is the refused key, as encoding/json reads it.
	Key string
	// Where is the object it is in: the root name ("the body") or a path
	// ("params", "params.options", "artifacts[2]").
	Where string
	// Hint ends the message: the key or field it matches but for case.
	Hint string
}

// Error reads as the HTTP door's bad_request detail: duplicate key "prompt"
// in params.
func (e *Error) Error() string {
	if e.Key == "" && e.Hint == "" && strings.HasPrefix(e.Problem, "a string holds") {
		return e.Problem + " at " + e.Where
	}
	return e.Problem + " " + strconv.Quote(e.Key) + " in " + e.Where + e.Hint
}

// Check walks b, one JSON object that encoding/json has already decoded
// (so valid, and nested no deeper than it allows), and refuses any object in
// it with a duplicate key. With typ (the HTTP door's strict routes), a key
// of an object decoded into a struct must also name one of its fields
// exactly: encoding/json would take "TASK_TYPE" for task_type. The error is
// an *Error whose Where calls b "the body". One pass over the bytes; nothing
// is kept but the keys of the objects open along the current path (as
// offsets into b), and nothing is allocated unless a key has an escape or an
// object has many keys.
func Check(b []byte, typ reflect.Type) error {
	return check(b, typ, "the body")
}

// CheckNamed is Check for b, any valid JSON value, whose error calls b
// root: "the message" (a JSON-RPC message), "arguments" (a tool's).
func CheckNamed(b []byte, typ reflect.Type, root string) error {
	return check(b, typ, root)
}

func check(b []byte, typ reflect.Type, root string) error {
	// Room for the keys and the path of a typical body, in one allocation.
	room := new(struct {
		keys [16]keySpan
		path [8]pathElem
	})
	w := keyWalker{b: b, keys: room.keys[:0], path: room.path[:0], root: root}
	_, err := w.value(w.space(0), typ)
	return err
}

type keyWalker struct {
	b []byte
	// keys are the keys of the open objects, innermost last.
	keys []keySpan
	// path is where the walk is, for the error: a key or an array index.
	path []pathElem
	// root names b in the error.
	root string
	// probe makes the walk a BadValue's: values of types that decode
	// themselves are decoded, and duplicate and unknown keys pass.
	probe bool
}

type keySpan struct {
	s, e int // the key's text in b, without the quotes
	esc  bool
}

type pathElem struct {
	key keySpan
	idx int // -1 for a key
}

// manyKeys is how many keys an object has before duplicates are looked up
// in a map rather than by comparing with each key seen.
const manyKeys = 16

func (w *keyWalker) space(i int) int {
	for i < len(w.b) && (w.b[i] == ' ' || w.b[i] == '\t' || w.b[i] == '\n' || w.b[i] == '\r') {
		i++
	}
	return i
}

// str returns the end of the string starting at b[i] (the opening quote),
// past the closing quote, and whether it has an escape.
func (w *keyWalker) str(i int) (int, bool) {
	esc := false
	for i++; i < len(w.b); i++ {
		switch w.b[i] {
		case '\\':
			esc = true
			i++
		case '"':
			return i + 1, esc
		}
	}
	return i, esc
}

// escapes refuses a string (b[i:end], quotes included) holding a \u0000
// escape: PostgreSQL keeps no U+0000 in text and SQLite would, so the two
// stores would answer one request apart. It is refused on every door,
// wherever it is. (A lone surrogate is rewritten instead:
// FixLoneSurrogates.)
func (w *keyWalker) escapes(i, end int) error {
	b := w.b[:end]
	for i++; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		i++
		if i >= len(b) || b[i] != 'u' {
			continue
		}
		if r, ok := hex4(b, i+1); ok && r == 0 {
			return w.refuseValue("a string holds a NUL character (\\u0000), which no field accepts")
		}
	}
	return nil
}

// FixLoneSurrogates returns b with every \u escape of a UTF-16 surrogate
// that is not half of a pair, in its strings, written \ufffd (U+FFFD, the
// replacement character): the value encoding/json decodes such an escape
// to. A raw value (a task's params, a receipt's body), which is stored and
// handed back as sent, then holds what a decoded field holds, and the strict
// JSON readers of whoever reads it back can read it. It returns b itself
// when there is nothing to rewrite, else a rewritten copy of the same length.
// b need not be valid JSON: only its strings' escapes are read.
func FixLoneSurrogates(b []byte) []byte {
	var out []byte
	in := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !in {
			in = c == '"'
			continue
		}
		switch c {
		case '"':
			in = false
			continue
		case '\\':
		default:
			continue
		}
		i++
		if i >= len(b) || b[i] != 'u' {
			continue
		}
		r, ok := hex4(b, i+1)
		if !ok {
			continue
		}
		at := i + 1 // the escape's digits
		i += 4
		if r < 0xD800 || r >= 0xE000 {
			continue
		}
		if r < 0xDC00 && i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
			if lo, ok := hex4(b, i+3); ok && lo >= 0xDC00 && lo < 0xE000 {
				i += 6 // a pair
				continue
			}
		}
		if out == nil {
			out = bytes.Clone(b)
		}
		copy(out[at:at+4], "fffd")
	}
	if out == nil {
		return b
	}
	return out
}

// hex4 reads the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// text is a key as encoding/json reads it.
func (w *keyWalker) text(k keySpan) string {
	if !k.esc {
		return string(w.b[k.s:k.e])
	}
	var s string
	// A copy, so that the walker's buffers do not escape through Unmarshal.
	_ = json.Unmarshal(bytes.Clone(w.b[k.s-1:k.e+1]), &s)
	return s
}

func (w *keyWalker) same(a, b keySpan) bool {
	if !a.esc && !b.esc {
		return bytes.Equal(w.b[a.s:a.e], w.b[b.s:b.e])
	}
	return w.text(a) == w.text(b)
}

// duplicate is the error for k, a duplicate of an earlier key.
func (w *keyWalker) duplicate(k keySpan) error {
	if w.probe {
		return nil
	}
	return w.refuse("duplicate key", w.text(k), "")
}

func (w *keyWalker) value(i int, typ reflect.Type) (int, error) {
	if i >= len(w.b) {
		return i, nil
	}
	if w.probe && typ != nil && decodesItself(typ) {
		return w.probeValue(i, typ)
	}
	switch w.b[i] {
	case '{':
		var fields *structFields
		var elem reflect.Type
		if t := checkedType(typ); t != nil {
			switch t.Kind() {
			case reflect.Struct:
				fields = fieldsOf(t)
			case reflect.Map:
				elem = t.Elem()
			}
		}
		return w.object(i, fields, elem)
	case '[':
		var elem reflect.Type
		if t := checkedType(typ); t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		return w.array(i, elem)
	case '"':
		end, esc := w.str(i)
		if esc {
			if err := w.escapes(i, end); err != nil {
				return i, err
			}
		}
		return end, nil
	}
	// A number, true, false or null.
	for ; i < len(w.b); i++ {
		switch w.b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i, nil
		}
	}
	return i, nil
}

func (w *keyWalker) object(i int, fields *structFields, elem reflect.Type) (int, error) {
	first := len(w.keys)
	defer func() { w.keys = w.keys[:first] }()
	var many map[string]struct{}
	i = w.space(i + 1)
	for i < len(w.b) && w.b[i] != '}' {
		end, esc := w.str(i)
		if esc {
			if err := w.escapes(i, end); err != nil {
				return i, err
			}
		}
		k := keySpan{s: i + 1, e: end - 1, esc: esc}
		if many != nil {
			t := w.text(k)
			if _, dup := many[t]; dup {
				if err := w.duplicate(k); err != nil {
					return i, err
				}
			}
			many[t] = struct{}{}
		} else {
			for _, seen := range w.keys[first:] {
				if w.same(seen, k) {
					if err := w.duplicate(k); err != nil {
						return i, err
					}
				}
			}
			if len(w.keys)-first == manyKeys {
				many = make(map[string]struct{}, 2*manyKeys)
				for _, seen := range w.keys[first:] {
					many[w.text(seen)] = struct{}{}
				}
				many[w.text(k)] = struct{}{}
			}
		}
		w.keys = append(w.keys, k)
		vt := elem
		if fields != nil {
			var ok bool
			if esc {
				vt, ok = fields.exact[w.text(k)]
			} else {
				vt, ok = fields.exact[string(w.b[k.s:k.e])]
			}
			if !ok && !w.probe {
				name := w.text(k)
				return i, w.refuse("unknown field", name, fields.hint(name))
			}
		}
		i = w.space(end)
		i = w.space(i + 1) // the colon
		w.path = append(w.path, pathElem{key: k, idx: -1})
		var err error
		if i, err = w.value(i, vt); err != nil {
			return i, err
		}
		w.path = w.path[:len(w.path)-1]
		i = w.space(i)
		if i < len(w.b) && w.b[i] == ',' {
			i = w.space(i + 1)
		}
	}
	return i + 1, nil
}

func (w *keyWalker) array(i int, elem reflect.Type) (int, error) {
	i = w.space(i + 1)
	for n := 0; i < len(w.b) && w.b[i] != ']'; n++ {
		w.path = append(w.path, pathElem{idx: n})
		var err error
		if i, err = w.value(i, elem); err != nil {
			return i, err
		}
		w.path = w.path[:len(w.path)-1]
		i = w.space(i)
		if i < len(w.b) && w.b[i] == ',' {
			i = w.space(i + 1)
		}
	}
	return i + 1, nil
}

// refuseValue is an *Error about a string rather than a key, naming where
// it is: "task_type", "params.prompt", "steps[2].name", or the root.
func (w *keyWalker) refuseValue(what string) error {
	e := w.refuse(what, "", "").(*Error)
	return e
}

// refuse is an *Error naming the key and the object it is in: the root
// ("the body"), "params", "params.options", "artifacts[2]".
func (w *keyWalker) refuse(what, key, hint string) error {
	return &Error{Problem: what, Key: key, Where: w.where(), Hint: hint}
}

// where names the walk's place: the root, or a path ("params.options",
// "artifacts[2]").
func (w *keyWalker) where() string {
	where := w.root
	if len(w.path) > 0 {
		var sb strings.Builder
		for n, p := range w.path {
			if p.idx >= 0 {
				sb.WriteByte('[')
				sb.WriteString(strconv.Itoa(p.idx))
				sb.WriteByte(']')
				continue
			}
			if n > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(w.text(p.key))
		}
		where = sb.String()
	}
	return where
}

// PathAt returns the path of the innermost value of b, one valid JSON
// value, that holds byte off: "entries[1].lease_id", "tasks[3]", or root
// for b itself (and for an off outside b). It names where an
// encoding/json error with an offset (json.UnmarshalTypeError.Offset, the
// bytes read when it was found: past a scalar, past the opening bracket of
// an object or array) is, with the array indexes its Field leaves out: so
// off is the offset less one.
func PathAt(b []byte, off int64, root string) string {
	w := keyWalker{b: b, root: root}
	at := int(off)
	found := ""
	var walk func(i int) int
	walk = func(i int) int {
		start := i
		if i >= len(b) {
			return i
		}
		var end int
		switch b[i] {
		case '{':
			i = w.space(i + 1)
			for i < len(b) && b[i] != '}' && i <= at {
				kend, esc := w.str(i)
				k := keySpan{s: i + 1, e: kend - 1, esc: esc}
				i = w.space(w.space(kend) + 1) // the colon
				w.path = append(w.path, pathElem{key: k, idx: -1})
				i = w.space(walk(i))
				w.path = w.path[:len(w.path)-1]
				if i < len(b) && b[i] == ',' {
					i = w.space(i + 1)
				}
			}
			end = i + 1
		case '[':
			i = w.space(i + 1)
			for n := 0; i < len(b) && b[i] != ']' && i <= at; n++ {
				w.path = append(w.path, pathElem{idx: n})
				i = w.space(walk(i))
				w.path = w.path[:len(w.path)-1]
				if i < len(b) && b[i] == ',' {
					i = w.space(i + 1)
				}
			}
			end = i + 1
		default:
			end = w.skip(i)
		}
		// A container's walk stops past at, so end is at most its own.
		if found == "" && start <= at && at < end {
			found = w.where()
		}
		return end
	}
	walk(w.space(0))
	if found == "" {
		return root
	}
	return found
}

// skip returns the end of the scalar at b[i]: a string, a number, true,
// false or null.
func (w *keyWalker) skip(i int) int {
	if i < len(w.b) && w.b[i] == '"' {
		end, _ := w.str(i)
		return end
	}
	for ; i < len(w.b); i++ {
		switch w.b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// checkedType is the type whose field names the walk checks for a value
// decoded into t: pointers are followed; a type that decodes itself
// (json.RawMessage, time.Time, rawObject) and interfaces are not checked.
func checkedType(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Kind() == reflect.Interface || t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
			return nil
		}
		if t.Kind() != reflect.Pointer {
			return t
		}
		t = t.Elem()
	}
	return nil
}

// structFields are the JSON field names of a struct, as encoding/json sees
// them (embedded structs' fields promoted), with their types.
type structFields struct {
	exact map[string]reflect.Type
}

// hint is the end of the error for a key that is not a field: the field it
// would have matched by case.
func (f *structFields) hint(k string) string {
	for name := range f.exact {
		if strings.EqualFold(name, k) {
			return "; field names are case-sensitive: did you mean " + strconv.Quote(name) + "?"
		}
	}
	return ""
}

var fieldCache sync.Map // reflect.Type → *structFields

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{exact: map[string]reflect.Type{}}
	collectFields(t, f.exact, 0)
	fieldCache.Store(t, f)
	return f
}

// collectFields adds t's JSON fields to into; a shallower field wins over a
// promoted one of the same name, as in encoding/json.
func collectFields(t reflect.Type, into map[string]reflect.Type, depth int) {
	if depth > 8 {
		return
	}
	var embedded []reflect.Type
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		into[name] = sf.Type
	}
	for _, et := range embedded {
		sub := map[string]reflect.Type{}
		collectFields(et, sub, depth+1)
		for k, v := range sub {
			if _, ok := into[k]; !ok {
				into[k] = v
			}
		}
	}
}

// BadValue walks b, one valid JSON value that decoding into typ refused, and
// returns the first value decoded by a type of its own (time.Time, or any
// other json.Unmarshaler along typ's fields) that refuses its bytes: its
// path, as Check names paths ("tasks[2].not_before", or root for b itself),
// its bytes, and the type's error; err is nil when no such value refuses.
// encoding/json reports such an error without saying where the value is;
// this is for the error's message, so it is not fast.
func BadValue(b []byte, typ reflect.Type, root string) (path string, raw []byte, err error) {
	w := keyWalker{b: b, root: root, probe: true}
	if _, werr := w.value(w.space(0), typ); werr != nil {
		if e, is := werr.(*badValue); is {
			return e.where, e.raw, e.err
		}
	}
	return "", nil, nil
}

// badValue is what a probing walk stops at.
type badValue struct {
	where string
	raw   []byte
	err   error
}

func (e *badValue) Error() string { return e.where + ": " + e.err.Error() }

// probeValue decodes the value at b[i], of a type that decodes itself, on
// its own; a refusal stops the walk with a *badValue.
func (w *keyWalker) probeValue(i int, typ reflect.Type) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(w.b[i:]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return len(w.b), nil
	}
	end := i + int(dec.InputOffset())
	t := typ
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
		return i, &badValue{where: w.where(), raw: raw, err: err}
	}
	return end, nil
}

// decodesItself reports whether values of t (or *t) decode themselves.
func decodesItself(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		if t.Implements(unmarshalerType) {
			return true
		}
		t = t.Elem()
	}
	return t.Kind() != reflect.Interface && (t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType))
}
