package store

import "strings"

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
