#!/usr/bin/env bash
# plugin-new-to-loaded.sh measures the time from `gate plugin new` to a plugin
# loaded by a running gate, as docs/plugins.md walks it: new → build →
# install (which returns once GET /v1/admin/plugins reports it loaded), in an
# empty folder with GOPROXY=off.
#
#   scripts/plugin-new-to-loaded.sh [GATE_BINARY]     (default: bin/gate)
#
# warm: Go's build cache as it is (Go used before on this machine).
# cold: an empty Go build cache and an empty gate plugin build cache, so the
#       Go runtime and standard library are compiled for wasip1 first.
# Each run uses a fresh gate with an empty compiled-module cache.
set -euo pipefail
gate=$(realpath "${1:-bin/gate}")
tmp=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

export GOFLAGS=-mod=mod GOPROXY=off
unset ASYNCGATE_URL ASYNCGATE_ADMIN_KEY GOWORK

run() { # run NAME GOCACHE
	local name=$1 gocache=$2 data="$tmp/data-$1" work="$tmp/work-$1"
	mkdir -p "$work"
	"$gate" serve --data "$data" --listen 127.0.0.1:0 2>"$tmp/$name.log" &
	pid=$!
	local addr=""
	for _ in $(seq 600); do
		addr=$(sed -n 's/.*msg=listening.*addr=\([^ ]*\).*/\1/p' "$tmp/$name.log" | head -1)
		[ -n "$addr" ] && break
		sleep 0.1
	done
	[ -n "$addr" ] || { echo "gate did not start:"; cat "$tmp/$name.log"; exit 1; }
	local start end
	start=$(date +%s.%N)
	(
		cd "$work"
		export GOCACHE="$gocache" XDG_CACHE_HOME="$tmp/cache-$name"
		"$gate" plugin new policy "p$name" >/dev/null
		"$gate" plugin build "p$name" >/dev/null
		"$gate" plugin install --url "http://$addr" --key "$(cat "$data/admin.key")" "p$name/p$name.wasm" >/dev/null
	)
	end=$(date +%s.%N)
	printf '%-5s new → loaded: %.1f s\n' "$name" "$(echo "$end - $start" | bc)"
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
}

run warm "$(go env GOCACHE)"
run cold "$tmp/gocache-cold"
