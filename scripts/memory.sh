#!/usr/bin/env bash
# memory.sh measures what an idle `gate serve` holds (issue 38 item 5): it
# starts the gate on a fresh data folder (empty compiled-module cache),
# waits until its plugins run compiled code, reads VmRSS (and its anonymous
# and file-backed parts) from /proc/PID/status 10 s and IDLE s later, runs a
# burst of TASKS cycles with `gate bench --url` against it, and then reads
# VmRSS every second for 30 s. Plugins unused for their idle timeout (60 s)
# go dormant, hence the second idle reading.
#
#   scripts/memory.sh [GATE_BINARY] [TASKS] [IDLE]    (default: bin/gate 10000 75)
#
# Goals: idle after start < 80 MB; back under 120 MB within 30 s of the burst.
set -euo pipefail
gate=$(realpath "${1:-bin/gate}")
tasks=${2:-10000}
idle=${3:-75}
tmp=$(mktemp -d /tmp/memory.XXXXXX)
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
rss() { awk '/^VmRSS:/{printf "%d", $2/1024}' "/proc/$pid/status"; }
parts() { awk '/^RssAnon:/{a=$2} /^RssFile:/{f=$2} END{printf "anon %d MB, file %d MB", a/1024, f/1024}' "/proc/$pid/status"; }
hwm() { awk '/^VmHWM:/{printf "%d", $2/1024}' "/proc/$pid/status"; }

p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$p"
t0=$(date +%s%N)
"$gate" serve --data "$tmp/data" --listen "127.0.0.1:$p" --log-level warn 2>"$tmp/gate.log" &
pid=$!
until [ -s "$tmp/data/admin.key" ] && curl -s -o /dev/null "$url/healthz"; do sleep 0.01; done
admin=$(cat "$tmp/data/admin.key")
# Compiled: the listing is ready and no plugin runs on the interpreter.
until curl -s "$url/v1/admin/plugins" -H "Authorization: Bearer $admin" |
	jq -e '.ready and ([.plugins[] | select(.engine == "interpreter")] | length == 0)' >/dev/null; do sleep 0.1; done
echo "plugins compiled after $(( ($(date +%s%N) - t0) / 1000000 )) ms; VmRSS $(rss) MB, peak (VmHWM) $(hwm) MB"
sleep 10
echo "idle 10 s later: VmRSS $(rss) MB ($(parts))"
sleep $((idle - 10))
echo "idle ${idle} s later: VmRSS $(rss) MB ($(parts))"
"$gate" bench --url "$url" --key "$admin" --tasks "$tasks" --progress=false >"$tmp/bench.out" 2>&1 || { cat "$tmp/bench.out"; exit 1; }
grep -iE 'cycles/s|throughput|tasks/s' "$tmp/bench.out" | head -3 || true
echo "burst of $tasks cycles done: VmRSS $(rss) MB, peak (VmHWM) $(hwm) MB"
line=""
for s in $(seq 30); do sleep 1; line+=" $(rss)"; done
echo "VmRSS each second for 30 s (MB):$line ($(parts))"
echo "($(uptime | sed 's/.*load/load/'))"
