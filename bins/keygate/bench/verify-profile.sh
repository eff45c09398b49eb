#!/usr/bin/env bash
# Where a request's work goes, side by side: ratelimits.limit, a cached v1 keys.verifyKey,
# a cached v2 keys.verifyKey (with a one-permission query, and without one), a v2 one
# that spends (verify-credits.sh's keys: credits and an auto-applied limit) and its two
# parts apart (keys with the auto-applied limit only, and with credits only), on one
# embedded server (one worker): user-space instructions, heap allocations, syscalls per
# request and the largest self costs. On 4 connections a spend's group commit holds at
# most 4 spends (verify-credits.sh's 64 connections make ~30). Counts, not timings: they do not move with the VM's
# noise, so two builds compare exactly (BINARY=path/to/keygate for another build).
#
#   bash bins/keygate/bench/verify-profile.sh
#   DURATION=10s KEYS=1000 TOP=15 bash bins/keygate/bench/verify-profile.sh
#   KEEP=/tmp/prof bash bins/keygate/bench/verify-profile.sh  # keeps each callgrind dump there
#
# Instructions and allocations: the server under valgrind's callgrind, counters zeroed
# after a warm-up and dumped after DURATION of wrk on 4 connections per workload
# (callgrind_costs.py reads the dumps, one per thread: the threads that serve requests are
# counted, the background threads' share is printed apart as `background=`; it is larger
# the slower the run, and under valgrind runs are slow). A warm-up asks every key three
# times (each of limit.lua's 10,000 identifiers twice) before counting. valgrind does not emulate SHA-NI, so SHA-256 runs
# its portable code there; its share is printed apart (`sha2=`). Syscalls: the same
# workloads on the native server under `strace -c -f`.
# Needs: valgrind, strace, wrk, curl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

DURATION=${DURATION:-5s}
KEYS=${KEYS:-1000}
TOP=${TOP:-12}
PORT=${PORT:-18390}
BINARY=${BINARY:-target/release/keygate}
ROOT_KEY=kg_root_bench_profile_$(date +%s)_0000
export ROOT_KEY

require valgrind callgrind_control strace wrk curl python3
[ "$BINARY" != target/release/keygate ] || cargo build --release -q -p keygate --bin keygate
export DATABASE_URL="sqlite://$work/bench.db"
run_env=(KEYGATE_LISTEN="127.0.0.1:$PORT" KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY="$ROOT_KEY" RUST_LOG=warn)

# The keys, made by a native server (the same database is then served under each tool).
env "${run_env[@]}" "$BINARY" 2>"$work/setup.log" &
setup=$!
pids+=("$setup")
wait_up "$PORT"
create_keys "$PORT" v1/keys.createKey '{"permissions":["documents.read"]}' "$KEYS" >"$work/keys.txt"
create_keys "$PORT" v2/keys.createKey \
  '{"apiId":"api_bench","credits":{"remaining":1000000000},"ratelimits":[{"name":"calls","limit":1000000,"duration":60000,"autoApply":true}]}' \
  "$KEYS" >"$work/spending.txt"
create_keys "$PORT" v2/keys.createKey '{"apiId":"api_bench","ratelimits":[{"name":"calls","limit":1000000,"duration":60000,"autoApply":true}]}' \
  "$KEYS" >"$work/limited.txt"
create_keys "$PORT" v2/keys.createKey '{"apiId":"api_bench","credits":{"remaining":1000000000}}' "$KEYS" >"$work/credits.txt"
expect_valid "$PORT" v2/keys.verifyKey "{\"key\":\"$(head -1 "$work/spending.txt")\"}"
export KEYS_FILE="$work/keys.txt"
expect_valid "$PORT" v2/keys.verifyKey "{\"key\":\"$(head -1 "$KEYS_FILE")\",\"permissions\":\"documents.read\"}"
kill "$setup"
wait "$setup" 2>/dev/null || true

