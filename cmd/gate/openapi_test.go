package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/httpapi"
	"github.com/asyncgate/asyncgate/host/mcpapi"
	"github.com/asyncgate/asyncgate/host/sqlite"
)

// TestOpenAPICoversEveryRoute builds the gate's HTTP server as serve does,
// with every door mounted (plugins, MCP), and fails when a registered route
// lacks an operation in the OpenAPI document or the reverse. Paths outside
// the JSON API are listed once, in openapi.Excluded.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(filepath.Join(dir, "gate.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := defaultServeConfig()
	cfg.Data, cfg.WasmCacheDir = dir, wasmCache
	plugins, err := startPlugins(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer plugins.Close()
	eng, err := engine.New(engine.Config{Store: st, Logger: log, Plugins: plugins.Plugins})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	mcpSrv, err := mcpapi.New(mcpapi.Config{Engine: eng, Logger: log, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer mcpSrv.Close()
	srv, err := httpapi.New(httpapi.Config{Engine: eng, Logger: log, Metrics: httpapi.NewMetrics()}, plugins.Routes, httpapi.WithRoutes(mcpSrv.Mount))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	missing, extra := srv.RouteDocDiff()
	if len(missing) > 0 {
		t.Errorf("routes the OpenAPI document lacks (register them with openapi.Add next to the routes): %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("operations in the OpenAPI document without a route: %v", extra)
	}
}
