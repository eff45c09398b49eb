#!/usr/bin/env bash
# keys.verifyKey with the verification cache, against ratelimits.limit on the same server and
# against the same build with the cache off (KEYGATE_VERIFY_CACHE=off), in one run.
#
#   bash bins/keygate/bench/verify-limit.sh               # embedded default (SQLite)
#   SCALE_OUT=1 bash bins/keygate/bench/verify-limit.sh   # PostgreSQL + Redis (127.0.0.1)
#   ROUNDS=5 DURATION=10s CONNECTIONS=64 KEYS=1000 bash bins/keygate/bench/verify-limit.sh
#
# Two servers share one database: "on" (cache on) and "off" (cache off), each one worker
# pinned to CPU 0; wrk (one thread) on CPU 1. KEYS keys are created, each holding
# documents.read; verify.lua rotates over them asking for documents.read, limit.lua over
# 10,000 identifiers; verify-v2.lua the same keys with v2 keys.verifyKey, with the query
# (v2-query) and without (v2-plain). Rounds alternate verify(on), v2-query, v2-plain,
# limit(on), verify(off), so that machine noise hits them all; the ratios are medians of
# per-round ratios.
# Needs: wrk (apt-get install wrk), curl, taskset; SCALE_OUT=1 also psql and redis-cli.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1000}
ON_PORT=${ON_PORT:-18380}
OFF_PORT=${OFF_PORT:-18381}
ROOT_KEY=kg_root_bench_verify_$(date +%s)_0000
export ROOT_KEY

require wrk curl taskset
cargo build --release -q -p keygate --bin keygate
bench_database
serve_keygate $ON_PORT "$work/on.log" KEYGATE_VERIFY_CACHE=on
serve_keygate $OFF_PORT "$work/off.log" KEYGATE_VERIFY_CACHE=off

create_keys $ON_PORT v1/keys.createKey '{"permissions":["documents.read"]}' "$KEYS" >"$work/keys.txt"
export KEYS_FILE="$work/keys.txt"
for key in $(head -1 "$KEYS_FILE") $(tail -1 "$KEYS_FILE"); do
  for p in $ON_PORT $OFF_PORT; do
    expect_valid $p v1/keys.verifyKey "{\"key\":\"$key\",\"authorization\":{\"permissions\":\"documents.read\"}}"
  done
done

# Warm-up: caches, the namespace, the budgets.
CONNECTIONS=8 DURATION=2s wrk_round warm $ON_PORT bins/keygate/bench/verify.lua >/dev/null
CONNECTIONS=8 DURATION=2s wrk_round warm $OFF_PORT bins/keygate/bench/verify.lua >/dev/null
CONNECTIONS=8 DURATION=2s wrk_round warm $ON_PORT bins/keygate/bench/limit.lua >/dev/null
CONNECTIONS=8 DURATION=2s wrk_round warm $ON_PORT bins/keygate/bench/verify-v2.lua >/dev/null

for r in $(seq 1 "$ROUNDS"); do
  wrk_round "verify-on round=$r" $ON_PORT bins/keygate/bench/verify.lua
  PERMISSIONS=documents.read wrk_round "v2-query round=$r" $ON_PORT bins/keygate/bench/verify-v2.lua
  wrk_round "v2-plain round=$r" $ON_PORT bins/keygate/bench/verify-v2.lua
  wrk_round "limit-on round=$r" $ON_PORT bins/keygate/bench/limit.lua
  wrk_round "verify-off round=$r" $OFF_PORT bins/keygate/bench/verify.lua
done | tee "$work/results"

out=$work/results
echo "verifyKey (cache on):  median $(median_of "$out" verify-on rps) req/s, median p99 $(median_of "$out" verify-on p99_us) us"
echo "ratelimits.limit:      median $(median_of "$out" limit-on rps) req/s"
echo "verifyKey (cache off): median $(median_of "$out" verify-off rps) req/s"
echo "v2 verifyKey:          median $(median_of "$out" v2-query rps) req/s with the query, $(median_of "$out" v2-plain rps) without"
echo "verify/limit: median of per-round ratios $(ratio "$out" verify-on limit-on) (v1), $(ratio "$out" v2-query limit-on) (v2 with the query), $(ratio "$out" v2-plain limit-on) (v2 without); verify on/off: $(ratio "$out" verify-on verify-off); non-2xx or socket errors: $(errors "$out")"
