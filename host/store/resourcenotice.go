package store

import (
	"strconv"
	"strings"
)

// ResourceNotifyTx is implemented by the write transactions of stores whose
// Notifier reaches other hosts (PostgreSQL): NotifyResourceEnded asks that,
// once the transaction commits, every other host's subscription receive a
// resource notice (ResourceNotice) saying that a lease on the tenant's
// resource ended, so the waiters parked there for it look again. Nothing is
// sent when the transaction does not commit.
type ResourceNotifyTx interface {
	NotifyResourceEnded(tenant, resource string)
}

// ResourceNoticePrefix begins a Notifier payload that is a resource notice
// rather than a tenant name; a tenant name holds no ':'.
const ResourceNoticePrefix = "resource:"

// maxNotice keeps a notice under PostgreSQL's 8000-byte payload limit.
const maxNotice = 7900

// ResourceNotice is the Notifier payload saying that a lease on resource of
// tenant ended. When the resource's name does not fit the payload, the
// notice names the tenant only (every resource of it may have changed).
func ResourceNotice(tenant, resource string) string {
	s := ResourceNoticePrefix + tenant + "\n" + resource
	if len(s) > maxNotice {
		return ResourceNoticePrefix + tenant + "\n"
	}
	return s
}

// ParseResourceNotice reads a payload made by ResourceNotice; ok is false
// for any other payload. resource is "" when the notice names the tenant only.
func ParseResourceNotice(payload string) (tenant, resource string, ok bool) {
	rest, ok := strings.CutPrefix(payload, ResourceNoticePrefix)
	if !ok {
		return "", "", false
	}
	tenant, resource, ok = strings.Cut(rest, "\n")
	if !ok || tenant == "" {
		return "", "", false
	}
	return tenant, resource, true
}

// ReofferNoticePrefix begins a Notifier payload saying that a release made
// queued tasks of a type available again (ReofferNotice).
const ReofferNoticePrefix = "reoffered:"

// ReofferNotice is the Notifier payload saying that n tasks of taskType in
// tenant, stepped aside for resources, were made available by the end of
// what blocked them. A store whose ReofferWaitingTasks learns the tasks only
// as its transaction commits (PostgreSQL runs the statement in the COMMIT's
// round trip) sends it from the statement itself, and delivers it to every
// host's subscription, the sender's own included: the sender's engine does
// not know which types to wake.
func ReofferNotice(tenant, taskType string, n int) string {
	return ReofferNoticePrefix + tenant + "\n" + taskType + "\n" + strconv.Itoa(n)
}

// ParseReofferNotice reads a payload made by ReofferNotice; ok is false for
// any other payload.
func ParseReofferNotice(payload string) (tenant, taskType string, n int, ok bool) {
	rest, ok := strings.CutPrefix(payload, ReofferNoticePrefix)
	if !ok {
		return "", "", 0, false
	}
	tenant, rest, ok = strings.Cut(rest, "\n")
	if !ok || tenant == "" {
		return "", "", 0, false
	}
	i := strings.LastIndexByte(rest, '\n')
	if i <= 0 {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 1 {
		return "", "", 0, false
	}
	return tenant, rest[:i], n, true
}

// DeferredReofferTx is implemented by write transactions whose
// ReofferWaitingTasks makes the tasks available as the transaction commits
// and so returns no task types (PostgreSQL). The engine then wakes the
// long-polling workers of the tasks it stepped aside itself on the freed
// resources, and the store's ReofferNotice wakes those of every host that
// subscribes.
type DeferredReofferTx interface {
	ReofferDeferred()
}

// KeysRevokedNotice is the Notifier payload saying that an API key was
// revoked: every host drops the keys it cached (auth.Authenticator), so a
// revocation on one host, or by `gate keys revoke` on the database, takes
// effect on all of them at once instead of after their cache time.
const KeysRevokedNotice = "keys-revoked:"
