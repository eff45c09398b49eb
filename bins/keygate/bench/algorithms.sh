#!/usr/bin/env bash
# The rate-limit algorithms (API-v2.md §26) against each other on one server: v1
# `ratelimits.limit` over HTTP, 10,000 rotating identifiers, every request passing,
# saturated (wrk, 64 connections), in a namespace of each algorithm; rounds interleaved
# (fixed, sliding, token_bucket, then again), ratios the medians of per-round ratios.
#
#   bash bins/keygate/bench/algorithms.sh                 # in process (SQLite), 5 rounds of 8 s
#   SCALE_OUT=1 bash bins/keygate/bench/algorithms.sh     # PostgreSQL + the local Redis
#   ROUNDS=7 DURATION=10s bash bins/keygate/bench/algorithms.sh
#
# One worker pinned to CPU 0, wrk on CPU 1 (lib.sh). CPU=1 adds the server's CPU per request.
# Needs: wrk, curl, taskset.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
export DURATION=${DURATION:-8s}
PORT=${PORT:-18190}
ROOT_KEY=kg_root_bench_$(date +%s)
export ROOT_KEY

require wrk curl taskset
cargo build --release -q -p keygate --bin keygate
bench_database
serve_keygate "$PORT" "$work/kg.log"

for algorithm in fixed sliding token_bucket; do
  # Warm-up: the namespace's caches and its 10,000 budgets.
  algorithm_namespace "$PORT" "$algorithm"
done

for r in $(seq 1 "$ROUNDS"); do
  for algorithm in fixed sliding token_bucket; do
    NAMESPACE=$algorithm wrk_round "$algorithm round=$r" "$PORT" bins/keygate/bench/limit.lua
  done
done | tee "$work/rounds"

[ "$(errors "$work/rounds")" = 0 ] || { echo "non-2xx answers or socket errors in the rounds" >&2; exit 1; }
for algorithm in fixed sliding token_bucket; do
  echo "$algorithm: median $(median_of "$work/rounds" "$algorithm" rps) req/s, p99 $(median_of "$work/rounds" "$algorithm" p99_us) us"
done
echo "sliding / fixed: $(ratio "$work/rounds" sliding fixed)"
echo "token_bucket / fixed: $(ratio "$work/rounds" token_bucket fixed)"
