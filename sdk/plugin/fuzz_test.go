package plugin

import (
	"reflect"
	"testing"
)

// FuzzDecodeFailureRecord feeds arbitrary bytes to the guest's decoder of
// decide's binary input. It must never panic, and what it accepts must
// survive a round trip through the reference encoder unchanged.
func FuzzDecodeFailureRecord(f *testing.F) {
	f.Add(EncodeFailureRecord(FailureInput{TaskID: "T-1", TaskType: "work", Kind: "failure", Retryable: true, Attempts: 1, MaxRetries: 3,
		Error: "boom", Config: []byte(`{"base_seconds":10}`)}))
	f.Add(EncodeFailureRecord(FailureInput{Kind: "expiry", LeaseExpiries: 2}))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeFailureRecord(b)
		if err != nil {
			return
		}
		if in.Kind != "failure" && in.Kind != "expiry" {
			t.Fatalf("decoded unknown kind %q", in.Kind)
		}
		again, err := DecodeFailureRecord(EncodeFailureRecord(in))
		if len(in.Config) == 0 {
			in.Config = nil
		}
		if len(again.Config) == 0 {
			again.Config = nil
		}
		if err != nil || !reflect.DeepEqual(again, in) {
			t.Fatalf("%x decoded to %+v; re-encoded it decodes to %+v, %v", b, in, again, err)
		}
	})
}
