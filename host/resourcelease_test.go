package host

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestNormalizeResource(t *testing.T) {
	for in, want := range map[string]string{
		"FILE:/a/b.go":          "FILE:/a/b.go",
		" file:/a/./c/../b.go ": "FILE:/a/b.go",
		"repo:github.com/a/b":   "REPO:github.com/a/b",
		"plain name":            "plain name",
		"1x:y":                  "1x:y", // not a kind: starts with a digit
		"http://x/y":            "HTTP://x/y",
		// Each round of cleaning uncovers another "./" behind a space.
		"FILE:" + strings.Repeat("./ ", 12) + "x": "FILE:x",
		"FILE:/caf\u00e9":                         "FILE:/caf\u00e9",
		"FILE:/cafe\u0301":                        "FILE:/caf\u00e9", // composed (NFC)
	} {
		got, err := NormalizeResource(in)
		if err != nil || got != want {
			t.Errorf("NormalizeResource(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func FuzzNormalizeResource(f *testing.F) {
	for _, s := range []string{"FILE:/a", "", " x ", "a\x00", "REPO:", strings.Repeat("y", 600), "file:../../..", "FILE:" + strings.Repeat("./ ", 12) + "x", "FILE:cafe\u0301", "FILE: \u0301", "e/./\u0301", "x:\u0301"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := NormalizeResource(s)
		if err != nil {
			if ErrorCode(err) != CodeInvalidResource || ErrorDetail(err) == "" {
				t.Fatalf("%q: error %v without the code or a rule", s, err)
			}
			return
		}
		if got == "" || len(got) > MaxResourceLen || !utf8.ValidString(got) || !norm.NFC.IsNormalString(got) {
			t.Fatalf("%q normalized to %q", s, got)
		}
		again, err := NormalizeResource(got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", s, got, again, err)
		}
	})
}

// A task's intents stored before names were put in NFC come back in NFC
// (and merged, should two spellings of one name now meet), so the task
// locks what a name typed today locks.
func TestStoredIntentsReadInNFC(t *testing.T) {
	got, err := IntentsFromJSON(`[{"resource":"FILE:/cafe\u0301","predicate":"READS"},{"resource":"FILE:/caf\u00e9","predicate":"MUTATES"}]`)
	if err != nil || len(got) != 1 || got[0].Resource != "FILE:/caf\u00e9" || got[0].Predicate != PredicateMutates {
		t.Fatalf("stored intents read as %+v, %v; want one MUTATES FILE:/caf\u00e9", got, err)
	}
}
