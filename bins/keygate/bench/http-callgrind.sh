#!/usr/bin/env bash
# Instructions per ratelimits.limit request, keygate against the bare actix-web handler,
# counted by valgrind's callgrind: a figure that does not move with machine noise (unlike
# the timings of http-limit.sh), for comparing builds of the hot path.
#
#   bash bins/keygate/bench/http-callgrind.sh          # 10 s of load on each server
#   DURATION=20s bash bins/keygate/bench/http-callgrind.sh
#   KEEP=/tmp/cg bash bins/keygate/bench/http-callgrind.sh   # keeps both dumps there, e.g. for
#       python3 bins/keygate/bench/callgrind_costs.py /tmp/cg/keygate.out.1 REQUESTS 40
#
# Each server runs under callgrind; after a 5 s warm-up (namespace, caches, budgets) the
# counters are zeroed, wrk sends DURATION of requests on 4 connections, and the counters are
# dumped. Counts are user-space only (the kernel's share, ~60% of a request's CPU, is the
# same for both). valgrind does not emulate SHA-NI, so under it keygate's SHA-256 of the
# root key runs the portable code (~3.4k instructions); natively it takes the SHA-NI path,
# so that part is printed separately.
# Needs: valgrind, wrk (apt-get install valgrind wrk).
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

DURATION=${DURATION:-10s}
KG_PORT=${KG_PORT:-18280}
BARE_PORT=${BARE_PORT:-18281}
ROOT_KEY=kg_root_bench_callgrind_$(date +%s)
export ROOT_KEY

require valgrind callgrind_control wrk curl
cargo build --release -q -p keygate --bin keygate --example bare

# Self cost of functions whose name matches $2, and the total, in callgrind file $1.
count() {
  awk -v pat="$2" '
    /^fn=/ { name = $0; sub(/^fn=\([0-9]+\) ?/, "", name); id = $0; sub(/^fn=/, "", id); sub(/\).*/, ")", id)
             if (name != "") names[id] = name; fn = names[id]; after_call = 0; next }
    /^cfn=/ { cname = $0; sub(/^cfn=\([0-9]+\) ?/, "", cname); cid = $0; sub(/^cfn=/, "", cid); sub(/\).*/, ")", cid)
              if (cname != "") names[cid] = cname; next }
    /^calls=/ { after_call = 1; next }
    /^[0-9+*-]/ { if (after_call) { after_call = 0; next }
                  total += $2; if (fn ~ pat) part += $2 }
    END { printf "%d %d\n", total, part }' "$1"
}

measure() { # name port command...
  local name=$1 port=$2
  shift 2
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.out" "$@" >"$work/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.5; done
  wrk -t1 -c4 -d5s -s bins/keygate/bench/limit.lua "http://127.0.0.1:$port" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  local n
  n=$(wrk -t1 -c4 -d"$DURATION" -s bins/keygate/bench/limit.lua "http://127.0.0.1:$port" | awk '/requests in/ {print $1}')
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  read -r total sha < <(count "$work/$name.out.1" '^sha2::')
  echo "$name $n $total $sha"
}

kg=$(DATABASE_URL="sqlite://$work/bench.db" KEYGATE_LISTEN=127.0.0.1:$KG_PORT KEYGATE_WORKERS=1 \
  KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn measure keygate $KG_PORT "$RELEASE"/keygate)
bare=$(measure bare $BARE_PORT "$RELEASE"/examples/bare 127.0.0.1:$BARE_PORT)
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP"
  cp "$work/keygate.out.1" "$work/bare.out.1" "$KEEP/"
fi
echo "$kg
$bare" | awk '
  { n[$1] = $2; total[$1] = $3; sha[$1] = $4 }
  END {
    k = total["keygate"] / n["keygate"]; s = sha["keygate"] / n["keygate"]; b = total["bare"] / n["bare"]
    printf "keygate: %d requests, %.0f instructions/request (of which SHA-256, portable code: %.0f)\n", n["keygate"], k, s
    printf "bare:    %d requests, %.0f instructions/request\n", n["bare"], b
    printf "keygate - bare: %.0f instructions/request; without the portable SHA-256: %.0f\n", k - b, k - s - b
  }'
