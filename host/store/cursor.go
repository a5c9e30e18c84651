package store

import (
	"strconv"

	"github.com/asyncgate/asyncgate/host"
)

// ParseCursor reads a listing cursor: the decimal sequence number of the last
// item of the previous page, or "" for the first page. Cursors come from
// clients, so anything else is a bad_request error.
func ParseCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(c, 10, 64)
	if err != nil || v < 0 {
		return 0, host.Errorf(host.CodeBadRequest, "bad cursor %q", c)
	}
	return v, nil
}

// Page trims a listing that asked the database for limit+1 rows: when more
// than limit came back, it keeps the first limit and returns the cursor of the
// next page, the sequence number of the last item kept (seqAt(limit-1));
// otherwise the listing is the last page and the cursor is "".
func Page[T any](items []T, limit int, seqAt func(i int) int64) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	return items[:limit], strconv.FormatInt(seqAt(limit-1), 10)
}
