#!/usr/bin/env bash
# ratelimits.limit in Redis mode against the naive Redis limiter and the in-process store,
# alternating rounds in one run (docs/performance/redis.md).
#
#   bash bins/keygate/bench/redis-limit.sh
#   ROUNDS=5 DURATION=10s RATE=20000 bash bins/keygate/bench/redis-limit.sh
#
# A private Redis (redis-server on REDIS_PORT, no persistence) and each server under test
# (one worker) are pinned to CPU 0, the load generator to CPU 1: the work one decision
# costs, in the server and in Redis, is measured on one core, and the load generator's
# core stays free (with Redis beside it, the load generator is what saturates).
#   keygate-redis   keygate with REDIS_URL (SQLite for keys)
#   naive           examples/naive_redis.rs: one EVALSHA per request, multiplexed connection
#   keygate-memory  keygate on the in-process store
# Phases: 1. saturated (wrk -c64, 10k identifiers, a limit that always passes): the
# throughput ratios; 2. `async: true` (same load): Redis mode against the in-process store;
# 3. a load of denials (limit 5): Redis mode against the in-process store; 4. open loop at
# RATE req/s: keygate-redis's latency (p99).
# Needs: wrk, taskset, redis-server.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-20000}
REDIS_PORT=${REDIS_PORT:-16390}
SECONDS_PER_ROUND=${DURATION%s}
ROOT_KEY=kg_root_redis_bench_$(date +%s)
export ROOT_KEY
require wrk redis-server curl taskset
cargo build --release -q -p keygate --bin keygate --example naive_redis --example openloop

taskset -c 0 redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" &
pids+=($!)
redis_url=redis://127.0.0.1:$REDIS_PORT
declare -A port=([keygate-redis]=18191 [naive]=18192 [keygate-memory]=18193)
serve_keygate "${port[keygate-redis]}" "$work/r.log" DATABASE_URL="sqlite://$work/r.db" REDIS_URL=$redis_url
taskset -c 0 target/release/examples/naive_redis 127.0.0.1:${port[naive]} "$redis_url" &
pids+=($!)
wait_up "${port[naive]}" ""
serve_keygate "${port[keygate-memory]}" "$work/m.log" DATABASE_URL="sqlite://$work/m.db"

run() { # name round [LIMIT [ASYNC]]
  LIMIT=${3:-1000000000} ASYNC=${4:-false} CONNECTIONS=64 wrk_round "$1 round=$2" "${port[$1]}" bins/keygate/bench/limit.lua
}
for s in "${!port[@]}"; do # warm-up: namespaces, caches, the 10k budgets
  LIMIT=1000000000 CONNECTIONS=8 DURATION=2s wrk_round warm "${port[$s]}" bins/keygate/bench/limit.lua >/dev/null
done

ratios() { # results-file first second: median of the per-round throughput ratios first/second
  echo "$2 / $3: median of $ROUNDS per-round ratios $(ratio "$1" "$2" "$3")"
}

echo "== saturated: 64 connections, 10k identifiers, every request passes"
for r in $(seq 1 "$ROUNDS"); do
  for s in keygate-redis naive keygate-memory; do run "$s" "$r"; done
done | tee "$work/saturated"
ratios "$work/saturated" keygate-redis naive
ratios "$work/saturated" keygate-redis keygate-memory

echo "== async: true, same load as the saturated phase"
for r in $(seq 1 "$ROUNDS"); do
  for s in keygate-redis keygate-memory; do run "$s" "$r" 1000000000 true; done
done | tee "$work/async"
ratios "$work/async" keygate-redis keygate-memory

echo "== denials: limit 5 (after the first 5 requests of each identifier, every answer is a denial)"
for r in $(seq 1 "$ROUNDS"); do
  for s in keygate-redis keygate-memory; do run "$s" "$r" 5; done
done | tee "$work/denials"
ratios "$work/denials" keygate-redis keygate-memory

echo "== open loop: $RATE req/s over 64 connections (keygate-redis, then naive)"
for i in $(seq 1 10000); do
  printf '{"namespace":"bench","identifier":"user_%06d@example.com","limit":1000000000,"duration":60000,"cost":1}\n' "$i"
done >"$work/bodies.txt"
for r in $(seq 1 "$ROUNDS"); do
  for s in keygate-redis naive; do
    echo "$s round=$r $(taskset -c 1 target/release/examples/openloop "127.0.0.1:${port[$s]}" "$RATE" "$SECONDS_PER_ROUND" 64 "$work/bodies.txt" | sed 's/^RESULT //')"
  done
done
