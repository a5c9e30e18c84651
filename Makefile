# AsyncGate build. `make run` builds and runs the gate on its embedded defaults;
# `make test` runs every test (the command CI runs).
GO      ?= go
BIN     ?= bin/gate
export GOFLAGS ?= -buildvcs=false
# The version `gate version` and /healthz report. -buildvcs=false (above)
# keeps the toolchain from recording the revision, so it is stamped here.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS ?= -X main.version=$(VERSION)

.PHONY: jaeger all build run test test-go vet lint fmt bench bench-smoke bench-compare clean plugins fuzz cover python-wheel

all: build

build: plugins
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/gate

# The first build downloads and compiles every dependency: minutes, and up to
# ~2.8 GB of memory at its peak (openai-go alone ~1.5 GB) from a cold cache.
# The gate listens at once but answers plugin_not_ready until its plugins have
# compiled (13 s on a quiet machine, more on a busy one); the log line
# "plugins loaded in the background" says they are ready.
run:
	@echo "make run: the first build takes minutes and up to ~2.8 GB of memory; the gate is ready when its log says \"plugins loaded in the background\"."
	@$(MAKE) --no-print-directory build
	./$(BIN) serve

# The Python worker client as a wheel, built by its in-tree backend with the
# standard library only (no pip, no setuptools, no network):
# pip install dist/python/asyncgate_worker-*.whl
python-wheel:
	python3 sdk/python/_build/asyncgate_build.py dist/python

# The SDKs are their own modules (sdk/plugin, sdk/worker, sdk/client), outside ./... of
# the root module: vet and test them from their folders.
SDK_MODULES := sdk/plugin sdk/worker sdk/client

vet:
	$(GO) vet ./...
	@for m in $(SDK_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@# bench/ is its own module (River beside the gate): vetting it keeps its
	@# go.sum in step with the gate's imports, so make bench-compare builds.
	@cd bench && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)

# The dashboard's browser test needs Chromium; scripts/ensure-chromium.sh
# installs Debian's package when it is missing, with the same CI rule.
# The mail tests need mailpit (SMTP + POP3); scripts/ensure-mailpit.sh
# installs it with go install, with the same CI rule.
# PostgreSQL tests need a server on 127.0.0.1:5432; scripts/ensure-postgres.sh
# starts (or installs) one. Under CI it must succeed; on a laptop without
# PostgreSQL its tests skip with a message.
# -timeout is a hang guard per package, not a budget: alone, the slowest
# package (cmd/gate, the real binary end to end) takes about 5 minutes under
# -race, and two runs at once on two cores have taken it past 25.
# -p 1 runs the packages one at a time: on two cores two at a time only
# contend for the cores and the database (cmd/gate took 279 s alone and 718 s
# beside the others) and stretch each other's waits; in all it is no slower
# (the go test step 18.4 minutes two at a time, 16.8 and 18.4 one at a time,
# one fresh-clone run each, 2026-11-30). Override with GOTEST_P=N on a larger
# machine.
# WAITING_PKGS run four of their parallel tests at once (-parallel 4), not
# one per core: the end-to-end tests and the PostgreSQL suites mostly wait
# (on gate processes, the server, leases running out), so two at a time
# left the cores half idle (cmd/gate 539 → 307 s, host/postgres 404 → 188 s
# in CI). The other packages keep one per core: host/sqlite and host/plugin
# are busy on the cores, and four at once made them slower (host/sqlite
# 186 → 252 s, host/plugin 113 → 135 s; docs/performance.md, "The test
# run's parallelism").
GOTEST_P ?= 1
GOTEST_PARALLEL ?= 4
WAITING_PKGS := ./cmd/gate ./host/postgres
test: plugins vet
	@bash scripts/ensure-postgres.sh || { if [ -n "$$CI" ]; then exit 1; fi; echo "PostgreSQL unavailable here: its tests will skip"; }
	@bash scripts/ensure-chromium.sh || { if [ -n "$$CI" ]; then exit 1; fi; echo "Chromium unavailable here: the dashboard's browser test will skip"; }
	@bash scripts/ensure-mailpit.sh || { if [ -n "$$CI" ]; then exit 1; fi; echo "mailpit unavailable here: the mail tests will skip"; }
	$(GO) test -race -count=1 -p $(GOTEST_P) -timeout 45m $$($(GO) list ./... | grep -v -x -F $(foreach p,$(WAITING_PKGS),-e github.com/asyncgate/asyncgate/$(patsubst ./%,%,$(p))))
	$(GO) test -race -count=1 -p $(GOTEST_P) -parallel $(GOTEST_PARALLEL) -timeout 45m $(WAITING_PKGS)
	@for m in $(SDK_MODULES); do (cd $$m && $(GO) test -race -count=1 -timeout 10m ./...) || exit 1; done
	$(MAKE) bench-smoke

