package host

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestTransitions(t *testing.T) {
	all := []TaskState{StateQueued, StateLeased, StateSucceeded, StateCanceled, StateDeadLetter}
	allowed := map[Event][][2]TaskState{
		EventLease:   {{StateQueued, StateLeased}},
		EventAccept:  {{StateLeased, StateLeased}},
		EventBeat:    {{StateLeased, StateLeased}},
		EventSucceed: {{StateLeased, StateSucceeded}},
		EventRetry:   {{StateLeased, StateQueued}},
		EventDead:    {{StateLeased, StateDeadLetter}},
		EventRelease: {{StateLeased, StateQueued}},
		EventExpire:  {{StateLeased, StateQueued}, {StateLeased, StateDeadLetter}},
		EventCancel:  {{StateQueued, StateCanceled}, {StateLeased, StateLeased}, {StateQueued, StateLeased}, {StateLeased, StateCanceled}},
		EventRedrive: {{StateDeadLetter, StateQueued}},
	}
	for ev, pairs := range allowed {
		for _, from := range all {
			for _, to := range all {
				want := false
				for _, p := range pairs {
					if p[0] == from && p[1] == to {
						want = true
					}
				}
				if got := CanTransition(from, ev, to); got != want {
					t.Errorf("CanTransition(%s, %s, %s) = %v, want %v", from, ev, to, got, want)
				}
			}
		}
	}
	for _, s := range []TaskState{StateSucceeded, StateCanceled, StateDeadLetter} {
		if !s.Terminal() {
			t.Errorf("%s should be terminal", s)
		}
		for ev := range allowed {
			if ev != EventRedrive && CanApply(s, ev) {
				t.Errorf("event %s applies to terminal state %s", ev, s)
			}
		}
	}
	if CanApply(StateQueued, Event("bogus")) || TaskState("bogus").Valid() {
		t.Error("unknown events and states must be refused")
	}
}

func TestTerminationRules(t *testing.T) {
	cases := []struct {
		child, parent ReceiptType
		want          bool
	}{
		{ReceiptCompleted, ReceiptAssigned, true},
		{ReceiptFailed, ReceiptAssigned, true},
		{ReceiptCanceled, ReceiptAssigned, true},
		{ReceiptRetryScheduled, ReceiptAssigned, false},
		{ReceiptEscalated, ReceiptAssigned, false},
		{ReceiptReleased, ReceiptAssigned, false},
		{ReceiptProgress, ReceiptAssigned, false},
		{ReceiptCompleted, ReceiptAccepted, true},
		{ReceiptFailed, ReceiptAccepted, true},
		{ReceiptRetryScheduled, ReceiptAccepted, true},
		{ReceiptEscalated, ReceiptAccepted, true},
		{ReceiptReleased, ReceiptAccepted, true},
		{ReceiptCanceled, ReceiptAccepted, true},
		{ReceiptProgress, ReceiptAccepted, false},
		{ReceiptCompleted, ReceiptCompleted, false},
		{ReceiptCompleted, ReceiptProgress, false},
	}
	for _, c := range cases {
		if got := c.child.Terminates(c.parent); got != c.want {
			t.Errorf("%s terminates %s = %v, want %v", c.child, c.parent, got, c.want)
		}
	}
	for _, typ := range []ReceiptType{ReceiptAssigned, ReceiptAccepted} {
		if !typ.CreatesObligation() {
			t.Errorf("%s must create an obligation", typ)
		}
	}
	for _, typ := range []ReceiptType{ReceiptProgress, ReceiptCompleted, ReceiptEscalated} {
		if typ.CreatesObligation() {
			t.Errorf("%s must not create an obligation", typ)
		}
	}
}

