package plugin

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"unsafe"
)

// handler runs one operation: it appends its JSON result to dst and returns
// it, with the binary data to send back, if any.
type handler func(dst, in, data []byte) (result, out []byte, err error)

// The handlers of the six operations. Plain variables rather than a map:
// under wazero's termination checks every loop iteration in the guest costs
// an exit to the host, and a map lookup loops.
var hDecide, hValidate, hPut, hGet, hAck, hCapabilities handler

func slot(op string) *handler {
	switch op {
	case "decide":
		return &hDecide
	case "validate":
		return &hValidate
	case "put":
		return &hPut
	case "get":
		return &hGet
	case "ack":
		return &hAck
	case "capabilities":
		return &hCapabilities
	}
	return nil
}

// register installs h for op. Registering twice is a programming error.
func register(op string, h handler) {
	s := slot(op)
	if *s != nil {
		panic("plugin: operation " + op + " registered twice")
	}
	*s = h
}

// configCache decodes a plugin's config with encoding/json once per distinct
// config document: the host sends the same config on every call, so the hot
// path only compares bytes.
type configCache[C any] struct {
	raw string
	cfg *C
}

func (c *configCache[C]) get(raw []byte) (*C, error) {
	if c.cfg != nil && string(raw) == c.raw {
		return c.cfg, nil
	}
	cfg := new(C)
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, cfg); err != nil {
			return nil, Errorf("invalid_config", err.Error())
		}
	}
	c.raw, c.cfg = string(raw), cfg
	return cfg, nil
}

// Policy makes this module a policy plugin: fn decides what happens after a
// failed or expired attempt. C is the config type, decoded from the task
// type's policy config with encoding/json (once per distinct config).
func Policy[C any](fn func(in FailureInput, cfg *C) (Decision, error)) {
	var cache configCache[C]
	register("decide", func(dst, in, _ []byte) ([]byte, []byte, error) {
		fi, err := DecodeFailureRecord(in)
		if err != nil {
			return nil, nil, Errorf("bad_request", err.Error())
		}
		cfg, err := cache.get(fi.Config)
		if err != nil {
			return nil, nil, err
		}
		d, err := fn(fi, cfg)
		if err != nil {
			return nil, nil, err
		}
		return AppendDecision(dst, d), nil, nil
	})
}

