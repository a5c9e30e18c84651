package host

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestErrorfClipsLongDetail: a detail quoting a huge input (a 900,000
// character task id) is cut to MaxErrorDetail bytes at a character
// boundary and says how much was cut; a short one is left whole.
func TestErrorfClipsLongDetail(t *testing.T) {
	huge := "T-" + strings.Repeat("é", 450000)
	e := Errorf(CodeNotFound, "no task %q", huge)
	if len(e.Detail) > MaxErrorDetail || !utf8.ValidString(e.Detail) ||
		!strings.HasPrefix(e.Detail, `no task "T-éé`) || !strings.HasSuffix(e.Detail, "bytes more not shown)") {
		t.Fatalf("detail of %d bytes (valid UTF-8 %v): %.80q … %q", len(e.Detail), utf8.ValidString(e.Detail), e.Detail, e.Detail[max(0, len(e.Detail)-40):])
	}
	if e := Errorf(CodeNotFound, "no task %q", "T-1"); e.Detail != `no task "T-1"` {
		t.Fatalf("a short detail changed: %q", e.Detail)
	}
}
