#!/usr/bin/env bash
# nginx + keygate forward auth (docs/gateways.md's configuration) against nginx alone
# proxying the same upstream and against nginx + an auth server that does nothing,
# alternating rounds in one run (docs/performance/gateway.md).
#
#   bash bins/keygate/bench/gateway.sh          # ROUNDS=5 DURATION=10s CONNECTIONS=32
#   PERF=1 bash bins/keygate/bench/gateway.sh   # + per request: context switches, syscalls
#                                               #   and CPU time of nginx and of the auth server
#
# nginx (one worker) serves the upstream (a fixed 200) and four gateways in front of it:
#   plain   the proxy alone
#   ext204  auth_request (docs/gateways.md's block) to a second nginx process answering 204
#   tcp     auth_request to keygate over TCP loopback
#   uds     auth_request to keygate over a Unix domain socket
# keygate: one worker each (embedded default, one database), a key holding the permission
# and a limit that always passes. Both nginx processes and keygate share CPU 0, wrk runs
# on CPU 1: what the gateway costs per request on one core.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
ROOT_KEY=kg_root_gateway_bench_$(date +%s)_0000
require wrk nginx curl taskset
cargo build --release -q -p keygate --bin keygate
chmod 755 "$work"  # nginx's workers (another user) reach the Unix socket in it
KG=18401 UP=18402 PLAIN=18403 AUTH=18404 E204=18405 EXT=18406 UDS=18407
SOCK=$work/kg.sock
serve_keygate $KG "$work/kg.log" DATABASE_URL="sqlite://$work/k.db"
kg_tcp=${pids[-1]}
DATABASE_URL="sqlite://$work/k.db" KEYGATE_LISTEN=unix:$SOCK KEYGATE_LISTEN_MODE=0666 KEYGATE_WORKERS=1 \
  RUST_LOG=warn taskset -c 0 target/release/keygate 2>"$work/kg-uds.log" &
pids+=($!)
kg_uds=$!
for _ in $(seq 1 50); do curl -s -o /dev/null --unix-socket "$SOCK" http://x/v1/liveness && break; sleep 0.1; done
key=$(curl -s "http://127.0.0.1:$KG/v1/keys.createKey" -H "Authorization: Bearer $ROOT_KEY" \
  -H 'Content-Type: application/json' -d '{"permissions":["documents.read"]}' | sed 's/.*"key":"\([^"]*\)".*/\1/')

# docs/gateways.md's nginx block, with a limit that always passes: $1 keygate's address,
# $2 the gateway's port, $3 the upstream block's name.
block() {
  awk '/^```nginx$/{on=1; next} /^```$/{on=0} on' docs/gateways.md \
    | sed -e "s#127.0.0.1:8080#$1#" -e "s/127.0.0.1:9000/127.0.0.1:$UP/" \
          -e "s/listen 8000;/listen 127.0.0.1:$2;/" -e "s/kg_root_replace_with_the_gateways_root_key/$ROOT_KEY/" \
          -e "s/limit=100/limit=1000000000/" -e "s/upstream keygate /upstream $3 /" -e "s#http://keygate/#http://$3/#"
}
cat >"$work/nginx.conf" <<CONF
daemon off; worker_processes 1; pid $work/nginx.pid; error_log $work/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  upstream up { server 127.0.0.1:$UP; keepalive 64; }
  server { listen 127.0.0.1:$UP; location / { return 200 "ok"; } }
  server { listen 127.0.0.1:$PLAIN; location / { proxy_pass http://127.0.0.1:$UP; } }
  $(block "127.0.0.1:$KG" "$AUTH" keygate)
  $(block "unix:$SOCK" "$UDS" keygate_uds)
  $(block "127.0.0.1:$E204" "$EXT" auth204)
}
CONF
# The auth server that does nothing: a second nginx process answering 204.
cat >"$work/nginx204.conf" <<CONF
daemon off; worker_processes 1; pid $work/nginx204.pid; error_log $work/error204.log;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$E204; location / { return 204; } } }
CONF
taskset -c 0 nginx -p "$work" -c "$work/nginx.conf" &
pids+=($!)
nginx_master=$!
taskset -c 0 nginx -p "$work" -c "$work/nginx204.conf" &
pids+=($!)
nginx204_master=$!
sleep 1
nginx_worker=$(pgrep -P "$nginx_master")
nginx204_worker=$(pgrep -P "$nginx204_master")

# PERF=1: `perf stat` on a process for the round: context switches, syscalls and CPU ms,
# written as "cs sys ms" to $2.
measure() {
  perf stat -x, -e context-switches,raw_syscalls:sys_enter,task-clock -p "$1" -o "$2.raw" -- sleep "${DURATION%s}" 2>/dev/null
  awk -F, '$3 == "context-switches" {c = $1} $3 == "raw_syscalls:sys_enter" {y = $1} $3 == "task-clock" {t = $1}
    END {print c, y, t}' "$2.raw" >"$2"
}
for port in $AUTH $UDS $EXT; do
  curl -sf -o /dev/null -H "Authorization: Bearer $key" "http://127.0.0.1:$port/x" || { echo "the gateway on $port does not pass a valid key:" >&2; curl -si -H "Authorization: Bearer $key" "http://127.0.0.1:$port/x" >&2; cat "$work"/error.log "$work"/kg-uds.log >&2; exit 1; }
done

for r in $(seq 1 "$ROUNDS"); do
  for s in ${SETUPS:-plain ext204 tcp uds}; do
    case $s in plain) port=$PLAIN ;; ext204) port=$EXT ;; tcp) port=$AUTH ;; uds) port=$UDS ;; esac
    case $s in ext204) auth=$nginx204_worker ;; tcp) auth=$kg_tcp ;; uds) auth=$kg_uds ;; *) auth= ;; esac
    if [ "${PERF:-0}" = 1 ]; then
      measure "$nginx_worker" "$work/perf.nginx" &
      [ -n "$auth" ] && measure "$auth" "$work/perf.auth" &
    fi
    out=$(taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -H "Authorization: Bearer $key" "http://127.0.0.1:$port/x")
    wait_perf=$(jobs -p); [ -n "$wait_perf" ] && wait $wait_perf 2>/dev/null || true
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
    extra=
    if [ "${PERF:-0}" = 1 ]; then
      requests=$(awk '/requests in/ {print $1}' <<<"$out")
      for who in nginx auth; do
        [ "$who" = auth ] && [ -z "$auth" ] && continue
        read -r cs sys ms <"$work/perf.$who"
        extra+=$(awk -v n="$requests" -v c="$cs" -v y="$sys" -v t="$ms" -v w="$who" \
          'BEGIN {printf " %s_cs=%.2f %s_syscalls=%.2f %s_cpu_us=%.1f", w, c / n, w, y / n, w, t * 1000 / n}')
      done
    fi
    echo "$s round=$r rps=$rps p50=$p50 p99=$p99 non2xx=${non2xx:-0}$extra"
  done
done | tee "$work/rounds"
# Per-round ratios of each setup to plain and to ext204, medians over the rounds.
setups=(${SETUPS:-plain ext204 tcp uds})
for s in "${setups[@]}"; do
  for base in plain ext204; do
    [ "$s" = "$base" ] || [ "$s" = plain ] || [[ " ${setups[*]} " != *" $base "* ]] && continue
    printf '%-7s / %-7s median of %d per-round throughput ratios %s\n' "$s" "$base:" "$ROUNDS" "$(ratio "$work/rounds" "$s" "$base")"
  done
done
