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

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1000}
ON_PORT=${ON_PORT:-18382}
OFF_PORT=${OFF_PORT:-18383}
ROOT_KEY=kg_root_bench_analytics_$(date +%s)_0000
export ROOT_KEY

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
cargo build --release -q -p keygate --bin keygate

work=$(mktemp -d)
schema=""
cleanup() {
  kill "${on_pid:-}" "${off_pid:-}" 2>/dev/null || true
  [ -n "$schema" ] && psql -q -h 127.0.0.1 -U postgres test -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

if [ "${SCALE_OUT:-0}" = 1 ]; then
  schema=kg_bench_$$
  psql -q -h 127.0.0.1 -U postgres test -c "CREATE SCHEMA $schema" >/dev/null
  export DATABASE_URL="postgres://postgres@127.0.0.1:5432/test?options=--search_path%3D$schema"
  export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379} KEYGATE_REDIS_KEY_PREFIX="kgbench$$:"
else
  export DATABASE_URL="sqlite://$work/bench.db"
fi

serve() { # port analytics-on|off log
  KEYGATE_LISTEN=127.0.0.1:$1 KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY=$ROOT_KEY KEYGATE_ANALYTICS=$2 \
    RUST_LOG=warn taskset -c 0 target/release/keygate 2>"$3" &
}
wait_up() { for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$1/v1/liveness" && return; sleep 0.1; done; }
# ON_MODE=off makes both sides off: an A/A run that shows the two servers' own skew.
serve $ON_PORT "${ON_MODE:-on}" "$work/on.log"; on_pid=$!
wait_up $ON_PORT
serve $OFF_PORT off "$work/off.log"; off_pid=$!
wait_up $OFF_PORT

WORKLOAD=${WORKLOAD:-verify}
case $WORKLOAD in
  verify) script=verify.lua; label=verifyKey ;;
  limit) script=limit.lua; label=ratelimits.limit; KEYS=1 ;;
  *) echo "WORKLOAD is verify or limit" >&2; exit 1 ;;
esac

for _ in $(seq 1 "$KEYS"); do
  curl -s "http://127.0.0.1:$ON_PORT/v1/keys.createKey" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d '{"permissions":["documents.read"]}' \
    | sed -E 's/.*"key":"([^"]+)".*/\1/'
  echo
done >"$work/keys.txt"
export KEYS_FILE="$work/keys.txt"
for key in $(head -1 "$KEYS_FILE") $(tail -1 "$KEYS_FILE"); do
  for p in $ON_PORT $OFF_PORT; do
    curl -s "http://127.0.0.1:$p/v1/keys.verifyKey" -H 'Content-Type: application/json' \
      -d "{\"key\":\"$key\",\"authorization\":{\"permissions\":\"documents.read\"}}" | grep -q '"valid":true' \
      || { echo "a benchmark key does not verify VALID on port $p" >&2; exit 1; }
  done
done

run() { # name port script
  taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s "bins/keygate/bench/$3" "http://127.0.0.1:$2" \
    | grep '^RESULT' | sed "s/^RESULT/$1/"
}
# Warm-up: caches.
for p in $ON_PORT $OFF_PORT; do taskset -c 1 wrk -t1 -c8 -d2s -s "bins/keygate/bench/$script" "http://127.0.0.1:$p" >/dev/null; done

for r in $(seq 1 "$ROUNDS"); do
  run "on round=$r" $ON_PORT "$script"
  run "off round=$r" $OFF_PORT "$script"
done | tee "$work/results"
sleep 3 # the last flush
curl -s "http://127.0.0.1:$ON_PORT/metrics" | grep -E '^keygate_analytics_dropped_total' || echo "keygate_analytics_dropped_total 0"

awk -v label="$label" '
  { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
  $1 == "on"  { on[++n] = v["rps"]; onp99[n] = v["p99_us"]; err += v["errors"] }
  $1 == "off" { off[n] = v["rps"]; offp99[n] = v["p99_us"]; err += v["errors"] }
  function median(a, m,   i, j, t, b) {
    for (i = 1; i <= m; i++) b[i] = a[i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
    return (m % 2) ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2
  }
  END {
    for (i = 1; i <= n; i++) r[i] = on[i] / off[i]
    printf "%s, analytics on:  median %.0f req/s, median p99 %d us\n", label, median(on, n), median(onp99, n)
    printf "%s, analytics off: median %.0f req/s, median p99 %d us\n", label, median(off, n), median(offp99, n)
    printf "on/off: median of per-round ratios %.2f (target >= 0.95); non-2xx or socket errors: %d\n", median(r, n), err
  }' "$work/results"
