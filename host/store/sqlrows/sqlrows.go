// Package sqlrows names each table's columns once and maps its rows to and
// from the host and store types, for both SQL drivers (host/sqlite and
// host/postgres): a column added to a table is added here, once, and both
// drivers' reads, inserts and updates carry it.
//
// For each table there is a column list for SELECT (…Columns), a Scan
// function that reads one row of that list into the domain type, and, where
// the drivers write rows, the insert or update column list with a function
// that returns the row's values in the same order. The values are of types
// both drivers bind unchanged: strings, int, int64, bool, *int64, *float64
// and *string (nil for NULL). Times are microseconds since the Unix epoch
// (int64) in both databases.
//
// What differs between the dialects stays in the drivers: placeholders ($1
// against ?), locking (FOR UPDATE SKIP LOCKED), upserts, PostgreSQL's array
// parameters for rows written behind, and the statements themselves.
package sqlrows

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// Scanner is one row of a result: *sql.Row, *sql.Rows, pgx.Row and pgx.Rows
// all are.
type Scanner interface {
	Scan(dest ...any) error
}

// US is t as the columns keep a time: microseconds since the Unix epoch.
func US(t time.Time) int64 { return t.UnixMicro() }

// FromUS is the time a column of microseconds holds, in UTC.
func FromUS(v int64) time.Time { return time.UnixMicro(v).UTC() }

// NUS is US for a time that may be absent (NULL).
func NUS(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	v := t.UnixMicro()
	return &v
}

// FromNUS is FromUS for a column that may be NULL.
func FromNUS(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := FromUS(*v)
	return &t
}

// ResultJSON is a task's result as its column keeps it: JSON, or NULL for
// none.
func ResultJSON(r *host.Result) (*string, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

// Prefixed is cols (a column list) with each column qualified by alias, for
// a query that joins the table: Prefixed("t", "a, b") is "t.a, t.b".
func Prefixed(alias, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// Names is a column list as its column names.
func Names(cols string) []string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = strings.TrimSpace(c)
	}
	return parts
}
