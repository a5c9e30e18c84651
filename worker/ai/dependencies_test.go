package ai

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

func TestDependencyContext(t *testing.T) {
	inline := func(s string) []byte {
		return []byte(`{"result_pointer":"inline:` + base64.StdEncoding.EncodeToString([]byte(s)) + `","summary":"short"}`)
	}
	deps := []worker.Dependency{
		{TaskID: "T-1", TaskType: "ai.chat", Status: "succeeded", Result: inline(`{"model":"model-a","answer":"the full answer of a"}`)},
		{TaskID: "T-2", TaskType: "ai.chat", Status: "succeeded", Result: inline(`{"answers":[{"model":"m1","answer":"one"},{"model":"m2","answer":"two"}]}`)},
		{TaskID: "T-3", TaskType: "other", Status: "succeeded", Result: []byte(`{"result_pointer":"file:abc","summary":"in a file"}`)},
		{TaskID: "T-4", TaskType: "ai.chat", Status: "dead_letter", Error: "provider down"},
		{TaskID: "T-5", TaskType: "ai.chat", Status: "succeeded", Result: []byte(`{"result_pointer":"file:def","summary":"long"}`)},
	}
	got := DependencyContext(deps, nil)
	for _, want := range []string{"Results of the 5 tasks", "[1] task T-1 (ai.chat, succeeded):\nthe full answer of a", "m1: one\nm2: two",
		"in a file (result at file:abc)", "[4] task T-4 (ai.chat, dead_letter):\ndid not succeed: provider down", "long (result at file:def)"} {
		if !strings.Contains(got, want) {
			t.Fatalf("context lacks %q:\n%s", want, got)
		}
	}
	// A payload the gate stored in a file is read through the lease.
	read := func(id string) ([]byte, error) {
		if id == "T-5" {
			return []byte(`{"model":"model-e","answer":"the answer too long to be inline"}`), nil
		}
		return nil, errors.New("404 not_found")
	}
	got = DependencyContext(deps, read)
	for _, want := range []string{"[5] task T-5 (ai.chat, succeeded):\nthe answer too long to be inline", "in a file (result at file:abc, not readable: 404 not_found)"} {
		if !strings.Contains(got, want) {
			t.Fatalf("context with reads lacks %q:\n%s", want, got)
		}
	}
	long := strings.Repeat("x", maxDependencyText*2)
	deps = make([]worker.Dependency, 20)
	for i := range deps {
		deps[i] = worker.Dependency{TaskID: "T", TaskType: "ai.chat", Status: "succeeded", Result: inline(`{"answer":"` + long + `"}`)}
	}
	if got := DependencyContext(deps, nil); len(got) > maxDependencyTotal+maxDependencyText+200 || !strings.Contains(got, "left out") {
		t.Fatalf("20 long answers make %d bytes", len(got))
	}
}
