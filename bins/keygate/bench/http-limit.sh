#!/usr/bin/env bash
# HTTP benchmark of ratelimits.limit against a bare actix-web handler, in one run.
#
#   bash bins/keygate/bench/http-limit.sh            # 3 rounds of 10 s, 64 connections
#   ROUNDS=5 DURATION=20s CONNECTIONS=64 THINK_MS=1 bash bins/keygate/bench/http-limit.sh
#
# Two phases, each alternating keygate and bare rounds: saturated (no think time: the
# throughput ratio) and paced (each connection waits THINK_MS after a response: latency
# below saturation).
# The server under test runs with one worker pinned to CPU 0; wrk (one thread) is pinned
# to CPU 1. Rounds alternate keygate and the bare handler so that machine noise hits both.
# Needs: wrk (apt-get install wrk), taskset (util-linux).
set -euo pipefail
cd "$(dirname "$0")/../../.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
PACE_MS=${THINK_MS:-1}
unset THINK_MS
KG_PORT=${KG_PORT:-18180}
BARE_PORT=${BARE_PORT:-18181}
ROOT_KEY=kg_root_bench_$(date +%s)
export ROOT_KEY

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
cargo build --release -q -p keygate --bin keygate --example bare

work=$(mktemp -d)
cleanup() { kill "${kg_pid:-}" "${bare_pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

DATABASE_URL="sqlite://$work/bench.db" KEYGATE_LISTEN=127.0.0.1:$KG_PORT KEYGATE_WORKERS=1 \
  KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn taskset -c 0 target/release/keygate 2>"$work/kg.log" &
kg_pid=$!
taskset -c 0 target/release/examples/bare 127.0.0.1:$BARE_PORT &
bare_pid=$!
for port in $KG_PORT $BARE_PORT; do
  for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
done

run() { # name port
  taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bins/keygate/bench/limit.lua "http://127.0.0.1:$2" \
    | grep '^RESULT' | sed "s/^RESULT/$1/"
}

# Warm-up: creates the namespace, fills the caches and the 10k budgets.
taskset -c 1 wrk -t1 -c8 -d2s -s bins/keygate/bench/limit.lua "http://127.0.0.1:$KG_PORT" >/dev/null
taskset -c 1 wrk -t1 -c8 -d2s -s bins/keygate/bench/limit.lua "http://127.0.0.1:$BARE_PORT" >/dev/null

phase() { # results-file: alternating keygate and bare rounds
  for r in $(seq 1 "$ROUNDS"); do
    run "keygate round=$r" $KG_PORT
    run "bare    round=$r" $BARE_PORT
  done | tee "$1"
}

summarize() { # results-file, saturated|paced
  awk -v mode="$2" '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
    $1 == "keygate" { kr += v["rps"]; last = v["rps"]; kp99 = (v["p99_us"] > kp99 ? v["p99_us"] : kp99); ke += v["errors"]; n++
                      p99s[n] = v["p99_us"] }
    $1 == "bare"    { br += v["rps"]; bp99 = (v["p99_us"] > bp99 ? v["p99_us"] : bp99); ratios[n] = last / v["rps"]; bp99s[n] = v["p99_us"] }
    function median(a, m,   i, j, t) {
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    END {
      printf "keygate: %.0f req/s (mean of %d rounds), median p99 %d us, worst p99 %d us, non-2xx/errors %d\n", kr / n, n, median(p99s, n), kp99, ke
      printf "bare:    %.0f req/s, median p99 %d us, worst p99 %d us\n", br / n, median(bp99s, n), bp99
      if (mode == "saturated")
        printf "ratio keygate/bare: mean-of-rates %.3f, median of per-round ratios %.3f\n", kr / br, median(ratios, n)
      else
        printf "(latency only: with think time the request rate follows wrk'"'"'s millisecond timers, not the server)\n"
    }' "$1"
}

# 1. Saturation: throughput (the ratio) and latency, which here is queueing: every
#    connection always has a request in flight.
echo "== saturated: $CONNECTIONS connections, no think time"
phase "$work/saturated"
summarize "$work/saturated" saturated

# 2. Below saturation: the same connections, each waiting THINK_MS after every response
#    (wrk's delay(); whole milliseconds), so latency is service time plus bursts.
echo "== paced: $CONNECTIONS connections, $PACE_MS ms think time"
export THINK_MS=$PACE_MS
phase "$work/paced"
summarize "$work/paced" paced
