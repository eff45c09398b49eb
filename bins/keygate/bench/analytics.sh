#!/usr/bin/env bash
# v1 keys.verifyKey (or ratelimits.limit) with analytics on (every verification or
# decision counted, written every 2 s) against the same build with KEYGATE_ANALYTICS=off,
# in one run (issue 33's target: >= 0.95x).
#
#   bash bins/keygate/bench/analytics.sh               # embedded default (SQLite)
#   SCALE_OUT=1 bash bins/keygate/bench/analytics.sh   # PostgreSQL + Redis (127.0.0.1)
#   ROUNDS=5 DURATION=10s CONNECTIONS=64 KEYS=1000 bash bins/keygate/bench/analytics.sh
#   WORKLOAD=limit bash bins/keygate/bench/analytics.sh  # v1 ratelimits.limit instead
#                                                         # (10,000 rotating identifiers)
#
# Two servers share one database: "on" and "off", each one worker pinned to CPU 0; wrk (one
# thread) on CPU 1. KEYS keys are created, each holding documents.read; verify.lua rotates
# over them asking for documents.read. Rounds alternate on and off, so that machine noise
# hits both; the ratio is the median of per-round ratios.
# Needs: wrk (apt-get install wrk), curl, taskset; SCALE_OUT=1 also psql.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1000}
ON_PORT=${ON_PORT:-18382}
OFF_PORT=${OFF_PORT:-18383}
ROOT_KEY=kg_root_bench_analytics_$(date +%s)_0000
export ROOT_KEY

WORKLOAD=${WORKLOAD:-verify}
case $WORKLOAD in
  verify) script=bins/keygate/bench/verify.lua; label=verifyKey ;;
  limit) script=bins/keygate/bench/limit.lua; label=ratelimits.limit; KEYS=1 ;;
  *) echo "WORKLOAD is verify or limit" >&2; exit 1 ;;
esac

require wrk curl taskset
cargo build --release -q -p keygate --bin keygate
bench_database
# ON_MODE=off makes both sides off: an A/A run that shows the two servers' own skew.
serve_keygate $ON_PORT "$work/on.log" KEYGATE_ANALYTICS="${ON_MODE:-on}"
serve_keygate $OFF_PORT "$work/off.log" KEYGATE_ANALYTICS=off

create_keys $ON_PORT v1/keys.createKey '{"permissions":["documents.read"]}' "$KEYS" >"$work/keys.txt"
export KEYS_FILE="$work/keys.txt"
for key in $(head -1 "$KEYS_FILE") $(tail -1 "$KEYS_FILE"); do
  for p in $ON_PORT $OFF_PORT; do
    expect_valid $p v1/keys.verifyKey "{\"key\":\"$key\",\"authorization\":{\"permissions\":\"documents.read\"}}"
  done
done

# Warm-up: caches.
for p in $ON_PORT $OFF_PORT; do CONNECTIONS=8 DURATION=2s wrk_round warm $p "$script" >/dev/null; done

for r in $(seq 1 "$ROUNDS"); do
  wrk_round "on round=$r" $ON_PORT "$script"
  wrk_round "off round=$r" $OFF_PORT "$script"
done | tee "$work/results"
sleep 3 # the last flush
curl -s "http://127.0.0.1:$ON_PORT/metrics" | grep -E '^keygate_analytics_dropped_total' || echo "keygate_analytics_dropped_total 0"

out=$work/results
echo "$label, analytics on:  median $(median_of "$out" on rps) req/s, median p99 $(median_of "$out" on p99_us) us"
echo "$label, analytics off: median $(median_of "$out" off rps) req/s, median p99 $(median_of "$out" off p99_us) us"
echo "on/off: median of per-round ratios $(ratio "$out" on off) (target >= 0.95); non-2xx or socket errors: $(errors "$out")"
