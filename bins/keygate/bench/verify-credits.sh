#!/usr/bin/env bash
# v2 keys.verifyKey on keys that spend (credits and an auto-applied rate limit) against the
# same call on plain keys, same server, same run (issue 48's targets: >= 0.85x embedded,
# >= 0.80x scaled out; p99 <= 2x plain).
#
#   bash bins/keygate/bench/verify-credits.sh               # embedded default (SQLite)
#   SCALE_OUT=1 bash bins/keygate/bench/verify-credits.sh   # PostgreSQL + Redis (127.0.0.1)
#   ROUNDS=5 DURATION=10s CONNECTIONS=64 KEYS=1000 bash bins/keygate/bench/verify-credits.sh
#   KEYGATE_BIN=/tmp/keygate-before bash bins/keygate/bench/verify-credits.sh  # another build, as is
#   PARTS=1 bash bins/keygate/bench/verify-credits.sh  # also the two parts of a spend apart
#   CPU=1 bash bins/keygate/bench/verify-credits.sh    # also the ratios of CPU time per request
#   WEBHOOK=1 bash bins/keygate/bench/verify-credits.sh  # spending with a webhook endpoint
#     subscribed to credit events (enabled) against none (the endpoint disabled), same keys,
#     rounds interleaved (issue 76: >= 0.97x); the endpoint's receiver is a closed port
#
# One server, one worker pinned to CPU 0; wrk (one thread, one connection per request
# stream) on CPU 1. KEYS plain keys, and KEYS keys each with credits (1e9) and one
# autoApply limit (1,000,000 per minute, never reached). Rounds alternate plain and
# spending (PARTS=1: also keys with the limit only, and with credits only); the ratio is the
# median of per-round ratios. A failed commit or any answer but
# VALID counts as an error. At the end, the server's counters: group commits and their sizes,
# verifications by code, and how many went off the inline path (`keygate_blocking_wait_
# seconds_count`: each key's first load, 2 x KEYS, and any spend that had to wait).
# Needs: wrk (apt-get install wrk), curl, taskset; SCALE_OUT=1 also psql.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1000}
PORT=${PORT:-18390}
ROOT_KEY=kg_root_bench_credits_$(date +%s)_0000
export ROOT_KEY

require wrk curl taskset
[ -n "${KEYGATE_BIN:-}" ] || cargo build --release -q -p keygate --bin keygate
bench_database
serve_keygate $PORT "$work/server.log" KEYGATE_WEBHOOKS_ALLOW_PRIVATE=true

create_keys $PORT v2/keys.createKey '{"apiId":"api_bench"}' "$KEYS" >"$work/plain.txt"
spending=${SPENDING:-'{"apiId":"api_bench","credits":{"remaining":1000000000},"ratelimits":[{"name":"calls","limit":1000000,"duration":60000,"autoApply":true}]}'}
create_keys $PORT v2/keys.createKey "$spending" "$KEYS" >"$work/spending.txt"
kinds="plain spending"
if [ -n "${PARTS:-}" ]; then
  kinds="plain spending limited credits"
  create_keys $PORT v2/keys.createKey \
    '{"apiId":"api_bench","ratelimits":[{"name":"calls","limit":1000000,"duration":60000,"autoApply":true}]}' \
    "$KEYS" >"$work/limited.txt"
  create_keys $PORT v2/keys.createKey '{"apiId":"api_bench","credits":{"remaining":1000000000}}' "$KEYS" \
    >"$work/credits.txt"
fi
for f in $kinds; do
  expect_valid $PORT v2/keys.verifyKey "{\"key\":\"$(head -1 "$work/$f.txt")\"}"
done

run() { # name keys-file
  KEYS_FILE=$2 wrk_round "$1" $PORT bins/keygate/bench/verify-v2.lua
}
hook() { # enabled: true|false
  curl -sS "http://127.0.0.1:$PORT/v2/webhooks.$1" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d "$2"
}
if [ -n "${WEBHOOK:-}" ]; then
  endpoint=$(hook createEndpoint '{"url":"http://127.0.0.1:9/hook","events":["key.credits.low","key.credits.exhausted"],"enabled":false}' |
    sed -E 's/.*"endpointId":"([^"]+)".*/\1/')
  cp "$work/spending.txt" "$work/hooked.txt"
  kinds="spending hooked"
  # A round of `hooked` with the endpoint enabled, every other round with it disabled.
  run() {
    local enabled=false
    [[ $1 == hooked* ]] && enabled=true
    hook updateEndpoint "{\"endpointId\":\"$endpoint\",\"enabled\":$enabled}" >/dev/null
    KEYS_FILE=$2 wrk_round "$1" $PORT bins/keygate/bench/verify-v2.lua
  }
fi
# Warm-up: every key's cache entry.
for f in $kinds; do
  run "warm-$f" "$work/$f.txt" >/dev/null
done

for r in $(seq 1 "$ROUNDS"); do
  for f in $kinds; do
    run "$f round=$r" "$work/$f.txt"
  done
done | tee "$work/results"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^keygate_(credit_(commits_total|commit_batch_size_(sum|count))|blocking_wait_seconds_count|verifications_total)' || true

out=$work/results
echo "plain verifyKey:    median $(median_of "$out" plain rps) req/s, median p99 $(median_of "$out" plain p99_us) us"
echo "spending verifyKey: median $(median_of "$out" spending rps) req/s, median p99 $(median_of "$out" spending p99_us) us"
target=$([[ -n ${SCALE_OUT:-} ]] && echo 0.80 || echo 0.85)
echo "spending/plain: median of per-round ratios $(ratio "$out" spending plain) (target >= $target); errors: $(errors "$out")"
if [ -n "${WEBHOOK:-}" ]; then
  echo "spending with a credit webhook/without: median of per-round ratios $(ratio "$out" hooked spending) (target >= 0.97)"
fi
if [ -n "${PARTS:-}" ]; then
  echo "limit only/plain: $(ratio "$out" limited plain); credits only/plain: $(ratio "$out" credits plain)"
fi
if [ -n "${CPU:-}" ]; then
  # The same ratios from the server's CPU time per request (plain's over the other's).
  echo "by CPU time per request: spending/plain $(ratio "$out" plain spending cpu_us)$([ -n "${PARTS:-}" ] &&
    echo "; limit only/plain $(ratio "$out" plain limited cpu_us); credits only/plain $(ratio "$out" plain credits cpu_us)")"
fi
