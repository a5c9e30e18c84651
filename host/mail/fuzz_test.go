package mail_test

import (
	"testing"

	"github.com/asyncgate/asyncgate/host/mail"
)

// FuzzParse: any bytes a mail server hands back parse or fail with an
// error, never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte("Subject: x\r\nMessage-ID: <a@b>\r\n\r\nhi"))
	f.Add([]byte("Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Transfer-Encoding: base64\r\n\r\naGk=\r\n--b\r\nContent-Disposition: attachment; filename=\"a.json\"\r\n\r\n{}\r\n--b--\r\n"))
	f.Add([]byte("Content-Transfer-Encoding: quoted-printable\r\n\r\n=3D=\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = mail.Parse(raw)
	})
}

// FuzzCheckAddress: an accepted address never carries a line break or a
// second address.
func FuzzCheckAddress(f *testing.F) {
	for _, s := range []string{"a@example.com", "a@b\r\nBcc: c@d.com", "A <a@b.com>", "a@b.com,c@d.com", "\"a b\"@c.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if mail.CheckAddress(s) != nil {
			return
		}
		for _, r := range s {
			if r == '\r' || r == '\n' || r == ',' || r == '<' || r == ' ' {
				t.Fatalf("accepted %q", s)
			}
		}
	})
}