// Validator makes this module a validator plugin: fn returns the violations
// in a task's params (none means valid). An error means the validator itself
// failed, not that the params are invalid.
func Validator[C any](fn func(in ValidateInput, cfg *C) ([]Violation, error)) {
	var cache configCache[C]
	register("validate", func(dst, in, _ []byte) ([]byte, []byte, error) {
		v, err := ParseJSON(in)
		if err != nil || v.Kind != KindObject {
			return nil, nil, Errorf("bad_request", "validate input is not a JSON object")
		}
		var vi ValidateInput
		if t, ok := v.Get("task_type"); ok {
			vi.TaskType = t.Str
		}
		vi.Params, _ = v.Get("params")
		if c, ok := v.Get("config"); ok {
			vi.Config = AppendValue(nil, c)
		}
		cfg, err := cache.get(vi.Config)
		if err != nil {
			return nil, nil, err
		}
		vs, err := fn(vi, cfg)
		if err != nil {
			return nil, nil, err
		}
		b := append(dst, `{"valid":`...)
		b = strconv.AppendBool(b, len(vs) == 0)
		b = append(b, `,"violations":[`...)
		for i, x := range vs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"key":`...)
			b = AppendString(b, x.Key)
			b = append(b, `,"message":`...)
			b = AppendString(b, x.Message)
			b = append(b, '}')
		}
		return append(b, "]}"...), nil, nil
	})
}

// ChannelImpl is what a channel plugin provides. C is its config type, set by
// the operator. Put, Get and Capabilities are required; Ack may be nil (a no-op).
type ChannelImpl[C any] struct {
	Put          func(cfg *C, taskID string, payload []byte) (PutResult, error)
	Get          func(cfg *C, pointer string) ([]byte, error)
	Ack          func(cfg *C, pointer string) error
	Capabilities func(cfg *C) (Capabilities, error)
}

// Channel makes this module a channel plugin.
func Channel[C any](impl ChannelImpl[C]) {
	var cache configCache[C]
	// header reads the JSON input's string fields and config.
	header := func(in []byte, field string) (string, *C, error) {
		var val string
		var rawCfg []byte
		s := scanner{b: in}
		err := s.fields(func(k []byte) error {
			var err error
			switch string(k) {
			case field:
				val, err = s.readString()
			case "config":
				rawCfg, err = s.skip()
			default:
				_, err = s.skip()
			}
			return err
		})
		if err != nil {
			return "", nil, Errorf("bad_request", err.Error())
		}
		cfg, err := cache.get(rawCfg)
		return val, cfg, err
	}
	register("put", func(dst, in, data []byte) ([]byte, []byte, error) {
		taskID, cfg, err := header(in, "task_id")
		if err != nil {
			return nil, nil, err
		}
		r, err := impl.Put(cfg, taskID, data)
		if err != nil {
			return nil, nil, err
		}
		b := AppendString(append(dst, `{"pointer":`...), r.Pointer)
		if len(r.Proof) > 0 {
			b = append(append(b, `,"delivery_proof":`...), r.Proof...)
		}
		return append(b, '}'), nil, nil
	})
	register("get", func(dst, in, _ []byte) ([]byte, []byte, error) {
		ptr, cfg, err := header(in, "pointer")
		if err != nil {
			return nil, nil, err
		}
		payload, err := impl.Get(cfg, ptr)
		if err != nil {
			return nil, nil, err
		}
		return append(strconv.AppendInt(append(dst, `{"size":`...), int64(len(payload)), 10), '}'), payload, nil
	})
	register("ack", func(dst, in, _ []byte) ([]byte, []byte, error) {
		ptr, cfg, err := header(in, "pointer")
		if err != nil {
			return nil, nil, err
		}
		if impl.Ack != nil {
			if err := impl.Ack(cfg, ptr); err != nil {
				return nil, nil, err
			}
		}
		return append(dst, `{}`...), nil, nil
	})
	register("capabilities", func(dst, in, _ []byte) ([]byte, []byte, error) {
		_, cfg, err := header(in, "")
		if err != nil {
			return nil, nil, err
		}
		c, err := impl.Capabilities(cfg)
		if err != nil {
			return nil, nil, err
		}
		b := strconv.AppendInt(append(dst, `{"max_size_bytes":`...), c.MaxSizeBytes, 10)
		b = strconv.AppendBool(append(b, `,"supports_attachments":`...), c.SupportsAttachments)
		b = strconv.AppendBool(append(b, `,"supports_streaming":`...), c.SupportsStreaming)
		b = strconv.AppendInt(append(b, `,"retention_days":`...), int64(c.RetentionDays), 10)
		b = strconv.AppendBool(append(b, `,"human_readable":`...), c.HumanReadable)
		return append(b, '}'), nil, nil
	})
}

// frameBuf is reused for every result frame, so a call allocates nothing for
// its answer. A frame stays valid until the next call.
var frameBuf []byte

// Dispatch runs operation op and returns its result frame: a little-endian
// uint32 length n, n bytes of JSON envelope ({"ok":true,"result":...} or
// {"ok":false,"error":{"code":...,"message":...}}), then the binary data.
// A panic in the handler becomes an error envelope with "panic":true, so the
// host can discard the instance. The frame is reused by the next call, and
// strings handed to the handler may share in's memory, so the caller must
// not modify in afterwards. On wasip1 the op exports call it; elsewhere tests
// call it to run a plugin's logic natively.
func Dispatch(op string, in, data []byte) []byte {
	s := slot(op)
	if s == nil || *s == nil {
		return errorFrame("not_implemented", "this plugin has no "+op+" operation", false)
	}
	return dispatch(*s, in, data)
}

func dispatch(h handler, in, data []byte) (frame []byte) {
	if h == nil {
		return errorFrame("not_implemented", "this plugin does not implement the operation", false)
	}
	defer func() {
		if r := recover(); r != nil {
			frame = errorFrame("panic", fmt.Sprint(r)+"\n"+string(debug.Stack()), true)
		}
	}()
	if cap(frameBuf) > 2<<20 {
		frameBuf = nil // do not pin a large payload's buffer forever
	}
	b := append(frameBuf[:0], 0, 0, 0, 0)
	b = append(b, `{"ok":true,"result":`...)
	b, out, err := h(b, in, data)
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return errorFrame(pe.Code, pe.Message, false)
		}
		return errorFrame("plugin_error", err.Error(), false)
	}
	b = append(b, '}')
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	b = append(b, out...)
	frameBuf = b
	return b
}

func errorFrame(code, msg string, panicked bool) []byte {
	const maxMsg = 4096
	if len(msg) > maxMsg {
		msg = msg[:maxMsg]
	}
	b := append(make([]byte, 4, 64+len(msg)), `{"ok":false,"error":{"code":`...)
	b = AppendString(b, code)
	b = AppendString(append(b, `,"message":`...), msg)
	if panicked {
		b = append(b, `,"panic":true`...)
	}
	b = append(b, "}}"...)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// DecodeFailureInput parses decide's JSON input without reflection.
func DecodeFailureInput(b []byte) (FailureInput, error) {
	var in FailureInput
	s := scanner{b: b}
	err := s.fields(func(k []byte) error {
		var err error
		switch string(k) {
		case "task_id":
			in.TaskID, err = s.readString()
		case "task_type":
			in.TaskType, err = s.readString()
		case "kind":
			in.Kind, err = s.readString()
		case "retryable":
			in.Retryable, err = s.readBool()
		case "attempts":
			in.Attempts, err = s.readInt()
		case "max_retries":
			in.MaxRetries, err = s.readInt()
		case "lease_expiries":
			in.LeaseExpiries, err = s.readInt()
		case "error":
			in.Error, err = s.readString()
		case "config":
			in.Config, err = s.skip()
		default:
			_, err = s.skip()
		}
		return err
	})
	if err == nil {
		err = s.end()
	}
	return in, err
}

// AppendDecision appends d as decide's JSON output.
func AppendDecision(b []byte, d Decision) []byte {
	b = AppendString(append(b, `{"action":`...), d.Action)
	if d.DelaySeconds != 0 {
		b = appendFloat(append(b, `,"delay_seconds":`...), d.DelaySeconds)
	}
	if d.Reason != "" {
		b = AppendString(append(b, `,"reason":`...), d.Reason)
	}
	if d.EscalateTo != "" {
		b = AppendString(append(b, `,"escalate_to":`...), d.EscalateTo)
	}
	return append(b, '}')
}

// DecodeFailureRecord parses decide's input: the compact binary record the
// host sends instead of JSON (see schemas/plugin-abi.md), little-endian:
//
//	u8 version (1), u8 kind (0 failure, 1 expiry), u8 flags (bit 0: retryable), u8 0,
//	u32 attempts, u32 max_retries, u32 lease_expiries,
//	then four u32-length-prefixed byte strings: task_id, task_type, error, config (JSON).
//
// Strings share b's memory; b must not change afterwards.
func DecodeFailureRecord(b []byte) (FailureInput, error) {
	var in FailureInput
	if len(b) < 16 || b[0] != 1 {
		return in, errors.New("decide input is not a version 1 failure record")
	}
	switch b[1] {
	case 0:
		in.Kind = "failure"
	case 1:
		in.Kind = "expiry"
	default:
		return in, errors.New("unknown failure kind")
	}
	in.Retryable = b[2]&1 != 0
	in.Attempts = int(binary.LittleEndian.Uint32(b[4:]))
	in.MaxRetries = int(binary.LittleEndian.Uint32(b[8:]))
	in.LeaseExpiries = int(binary.LittleEndian.Uint32(b[12:]))
	rest := b[16:]
	var fields [4][]byte
	for i := range fields {
		if len(rest) < 4 {
			return in, errors.New("truncated failure record")
		}
		n := binary.LittleEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			return in, errors.New("truncated failure record")
		}
		fields[i], rest = rest[4:4+n], rest[4+n:]
	}
	in.TaskID = unsafeString(fields[0])
	in.TaskType = unsafeString(fields[1])
	in.Error = unsafeString(fields[2])
	in.Config = fields[3]
	return in, nil
}

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// EncodeFailureRecord is the reference encoder of decide's binary input (the
// host has its own); tests use it to drive Dispatch("decide", ...).
func EncodeFailureRecord(in FailureInput) []byte {
	b := make([]byte, 16, 32+len(in.TaskID)+len(in.TaskType)+len(in.Error)+len(in.Config))
	b[0] = 1
	if in.Kind == "expiry" {
		b[1] = 1
	}
	if in.Retryable {
		b[2] = 1
	}
	binary.LittleEndian.PutUint32(b[4:], uint32(in.Attempts))
	binary.LittleEndian.PutUint32(b[8:], uint32(in.MaxRetries))
	binary.LittleEndian.PutUint32(b[12:], uint32(in.LeaseExpiries))
	for _, f := range []string{in.TaskID, in.TaskType, in.Error, string(in.Config)} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}
