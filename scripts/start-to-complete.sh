#!/usr/bin/env bash
# start-to-complete.sh measures a first start (issue 38 item 2): from exec of
# `gate serve` on a fresh data folder with an empty compiled-module cache to
# the first 200 of /readyz, and to the first completed task, driven as the
# README's quick-start loop does it right after `make run` (register a task
# type, make keys, queue, lease, complete with an inline result). A call
# answered 503 is retried after its Retry-After and counted: the README's
# loop, pasted, fails on each of them.
#
#   scripts/start-to-complete.sh [GATE_BINARY] [RUNS]    (default: bin/gate 3)
#
# Prints one line per run and the medians, with uptime's load.
set -euo pipefail
gate=$(realpath "${1:-bin/gate}")
runs=${2:-3}
tmp=$(mktemp -d /tmp/start-to-complete.XXXXXX)
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# call METHOD URL KEY BODY: prints the body; retries a 503 after its Retry-After.
retried=0
call() {
	local out code ra
	while :; do
		out=$(curl -s -D "$tmp/h" -o "$tmp/b" -w '%{http_code}' -X "$1" "$2" -H "Authorization: Bearer $3" ${4:+-d "$4"})
		code=$out
		if [ "$code" != 503 ]; then break; fi
		retried=$((retried + 1))
		ra=$(awk 'tolower($1)=="retry-after:"{print $2+0}' "$tmp/h")
		sleep "${ra:-1}"
	done
	if [ "${code:0:1}" != 2 ]; then echo "$1 $2: $code $(cat "$tmp/b")" >&2; return 1; fi
	cat "$tmp/b"
}

ready=() complete=()
for i in $(seq "$runs"); do
	data="$tmp/data-$i" p=$(port) url=""
	url="http://127.0.0.1:$p" retried=0
	t0=$(date +%s%N)
	"$gate" serve --data "$data" --listen "127.0.0.1:$p" --log-level warn 2>"$tmp/gate-$i.log" &
	pid=$!
	until [ -s "$data/admin.key" ] && curl -s -o /dev/null "$url/healthz"; do sleep 0.005; done
	admin=$(cat "$data/admin.key")
	(until [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz")" = 200 ]; do sleep 0.01; done; ms "$t0" >"$tmp/ready") &
	rpid=$!
	call PUT "$url/v1/admin/task-types/echo" "$admin" '{"description":"returns its params"}' >/dev/null
	agent=$(call POST "$url/v1/admin/keys" "$admin" '{"role":"agent","principal":"agent.kee"}' | jq -r .api_key)
	worker=$(call POST "$url/v1/admin/keys" "$admin" '{"role":"worker","principal":"echo.1"}' | jq -r .api_key)
	call POST "$url/v1/tasks" "$agent" '{"task_type":"echo","params":{"hello":"world"}}' >/dev/null
	lease=$(call POST "$url/v1/leases" "$worker" '{"worker_id":"echo.1","task_types":["echo"],"wait_seconds":5}' | jq -r '.leases[0].lease_id')
	call POST "$url/v1/leases/$lease/complete" "$worker" '{"result":{"hello":"world"},"summary":"done"}' >/dev/null
	c=$(ms "$t0")
	wait "$rpid"
	r=$(cat "$tmp/ready")
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
	echo "run $i: readyz 200 after ${r} ms, first task completed after ${c} ms, 503 answers on the way: $retried"
	ready+=("$r") complete+=("$c")
	rm -rf "$data"
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
echo "median: readyz ${ready[*]:+$(med "${ready[@]}")} ms, first completed task $(med "${complete[@]}") ms ($runs runs; $(uptime | sed 's/.*load/load/'))"
