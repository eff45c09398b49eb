#!/usr/bin/env bash
# Envoy's rate-limit service (ShouldRateLimit) answered by keygate and by Kuadrant's
# limitador (issue 78): the same gRPC calls, one core each, 10,000 rotating identifiers,
# every call answered OK (a limit of 10^9 a minute), saturated by one load thread
# (crates/grpc/examples/rls_load.rs: 64 calls in flight over 4 HTTP/2 connections); rounds
# interleaved, ratios the medians of per-round ratios (docs/performance/gateway.md).
#
#   LIMITADOR_BIN=/path/to/limitador-server bash bins/keygate/bench/rls.sh
#       in memory: keygate on SQLite (the default), limitador's `memory` storage
#   SCALE_OUT=1 LIMITADOR_BIN=... bash bins/keygate/bench/rls.sh
#       both on the local Redis: keygate on PostgreSQL + Redis, limitador's `redis` storage
#
# LIMITADOR_BIN is a limitador-server binary you built yourself from its public repository
# (docs/performance/algorithms.md names the commit measured); nothing here builds it.
# keygate's configuration (envoyproxy/ratelimit's YAML) and limitador's limits file say the
# same: domain/namespace `bench`, one budget per `user_id` value. Both servers pinned to
# CPU 0 (so each runs one worker thread), the load on CPU 1. Needs: curl, taskset.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-8}
STREAMS=${STREAMS:-64}
CONNECTIONS=${CONNECTIONS:-4}
PORT=${PORT:-18501}
LIMITADOR_PORT=${LIMITADOR_PORT:-18503}
ROOT_KEY=kg_root_bench_$(date +%s)
export ROOT_KEY
: "${LIMITADOR_BIN:?LIMITADOR_BIN: the path of a limitador-server binary}"

require curl taskset
cargo build --release -q -p keygate --bin keygate
cargo build --release -q -p keygate-grpc --example rls_load
LOAD=$RELEASE/examples/rls_load
bench_database

cat >"$work/keygate.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user_id
    rate_limit: { unit: minute, requests_per_unit: 1000000000 }
YAML
serve_keygate "$PORT" "$work/kg.log" KEYGATE_GRPC_LISTEN="127.0.0.1:$((PORT + 1))" \
  KEYGATE_ENVOY_RATELIMIT_CONFIG="$work/keygate.yaml"

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

# round NAME PORT [SECONDS]: one round of the load against the RLS at PORT, named.
round() {
  KEYGATE_ROOT_KEY=$ROOT_KEY taskset -c 1 "$LOAD" "http://127.0.0.1:$2" bench user_id "${3:-$SECONDS_PER_ROUND}" \
    "$STREAMS" "$CONNECTIONS" 10000 | grep '^RESULT' | sed "s/^RESULT/$1/"
}
# Warm: each server answers OK for every identifier before the rounds.
for s in "keygate $((PORT + 1))" "limitador $((LIMITADOR_PORT + 1))"; do
  set -- $s
  line=$(round "$1" "$2" 2)
  case $line in *" errors=0 "*) ;; *) echo "$1 does not answer OK: $line" >&2; exit 1 ;; esac
done

for r in $(seq 1 "$ROUNDS"); do
  round "keygate round=$r" $((PORT + 1))
  round "limitador round=$r" $((LIMITADOR_PORT + 1))
done | tee "$work/rounds"

[ "$(errors "$work/rounds")" = 0 ] || { echo "failed calls or answers other than OK in the rounds" >&2; exit 1; }
for name in keygate limitador; do
  echo "$name: median $(median_of "$work/rounds" "$name" rps) calls/s, p99 $(median_of "$work/rounds" "$name" p99_us) us"
done
echo "keygate / limitador: $(ratio "$work/rounds" keygate limitador)"
