#!/usr/bin/env bash
# v1 keys.verifyKey of one workspace while another workspace runs SQL analytics queries
# that hit the 5 s deadline back to back (two at a time, its limit): the verification
# throughput with them ("busy") against without ("quiet"), rounds alternating, in one run
# (API-v2.md §18: other tenants' requests are not slowed).
#
#   bash bins/keygate/bench/analytics-sql.sh               # embedded default (SQLite)
#   SCALE_OUT=1 bash bins/keygate/bench/analytics-sql.sh   # PostgreSQL + Redis
#   ROUNDS=5 DURATION=10s CONNECTIONS=64 KEYS=1000 bash bins/keygate/bench/analytics-sql.sh
#
# One server, one worker, pinned to CPU 0 (its blocking pool, where the queries run, too);
# wrk (one thread) on CPU 1, the queries sent by curl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
KEYS=${KEYS:-1000}
PORT=${PORT:-18391}
ROOT_KEY=kg_root_bench_sql_$(date +%s)_00000
export ROOT_KEY

require wrk curl taskset
cargo build --release -q -p keygate --bin keygate
bench_database
serve_keygate $PORT "$work/server.log"
create_keys $PORT v1/keys.createKey '{"permissions":["documents.read"]}' "$KEYS" >"$work/keys.txt"
export KEYS_FILE="$work/keys.txt"
expect_valid $PORT v1/keys.verifyKey "{\"key\":\"$(head -1 "$KEYS_FILE")\",\"authorization\":{\"permissions\":\"documents.read\"}}"

# The other tenant: a workspace of its own, a root key reading its analytics, and a few
# counts to join (its own verifications, flushed).
target/release/keygate workspaces create --name other >/dev/null
other_key=$(target/release/keygate root-keys create --workspace other --permission '*' | sed -E 's/.*"key":"([^"]+)".*/\1/')
for _ in 1 2 3 4; do
  secret=$(curl -s "http://127.0.0.1:$PORT/v2/keys.createKey" -H "Authorization: Bearer $other_key" \
    -H 'Content-Type: application/json' -d '{"apiId":"api_other"}' | sed -E 's/.*"key":"([^"]+)".*/\1/')
  curl -s -o /dev/null "http://127.0.0.1:$PORT/v2/keys.verifyKey" -H "Authorization: Bearer $other_key" \
    -H 'Content-Type: application/json' -d "{\"key\":\"$secret\"}"
done
sleep 3
from=$(for i in $(seq 1 20); do printf 'key_verifications_per_day_v1 t%s, ' "$i"; done)
query="{\"query\":\"SELECT count() AS n FROM ${from%, }\"}"
answer=$(curl -s "http://127.0.0.1:$PORT/v2/analytics.getVerifications" -H "Authorization: Bearer $other_key" \
  -H 'Content-Type: application/json' -d "$query")
grep -q query_too_expensive <<<"$answer" || { echo "the heavy query did not hit its deadline: $answer" >&2; exit 1; }

# busy_loop FILE: two clients sending the heavy query back to back until FILE is removed.
busy_loop() {
  for _ in 1 2; do
    ( while [ -e "$1" ]; do
        curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$PORT/v2/analytics.getVerifications" \
          -H "Authorization: Bearer $other_key" -H 'Content-Type: application/json' -d "$query" >>"$work/busy-codes.txt"
      done ) &
  done
}

results="$work/rounds.txt"
for round in $(seq 1 "$ROUNDS"); do
  wrk_round quiet $PORT bins/keygate/bench/verify.lua | sed "s/^quiet/quiet round=$round/" >>"$results"
  touch "$work/busy"
  busy_loop "$work/busy"
  sleep 1
  wrk_round busy $PORT bins/keygate/bench/verify.lua | sed "s/^busy/busy round=$round/" >>"$results"
  rm -f "$work/busy"
  wait $(jobs -p | grep -v -w -F "$(printf '%s\n' "${pids[@]}")") 2>/dev/null || true
done
cat "$results"
echo "verifyKey rps: quiet $(median_of "$results" quiet rps), busy $(median_of "$results" busy rps); busy/quiet $(ratio "$results" busy quiet)"
echo "p99 (us): quiet $(median_of "$results" quiet p99_us), busy $(median_of "$results" busy p99_us)"
echo "heavy queries answered: $(sort "$work/busy-codes.txt" | uniq -c | tr '\n' ' ')"
echo "errors: $(errors "$results")"
