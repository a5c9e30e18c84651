package ui

import (
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host/store"
)

// Bounds of the obligations page's summary: how many principals it counts
// for, and how far it counts for each before it says "100+".
const (
	summaryPrincipals = 50
	summaryCount      = 100
)

// obligationCount is one principal's line of the obligations summary.
type obligationCount struct {
	Principal  string
	Owes, Owed string
	Any        bool
}

// obligationsSummary counts, for each principal with a key in the tenant,
// the open obligations it owes and is owed (from the obligation index, at
// most summaryCount each), those with any first.
func (u *UI) obligationsSummary(c echo.Context, principals []string) ([]obligationCount, bool, error) {
	ctx := c.Request().Context()
	actor := sessionOf(c).actor()
	more := len(principals) > summaryPrincipals
	if more {
		principals = principals[:summaryPrincipals]
	}
	count := func(p, role string) (string, int, error) {
		obs, cur, err := u.eng.OpenObligations(ctx, actor, store.ObligationFilter{Principal: p, Role: role, Limit: summaryCount})
		if err != nil {
			return "", 0, err
		}
		if cur != "" {
			return strconv.Itoa(summaryCount) + "+", len(obs), nil
		}
		return strconv.Itoa(len(obs)), len(obs), nil
	}
	var busy, idle []obligationCount
	for _, p := range principals {
		owes, n1, err := count(p, "obligor")
		if err != nil {
			return nil, false, err
		}
		owed, n2, err := count(p, "obligee")
		if err != nil {
			return nil, false, err
		}
		row := obligationCount{Principal: p, Owes: owes, Owed: owed, Any: n1+n2 > 0}
		if row.Any {
			busy = append(busy, row)
		} else {
			idle = append(idle, row)
		}
	}
	return append(busy, idle...), more, nil
}
