#!/usr/bin/env bash
# `keygate keys import` throughput: KEYS keys from a file of JSON lines into a fresh API,
# ROUNDS times (a fresh API each), while the server runs; keys per second from the
# command's own summary (migrated / seconds), the median of the rounds. Issue 47's target:
# >= 10,000 keys/s on SQLite and on PostgreSQL.
#
#   bash bins/keygate/bench/import.sh               # embedded default (SQLite)
#   SCALE_OUT=1 bash bins/keygate/bench/import.sh   # PostgreSQL (+ Redis) on 127.0.0.1
#   ROUNDS=3 KEYS=100000 bash bins/keygate/bench/import.sh
#
# The file (bins/keygate/bench/import_file.py): one entry per key, each with two permissions
# and an identity, some with a name, meta and credits. Rounds add to one database: round r
# imports into (r-1)*KEYS keys.
# Needs: curl, taskset, python3; SCALE_OUT=1 also psql.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-3}
KEYS=${KEYS:-100000}
PORT=${PORT:-18391}
ROOT_KEY=kg_root_bench_import_$(date +%s)_0000
export ROOT_KEY

require curl taskset python3
cargo build --release -q -p keygate --bin keygate
bench_database
serve_keygate $PORT "$work/server.log"

for r in $(seq 1 "$ROUNDS"); do
  api=$(create_api $PORT "import_$r")
  python3 bins/keygate/bench/import_file.py "$work/keys.jsonl" "$KEYS" "$r"
  summary=$(taskset -c 1 target/release/keygate keys import --api "$api" --migration sha256_hex "$work/keys.jsonl")
  echo "$summary" | R=$r python3 -c '
import json, os, sys
s = json.load(sys.stdin)
m, f, t = s["migrated"], s["failed"], s["seconds"]
print("import round=%s keys_per_s=%.0f migrated=%d failed=%d seconds=%s" % (os.environ["R"], m / t, m, f, t))'
done | tee "$work/results"
echo "keys import: median $(median_of "$work/results" import keys_per_s) keys/s over $ROUNDS rounds of $KEYS keys (target >= 10000)"
