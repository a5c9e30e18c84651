#!/usr/bin/env bash
# validator-memory.sh measures what a hostile validator costs a running
# gate: it starts `gate serve` on a fresh data folder, drops in the hog
# validator (testdata/plugins/hog, built here), registers a task type that
# names it, and enqueues CALLS tasks whose params ask it to touch 40 MiB,
# PAR at once, reading VmRSS and VmHWM from /proc/PID/status before, after
# one call, after the CALLS and 10 s later. Run from the repository's root.
#
#   scripts/validator-memory.sh [GATE_BINARY] [CALLS] [PAR]    (default: bin/gate 20 4)
set -euo pipefail
gate=$(realpath "${1:-bin/gate}"); calls=${2:-20}; par=${3:-4}
tmp=$(mktemp -d /tmp/validator-memory.XXXXXX); pid=""
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; rm -rf "$tmp"; }
trap cleanup EXIT
rss() { awk '/^VmRSS:/{printf "%d", $2/1024}' "/proc/$pid/status"; }
hwm() { awk '/^VmHWM:/{printf "%d", $2/1024}' "/proc/$pid/status"; }
p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$p"
"$gate" serve --data "$tmp/data" --listen "127.0.0.1:$p" --log-level warn 2>"$tmp/gate.log" &
pid=$!
until [ -s "$tmp/data/admin.key" ] && curl -s -o /dev/null "$url/healthz"; do sleep 0.05; done
admin=$(cat "$tmp/data/admin.key")
mkdir -p "$tmp/data/plugins"
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$tmp/hog.wasm" ./testdata/plugins/hog
sha=$(sha256sum "$tmp/hog.wasm" | cut -d' ' -f1)
cp "$tmp/hog.wasm" "$tmp/data/plugins/.hog.tmp" && mv "$tmp/data/plugins/.hog.tmp" "$tmp/data/plugins/hog.wasm"
python3 -c "import json; m=json.load(open('testdata/plugins/hog/manifest.json')); m['wasm_sha256']='$sha'; print(json.dumps(m))" >"$tmp/data/plugins/.m.tmp"
mv "$tmp/data/plugins/.m.tmp" "$tmp/data/plugins/hog.manifest.json"
until curl -s "$url/v1/admin/plugins" -H "Authorization: Bearer $admin" |
	jq -e '.ready and ([.plugins[] | select(.engine == "interpreter")] | length == 0) and ([.plugins[] | select(.name == "hog")] | length == 1)' >/dev/null; do sleep 0.2; done
curl -sf -X PUT "$url/v1/admin/task-types/hog" -H "Authorization: Bearer $admin" -d '{"validators":[{"name":"hog"}]}' >/dev/null
agent=$("$gate" keys create --data "$tmp/data" --role agent --principal agent.hog 2>/dev/null)
sleep 10
echo "plugins compiled, hog loaded, 10 s later: VmRSS $(rss) MB, VmHWM $(hwm) MB"
one() { curl -s -o /dev/null -w '%{http_code}\n' "$url/v1/tasks" -H "Authorization: Bearer $agent" -d '{"task_type":"hog","params":{"mib":40}}'; }
export -f one; export url agent
one
echo "after 1 call: VmRSS $(rss) MB, VmHWM $(hwm) MB"
echo "answers: $(seq "$calls" | xargs -P "$par" -I{} bash -c one | sort | uniq -c | tr -s ' \n' ' ')"
echo "after $calls calls, $par at once: VmRSS $(rss) MB, VmHWM $(hwm) MB"
sleep 10
echo "10 s later: VmRSS $(rss) MB"
echo "($(uptime | sed 's/.*load/load/'))"
