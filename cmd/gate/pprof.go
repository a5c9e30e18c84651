package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// checkPprofListen accepts an empty address (profiling off) or a loopback
// one: the profiles show the gate's code, memory and goroutines to whoever
// asks, without a key, so they are never offered beyond this machine.
func checkPprofListen(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--pprof-listen (pprof_listen) %q: %v (want host:port)", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--pprof-listen (pprof_listen) %q: not a loopback address; the profiling endpoints answer without a key, so they listen on 127.0.0.1, [::1] or localhost only", addr)
}

// servePprof binds addr and serves /debug/pprof/ on it until the returned
// function is called. Its mux holds nothing else: the gate's routes and keys
// stay on --listen.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	if err := checkPprofListen(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No write timeout: a CPU profile or trace answers after the seconds it
	// was asked for.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("profiling endpoints stopped", "err", err)
		}
	}()
	log.Info("profiling endpoints listening", "pprof_addr", ln.Addr().String())
	return func() { hs.Close(); <-done }, nil
}
