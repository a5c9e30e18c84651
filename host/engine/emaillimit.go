package engine

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// Default send_email budgets, per hour (EmailLimit).
const (
	DefaultEmailsPerPrincipalHour = 100
	DefaultEmailsPerTenantHour    = 1000
)

// EmailLimit bounds how many emails send_email queues per hour, for each
// principal and for each tenant: every message (and its archive copy) goes
// through the gate's one mail server and lands in its one mailbox, which
// results are read back from, so one principal sending without end would
// crowd out every tenant's mail. Zero is the default; a negative value
// means no bound. The budgets are counted by each host in memory: a
// restart starts them afresh, and several hosts each allow as much.
type EmailLimit struct {
	PerPrincipalPerHour int `json:"per_principal_per_hour,omitempty"`
	PerTenantPerHour    int `json:"per_tenant_per_hour,omitempty"`
}

// rates returns the per-principal and per-tenant budgets, 0 for none.
func (l EmailLimit) rates() (principal, tenant int) {
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return pick(l.PerPrincipalPerHour, DefaultEmailsPerPrincipalHour), pick(l.PerTenantPerHour, DefaultEmailsPerTenantHour)
}

// maxBuckets bounds the buckets kept; past it, full ones (which say nothing
// a missing one does not) are dropped.
const maxBuckets = 10000

// emailBudget is a token bucket per principal and per tenant: each holds up
// to its hour's budget and refills at that rate, so a burst of the whole
// budget is allowed and then one message every hour/budget.
type emailBudget struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// level returns b's tokens at now, of capacity per, refilled per hour.
func (b *bucket) level(now time.Time, per int) float64 {
	return math.Min(float64(per), b.tokens+now.Sub(b.at).Hours()*float64(per))
}

// take spends one message of tenant's and of principal's budgets at now,
// or spends nothing and returns a quota_exceeded error naming the budget
// spent and when the next message is allowed.
func (eb *emailBudget) take(lim EmailLimit, tenant, principal string, now time.Time) error {
	perP, perT := lim.rates()
	type want struct {
		key, what, field string
		per              int
	}
	wants := []want{
		{"p\x00" + tenant + "\x00" + principal, principal, "per_principal_per_hour", perP},
		{"t\x00" + tenant, "tenant " + tenant, "per_tenant_per_hour", perT},
	}
	eb.mu.Lock()
	defer eb.mu.Unlock()
	if eb.buckets == nil {
		eb.buckets = map[string]*bucket{}
	}
	for _, w := range wants {
		if w.per <= 0 {
			continue
		}
		if b := eb.buckets[w.key]; b != nil {
			if lvl := b.level(now, w.per); lvl < 1 {
				wait := time.Duration((1 - lvl) / float64(w.per) * float64(time.Hour))
				return host.Errorf(host.CodeQuotaExceeded, "%s has sent the %d emails an hour allows (mail.send_limit.%s); the next is allowed in %s",
					w.what, w.per, w.field, fmt.Sprint(max(wait.Round(time.Second), time.Second))).Wait(wait)
			}
		}
	}
	if len(eb.buckets) >= maxBuckets {
		for k, b := range eb.buckets {
			per := perT
			if k[0] == 'p' {
				per = perP
			}
			if per <= 0 || b.level(now, per) >= float64(per) {
				delete(eb.buckets, k)
			}
		}
	}
	for _, w := range wants {
		if w.per <= 0 {
			continue
		}
		b := eb.buckets[w.key]
		if b == nil {
			b = &bucket{tokens: float64(w.per), at: now}
			eb.buckets[w.key] = b
		}
		b.tokens, b.at = b.level(now, w.per)-1, now
	}
	return nil
}

// refund gives back the message take spent for tenant and principal at
// now, when nothing was queued after all (the store refused the write).
func (eb *emailBudget) refund(lim EmailLimit, tenant, principal string, now time.Time) {
	perP, perT := lim.rates()
	eb.mu.Lock()
	defer eb.mu.Unlock()
	for key, per := range map[string]int{"p\x00" + tenant + "\x00" + principal: perP, "t\x00" + tenant: perT} {
		if b := eb.buckets[key]; b != nil && per > 0 {
			b.tokens, b.at = math.Min(float64(per), b.level(now, per)+1), now
		}
	}
}
