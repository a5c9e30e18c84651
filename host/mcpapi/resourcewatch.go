package mcpapi

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
)

// ResourceLeaseURIPrefix starts the URI of a leased resource's holders:
// asyncgate://resource-leases/{resource}, the resource name as it is or
// path-escaped ("FILE:/a/b.go" is asyncgate://resource-leases/FILE:/a/b.go
// or asyncgate://resource-leases/FILE:%2Fa%2Fb.go).
// Subscribing to it (resources/subscribe) sends
// notifications/resources/updated whenever a lease on the resource ends (a
// release, an expiry, a revocation or an ended session), on any gate host:
// the moment to acquire it again.
const ResourceLeaseURIPrefix = "asyncgate://resource-leases/"

// resourceLeaseURI returns the normalized resource name of a
// asyncgate://resource-leases/{resource} URI.
func resourceLeaseURI(uri string) (string, bool, error) {
	rest, ok := strings.CutPrefix(uri, ResourceLeaseURIPrefix)
	if !ok {
		return "", false, nil
	}
	name, err := url.PathUnescape(rest)
	if err != nil || name == "" {
		return "", true, host.Errorf(host.CodeBadRequest, "want %s{resource}, the resource name path-escaped", ResourceLeaseURIPrefix)
	}
	n, err := host.NormalizeResource(name)
	if err != nil {
		return "", true, err
	}
	return n, true, nil
}

// resourceLeaseResources registers the leased-resource template.
func (s *Server) resourceLeaseResources() {
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(ResourceLeaseURIPrefix+"{+resource}", "leased resource",
		mcp.WithTemplateDescription("Who holds a resource now (as list_resource_holders answers). Subscribe to it (resources/subscribe) to hear when a lease on it ends: the moment to acquire it again instead of polling."),
		mcp.WithTemplateMIMEType("application/json")),
		s.readTemplate)
}

func (s *Server) readResourceHolders(ctx context.Context, a engine.Actor, uri string) ([]mcp.ResourceContents, error) {
	name, ok, err := resourceLeaseURI(uri)
	if !ok {
		err = host.Errorf(host.CodeBadRequest, "want %s{resource}", ResourceLeaseURIPrefix)
	}
	if err != nil {
		return nil, err
	}
	res, err := s.eng.ResourceHolders(ctx, a, []string{name})
	if err != nil {
		return nil, err
	}
	return jsonResource(uri, res)
}

// MaxSubscriptions caps the resources one session subscribes to at once
// (tasks and leased resources together); a subscription over it is refused
// with quota_exceeded until the session unsubscribes from another.
const MaxSubscriptions = 256

// addSubscription records uri among sess's subscriptions, refusing a new one
// over MaxSubscriptions. It reports whether uri was subscribed already. The
// caller holds sess.mu.
func addSubscription(sess *session, uri string) (bool, *rpcError) {
	if sess.subs == nil {
		sess.subs = map[string]bool{}
	}
	if sess.subs[uri] {
		return true, nil
	}
	if len(sess.subs) >= MaxSubscriptions {
		return false, errFor(host.Errorf(host.CodeQuotaExceeded, "a session subscribes to at most %d resources at once; unsubscribe from one first", MaxSubscriptions))
	}
	sess.subs[uri] = true
	return false, nil
}

// unsubscribe drops uri from sess's subscriptions and ends its resource
// watch, if any.
func unsubscribe(sess *session, uri string) {
	sess.mu.Lock()
	delete(sess.subs, uri)
	stop := sess.watches[uri]
	delete(sess.watches, uri)
	sess.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// subscribeResource subscribes sess to a leased resource: one watch per
// subscribed URI, which ends when the session unsubscribes, ends, or the
// server shuts down.
func (s *Server) subscribeResource(sess *session, uri, name string) (any, *rpcError) {
	sess.mu.Lock()
	already, rerr := addSubscription(sess, uri)
	if rerr != nil || already && sess.watches[uri] != nil {
		sess.mu.Unlock()
		return struct{}{}, rerr
	}
	ctx, stop := context.WithCancel(sess.gone)
	if sess.watches == nil {
		sess.watches = map[string]context.CancelFunc{}
	}
	sess.watches[uri] = stop
	sess.mu.Unlock()
	tenant := sess.actor.Tenant
	s.resourceWatches.Add(1)
	go func() {
		defer s.resourceWatches.Add(-1)
		defer stop()
		for {
			// Registered before the previous notification went out, so a
			// release meanwhile is not missed.
			ch, unwatch := s.eng.WatchResources(tenant, []string{name})
			select {
			case <-ch:
				unwatch()
				if ctx.Err() != nil {
					return
				}
				s.send(sess, "notifications/resources/updated", map[string]any{"uri": uri})
			case <-ctx.Done():
				unwatch()
				return
			case <-s.drain.Done():
				unwatch()
				return
			}
		}
	}()
	return struct{}{}, nil
}

// subscribeURIError explains which URIs may be subscribed to.
func subscribeURIError() *rpcError {
	return &rpcError{Code: rpcInvalidParams, Message: fmt.Sprintf("subscribe to %s{task_id} or %s{resource}", TaskURIPrefix, ResourceLeaseURIPrefix)}
}
