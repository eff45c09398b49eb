#!/usr/bin/env bash
# What metrics cost on the rate-limit hot path: keygate with KEYGATE_METRICS=on (the
# default) against KEYGATE_METRICS=off (nothing recorded), alternating rounds in one run
# (docs/performance.md). One worker each, pinned to CPU 0; wrk on CPU 1.
#
#   bash bins/keygate/bench/metrics-cost.sh                 # ROUNDS=5 DURATION=10s
set -euo pipefail
cd "$(dirname "$0")/../../.."

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
ROOT_KEY=kg_root_metrics_bench_$(date +%s)
export ROOT_KEY
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
cargo build --release -q -p keygate --bin keygate

work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
declare -A port=([on]=18291 [off]=18292)
for m in on off; do
  DATABASE_URL="sqlite://$work/$m.db" KEYGATE_LISTEN=127.0.0.1:${port[$m]} KEYGATE_WORKERS=1 \
    KEYGATE_METRICS=$m KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn taskset -c 0 target/release/keygate 2>"$work/$m.log" &
  pids+=($!)
done
for p in "${port[@]}"; do
  for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$p/v1/liveness" && break; sleep 0.1; done
  taskset -c 1 wrk -t1 -c8 -d2s -s bins/keygate/bench/limit.lua "http://127.0.0.1:$p" >/dev/null
done
for r in $(seq 1 "$ROUNDS"); do
  for m in on off; do
    echo "$m round=$r $(taskset -c 1 wrk -t1 -c64 -d"$DURATION" -s bins/keygate/bench/limit.lua \
      "http://127.0.0.1:${port[$m]}" | grep '^RESULT' | sed 's/^RESULT //')"
  done
done | tee "$work/rounds"
awk '{ split($2, r, "="); split($3, x, "="); rps[$1, r[2]] = x[2]; if (r[2] > n) n = r[2] }
  END {
    for (i = 1; i <= n; i++) q[i] = rps["on", i] / rps["off", i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (q[j] < q[i]) { t = q[i]; q[i] = q[j]; q[j] = t }
    printf "metrics on / off: median of %d per-round ratios %.3f\n", n, (n % 2) ? q[(n + 1) / 2] : (q[n / 2] + q[n / 2 + 1]) / 2
  }' "$work/rounds"
