package mail

import (
	"strings"
	"testing"
)

// TestEncodeSubjectLineLengths: a Subject header's lines stay within their
// limits: 76 characters a line that holds encoded words (RFC 2047), 998 any
// line (RFC 5322), "Subject: " included on the first.
func TestEncodeSubjectLineLengths(t *testing.T) {
	for _, s := range []string{
		strings.Repeat("é", 500),
		strings.Repeat("a", 989) + "é",
		strings.Repeat("x", 990),
		"=?utf-8?q?a=0D=0A?=",
		strings.Repeat("😀", 250),
	} {
		v := encodeSubject(s)
		for i, line := range strings.Split("Subject: "+v, "\r\n") {
			limit := 998
			if strings.Contains(line, "=?utf-8?b?") {
				limit = 76
			}
			if len(line) > limit {
				t.Errorf("subject of %d bytes: line %d is %d characters (limit %d): %.80q", len(s), i, len(line), limit, line)
			}
		}
	}
	if v := encodeSubject("Task Results - T-1"); v != "Task Results - T-1" {
		t.Errorf("a short ASCII subject is encoded: %q", v)
	}
}
