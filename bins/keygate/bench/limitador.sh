#!/usr/bin/env bash
# keygate against Kuadrant's limitador (issue 80): the same decisions over HTTP, one core
# each, 10,000 rotating identifiers, every request passing (a limit of 10^9 a minute),
# saturated (wrk, 64 connections); rounds interleaved (keygate's fixed, sliding and
# token_bucket namespaces, then limitador), ratios the medians of per-round ratios.
#
#   LIMITADOR_BIN=/path/to/limitador-server bash bins/keygate/bench/limitador.sh
#       in memory: keygate on SQLite with its budgets kept across restarts (the default),
#       limitador's `memory` storage
#   SCALE_OUT=1 LIMITADOR_BIN=... bash bins/keygate/bench/limitador.sh
#       both on the local Redis: keygate on PostgreSQL + Redis, limitador's `redis` storage
#       (LIMITADOR_STORAGE=redis_cached for its cached one)
#
# LIMITADOR_BIN is a limitador-server binary you built yourself from its public repository
# (docs/performance/algorithms.md names the commit measured); nothing here builds it.
# keygate is sent `POST /v1/ratelimits.limit` (limit.lua), limitador `POST
# /check_and_report` (limitador.lua) with this limits file:
#   - {namespace: bench, max_value: 1000000000, seconds: 60, conditions: [],
#      variables: ["descriptors[0]['user_id']"]}
# Both servers pinned to CPU 0 (so each runs one worker thread: actix and tokio size their
# pools by the CPUs they may use), wrk on CPU 1. Needs: wrk, curl, taskset.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
export DURATION=${DURATION:-8s}
PORT=${PORT:-18195}
LIMITADOR_PORT=${LIMITADOR_PORT:-18196}
ROOT_KEY=kg_root_bench_$(date +%s)
export ROOT_KEY
: "${LIMITADOR_BIN:?LIMITADOR_BIN: the path of a limitador-server binary}"

require wrk curl taskset
cargo build --release -q -p keygate --bin keygate
bench_database
serve_keygate "$PORT" "$work/kg.log"

cat >"$work/limits.yaml" <<'YAML'
- namespace: bench
  max_value: 1000000000
  seconds: 60
  conditions: []
  variables: ["descriptors[0]['user_id']"]
YAML
if [ "${SCALE_OUT:-0}" = 1 ]; then
  storage=("${LIMITADOR_STORAGE:-redis}" "$REDIS_URL")
else
  storage=(memory)
fi
serve_limitador "$LIMITADOR_PORT" "$work/limits.yaml" "$work/limitador.log" "${storage[@]}"
curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$LIMITADOR_PORT/check_and_report" \
  -H 'Content-Type: application/json' -d '{"namespace":"bench","values":{"user_id":"warm"},"delta":1}' \
  | grep -q 200 || { echo "limitador does not pass a first request" >&2; exit 1; }

for algorithm in fixed sliding token_bucket; do
  algorithm_namespace "$PORT" "$algorithm"
done
CONNECTIONS=8 DURATION=2s wrk_round warm "$LIMITADOR_PORT" bins/keygate/bench/limitador.lua >/dev/null

for r in $(seq 1 "$ROUNDS"); do
  for algorithm in fixed sliding token_bucket; do
    NAMESPACE=$algorithm wrk_round "$algorithm round=$r" "$PORT" bins/keygate/bench/limit.lua
  done
  wrk_round "limitador round=$r" "$LIMITADOR_PORT" bins/keygate/bench/limitador.lua
done | tee "$work/rounds"

[ "$(errors "$work/rounds")" = 0 ] || { echo "non-2xx answers or socket errors in the rounds" >&2; exit 1; }
for name in fixed sliding token_bucket limitador; do
  echo "$name: median $(median_of "$work/rounds" "$name" rps) req/s, p99 $(median_of "$work/rounds" "$name" p99_us) us"
done
for algorithm in fixed sliding token_bucket; do
  echo "keygate $algorithm / limitador: $(ratio "$work/rounds" "$algorithm" limitador)"
done
