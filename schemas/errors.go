package schemas

import (
	"errors"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// FlattenError turns a jsonschema validation error into one readable line:
// at most three "location: problem" parts, sorted (the validator walks
// properties in map order), without the "doesn't validate with" wrappers.
// Other errors are returned as they are.
func FlattenError(err error) error {
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	var parts []string
	for _, u := range ve.BasicOutput().Errors {
		if u.Error == "" || strings.HasPrefix(u.Error, "doesn't validate with") {
			continue
		}
		loc := u.InstanceLocation
		if loc == "" {
			loc = "/"
		}
		parts = append(parts, loc+": "+u.Error)
	}
	sort.Strings(parts)
	if len(parts) > 3 {
		parts = parts[:3]
	}
	if len(parts) == 0 {
		return errors.New(ve.Message)
	}
	return errors.New(strings.Join(parts, "; "))
}