# NAME SCRIPT KEYS [PERMISSIONS]
workloads=("limit bins/keygate/bench/limit.lua keys" "v1-verify bins/keygate/bench/verify.lua keys"
  "v2-verify-query bins/keygate/bench/verify-v2.lua keys documents.read"
  "v2-verify bins/keygate/bench/verify-v2.lua keys" "v2-spending bins/keygate/bench/verify-v2.lua spending"
  "v2-limited bins/keygate/bench/verify-v2.lua limited" "v2-credits bins/keygate/bench/verify-v2.lua credits")

# load SCRIPT [PERMISSIONS] DURATION: wrk on 4 connections; the number of requests sent.
load() {
  PERMISSIONS=${2:-} wrk -t1 -c4 -d"$3" -s "$1" "http://127.0.0.1:$PORT" \
    | awk '/requests in/ {print $1}'
}
unset_empty() { [ -n "${PERMISSIONS:-}" ] || unset PERMISSIONS; }

echo "== instructions and allocations per request (callgrind, user space)"
env "${run_env[@]}" valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.out" "$BINARY" \
  >"$work/callgrind.log" 2>&1 &
cg=$!
pids+=("$cg")
wait_up "$PORT"
dump=0
for w in "${workloads[@]}"; do
  read -r name script keys perms <<<"$w"
  export KEYS_FILE="$work/$keys.txt"
  # Warm-up by count: every key (identifier) asked several times, however slow the run.
  want=$((3 * KEYS)); [ "$name" != limit ] || want=20000
  sent=0
  while [ "$sent" -lt "$want" ]; do
    sent=$((sent + $(PERMISSIONS=${perms:-}; unset_empty; export PERMISSIONS
      wrk -t1 -c4 -d5s -s "$script" "http://127.0.0.1:$PORT" | awk '/requests in/ {print $1}')))
  done
  callgrind_control -z "$cg" >/dev/null 2>&1
  n=$(PERMISSIONS=${perms:-}; unset_empty; export PERMISSIONS
    wrk -t1 -c4 -d"$DURATION" -s "$script" "http://127.0.0.1:$PORT" | awk '/requests in/ {print $1}')
  callgrind_control -d "$cg" >/dev/null 2>&1
  dump=$((dump + 1))
  echo "$name ($n requests): $(python3 bins/keygate/bench/callgrind_costs.py "$work/cg.out.$dump" "$n" "$TOP")"
  [ -z "${KEEP:-}" ] || for f in "$work/cg.out.$dump"-*; do cp "$f" "$KEEP/$name.callgrind${f##*"cg.out.$dump"}"; done
done
kill "$cg"
wait "$cg" 2>/dev/null || true

echo "== syscalls per request (strace -c -f, native)"
env "${run_env[@]}" "$BINARY" 2>"$work/native.log" &
native=$!
pids+=("$native")
wait_up "$PORT"
for w in "${workloads[@]}"; do
  read -r name script keys perms <<<"$w"
  export KEYS_FILE="$work/$keys.txt"
  (PERMISSIONS=${perms:-}; unset_empty; export PERMISSIONS
    wrk -t1 -c4 -d2s -s "$script" "http://127.0.0.1:$PORT" >/dev/null)
  strace -q -c -f -p "$native" -o "$work/strace.$name" &
  st=$!
  sleep 0.5
  n=$(PERMISSIONS=${perms:-}; unset_empty; export PERMISSIONS
    wrk -t1 -c4 -d"$DURATION" -s "$script" "http://127.0.0.1:$PORT" | awk '/requests in/ {print $1}')
  kill -INT "$st"
  wait "$st" 2>/dev/null || true
  awk -v n="$n" -v name="$name" '
    $NF == "total" { total = $4; next }
    /^ *[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ { calls[$NF] = $4 }
    /^ *[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9]+/ { calls[$NF] = $4 }
    END {
      line = sprintf("%s: %.2f syscalls/request:", name, total / n)
      for (s in calls) if (calls[s] / n >= 0.01) line = line sprintf(" %s=%.2f", s, calls[s] / n)
      print line
    }' "$work/strace.$name"
done