# Every benchmark once (-benchtime 1x, no figures worth reading): a benchmark
# that no longer runs fails here instead of on the day someone measures.
# ASYNCGATE_BENCH_PHASE shortens the schedule benchmark's two phases (65 s
# each when measuring) to a smoke run's length, GATE_RSS_MB the result
# fetches' payloads (30 MiB when measuring), and -short skips the one
# benchmark that fills a queue of a million tasks (BenchmarkLeaseDepth runs
# the same path with a thousand).
bench-smoke:
	ASYNCGATE_BENCH_PHASE=3s GATE_RSS_MB=4 $(GO) test -short -run '^$$' -bench . -benchtime 1x -timeout 15m ./...

# staticcheck, pinned, installed into ./bin from the Go module proxy.
lint: vet
	GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	./bin/staticcheck ./...
	@for m in $(SDK_MODULES); do (cd $$m && $(CURDIR)/bin/staticcheck ./...) || exit 1; done

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./host/...

# The gate beside River on this machine, same workloads and durability
# (bench/README.md). A module of its own, not part of `make test`; PostgreSQL
# from ASYNCGATE_TEST_POSTGRES. Example: make bench-compare BENCH_FLAGS='-runs 1'
BENCH_FLAGS ?=
bench-compare: build
	cd bench && $(GO) run ./cmd/compare -gate ../$(BIN) $(BENCH_FLAGS)

# Every fuzz target, each run for FUZZTIME (go test runs one -fuzz target at
# a time). `make fuzz FUZZTIME=2m` for a longer session; new crashers land in
# the package's testdata/fuzz and fail plain `go test` until fixed.
FUZZTIME ?= 10s
FUZZ_TARGETS := \
	./host:FuzzReceiptValidate \
	./host/engine:FuzzValidateParams \
	./host/httpapi:FuzzDecodeBody \
	./host/httpapi:FuzzRoutes \
	./host/plugin:FuzzParseManifest \
	./host/plugin:FuzzParseFrame \
	./host/plugin:FuzzDecodeDecision \
	./host/plugin:FuzzFailureRecord \
	./host/plugin:FuzzHTTPHostCall \
	./host/plugin:FuzzMailHostCall \
	./host/mail:FuzzParse \
	./host/mail:FuzzCheckAddress \
	./host/store:FuzzParseCursor \
	./sdk/plugin:FuzzParseJSON \
	./sdk/plugin:FuzzDecodeFailureRecord \
	./sdk/worker:FuzzSpoolLoad \
	./worker/ai:FuzzParseProfile \
	./cmd/gate:FuzzBridgeEvents \
	./cmd/gate:FuzzConfigFile

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$fn ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

# Coverage counted end to end: the unit tests, plus every `gate` process the
# end-to-end tests start (built with -cover, writing to GOCOVERDIR), merged
# with `go tool covdata`; prints per-package figures. COVER_PKGS narrows the
# test run (default: everything, as long as `make test`).
COVERDIR   ?= $(CURDIR)/.cover
COVER_PKGS ?= ./...
cover: plugins
	rm -rf $(COVERDIR) && mkdir -p $(COVERDIR)/unit $(COVERDIR)/e2e $(COVERDIR)/merged
	ASYNCGATE_E2E_COVERDIR=$(COVERDIR)/e2e $(GO) test -count=1 -timeout 40m -cover -coverpkg=github.com/asyncgate/asyncgate/... $(COVER_PKGS) -args -test.gocoverdir=$(COVERDIR)/unit
	$(GO) tool covdata merge -i=$(COVERDIR)/unit,$(COVERDIR)/e2e -o $(COVERDIR)/merged
	$(GO) tool covdata percent -i=$(COVERDIR)/merged

# --- plugins (built from source with GOOS=wasip1 GOARCH=wasm) ---
# Owned by the plugin runtime (host/plugin, issue 5). Builds every folder with
# a manifest.json under plugins/channels and plugins/policies into plugins/dist
# (gitignored, embedded by the gate). The go build cache makes rebuilds cheap.
PLUGIN_DIRS := $(patsubst %/manifest.json,%,$(wildcard plugins/channels/*/manifest.json plugins/policies/*/manifest.json))

plugins:
	@mkdir -p plugins/dist
	@for d in $(PLUGIN_DIRS); do \
		n=$$(basename $$d); \
		GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o plugins/dist/$$n.wasm ./$$d || exit 1; \
		cp $$d/manifest.json plugins/dist/$$n.manifest.json; \
	done
	@echo "built $(words $(PLUGIN_DIRS)) plugins into plugins/dist"
# --- end plugins ---

clean:
	rm -rf bin dist

# Jaeger v1.76.0 from its own tool module (tools/jaeger), so its dependencies
# stay out of the gate's go.mod; docs/tracing.md. The tracing e2e test builds
# the same binary into the user cache folder by itself.
jaeger:
	cd tools/jaeger && $(GO) build -o ../../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger
