#!/usr/bin/env bash
# The embedded mode's persistent rate-limit store (budgets kept in `<db>-ratelimits/`,
# API-v2.md §26) against the volatile one (KEYGATE_RATELIMIT_PERSIST=off): two servers on
# SQLite files of their own, v1 `ratelimits.limit` over HTTP, 10,000 rotating identifiers,
# every request passing, saturated (wrk, 64 connections), in a namespace of each algorithm;
# rounds interleaved (persistent, volatile, then again), ratios the medians of per-round
# ratios.
#
#   bash bins/keygate/bench/limit-persist.sh                 # 5 rounds of 8 s
#   ROUNDS=7 DURATION=10s bash bins/keygate/bench/limit-persist.sh
#
# Each server one worker pinned to CPU 0 (one loaded at a time), wrk on CPU 1 (lib.sh).
# Needs: wrk, curl, taskset.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
export DURATION=${DURATION:-8s}
PORT=${PORT:-18290}
ROOT_KEY=kg_root_bench_$(date +%s)
export ROOT_KEY
ALGORITHMS=${ALGORITHMS:-fixed sliding token_bucket}

require wrk curl taskset
cargo build --release -q -p keygate --bin keygate
serve_keygate "$PORT" "$work/persistent.log" DATABASE_URL="sqlite://$work/persistent.db" KEYGATE_RATELIMIT_PERSIST=on
serve_keygate "$((PORT + 1))" "$work/volatile.log" DATABASE_URL="sqlite://$work/volatile.db" KEYGATE_RATELIMIT_PERSIST=off
[ -d "$work/persistent.db-ratelimits" ] || { echo "the persistent server keeps no budgets" >&2; exit 1; }

for port in "$PORT" "$((PORT + 1))"; do
  for algorithm in $ALGORITHMS; do
    algorithm_namespace "$port" "$algorithm"
  done
done

for r in $(seq 1 "$ROUNDS"); do
  for algorithm in $ALGORITHMS; do
    NAMESPACE=$algorithm wrk_round "persistent-$algorithm round=$r" "$PORT" bins/keygate/bench/limit.lua
    NAMESPACE=$algorithm wrk_round "volatile-$algorithm round=$r" "$((PORT + 1))" bins/keygate/bench/limit.lua
  done
done | tee "$work/rounds"

[ "$(errors "$work/rounds")" = 0 ] || { echo "non-2xx answers or socket errors in the rounds" >&2; exit 1; }
for algorithm in $ALGORITHMS; do
  for mode in persistent volatile; do
    echo "$mode $algorithm: median $(median_of "$work/rounds" "$mode-$algorithm" rps) req/s, p99 $(median_of "$work/rounds" "$mode-$algorithm" p99_us) us"
  done
  echo "persistent / volatile ($algorithm): throughput $(ratio "$work/rounds" "persistent-$algorithm" "volatile-$algorithm"), p99 $(ratio "$work/rounds" "persistent-$algorithm" "volatile-$algorithm" p99_us)"
done
echo "journal files: $(du -sh "$work/persistent.db-ratelimits" | cut -f1)"
