package mcpapi

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
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

// resubscribeCheck is how often a resource watch looks whether its session
// still subscribes when nothing happens on the resource.
const resubscribeCheck = 30 * time.Second

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
		s.readResourceHolders)
}

func (s *Server) readResourceHolders(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	a, ok := auth.ActorFromContext(ctx)
	if !ok {
		return nil, host.Errorf(host.CodeUnauthorized, "no caller identity: connect with an API key")
	}
	name, ok, err := resourceLeaseURI(req.Params.URI)
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
	return jsonResource(req.Params.URI, res)
}

// subscribeResource subscribes sess to a leased resource: one watch per
// subscription, which ends when the session unsubscribes, ends, or the
// server shuts down.
func (s *Server) subscribeResource(sess *session, uri, name string) (any, *rpcError) {
	sess.mu.Lock()
	if sess.subs == nil {
		sess.subs = map[string]bool{}
	}
	already := sess.subs[uri]
	sess.subs[uri] = true
	sess.mu.Unlock()
	if already {
		return struct{}{}, nil
	}
	subscribed := func() bool {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		return sess.subs[uri]
	}
	tenant := sess.actor.Tenant
	go func() {
		tick := time.NewTicker(resubscribeCheck)
		defer tick.Stop()
		for {
			// Registered before the previous notification went out, so a
			// release meanwhile is not missed.
			ch, stop := s.eng.WatchResources(tenant, []string{name})
			select {
			case <-ch:
				stop()
				if !subscribed() {
					return
				}
				s.send(sess, "notifications/resources/updated", map[string]any{"uri": uri})
			case <-tick.C:
				stop()
				if !subscribed() {
					return
				}
			case <-sess.gone.Done():
				stop()
				return
			case <-s.drain.Done():
				stop()
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
