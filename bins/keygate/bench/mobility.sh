#!/usr/bin/env bash
# Data mobility at scale (issue 47). A SQLite database of KEYS keys (default 1,000,000, each
# with two permissions and an identity: 1M keys, 2M links, 1M audit events), brought in with
# `keygate keys import` while a server runs on it, then:
#  1. `keygate store copy` of it into a fresh PostgreSQL schema, verified (target: <= 5
#     minutes for 1M keys with links), and the rows per second;
#  2. `keygate backup` of it while the server verifies keys under wrk: each backup's time,
#     and the verification throughput while backups run back to back vs without, ROUNDS
#     rounds of each, alternating (the median of per-round ratios).
#
#   bash bins/keygate/bench/mobility.sh
#   KEYS=200000 ROUNDS=3 DURATION=20s bash bins/keygate/bench/mobility.sh
#
# The server: one worker pinned to CPU 0; wrk on CPU 1; the import, copy and backups are not
# pinned (they compete with both, as they would on a real host).
# Needs: wrk, curl, taskset, python3, psql (PostgreSQL at 127.0.0.1:5432, database test).
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

KEYS=${KEYS:-1000000}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-64}
PORT=${PORT:-18392}
ROOT_KEY=kg_root_bench_mobility_$(date +%s)_0000
export ROOT_KEY DURATION CONNECTIONS

require wrk curl taskset python3 psql
cargo build --release -q -p keygate --bin keygate
export DATABASE_URL="sqlite://$work/source.db"
serve_keygate $PORT "$work/server.log"

# The database: KEYS keys, imported in files of 100,000.
api=$(create_api $PORT mobility)
chunk=$(( KEYS < 100000 ? KEYS : 100000 ))
start=$(date +%s.%N)
for part in $(seq 1 $(( KEYS / chunk ))); do
  python3 bins/keygate/bench/import_file.py "$work/keys.jsonl" "$chunk" "$part" "$work/secrets-$part.txt" 2000
  target/release/keygate keys import --api "$api" --migration sha256_hex "$work/keys.jsonl" >"$work/import-$part.json"
done
imported=$(cat "$work"/import-*.json | python3 -c 'import json, sys; print(sum(json.loads(l)["migrated"] for l in sys.stdin))')
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
bytes=$(stat -c %s "$work/source.db")
printf "database: %s keys imported in %.0f s (generating the files included), %s MiB\n" "$imported" "$elapsed" "$((bytes / 1048576))"

# 1. The copy to PostgreSQL.
schema=kg_bench_copy_$$
psql -q -h 127.0.0.1 -U postgres test -c "CREATE SCHEMA $schema" >/dev/null
target="postgres://postgres@127.0.0.1:5432/test?options=--search_path%3D$schema"
target/release/keygate store copy --from "$DATABASE_URL" --to "$target" >"$work/copy.json"
python3 - "$work/copy.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
t = s["tables"]
print("store copy: %d rows (keys %d, key permissions %d, audit events %d) in %.1f s: %.0f rows/s, verified %s (target <= 300 s for 1M keys)"
      % (s["rows"], t["keys"]["rows"], t["keys_permissions"]["rows"], t["audit_events"]["rows"], s["seconds"],
         s["rows"] / s["seconds"], s["verified"]))
PY

# 2. Backups while the server verifies.
cat "$work"/secrets-*.txt >"$work/secrets.txt"
expect_valid $PORT v2/keys.verifyKey "{\"key\":\"$(head -1 "$work/secrets.txt")\"}"
run() { KEYS_FILE="$work/secrets.txt" wrk_round "$1" $PORT bins/keygate/bench/verify-v2.lua; }
run warm >/dev/null
backups() { # until stopped: backups back to back, each one's seconds on a line
  local i=0
  while [ ! -e "$work/stop" ]; do
    i=$((i + 1))
    target/release/keygate backup --to "$work/backup-$i.db" | python3 -c 'import json, sys; print(json.load(sys.stdin)["seconds"])'
    rm -f "$work/backup-$i.db"
  done
}
for r in $(seq 1 "$ROUNDS"); do
  run "plain round=$r"
  rm -f "$work/stop"
  backups >>"$work/backup-seconds" &
  loop=$!
  run "backup round=$r"
  touch "$work/stop"
  wait $loop
done | tee "$work/results"
echo "verifyKey without backups: median $(median_of "$work/results" plain rps) req/s"
echo "verifyKey during backups:  median $(median_of "$work/results" backup rps) req/s, median p99 $(median_of "$work/results" backup p99_us) us"
echo "during/without: median of per-round ratios $(ratio "$work/results" backup plain); errors: $(errors "$work/results")"
echo "backup of $((bytes / 1048576)) MiB: median $(median <"$work/backup-seconds") s over $(wc -l <"$work/backup-seconds") backups"
