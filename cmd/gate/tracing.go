package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/asyncgate/asyncgate/host/tracing"
)

// startTracing turns on span export when the config's otlp_endpoint or the
// standard OTEL_* variables ask for it (host/tracing), and returns what
// flushes the spans still buffered at shutdown. Off, nothing is installed.
func startTracing(ctx context.Context, cfg serveConfig, log *slog.Logger) (stop func(), err error) {
	tcfg := tracing.Config{Endpoint: cfg.OTLPEndpoint, ServiceName: "asyncgate", Version: buildVersion(), Getenv: os.Getenv}
	shutdown, on, err := tracing.Start(ctx, tcfg)
	if err != nil {
		return func() {}, err
	}
	if !on {
		return func() {}, nil
	}
	where := cfg.OTLPEndpoint
	if where == "" {
		where = "from OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	log.Info("tracing on: spans go to an OTLP collector", "endpoint", where)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flushing the last spans", "err", err)
		}
	}, nil
}
