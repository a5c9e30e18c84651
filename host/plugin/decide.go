package plugin

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/asyncgate/asyncgate/host"
)

// Typed equivalents of plugin-policy-decide.{input,output}.schema.json for
// the hot path. TestDecideTypedMatchesSchema keeps them in step with the files.

// checkFailureInput enforces the decide input schema on a typed input.
func checkFailureInput(in host.FailureInput) error {
	switch {
	case in.TaskID == "":
		return errors.New("task_id is empty")
	case in.TaskType == "":
		return errors.New("task_type is empty")
	case in.Kind != host.FailureError && in.Kind != host.FailureExpiry:
		return fmt.Errorf("kind %q is not failure or expiry", in.Kind)
	case in.Attempts < 0 || in.MaxRetries < 0 || in.LeaseExpiries < 0:
		return errors.New("attempts, max_retries and lease_expiries must be >= 0")
	case in.Attempts > math.MaxUint32 || in.MaxRetries > math.MaxUint32 || in.LeaseExpiries > math.MaxUint32:
		return errors.New("counts out of range")
	}
	return nil
}

// encodeFailureRecord writes decide's binary input (schemas/plugin-abi.md):
// a 16-byte header and four u32-length-prefixed strings. config replaces
// in.Config.
func encodeFailureRecord(in host.FailureInput, config json.RawMessage) []byte {
	b := make([]byte, 16, 32+len(in.TaskID)+len(in.TaskType)+len(in.Error)+len(config))
	b[0] = 1
	if in.Kind == host.FailureExpiry {
		b[1] = 1
	}
	if in.Retryable {
		b[2] = 1
	}
	binary.LittleEndian.PutUint32(b[4:], uint32(in.Attempts))
	binary.LittleEndian.PutUint32(b[8:], uint32(in.MaxRetries))
	binary.LittleEndian.PutUint32(b[12:], uint32(in.LeaseExpiries))
	for _, f := range [...]string{in.TaskID, in.TaskType, in.Error} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(config)))
	return append(b, config...)
}

// decodeDecision decodes decide's result strictly (unknown fields refused)
// and enforces the output schema's constraints.
func decodeDecision(raw []byte) (host.Decision, error) {
	var d struct {
		Action       *string  `json:"action"`
		DelaySeconds *float64 `json:"delay_seconds"`
		Reason       *string  `json:"reason"`
		EscalateTo   *string  `json:"escalate_to"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return host.Decision{}, err
	}
	if dec.More() {
		return host.Decision{}, errors.New("trailing data")
	}
	var out host.Decision
	if d.Action == nil {
		return out, errors.New("/: missing property action")
	}
	out.Action = host.Action(*d.Action)
	switch out.Action {
	case host.ActionRetry, host.ActionDeadLetter, host.ActionEscalate:
	default:
		return out, fmt.Errorf("/action: %q is not retry, dead_letter or escalate", *d.Action)
	}
	if d.DelaySeconds != nil {
		if *d.DelaySeconds < 0 || *d.DelaySeconds > 31536000 {
			return out, fmt.Errorf("/delay_seconds: %v is outside [0, 31536000]", *d.DelaySeconds)
		}
		out.DelaySeconds = *d.DelaySeconds
	}
	if d.Reason != nil {
		if utf8.RuneCountInString(*d.Reason) > 200 {
			return out, errors.New("/reason: longer than 200 characters")
		}
		out.Reason = *d.Reason
	}
	if d.EscalateTo != nil {
		if n := utf8.RuneCountInString(*d.EscalateTo); n < 1 || n > 200 {
			return out, errors.New("/escalate_to: length must be 1..200")
		}
		out.EscalateTo = *d.EscalateTo
	}
	if out.Action == host.ActionEscalate && d.EscalateTo == nil {
		return out, errors.New("/: escalate needs escalate_to")
	}
	return out, nil
}
