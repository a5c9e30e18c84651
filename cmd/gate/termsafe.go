package main

import (
	"bytes"
	"io"
	"strconv"
	"unicode/utf8"
)

// termSafe writes what the CLI prints with the control characters a
// terminal would act on made visible: C0 controls but newline and tab, DEL
// and the C1 controls (U+0080–U+009F) are written as \x1b, \u009b, ….
// The bidirectional embeddings, overrides and isolates (U+202A–U+202E,
// U+2066–U+2069) are written as \u202e, …: one in a summary would
// reverse what the terminal shows after it on the line (a file name, the
// next column, another principal's name).
// Task summaries, error and progress messages and receipt bodies are
// written by agents and workers: an escape sequence among them must not
// clear the operator's screen, retitle the window, rewrite earlier lines
// or plant a hyperlink. A result's payload, which the caller asked for as
// it is, is not written through it (remoteCtx.raw).
type termSafe struct {
	w    io.Writer
	tail []byte // an incomplete UTF-8 sequence the last Write ended with
}

func (t *termSafe) Write(p []byte) (int, error) {
	n := len(p)
	if len(t.tail) > 0 {
		p = append(t.tail, p...)
		t.tail = nil
	}
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				out = append(out, `\x`...)
				out = append(out, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		if !utf8.FullRune(p[i:]) {
			t.tail = append([]byte(nil), p[i:]...)
			break
		}
		r, size := utf8.DecodeRune(p[i:])
		if r >= 0x80 && r <= 0x9f || bidiControl(r) {
			out = append(out, `\u`...)
			if r < 0x1000 {
				out = append(out, "00"...)
			}
			out = strconv.AppendInt(out, int64(r), 16)
		} else {
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// inert is s with its control characters made visible, as termSafe writes
// them: for a line the CLI itself redraws with its own controls (written to
// remoteCtx.raw around it).
func inert(s string) string {
	var b bytes.Buffer
	_, _ = (&termSafe{w: &b}).Write([]byte(s))
	return b.String()
}

// bidiControl reports whether r is a bidirectional embedding, override or
// isolate (U+202A–U+202E, U+2066–U+2069).
func bidiControl(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}
