#!/usr/bin/env bash
# Verification over many keys (issue 82): KEYS keys imported with `keygate keys import`
# (each with two permissions and an identity: bins/keygate/bench/import_file.py), then v2
# `keys.verifyKey` over all of them in rotation, one worker on CPU 0, wrk on CPU 1:
#   miss    the verification cache bounded at 1 MiB, so nearly every verification loads
#           its key (server CPU per verification: the miss's cost; target <= 50 us on
#           SQLite, <= 100 us on PostgreSQL)
#   cached  the default cache, after one pass over the keys warmed it: req/s, p99, and the
#           server's memory per cached key: resident (RSS after warming minus before, over
#           the keys verified; it includes what else warming grew, e.g. SQLite's page
#           caches and analytics' series), heap (the allocator's count of what Rust code
#           holds, after minus before) and the cache's own account of its entries
#   restart a warmed server stopped and the next started under the same load (RESTART=0:
#           not measured): p99 per 2 s slice, from its snapshot and cold
# ROUNDS rounds of each, interleaved (each its own server, on one database).
#
#   bash bins/keygate/bench/many-keys.sh                     # 100,000 keys on SQLite
#   KEYS=1000000 bash bins/keygate/bench/many-keys.sh
#   SCALE_OUT=1 bash bins/keygate/bench/many-keys.sh         # PostgreSQL + Redis
#   KEYGATE_BIN=/tmp/keygate-before bash bins/keygate/bench/many-keys.sh   # another build
#   ANALYTICS=off bash bins/keygate/bench/many-keys.sh       # servers with analytics off
#   ANALYTICS="on off" bash bins/keygate/bench/many-keys.sh  # cached rounds of both, and their ratio
#   COMPARE=/tmp/keygate-before MISS_ONLY=1 bash bins/keygate/bench/many-keys.sh
#                     # miss rounds of another build interleaved with this one's, nothing else
#   COMPARE=/tmp/keygate-before RESTART=0 bash bins/keygate/bench/many-keys.sh
#                     # miss and cached rounds of both builds interleaved, and their ratio
# Needs: wrk, curl, taskset, python3; SCALE_OUT=1 also psql.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-3}
ANALYTICS=${ANALYTICS:-on}
KEYS=${KEYS:-100000}
PORT=${PORT:-18392}
ROOT_KEY=kg_root_bench_many_keys_$(date +%s)_0000
export ROOT_KEY CPU=1

require wrk curl taskset python3
cargo build --release -q -p keygate --bin keygate
bench_database
serve_keygate $PORT "$work/import.log"
api=$(create_api $PORT many_keys)
python3 bins/keygate/bench/import_file.py "$work/keys.jsonl" "$KEYS" 1 "$work/secrets" "$KEYS"
taskset -c 1 target/release/keygate keys import --api "$api" --migration sha256_hex "$work/keys.jsonl" >/dev/null
kill "${pids[-1]}"
wait "${pids[-1]}" 2>/dev/null || true
unset 'pids[-1]'
export KEYS_FILE="$work/secrets"
secrets=$(wc -l <"$work/secrets")
echo "imported $KEYS keys, verifying $secrets of them (the ones without credits)"

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/${pids[-1]}/status"; }
# metric NAME: the value of a /metrics line (NAME with its labels, as printed).
metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v n="$1" '$1 == n { printf "%.0f\n", $2 }'; }
heap() { metric 'keygate_memory_bytes{kind="allocated"}'; }
stop_server() {
  kill "${pids[-1]}"
  wait "${pids[-1]}" 2>/dev/null || true
  unset 'pids[-1]'
}

# Each server of the miss and cached rounds starts cold: the cache a graceful stop wrote
# beside the database (`keygate.db-keys`) is removed first.
cold() { rm -f "$work/bench.db-keys"; }

for r in $(seq 1 "$ROUNDS"); do
  if [ -n "${COMPARE:-}" ]; then
    cold
    KEYGATE_BIN=$COMPARE serve_keygate $PORT "$work/miss.log" KEYGATE_VERIFY_CACHE_MB=1 KEYGATE_ANALYTICS="${ANALYTICS%% *}"
    wrk_round "miss-compare round=$r" $PORT bins/keygate/bench/verify-v2.lua
    stop_server
  fi
  cold
  serve_keygate $PORT "$work/miss.log" KEYGATE_VERIFY_CACHE_MB=1 KEYGATE_ANALYTICS="${ANALYTICS%% *}"
  line=$(wrk_round "miss round=$r" $PORT bins/keygate/bench/verify-v2.lua)
  echo "$line"
  misses_per_s=$(echo "$line" | sed -E 's/.* rps=([0-9]+).*/\1/')
  stop_server
  [ "${MISS_ONLY:-0}" = 0 ] || continue

  for analytics in $ANALYTICS; do
   for build in "" ${COMPARE:+compare}; do
    name=cached
    [ "$ANALYTICS" = "${ANALYTICS%% *}" ] || name=cached-$analytics
    [ -z "$build" ] || name=$name-compare
    cold
    if [ -n "$build" ]; then
      KEYGATE_BIN=$COMPARE serve_keygate $PORT "$work/cached.log" KEYGATE_ANALYTICS="$analytics"
    else
      serve_keygate $PORT "$work/cached.log" KEYGATE_ANALYTICS="$analytics"
    fi
    before=$(rss_kib) heap_before=$(heap)
    # One pass over every key warms the cache (its length from the miss rate just
    # measured, with a fifth to spare); then the measured round.
    warm=$((secrets * 6 / 5 / (misses_per_s > 0 ? misses_per_s : 1) + 2))
    DURATION=${WARM:-${warm}s} wrk_round warm $PORT bins/keygate/bench/verify-v2.lua >/dev/null
    line=$(wrk_round "$name round=$r" $PORT bins/keygate/bench/verify-v2.lua)
    cached=$(metric keygate_verify_cache_keys)
    echo "$line bytes_per_key=$(( ($(rss_kib) - before) * 1024 / secrets ))" \
      "heap_per_key=$(( ($(heap) - heap_before) / secrets ))" \
      "weight_per_key=$(( $(metric keygate_verify_cache_bytes) / (cached > 0 ? cached : 1) ))" "cached=$cached"
    stop_server
   done
  done
done | tee "$work/results"

# A restart under load: a server warmed by one pass is stopped gracefully (on SQLite it
# writes its cached keys beside the database), the next one started, and the load resumed
# at once in slices of SLICE (2 s) for RESTART_FOR (12 s): each slice's req/s and p99, from
# the snapshot and from a cold start (the snapshot removed before the start).
if [ "${RESTART:-1}" = 1 ] && [ "${MISS_ONLY:-0}" = 0 ]; then
  modes=cold
  [ "${SCALE_OUT:-0}" = 1 ] || modes="snapshot cold"
  misses_per_s=$(median_of "$work/results" miss rps)
  for mode in $modes; do
    cold
    serve_keygate $PORT "$work/restart.log"
    DURATION=${WARM:-$((secrets * 6 / 5 / (misses_per_s > 0 ? misses_per_s : 1) + 2))s} \
      wrk_round warm $PORT bins/keygate/bench/verify-v2.lua >/dev/null
    stop_server
    [ "$mode" = snapshot ] || cold
    serve_keygate $PORT "$work/restart.log"
    slice=${SLICE:-2}
    for t in $(seq 0 "$slice" $((${RESTART_FOR:-12} - slice))); do
      DURATION=${slice}s wrk_round "restart-$mode t=${t}-$((t + slice))s" $PORT bins/keygate/bench/verify-v2.lua
    done
    stop_server
  done | tee -a "$work/results"
fi

backend=$([ "${SCALE_OUT:-0}" = 1 ] && echo "PostgreSQL + Redis" || echo SQLite)
echo "many keys ($KEYS imported, $secrets verified, $backend):"
echo "  miss:   median $(median_of "$work/results" miss rps) req/s," \
  "$(field "$work/results" miss cpu_us | median) us of server CPU per verification"
[ -z "${COMPARE:-}" ] || echo "  miss, $COMPARE: median $(median_of "$work/results" miss-compare rps) req/s," \
  "$(field "$work/results" miss-compare cpu_us | median) us of server CPU per verification"
for analytics in $ANALYTICS; do
  [ "${MISS_ONLY:-0}" = 0 ] || break
  base=cached
  [ "$ANALYTICS" = "${ANALYTICS%% *}" ] || base=cached-$analytics
  for name in $base ${COMPARE:+$base-compare}; do
  echo "  $name: median $(median_of "$work/results" "$name" rps) req/s, p99 $(median_of "$work/results" "$name" p99_us) us," \
    "$(median_of "$work/results" "$name" bytes_per_key) bytes of RSS per key," \
    "$(median_of "$work/results" "$name" heap_per_key) of heap (the allocator's count)," \
    "$(median_of "$work/results" "$name" weight_per_key) by the cache's account"
  done
  [ -z "${COMPARE:-}" ] ||
    echo "  $base, this build / $COMPARE: $(ratio "$work/results" "$base" "$base-compare") (median of per-round ratios)"
done
for mode in snapshot cold; do
  lines=$(awk -v m="restart-$mode" '$1 == m' "$work/results")
  [ -n "$lines" ] && echo "  restart ($mode): p99 by slice $(echo "$lines" | sed -E 's/.* (t=[^ ]+) .*p99_us=([0-9]+).*/\1:\2us/' | tr '\n' ' ')"
done
if [ "$ANALYTICS" = "on off" ]; then
  echo "  analytics on / off: $(ratio "$work/results" cached-on cached-off) (median of per-round ratios)"
fi
[ "$(errors "$work/results")" = 0 ] || { echo "errors: $(errors "$work/results")" >&2; exit 1; }
