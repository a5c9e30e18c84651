package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A schema a newer gate migrated past this gate's last migration is refused
// at open, with a message naming both versions, rather than served by code
// that does not know its tables.
func TestOpenRefusesANewerSchema(t *testing.T) {
	schema := newSchema(t)
	openIn(t, schema, Options{}).Close()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+` (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	st, err := Open(ctx, testURL(), Options{Schema: schema})
	if err == nil {
		st.Close()
		t.Fatal("a schema at version 9999 was opened")
	}
	if !strings.Contains(err.Error(), "version 9999") || !strings.Contains(err.Error(), "newer gate") {
		t.Fatalf("refusal %q does not name the versions", err)
	}
}
