# AsyncGate build. `make run` builds and runs the gate on its embedded defaults;
# `make test` runs every test (the command CI runs).
GO      ?= go
BIN     ?= bin/gate
export GOFLAGS ?= -buildvcs=false

.PHONY: all build run test test-go vet fmt bench clean plugins

all: build

build: plugins
	$(GO) build -o $(BIN) ./cmd/gate

run: build
	./$(BIN) serve

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)

test: plugins vet
	$(GO) test -race -count=1 -timeout 25m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./host/...

# --- plugins (built from source with GOOS=wasip1 GOARCH=wasm) ---
plugins:
	@true

clean:
	rm -rf bin
