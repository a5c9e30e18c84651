package store

import (
	"context"
	"slices"
)

// StateRange is one range of a driver's (tenant, state, task_type, seq)
// index that a list by state merges: the tasks of one state and one type.
type StateRange struct {
	State, Type string
}

// StateRanges returns the ranges a list by state of f merges, one per state
// and type, states and types in f's order without repeats. With no types
// in f, the types of each state come from typesIn (the driver reads them
// from the same index). ok is false when there would be more than bound
// ranges: the driver then lists another way. No ranges with ok true means
// the page is empty.
func StateRanges(ctx context.Context, f TaskFilter, bound int, typesIn func(ctx context.Context, state string) ([]string, error)) (rs []StateRange, ok bool, err error) {
	given := Distinct(f.Types)
	for _, st := range Distinct(f.States) {
		types := given
		if len(types) == 0 {
			if types, err = typesIn(ctx, string(st)); err != nil {
				return nil, false, err
			}
		}
		for _, ty := range types {
			rs = append(rs, StateRange{State: string(st), Type: ty})
		}
		if len(rs) > bound {
			return nil, false, nil
		}
	}
	return rs, true, nil
}

// Distinct returns xs without repeats, in first-seen order.
func Distinct[T comparable](xs []T) []T {
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
