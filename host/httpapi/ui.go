package httpapi

import (
	"github.com/asyncgate/asyncgate/host/plugin"
	"github.com/asyncgate/asyncgate/host/ui"
)

// WithPluginInfo gives the dashboard's plugins page the loaded plugins
// (the same list GET /v1/admin/plugins shows).
func WithPluginInfo(fn func() (ready bool, list []plugin.Info)) Option {
	return func(s *Server) { s.pluginInfo = fn }
}

// WithPluginsPending makes /readyz answer 503 plugin_not_ready, naming the
// plugins, while fn returns any: plugins still in their first load after a
// start (see Server.readyz).
func WithPluginsPending(fn func() []string) Option {
	return func(s *Server) { s.pluginsPending = fn }
}

// uiRoutes mounts the operator dashboard at /ui. Its sampler stops when the
// server shuts down.
func (s *Server) uiRoutes() {
	u, err := ui.New(ui.Config{Engine: s.eng, Authenticate: s.authn.Authenticate, Plugins: s.pluginInfo,
		Version: s.cfg.Version, Logger: s.log, Context: s.drain})
	if err != nil {
		panic("httpapi: the dashboard's embedded templates do not parse: " + err.Error()) // a build defect
	}
	u.Mount(s.e)
}
