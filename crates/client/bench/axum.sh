#!/usr/bin/env bash
# An axum hello-world on one core behind keygate-client's layer (GET / requiring
# documents.read), against the same service without the layer, in one run (issue 35's
# target: embedded >= 0.8x); and the remote back end against the keygate server's own v2
# verifyKey throughput.
#
#   bash crates/client/bench/axum.sh
#   ROUNDS=5 DURATION=10s CONNECTIONS=64 KEYS=1000 bash crates/client/bench/axum.sh
#
# Services: "none" (no layer), "embedded" (keygate in process, on the server's SQLite file),
# "remote" (asking the keygate server over HTTP), each a current-thread runtime pinned to
# CPU 0; the keygate server (one worker) on CPU 0 too, so the remote service and the server
# it asks share that core; wrk (one thread) on CPU 1. Rounds go none, embedded, remote,
# server in turn, so that machine noise hits all; each ratio is the median of per-round
# ratios. Needs: wrk (apt-get install wrk), curl, taskset.
set -euo pipefail
cd "$(dirname "$0")/../../.."

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1000}
KG_PORT=${KG_PORT:-18390}
NONE_PORT=${NONE_PORT:-18391}
EMB_PORT=${EMB_PORT:-18392}
REM_PORT=${REM_PORT:-18393}
ROOT_KEY=kg_root_bench_client_$(date +%s)_0000
export ROOT_KEY

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
cargo build --release -q -p keygate --bin keygate
cargo build --release -q -p keygate-client --example hello_bench --features tower,embedded

work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
export DATABASE_URL="sqlite://$work/bench.db"

wait_up() { for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$1/$2" && return; sleep 0.1; done
  echo "nothing listens on $1" >&2; exit 1; }
KEYGATE_LISTEN=127.0.0.1:$KG_PORT KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn \
  taskset -c 0 target/release/keygate 2>"$work/keygate.log" & pids+=($!)
wait_up $KG_PORT v2/liveness

for _ in $(seq 1 "$KEYS"); do
  curl -s "http://127.0.0.1:$KG_PORT/v2/keys.createKey" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d '{"apiId":"api_bench","permissions":["documents.read"]}' \
    | sed -E 's/.*"key":"([^"]+)".*/\1/'
  echo
done >"$work/keys.txt"
export KEYS_FILE="$work/keys.txt"

hello() { # mode port
  MODE=$1 LISTEN=127.0.0.1:$2 KEYGATE_URL=http://127.0.0.1:$KG_PORT KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn \
    taskset -c 0 target/release/examples/hello_bench >"$work/$1.log" 2>&1 & pids+=($!)
  wait_up "$2" ""
}
hello none $NONE_PORT
hello embedded $EMB_PORT
hello remote $REM_PORT
key=$(head -1 "$KEYS_FILE")
for p in $NONE_PORT $EMB_PORT $REM_PORT; do
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "http://127.0.0.1:$p/")" = 200 ] \
    || { echo "a benchmark key is refused on port $p" >&2; exit 1; }
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$EMB_PORT/")" = 401 ] \
  || { echo "the embedded service lets a request without a key through" >&2; exit 1; }

run() { # port script -> rps
  taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s "$2" "http://127.0.0.1:$1" \
    | tee -a "$work/wrk.log" | sed -nE 's/^RESULT rps=([0-9]+).* errors=([0-9]+).*/\1 \2/p'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
emb_ratios=() rem_ratios=()
printf '%-6s %10s %10s %10s %10s\n' round none embedded remote server
for r in $(seq 1 "$ROUNDS"); do
  read -r none e1 < <(run $NONE_PORT crates/client/bench/hello.lua)
  read -r emb e2 < <(run $EMB_PORT crates/client/bench/hello.lua)
  read -r rem e3 < <(run $REM_PORT crates/client/bench/hello.lua)
  read -r srv e4 < <(run $KG_PORT bins/keygate/bench/verify-v2.lua)
  [ "$e1$e2$e3$e4" = 0000 ] || { echo "errors in round $r: $e1 $e2 $e3 $e4" >&2; exit 1; }
  printf '%-6s %10s %10s %10s %10s\n' "$r" "$none" "$emb" "$rem" "$srv"
  emb_ratios+=("$(awk "BEGIN {print $emb / $none}")")
  rem_ratios+=("$(awk "BEGIN {print $rem / $srv}")")
done
echo "embedded / none (median of rounds): $(printf '%s\n' "${emb_ratios[@]}" | median)"
echo "remote / keygate server's verifyKey (median of rounds): $(printf '%s\n' "${rem_ratios[@]}" | median)"
