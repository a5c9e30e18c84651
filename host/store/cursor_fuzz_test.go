package store

import (
	"strconv"
	"testing"

	"github.com/asyncgate/asyncgate/host"
)

// FuzzParseCursor feeds arbitrary cursors (they come from clients) to the
// parser. It must never panic; it accepts exactly the decimal non-negative
// sequence numbers it hands out (and "" for the start), and refuses anything
// else as bad_request.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", "0", "42", "-1", "9223372036854775808", "1e3", " 7", "0x10", "+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, c string) {
		v, err := ParseCursor(c)
		if err != nil {
			if host.ErrorCode(err) != host.CodeBadRequest {
				t.Fatalf("cursor %q: error %v is not bad_request", c, err)
			}
			return
		}
		if v < 0 {
			t.Fatalf("cursor %q parsed to negative %d", c, v)
		}
		if c == "" {
			if v != 0 {
				t.Fatalf("empty cursor parsed to %d", v)
			}
			return
		}
		if back, _ := ParseCursor(strconv.FormatInt(v, 10)); back != v {
			t.Fatalf("cursor %q: %d does not round-trip", c, v)
		}
	})
}

// TestPage checks the trimming of a limit+1 listing and its next cursor.
func TestPage(t *testing.T) {
	seqs := []int64{10, 20, 30}
	at := func(i int) int64 { return seqs[i] }
	if got, cur := Page([]string{"a", "b", "c"}, 2, at); len(got) != 2 || got[1] != "b" || cur != "20" {
		t.Fatalf("a full page: %v %q", got, cur)
	}
	if got, cur := Page([]string{"a", "b"}, 2, at); len(got) != 2 || cur != "" {
		t.Fatalf("the last page: %v %q", got, cur)
	}
	if got, cur := Page([]string{}, 2, at); len(got) != 0 || cur != "" {
		t.Fatalf("an empty page: %v %q", got, cur)
	}
}
