#!/usr/bin/env bash
# HTTP benchmark of ratelimits.limit against a bare actix-web handler, in one run.
#
#   bash bins/keygate/bench/http-limit.sh            # 3 rounds of 10 s, 64 connections
#   ROUNDS=5 DURATION=20s CONNECTIONS=64 RATES="10000 20000 40000" bash bins/keygate/bench/http-limit.sh
#   BARE=constant bash bins/keygate/bench/http-limit.sh   # bare answers a constant, no decision
#
# Two phases, each alternating keygate and bare rounds so that machine noise hits both:
# 1. saturated (wrk, closed loop, no think time): the throughput ratio;
# 2. open loop (bins/keygate/examples/openloop.rs) at each of RATES req/s, evenly spaced,
#    over the same 64 connections: latency below saturation, measured from each request's
#    due time (no coordinated omission).
# The server under test runs with one worker pinned to CPU 0; the load generator (wrk with
# one thread, or openloop) is pinned to CPU 1.
# Needs: wrk (apt-get install wrk), taskset (util-linux).
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
RATES=${RATES:-10000 20000 40000}
SECONDS_PER_ROUND=${DURATION%s}
[[ $SECONDS_PER_ROUND =~ ^[0-9]+$ ]] || { echo "DURATION must be whole seconds, e.g. 10s" >&2; exit 1; }
KG_PORT=${KG_PORT:-18180}
BARE_PORT=${BARE_PORT:-18181}
ROOT_KEY=kg_root_bench_$(date +%s)
export ROOT_KEY

require wrk curl taskset
# RabbitMQ (a service of this machine image, unused by keygate) boots a whole Erlang VM
# every 60 s (at second ~11 of each minute): 0.3-0.5 s of CPU that lands on the server's
# core while the load generator holds the other, i.e. a 60-340 ms stall in whichever round
# it hits. Stop it for the benchmark (/etc/init.d/rabbitmq-server stop; start it after).
if pgrep -x beam.smp >/dev/null; then
  echo "warning: RabbitMQ (beam.smp) is running: expect one 60-340 ms stall per minute (see docs/performance/http.md)" >&2
fi
cargo build --release -q -p keygate --bin keygate --example bare --example openloop

serve_keygate $KG_PORT "$work/kg.log" DATABASE_URL="sqlite://$work/bench.db"
# The bare handler makes the same in-memory decision (BARE=decide, the default), or
# answers a constant (BARE=constant, the stricter baseline of earlier figures).
BARE=${BARE:-decide}
taskset -c 0 "$RELEASE"/examples/bare 127.0.0.1:$BARE_PORT "$BARE" &
pids+=($!)
wait_up $BARE_PORT ""

run() { # name port
  wrk_round "$1" "$2" bins/keygate/bench/limit.lua
}

# Warm-up: creates the namespace, fills the caches and the 10k budgets.
for port in $KG_PORT $BARE_PORT; do CONNECTIONS=8 DURATION=2s run warm $port >/dev/null; done

phase() { # results-file: alternating keygate and bare rounds
  for r in $(seq 1 "$ROUNDS"); do
    run "keygate round=$r" $KG_PORT
    run "bare    round=$r" $BARE_PORT
  done | tee "$1"
}

summarize() { # results-file, saturated|open
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
    }' "$1"
}

# 1. Saturation: throughput (the ratio) and latency, which here is queueing: every
#    connection always has a request in flight.
echo "== saturated: $CONNECTIONS connections, no think time"
phase "$work/saturated"
summarize "$work/saturated" saturated

# 2. Below saturation: open loop at fixed rates (see examples/openloop.rs for why not wrk's
#    think time: its millisecond timers fire the 64 connections in bursts).
# The same 10,000 bodies as limit.lua, one per line.
for i in $(seq 1 10000); do
  printf '{"namespace":"bench","identifier":"user_%06d@example.com","limit":1000000000,"duration":60000,"cost":1}\n' "$i"
done >"$work/bodies.txt"
openloop() { # name port rate
  taskset -c 1 "$RELEASE"/examples/openloop "127.0.0.1:$2" "$3" "$SECONDS_PER_ROUND" "$CONNECTIONS" "$work/bodies.txt" \
    | sed "s/^RESULT/$1/"
}
for rate in $RATES; do
  echo "== open loop: $rate req/s over $CONNECTIONS connections"
  for r in $(seq 1 "$ROUNDS"); do
    openloop "keygate round=$r" $KG_PORT "$rate"
    openloop "bare    round=$r" $BARE_PORT "$rate"
  done | tee "$work/open-$rate"
  summarize "$work/open-$rate" open
done
