#!/usr/bin/env bash
# ratelimits.limit in Redis mode against the naive Redis limiter and the in-process store,
# alternating rounds in one run (docs/performance.md section 6).
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

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-20000}
REDIS_PORT=${REDIS_PORT:-16390}
SECONDS_PER_ROUND=${DURATION%s}
ROOT_KEY=kg_root_redis_bench_$(date +%s)
export ROOT_KEY
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is missing: apt-get install redis-server" >&2; exit 1; }
cargo build --release -q -p keygate --bin keygate --example naive_redis --example openloop

work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

taskset -c 0 redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" &
pids+=($!)
redis_url=redis://127.0.0.1:$REDIS_PORT
declare -A port=([keygate-redis]=18191 [naive]=18192 [keygate-memory]=18193)
DATABASE_URL="sqlite://$work/r.db" REDIS_URL=$redis_url KEYGATE_LISTEN=127.0.0.1:${port[keygate-redis]} \
  KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn taskset -c 0 target/release/keygate 2>"$work/r.log" &
pids+=($!)
taskset -c 0 target/release/examples/naive_redis 127.0.0.1:${port[naive]} "$redis_url" &
pids+=($!)
DATABASE_URL="sqlite://$work/m.db" KEYGATE_LISTEN=127.0.0.1:${port[keygate-memory]} \
  KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn taskset -c 0 target/release/keygate 2>"$work/m.log" &
pids+=($!)
for p in "${port[@]}"; do
  for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$p/" && break; sleep 0.1; done
done

run() { # name [LIMIT [ASYNC]]
  LIMIT=${2:-1000000000} ASYNC=${3:-false} taskset -c 1 wrk -t1 -c64 -d"$DURATION" -s bins/keygate/bench/limit.lua \
    "http://127.0.0.1:${port[$1]}" | grep '^RESULT' | sed "s/^RESULT/$1/"
}
for s in "${!port[@]}"; do # warm-up: namespaces, caches, the 10k budgets
  LIMIT=1000000000 taskset -c 1 wrk -t1 -c8 -d2s -s bins/keygate/bench/limit.lua "http://127.0.0.1:${port[$s]}" >/dev/null
done

ratios() { # results-file first second: median of the per-round throughput ratios first/second
  awk -v a="$2" -v b="$3" '
    { split($2, r, "="); round = r[2]; split($3, x, "="); rps[$1, round] = x[2]; if (round > n) n = round }
    END {
      for (i = 1; i <= n; i++) q[i] = rps[a, i] / rps[b, i]
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (q[j] < q[i]) { t = q[i]; q[i] = q[j]; q[j] = t }
      printf "%s / %s: median of %d per-round ratios %.2f\n", a, b, n, (n % 2) ? q[(n + 1) / 2] : (q[n / 2] + q[n / 2 + 1]) / 2
    }' "$1"
}

echo "== saturated: 64 connections, 10k identifiers, every request passes"
for r in $(seq 1 "$ROUNDS"); do
  for s in keygate-redis naive keygate-memory; do run "$s" | sed "s/^$s/$s round=$r/"; done
done | tee "$work/saturated"
ratios "$work/saturated" keygate-redis naive
ratios "$work/saturated" keygate-redis keygate-memory

echo "== async: true, same load as the saturated phase"
for r in $(seq 1 "$ROUNDS"); do
  for s in keygate-redis keygate-memory; do run "$s" 1000000000 true | sed "s/^$s/$s round=$r/"; done
done | tee "$work/async"
ratios "$work/async" keygate-redis keygate-memory

echo "== denials: limit 5 (after the first 5 requests of each identifier, every answer is a denial)"
for r in $(seq 1 "$ROUNDS"); do
  for s in keygate-redis keygate-memory; do run "$s" 5 | sed "s/^$s/$s round=$r/"; done
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
