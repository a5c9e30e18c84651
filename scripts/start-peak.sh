#!/usr/bin/env bash
# start-peak.sh GATE DATA [FLAGS…]: start `gate serve` on the data folder
# DATA (fresh: a cold start; again: a warm one), sample VmRSS every 0.2 s until
# no plugin runs on the interpreter, and print the time, the peak (VmHWM)
# and the samples (docs/performance.md, "A cold start's peak").
set -euo pipefail
gate=$1; data=$2; shift 2
p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$p"
t0=$(date +%s%N)
GODEBUG=${GODEBUG:-} "$gate" serve --data "$data" --listen "127.0.0.1:$p" --log-level warn "$@" 2>"$data.log" &
pid=$!
samples=""
until [ -s "$data/admin.key" ] && curl -s -o /dev/null "$url/healthz"; do sleep 0.05; done
admin=$(cat "$data/admin.key")
while ! curl -s "$url/v1/admin/plugins" -H "Authorization: Bearer $admin" | jq -e '.ready and ([.plugins[] | select(.engine == "interpreter")] | length == 0)' >/dev/null; do
  samples+=" $(awk '/^VmRSS:/{printf "%d", $2/1024}' /proc/$pid/status)"; sleep 0.2; done
hwm=$(awk '/^VmHWM:/{printf "%d", $2/1024}' /proc/$pid/status)
echo "compiled after $(( ($(date +%s%N) - t0) / 1000000 )) ms; peak $hwm MB; RSS samples:$samples"
sleep 5; echo "5 s later: $(awk '/^VmRSS:/{printf "%d", $2/1024}' /proc/$pid/status) MB"
kill $pid; wait $pid 2>/dev/null || true
