package plugin

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
)

// handler runs one operation: raw JSON input and binary data in, raw JSON
// result and binary data out.
type handler func(in, data []byte) (result, out []byte, err error)

var handlers = map[string]handler{}

// register installs h for op. Registering twice is a programming error.
func register(op string, h handler) {
	if _, dup := handlers[op]; dup {
		panic("plugin: operation " + op + " registered twice")
	}
	handlers[op] = h
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
	register("decide", func(in, _ []byte) ([]byte, []byte, error) {
		fi, err := DecodeFailureInput(in)
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
		return AppendDecision(make([]byte, 0, 128), d), nil, nil
	})
}

// Validator makes this module a validator plugin: fn returns the violations
// in a task's params (none means valid). An error means the validator itself
// failed, not that the params are invalid.
func Validator[C any](fn func(in ValidateInput, cfg *C) ([]Violation, error)) {
	var cache configCache[C]
	register("validate", func(in, _ []byte) ([]byte, []byte, error) {
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
		b := append(make([]byte, 0, 64), `{"valid":`...)
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
	register("put", func(in, data []byte) ([]byte, []byte, error) {
		taskID, cfg, err := header(in, "task_id")
		if err != nil {
			return nil, nil, err
		}
		r, err := impl.Put(cfg, taskID, data)
		if err != nil {
			return nil, nil, err
		}
		b := AppendString(append(make([]byte, 0, 96), `{"pointer":`...), r.Pointer)
		if len(r.Proof) > 0 {
			b = append(append(b, `,"delivery_proof":`...), r.Proof...)
		}
		return append(b, '}'), nil, nil
	})
	register("get", func(in, _ []byte) ([]byte, []byte, error) {
		ptr, cfg, err := header(in, "pointer")
		if err != nil {
			return nil, nil, err
		}
		payload, err := impl.Get(cfg, ptr)
		if err != nil {
			return nil, nil, err
		}
		return append(strconv.AppendInt([]byte(`{"size":`), int64(len(payload)), 10), '}'), payload, nil
	})
	register("ack", func(in, _ []byte) ([]byte, []byte, error) {
		ptr, cfg, err := header(in, "pointer")
		if err != nil {
			return nil, nil, err
		}
		if impl.Ack != nil {
			if err := impl.Ack(cfg, ptr); err != nil {
				return nil, nil, err
			}
		}
		return []byte(`{}`), nil, nil
	})
	register("capabilities", func(in, _ []byte) ([]byte, []byte, error) {
		_, cfg, err := header(in, "")
		if err != nil {
			return nil, nil, err
		}
		c, err := impl.Capabilities(cfg)
		if err != nil {
			return nil, nil, err
		}
		b := strconv.AppendInt([]byte(`{"max_size_bytes":`), c.MaxSizeBytes, 10)
		b = strconv.AppendBool(append(b, `,"supports_attachments":`...), c.SupportsAttachments)
		b = strconv.AppendBool(append(b, `,"supports_streaming":`...), c.SupportsStreaming)
		b = strconv.AppendInt(append(b, `,"retention_days":`...), int64(c.RetentionDays), 10)
		b = strconv.AppendBool(append(b, `,"human_readable":`...), c.HumanReadable)
		return append(b, '}'), nil, nil
	})
}

// Dispatch runs operation op and returns its result frame: a little-endian
// uint32 length n, n bytes of JSON envelope ({"ok":true,"result":...} or
// {"ok":false,"error":{"code":...,"message":...}}), then the binary data.
// A panic in the handler becomes an error envelope with "panic":true, so the
// host can discard the instance. It is exported for tests on the native
// platform; on wasip1 the op exports call it.
func Dispatch(op string, in, data []byte) (frame []byte) {
	h := handlers[op]
	if h == nil {
		return errorFrame("not_implemented", "this plugin has no "+op+" operation", false)
	}
	defer func() {
		if r := recover(); r != nil {
			frame = errorFrame("panic", fmt.Sprint(r)+"\n"+string(debug.Stack()), true)
		}
	}()
	result, out, err := h(in, data)
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return errorFrame(pe.Code, pe.Message, false)
		}
		return errorFrame("plugin_error", err.Error(), false)
	}
	n := 4 + len(`{"ok":true,"result":}`) + len(result)
	frame = make([]byte, 4, n+len(out))
	frame = append(frame, `{"ok":true,"result":`...)
	frame = append(frame, result...)
	frame = append(frame, '}')
	binary.LittleEndian.PutUint32(frame, uint32(n-4))
	return append(frame, out...)
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
