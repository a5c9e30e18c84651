package host

import (
	"strings"
	"testing"
)

// TestIsID: the ids NewID makes are ids; anything else a client could send
// as a cursor is not.
func TestIsID(t *testing.T) {
	for _, p := range []string{PrefixWorkflow, PrefixSchedule} {
		id := NewID(p)
		if !IsID(p, id) {
			t.Fatalf("IsID(%q, %q) = false", p, id)
		}
		for _, bad := range []string{"", "garbage", p, id[:len(id)-1], id + "0", strings.ToLower(id),
			p + "8" + id[len(p)+1:], p + strings.Repeat("U", 26), "X-" + id[len(p):], id[:len(id)-1] + "'"} {
			if IsID(p, bad) {
				t.Fatalf("IsID(%q, %q) = true", p, bad)
			}
		}
	}
	if IsID(PrefixSchedule, NewID(PrefixWorkflow)) {
		t.Fatal("a workflow id passed as a schedule id")
	}
}
