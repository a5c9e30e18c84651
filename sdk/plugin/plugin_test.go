package plugin

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
)

type testConfig struct {
	Base float64 `json:"base_seconds"`
}

func init() {
	Policy(func(in FailureInput, c *testConfig) (Decision, error) {
		switch in.TaskType {
		case "panic":
			panic("boom")
		case "error":
			return Decision{}, Errorf("nope", "refused")
		}
		return Decision{Action: ActionRetry, DelaySeconds: c.Base * float64(in.Attempts), Reason: in.Error}, nil
	})
}

func envelope(t testing.TB, frame []byte) map[string]any {
	t.Helper()
	n := binary.LittleEndian.Uint32(frame)
	var m map[string]any
	if err := json.Unmarshal(frame[4:4+n], &m); err != nil {
		t.Fatalf("envelope %q: %v", frame[4:4+n], err)
	}
	return m
}

func TestDispatchPolicy(t *testing.T) {
	rec := func(taskType string) []byte {
		return EncodeFailureRecord(FailureInput{TaskID: "t1", TaskType: taskType, Kind: "failure", Retryable: true, Attempts: 3, MaxRetries: 5,
			Error: "bad \"quote\" é\n", Config: []byte(`{"base_seconds":1.5}`)})
	}
	got := envelope(t, Dispatch("decide", rec("x"), nil))
	res := got["result"].(map[string]any)
	if got["ok"] != true || res["action"] != "retry" || res["delay_seconds"] != 4.5 || res["reason"] != "bad \"quote\" é\n" {
		t.Fatalf("got %v", got)
	}
	p := envelope(t, Dispatch("decide", rec("panic"), nil))
	if e := p["error"].(map[string]any); p["ok"] != false || e["panic"] != true || !strings.Contains(e["message"].(string), "boom") {
		t.Fatalf("panic: %v", p)
	}
	e := envelope(t, Dispatch("decide", rec("error"), nil))
	if e["error"].(map[string]any)["code"] != "nope" {
		t.Fatalf("error: %v", e)
	}
	bad := envelope(t, Dispatch("decide", []byte(`{"task_id": 5}`), nil))
	if fi, err := DecodeFailureInput([]byte(`{"task_id":"a","kind":"expiry","attempts":2,"config":{"x":[1]}}`)); err != nil || fi.Kind != "expiry" || fi.Attempts != 2 || string(fi.Config) != `{"x":[1]}` {
		t.Fatalf("DecodeFailureInput: %+v %v", fi, err)
	}
	if bad["error"].(map[string]any)["code"] != "bad_request" {
		t.Fatalf("bad input: %v", bad)
	}
	if m := envelope(t, Dispatch("put", nil, nil)); m["error"].(map[string]any)["code"] != "not_implemented" {
		t.Fatalf("unregistered op: %v", m)
	}
}

func TestParseJSONRoundTrip(t *testing.T) {
	for _, doc := range []string{`{"a":[1,2.5,-3e2,true,false,null,"x\u0000y"],"b":{},"c":[]}`, `"\ud83d\ude00"`, `[]`} {
		v, err := ParseJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		var a, b any
		json.Unmarshal([]byte(doc), &a)
		if err := json.Unmarshal(AppendValue(nil, v), &b); err != nil {
			t.Fatal(err)
		}
		aj, _ := json.Marshal(a)
		bj, _ := json.Marshal(b)
		if string(aj) != string(bj) {
			t.Errorf("%s: round trip %s != %s", doc, bj, aj)
		}
	}
	for _, bad := range []string{`{`, `{"a":}`, `[1,]`, `"abc`, `tru`, `{"a":1}x`, `"\x01"`} {
		if _, err := ParseJSON([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,"b",{"c":null}]}`, `"\u00e9"`, `-0.5e3`, `[[[[]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseJSON(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		if !json.Valid(AppendValue(nil, v)) {
			t.Fatalf("re-encoding of %q is invalid", b)
		}
	})
}

func BenchmarkDispatchDecide(b *testing.B) {
	in := EncodeFailureRecord(FailureInput{TaskID: "01JDQ8Z6X7W3K9M2N4P5R6S7T8", TaskType: "document_index", Kind: "failure", Retryable: true, Attempts: 2, MaxRetries: 5,
		Error: "worker crashed: connection reset by peer", Config: []byte(`{"base_seconds":10,"max_seconds":600,"jitter":0.1}`)})
	b.ReportAllocs()
	for range b.N {
		Dispatch("decide", in, nil)
	}
}
