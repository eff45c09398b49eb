#!/usr/bin/env bash
# Two keygate binaries side by side on the hot paths, alternating rounds in one run: the
# forward-auth call alone (GET /v1/gateway.authorize: key, permission, a limit that always
# passes), ratelimits.limit, keys.verifyKey (cached), and v2 keys.verifyKey over KEYS keys
# that spend credits and an auto-applied limit ("credits"), wrk at each server directly.
#
#   bash bins/keygate/bench/ab.sh BEFORE_BINARY AFTER_BINARY   # ROUNDS=3 DURATION=5s CONNECTIONS=64
#
# e.g. a build of an older commit against the current one:
#   git worktree add /tmp/before <commit> && (cd /tmp/before && CARGO_TARGET_DIR=$PWD/target \
#     cargo build --release -p keygate) ; cp target/release/keygate /tmp/keygate-before
# Each binary: one worker on CPU 0, a database of its own; wrk (one thread) on CPU 1.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BEFORE_BINARY AFTER_BINARY" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
KEYS=${KEYS:-200}
DURATION=${DURATION:-5s}
CONNECTIONS=${CONNECTIONS:-64}
ROOT_KEY=kg_root_ab_bench_$(date +%s)_000000
set -- "$(realpath "$1")" "$(realpath "$2")"  # before the cd below
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh
require wrk curl taskset

declare -A port key
port[before]=18601
port[after]=18602
for side in before after; do
  bin=$1; [ "$side" = after ] && bin=$2
  DATABASE_URL="sqlite://$work/$side.db" KEYGATE_LISTEN=127.0.0.1:${port[$side]} KEYGATE_WORKERS=1 \
    KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn taskset -c 0 "$bin" 2>"$work/$side.log" &
  pids+=($!)
  wait_up "${port[$side]}"
  key[$side]=$(curl -s "http://127.0.0.1:${port[$side]}/v1/keys.createKey" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d '{"permissions":["documents.read"]}' | sed 's/.*"key":"\([^"]*\)".*/\1/')
  create_keys "${port[$side]}" v2/keys.createKey \
    '{"apiId":"api_ab","credits":{"remaining":1000000000},"ratelimits":[{"name":"calls","limit":1000000,"duration":60000,"autoApply":true}]}' \
    "$KEYS" >"$work/$side-spending.txt"
  expect_valid "${port[$side]}" v2/keys.verifyKey "{\"key\":\"$(head -1 "$work/$side-spending.txt")\"}"
  cat >"$work/$side-limit.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $ROOT_KEY"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"namespace":"ab","identifier":"user","limit":1000000000,"duration":60000}'
LUA
  cat >"$work/$side-verify.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"key":"${key[$side]}","authorization":{"permissions":"documents.read"}}'
LUA
done

run() { # side endpoint
  local side=$1 what=$2 base="http://127.0.0.1:${port[$1]}"
  case $what in
    gateway) taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -H "Authorization: Bearer ${key[$side]}" \
      -H "X-Keygate-Root-Key: $ROOT_KEY" -H "X-Keygate-Permissions: documents.read" \
      -H "X-Keygate-Ratelimit: namespace=gw; limit=1000000000; duration=60000" "$base/v1/gateway.authorize" ;;
    limit) taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s "$work/$side-limit.lua" "$base/v1/ratelimits.limit" ;;
    verify) taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s "$work/$side-verify.lua" "$base/v1/keys.verifyKey" ;;
    credits) ROOT_KEY=$ROOT_KEY KEYS_FILE="$work/$side-spending.txt" \
      taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bins/keygate/bench/verify-v2.lua "$base" ;;
  esac | awk -v s="$side" -v w="$what" '/Requests\/sec/ {print w, s, $2} /Non-2xx/ {print "NON2XX", w, s, $NF > "/dev/stderr"}'
}

for r in $(seq 1 "$ROUNDS"); do
  for what in gateway limit verify credits; do
    for side in before after; do run "$side" "$what"; done
  done
done | tee "$work/rounds"
awk '{ v[$1, $2, ++n[$1, $2]] = $3; if (n[$1, $2] > m) m = n[$1, $2]; w[$1] = 1 }
  END {
    for (x in w) {
      for (i = 1; i <= m; i++) q[i] = v[x, "after", i] / v[x, "before", i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (q[j] < q[i]) { t = q[i]; q[i] = q[j]; q[j] = t }
      printf "%-8s after / before: median of %d per-round ratios %.3f\n", x, m, (m % 2) ? q[(m + 1) / 2] : (q[m / 2] + q[m / 2 + 1]) / 2
    }
  }' "$work/rounds"
