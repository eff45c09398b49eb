#!/usr/bin/env bash
# Scaled out, a verification against a rate-limit decision (issue 75's targets): v2
# keys.verifyKey on PostgreSQL + Redis, plain keys and keys that spend (credits and an
# auto-applied limit), against ratelimits.limit on the same server, rounds alternating in
# one run.
#
#   bash bins/keygate/bench/verify-redis.sh
#   ROUNDS=5 DURATION=10s RATE=20000 KEYS=1000 bash bins/keygate/bench/verify-redis.sh
#   CLUSTER=1 bash bins/keygate/bench/verify-redis.sh   # the Redis Cluster of .ci/redis-cluster.sh
#
# The rate-limit bench's topology (redis-limit.sh): a private Redis (redis-server on
# REDIS_PORT, no persistence) and the server (one worker) pinned to CPU 0, wrk (64
# connections) on CPU 1; PostgreSQL holds the keys (a fresh schema; a cached verification
# does not read it). CLUSTER=1: the three local nodes on 7001-7003 instead, not pinned.
# Phases: 1. saturated: limit (10k identifiers, a limit that always passes), plain and
# spending verifications over KEYS keys each; the medians of the per-round ratios plain /
# limit and spending / plain. 2. open loop at RATE req/s of plain verifications (the
# openloop example): p50 and p99. 3. one request in flight: plain verifications' p50.
# At the end, the server's Redis batches (script calls and decisions, counter reads and
# confirmations).
# Needs: wrk, taskset, redis-server, psql, curl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-20000}
KEYS=${KEYS:-1000}
PORT=${PORT:-18395}
REDIS_PORT=${REDIS_PORT:-16391}
SECONDS_PER_ROUND=${DURATION%s}
ROOT_KEY=kg_root_verify_redis_$(date +%s)_0000
export ROOT_KEY
require wrk redis-server curl taskset psql
[ -n "${KEYGATE_BIN:-}" ] || cargo build --release -q -p keygate --bin keygate --example openloop

extra=()
if [ -n "${CLUSTER:-}" ]; then
  bash .ci/redis-cluster.sh >/dev/null
  export REDIS_URL=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003
  extra=(KEYGATE_REDIS_CLUSTER=true)
else
  taskset -c 0 redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" &
  pids+=($!)
  export REDIS_URL=redis://127.0.0.1:$REDIS_PORT
  for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
SCALE_OUT=1 bench_database
serve_keygate $PORT "$work/server.log" "${extra[@]}"

create_keys $PORT v2/keys.createKey '{"apiId":"api_bench"}' "$KEYS" >"$work/plain.txt"
create_keys $PORT v2/keys.createKey \
  '{"apiId":"api_bench","credits":{"remaining":1000000000},"ratelimits":[{"name":"calls","limit":1000000,"duration":60000,"autoApply":true}]}' \
  "$KEYS" >"$work/spending.txt"
for f in plain spending; do
  expect_valid $PORT v2/keys.verifyKey "{\"key\":\"$(head -1 "$work/$f.txt")\"}"
done

run() { # name round
  case $1 in
    limit) LIMIT=1000000000 ASYNC=false wrk_round "limit round=$2" $PORT bins/keygate/bench/limit.lua ;;
    *) KEYS_FILE=$work/$1.txt wrk_round "$1 round=$2" $PORT bins/keygate/bench/verify-v2.lua ;;
  esac
}
for k in limit plain spending; do # warm-up: the namespace, the budgets, every key's cache entry
  DURATION=3s run "$k" 0 >/dev/null
done

echo "== saturated: 64 connections, $KEYS keys of each kind, 10k identifiers for the limit"
for r in $(seq 1 "$ROUNDS"); do
  for k in limit plain spending; do run "$k" "$r"; done
done | tee "$work/saturated"
out=$work/saturated
for k in limit plain spending; do
  echo "$k: median $(median_of "$out" "$k" rps) req/s, p99 $(median_of "$out" "$k" p99_us) us"
done
echo "plain / limit: $(ratio "$out" plain limit) (target >= 0.80); spending / plain: $(ratio "$out" spending plain) (target >= 0.80); errors: $(errors "$out")"

sed 's/.*/{"key":"&"}/' "$work/plain.txt" >"$work/bodies.txt"
echo "== open loop: $RATE req/s of plain verifications over 64 connections"
for r in $(seq 1 "$ROUNDS"); do
  echo "open round=$r $(OPENLOOP_PATH=/v2/keys.verifyKey taskset -c 1 "$RELEASE/examples/openloop" \
    "127.0.0.1:$PORT" "$RATE" "$SECONDS_PER_ROUND" 64 "$work/bodies.txt" | sed 's/^RESULT //')"
done | tee "$work/open"
echo "open loop at $RATE req/s: median p50 $(median_of "$work/open" open p50_us) us, p99 $(median_of "$work/open" open p99_us) us (target <= 2000)"

echo "== one request in flight: plain verifications"
for r in $(seq 1 "$ROUNDS"); do
  CONNECTIONS=1 run plain "$r" | sed 's/^plain/lone/'
done | tee "$work/lone"
echo "one in flight: median $(median_of "$work/lone" lone rps) req/s, p50 $(median_of "$work/lone" lone p50_us) us"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^keygate_redis_batch' || true
