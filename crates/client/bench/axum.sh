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
. bins/keygate/bench/lib.sh

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

require wrk curl taskset
cargo build --release -q -p keygate --bin keygate
cargo build --release -q -p keygate-client --example hello_bench --features tower,embedded
export DATABASE_URL="sqlite://$work/bench.db"
serve_keygate $KG_PORT "$work/keygate.log"

create_keys $KG_PORT v2/keys.createKey '{"apiId":"api_bench","permissions":["documents.read"]}' "$KEYS" >"$work/keys.txt"
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

for r in $(seq 1 "$ROUNDS"); do
  wrk_round "none round=$r" $NONE_PORT crates/client/bench/hello.lua
  wrk_round "embedded round=$r" $EMB_PORT crates/client/bench/hello.lua
  wrk_round "remote round=$r" $REM_PORT crates/client/bench/hello.lua
  wrk_round "server round=$r" $KG_PORT bins/keygate/bench/verify-v2.lua
done | tee "$work/results"
out=$work/results
[ "$(errors "$out")" = 0 ] || { echo "non-2xx answers or socket errors: $(errors "$out")" >&2; exit 1; }
for side in none embedded remote server; do echo "$side: median $(median_of "$out" $side rps) req/s"; done
echo "embedded / none (median of rounds): $(ratio "$out" embedded none)"
echo "remote / keygate server's verifyKey (median of rounds): $(ratio "$out" remote server)"
