package engine

import "github.com/asyncgate/asyncgate/host"

// Page sizes. Every list the gate answers takes a limit in 1..its maximum
// (MaxPage unless the list says otherwise) and gives DefaultPage items when
// none is asked for (0 here: the doors pass 0 for an absent limit). A limit
// outside the range is refused, never cut or replaced by the default, so
// every door answers alike.
const (
	// DefaultPage is a list's page size when the caller names none.
	DefaultPage = 100
	// MaxPage is most lists' largest page.
	MaxPage = 500
	// MaxLongPage is the largest page of the lists that take more: a task's
	// progress, the outbox status and the resource lease lists.
	MaxLongPage = 1000
)

// pageSize returns limit, or DefaultPage for 0 (none asked for); a limit
// below 0 or above max is a bad_request naming the range.
func pageSize(limit, max int) (int, error) {
	return inRange("limit", limit, max, DefaultPage)
}

// inRange returns n, or def for 0 (none asked for); n below 0 or above max
// is a bad_request "name must be 1..max, got n".
func inRange(name string, n, max, def int) (int, error) {
	if n == 0 {
		return def, nil
	}
	if n < 0 || n > max {
		return 0, host.Errorf(host.CodeBadRequest, "%s must be 1..%d, got %d", name, max, n)
	}
	return n, nil
}
