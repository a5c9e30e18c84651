package store

import "testing"

// TestReofferNotice: a re-offer notice reads back as it was made, and is
// told apart from a tenant name, a resource notice and a malformed payload.
func TestReofferNotice(t *testing.T) {
	tenant, typ, n, ok := ParseReofferNotice(ReofferNotice("acme", "edit.files", 3))
	if !ok || tenant != "acme" || typ != "edit.files" || n != 3 {
		t.Fatalf("round trip: %q %q %d %v", tenant, typ, n, ok)
	}
	// The PostgreSQL statement builds the payload itself: prefix, tenant,
	// newline, type, newline, count.
	if tenant, typ, n, ok := ParseReofferNotice("reoffered:acme\nedit\n12"); !ok || tenant != "acme" || typ != "edit" || n != 12 {
		t.Fatalf("the statement's payload: %q %q %d %v", tenant, typ, n, ok)
	}
	for _, p := range []string{"acme", ResourceNotice("acme", "FILE:/a"), "reoffered:", "reoffered:acme", "reoffered:acme\nedit",
		"reoffered:\nedit\n1", "reoffered:acme\n\n1", "reoffered:acme\nedit\n0", "reoffered:acme\nedit\nx"} {
		if _, _, _, ok := ParseReofferNotice(p); ok {
			t.Errorf("%q read as a re-offer notice", p)
		}
	}
	if _, _, ok := ParseResourceNotice(ReofferNotice("acme", "edit", 1)); ok {
		t.Error("a re-offer notice read as a resource notice")
	}
}
