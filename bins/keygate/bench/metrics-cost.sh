#!/usr/bin/env bash
# What metrics cost on the rate-limit hot path: keygate with KEYGATE_METRICS=on (the
# default) against KEYGATE_METRICS=off (nothing recorded), alternating rounds in one run
# (docs/performance/metrics.md). One worker each, pinned to CPU 0; wrk on CPU 1.
#
#   bash bins/keygate/bench/metrics-cost.sh                 # ROUNDS=5 DURATION=10s
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
ROOT_KEY=kg_root_metrics_bench_$(date +%s)
export ROOT_KEY
require wrk curl taskset
cargo build --release -q -p keygate --bin keygate

declare -A port=([on]=18291 [off]=18292)
for m in on off; do
  serve_keygate "${port[$m]}" "$work/$m.log" DATABASE_URL="sqlite://$work/$m.db" KEYGATE_METRICS=$m
  CONNECTIONS=8 DURATION=2s wrk_round warm "${port[$m]}" bins/keygate/bench/limit.lua >/dev/null
done
for r in $(seq 1 "$ROUNDS"); do
  for m in on off; do wrk_round "$m round=$r" "${port[$m]}" bins/keygate/bench/limit.lua; done
done | tee "$work/rounds"
echo "metrics on / off: median of $ROUNDS per-round ratios $(ratio "$work/rounds" on off)"
