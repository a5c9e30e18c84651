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
		// Compatibility forms fold (NFKC), in the kind and in the name.
		"\uff26\uff29\uff2c\uff25\uff1a/a.go": "FILE:/a.go", // ＦＩＬＥ：
		"file\uff1a/a\uff0fb":                 "FILE:/a/b",  // full-width colon and solidus
		"FILE:/\ufb01le":                      "FILE:/file", // the ligature ﬁ
		"FILE:/a/\u2025/b":                    "FILE:/b",    // "‥" is "..": cleaned as one
		// One script per word; Latin may go with Han, kana and Hangul.
		"FILE:/docs/\u0434\u043e\u043a.txt":     "FILE:/docs/\u0434\u043e\u043a.txt", // док.txt
		"REPO:\u6771\u4eac\u30bf\u30ef\u30fcv2": "REPO:\u6771\u4eac\u30bf\u30ef\u30fcv2",
		"FILE:/caf\u00e9-\u03b1\u03b2":          "FILE:/caf\u00e9-\u03b1\u03b2", // Greek in a word of its own
	} {
		got, err := NormalizeResource(in)
		if err != nil || got != want {
			t.Errorf("NormalizeResource(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestLookAlikeNamesAreRefused (issue 37 item 6): names that look like
// another but are not — invisible characters, bidi controls, a word mixing
// scripts — are refused with invalid_resource.
func TestLookAlikeNamesAreRefused(t *testing.T) {
	for _, s := range []string{
		"FILE:/a\u200b.go",     // zero-width space
		"FILE:/a\u200d.go",     // zero-width joiner
		"FILE:/\u202egpj.exe",  // right-to-left override
		"FILE:/a\u2066b\u2069", // isolates
		"FILE:/a\ufe0f.go",     // variation selector
		"FILE:/a\u00ad.go",     // soft hyphen
		"FILE:/a\ufeff.go",     // byte order mark
		"FILE:/a\u2028b",       // line separator
		"FILE:/\ue000",         // private use
		"FILE:/p\u0430ypal.go", // Cyrillic а in a Latin word
		"REPO:\u0440ython",     // Cyrillic р
		"FILE:/\u03bfpen.go",   // Greek ο
		"FILE:/a\u0661",        // an Arabic-Indic digit in a Latin word
		"\u0191ILE:/a\u0430",   // a mixed word in the name of no kind
	} {
		if got, err := NormalizeResource(s); !IsCode(err, CodeInvalidResource) {
			t.Errorf("NormalizeResource(%+q) = %q, %v; want invalid_resource", s, got, err)
		}
	}
}

// Stored names today's rules refuse keep their stored spelling, so a task
// queued before still locks what it locked; names the rules now fold are
// read in today's form.
func TestStoredIntentsKeepWorking(t *testing.T) {
	got := NormalizeStoredIntents([]ResourceIntent{{Resource: "FILE:/p\u0430ypal", Predicate: "READS"},
		{Resource: "\uff26\uff29\uff2c\uff25\uff1a/a", Predicate: "READS"}, {Resource: "FILE:/a", Predicate: "MUTATES"}})
	if len(got) != 2 || got[0].Resource != "FILE:/a" || got[0].Predicate != PredicateMutates || got[1].Resource != "FILE:/p\u0430ypal" {
		t.Fatalf("stored intents read as %+v", got)
	}
}

func FuzzNormalizeResource(f *testing.F) {
	for _, s := range []string{"FILE:/a", "", " x ", "a\x00", "REPO:", strings.Repeat("y", 600), "file:../../..", "FILE:" + strings.Repeat("./ ", 12) + "x", "FILE:cafe\u0301", "FILE: \u0301", "e/./\u0301", "x:\u0301",
		"\uff26\uff29\uff2c\uff25\uff1a/a", "FILE:/a\u200b", "FILE:/p\u0430ypal", "FILE:/a/\u2025/b", "x\uff1a \u0301"} {
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
		if got == "" || len(got) > MaxResourceLen || !utf8.ValidString(got) || !norm.NFKC.IsNormalString(got) {
			t.Fatalf("%q normalized to %q", s, got)
		}
		for _, r := range got {
			if invisible(r) {
				t.Fatalf("%q normalized to %q, which holds %U", s, got, r)
			}
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
