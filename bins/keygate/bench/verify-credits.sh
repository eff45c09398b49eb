#!/usr/bin/env bash
# v2 keys.verifyKey on keys that spend (credits and an auto-applied rate limit) against the
# same call on plain keys, same server, same run (issue 32's target: >= 0.80x).
#
#   bash bins/keygate/bench/verify-credits.sh               # embedded default (SQLite)
#   SCALE_OUT=1 bash bins/keygate/bench/verify-credits.sh   # PostgreSQL + Redis (127.0.0.1)
#   ROUNDS=5 DURATION=10s CONNECTIONS=64 KEYS=1000 bash bins/keygate/bench/verify-credits.sh
#
# One server, one worker pinned to CPU 0; wrk (one thread, one connection per request
# stream) on CPU 1. KEYS plain keys, and KEYS keys each with credits (1e9) and one
# autoApply limit (1,000,000 per minute, never reached). Rounds alternate plain and
# spending; the ratio is the median of per-round ratios. A failed commit or any answer but
# VALID counts as an error.
# Needs: wrk (apt-get install wrk), curl, taskset; SCALE_OUT=1 also psql.
set -euo pipefail
cd "$(dirname "$0")/../../.."

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1000}
PORT=${PORT:-18390}
ROOT_KEY=kg_root_bench_credits_$(date +%s)_0000
export ROOT_KEY

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
cargo build --release -q -p keygate --bin keygate

work=$(mktemp -d)
schema=""
cleanup() {
  kill "${pid:-}" 2>/dev/null || true
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

KEYGATE_LISTEN=127.0.0.1:$PORT KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn \
  taskset -c 0 target/release/keygate 2>"$work/server.log" &
pid=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/v1/liveness" && break; sleep 0.1; done

create() { # body
  curl -s "http://127.0.0.1:$PORT/v2/keys.createKey" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d "$1" | sed -E 's/.*"key":"([^"]+)".*/\1/'
  echo
}
for _ in $(seq 1 "$KEYS"); do create '{"apiId":"api_bench"}'; done >"$work/plain.txt"
spending=${SPENDING:-'{"apiId":"api_bench","credits":{"remaining":1000000000},"ratelimits":[{"name":"calls","limit":1000000,"duration":60000,"autoApply":true}]}'}
for _ in $(seq 1 "$KEYS"); do create "$spending"; done >"$work/spending.txt"
for f in plain spending; do
  key=$(head -1 "$work/$f.txt")
  curl -s "http://127.0.0.1:$PORT/v2/keys.verifyKey" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d "{\"key\":\"$key\"}" | grep -q '"valid":true' \
    || { echo "a $f benchmark key does not verify VALID" >&2; exit 1; }
done

run() { # name keys-file
  KEYS_FILE=$2 taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bins/keygate/bench/verify-v2.lua \
    "http://127.0.0.1:$PORT" | grep '^RESULT' | sed "s/^RESULT/$1/"
}
# Warm-up: every key's cache entry.
run warm-plain "$work/plain.txt" >/dev/null
run warm-spending "$work/spending.txt" >/dev/null

for r in $(seq 1 "$ROUNDS"); do
  run "plain round=$r" "$work/plain.txt"
  run "spending round=$r" "$work/spending.txt"
done | tee "$work/results"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^keygate_credit_(commits_total|commit_batch_size_(sum|count))' || true

awk '
  { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
  $1 == "plain"    { plain[++n] = v["rps"]; err += v["errors"] }
  $1 == "spending" { spend[n] = v["rps"]; sp99[n] = v["p99_us"]; err += v["errors"] }
  function median(a, m,   i, j, t, b) {
    for (i = 1; i <= m; i++) b[i] = a[i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
    return (m % 2) ? b[(m + 1) / 2] : (b[m / 2] + b[m / 2 + 1]) / 2
  }
  END {
    for (i = 1; i <= n; i++) r[i] = spend[i] / plain[i]
    printf "plain verifyKey:    median %.0f req/s\n", median(plain, n)
    printf "spending verifyKey: median %.0f req/s, median p99 %d us\n", median(spend, n), median(sp99, n)
    printf "spending/plain: median of per-round ratios %.2f (target >= 0.80); errors: %d\n", median(r, n), err
  }' "$work/results"