func TestReceiptValidate(t *testing.T) {
	base := func() Receipt {
		return Receipt{Type: ReceiptCompleted, From: "w.1", To: "agent", Parents: []string{"R-1"}, Body: json.RawMessage(`{"result_pointer":"inline:eA=="}`)}
	}
	cases := []struct {
		name string
		mod  func(*Receipt)
		code string
	}{
		{"ok", func(*Receipt) {}, ""},
		{"unknown type", func(r *Receipt) { r.Type = "task.nope" }, CodeInvalidReceipt},
		{"no parties", func(r *Receipt) { r.From = "" }, CodeInvalidReceipt},
		{"terminal without parents", func(r *Receipt) { r.Parents = nil }, CodeInvalidReceipt},
		{"not locatable", func(r *Receipt) { r.Body = json.RawMessage(`{"summary":"done"}`) }, CodeNotLocatable},
		{"artifacts locate", func(r *Receipt) { r.Body = json.RawMessage(`{"artifacts":[{"type":"s3","url":"s3://b/k"}]}`) }, ""},
		{"delivery proof locates", func(r *Receipt) { r.Body = json.RawMessage(`{"delivery_proof":{"mode":"push"}}`) }, ""},
		{"null proof does not", func(r *Receipt) { r.Body = json.RawMessage(`{"delivery_proof":null}`) }, CodeNotLocatable},
		{"body not json", func(r *Receipt) { r.Body = json.RawMessage(`{`) }, CodeInvalidReceipt},
		{"body not object", func(r *Receipt) { r.Body = json.RawMessage(`[1]`) }, CodeInvalidReceipt},
		{"duplicate parents", func(r *Receipt) { r.Parents = []string{"R-1", "R-1"} }, CodeInvalidReceipt},
		{"too many parents", func(r *Receipt) { r.Parents = []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"} }, CodeTooLarge},
		{"too many artifacts", func(r *Receipt) {
			arts := make([]map[string]string, 101)
			for i := range arts {
				arts[i] = map[string]string{"type": "x"}
			}
			r.Body, _ = json.Marshal(map[string]any{"artifacts": arts})
		}, CodeTooLarge},
		{"body too large", func(r *Receipt) {
			r.Body = json.RawMessage(`{"x":"` + pad(MaxReceiptBody) + `"}`)
		}, CodeTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := base()
			c.mod(&r)
			err := r.Validate()
			if got := ErrorCode(err); got != c.code {
				t.Fatalf("Validate() = %v, want code %q", err, c.code)
			}
		})
	}
}

func pad(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}

func TestChainHashCoversEveryField(t *testing.T) {
	r := Receipt{ID: "R-1", Tenant: "t", Type: ReceiptProgress, From: "a", To: "b", TaskID: "T-1", LeaseID: "l", Parents: []string{"p"}, Body: json.RawMessage(`{}`), DedupeKey: "d", Seq: 3}
	h := ChainHash(&r, "prev")
	mods := []func(*Receipt){
		func(r *Receipt) { r.ID = "R-2" }, func(r *Receipt) { r.Tenant = "u" }, func(r *Receipt) { r.Type = ReceiptEscalated },
		func(r *Receipt) { r.From = "x" }, func(r *Receipt) { r.To = "x" }, func(r *Receipt) { r.TaskID = "T-2" },
		func(r *Receipt) { r.LeaseID = "m" }, func(r *Receipt) { r.Parents = []string{"q"} }, func(r *Receipt) { r.Body = json.RawMessage(`{"a":1}`) },
		func(r *Receipt) { r.DedupeKey = "e" }, func(r *Receipt) { r.Seq = 4 }, func(r *Receipt) { r.CreatedAt = r.CreatedAt.Add(1000) },
		func(r *Receipt) { r.From, r.To = "ab", "" }, // length prefixes keep field boundaries
	}
	for i, m := range mods {
		c := r
		m(&c)
		if ChainHash(&c, "prev") == h {
			t.Errorf("modification %d does not change the hash", i)
		}
	}
	if ChainHash(&r, "other") == h {
		t.Error("the predecessor's hash is not covered")
	}
}

func TestWorkerID(t *testing.T) {
	for id, want := range map[string]bool{
		"worker.codegen-aws-i-1234567": true, "openrouter.001": true, "a.b.c": true,
		"openrouter-001": false, "": false, ".x": false, "x.": false, "a b.c": false,
	} {
		if got := ValidWorkerID(id); got != want {
			t.Errorf("ValidWorkerID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestIDsAreOrderedAndUnique(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i := 0; i < 10000; i++ {
		id := NewID(PrefixTask)
		if seen[id] || id <= prev || len(id) != len(PrefixTask)+26 {
			t.Fatalf("id %q after %q", id, prev)
		}
		seen[id] = true
		prev = id
	}
}

func FuzzReceiptValidate(f *testing.F) {
	f.Add("task.completed", `{"result_pointer":"x"}`, "R-1")
	f.Add("task.progress", `{}`, "")
	f.Add("task.failed", `{"artifacts":[1,2]}`, "R-1,R-2")
	f.Add("task.escalated", `[`, "R-1")
	f.Fuzz(func(t *testing.T, typ, body, parents string) {
		r := Receipt{Type: ReceiptType(typ), From: "a", To: "b", Body: json.RawMessage(body)}
		if parents != "" {
			r.Parents = splitComma(parents)
		}
		err := r.Validate()
		if err != nil {
			if ErrorCode(err) == CodeInternal {
				t.Fatalf("validation error without a code: %v", err)
			}
			return
		}
		// A valid receipt's body is compact JSON of at most the limit.
		if !json.Valid(r.Body) || len(r.Body) > MaxReceiptBody || len(r.Parents) > MaxParents {
			t.Fatalf("accepted an invalid receipt: %q", r.Body)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, r.Body); err != nil || !bytes.Equal(compact.Bytes(), r.Body) {
			t.Fatalf("accepted body %q is not compact (%q)", r.Body, compact.Bytes())
		}
		if r.Type.Terminal() && len(r.Parents) == 0 {
			t.Fatal("accepted a terminal receipt without parents")
		}
	})
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// TestTaskTypeDescriptionLimit: Normalize takes a description of
// MaxTaskTypeDescription characters (counted as characters, not bytes) and
// refuses a longer one with invalid_task_type.
func TestTaskTypeDescriptionLimit(t *testing.T) {
	tt := NewTaskType("d")
	tt.Description = strings.Repeat("é", MaxTaskTypeDescription)
	if err := tt.Normalize(); err != nil {
		t.Fatalf("a description of %d characters: %v", MaxTaskTypeDescription, err)
	}
	tt.Description += "x"
	if err := tt.Normalize(); !IsCode(err, CodeInvalidTaskType) {
		t.Fatalf("a description of %d characters: %v, want %s", MaxTaskTypeDescription+1, err, CodeInvalidTaskType)
	}
}
