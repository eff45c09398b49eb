#!/usr/bin/env bash
# Each real gateway with keygate's forward auth against the same gateway with an auth
# server that does nothing, rounds interleaved in one run (docs/performance/gateway.md).
# Every gateway runs its inline block of docs/gateways.md (the one the tests run), a limit
# that never denies put in.
#
#   bash bins/keygate/bench/gateway.sh          # ROUNDS=5 DURATION=5s CONNECTIONS=32
#   GATEWAYS="nginx envoy" bash bins/keygate/bench/gateway.sh
#
# GATEWAYS (default: nginx nginx-uds caddy traefik envoy envoy-grpc envoy-rls haproxy;
# nginx-uds is nginx's block with keygate on a Unix domain socket, envoy-grpc Envoy's gRPC
# ext_authz block, envoy-rls Envoy's global rate-limit block with keygate's RLS). For each:
# `NAME-keygate` (the block, asking keygate) and `NAME-nothing` (the same block asking a
# second nginx process that answers 204 at once; 200 for Envoy, whose ext_authz passes a 200
# only; for envoy-grpc, Envoy's HTTP block asking it; for envoy-rls, the block without its
# rate-limit filter). The upstream is an nginx answering 200. LIMITADOR_BIN=/path/to/
# limitador-server adds envoy-rls's block asking limitador (bench/rls.sh says which). keygate (one worker), the gateways (one worker or thread each: Envoy
# --concurrency 1, the others from their CPU affinity), the do-nothing server and the
# upstream share CPU 0; wrk (one thread) runs on CPU 1: what the gateway costs per request
# on one core.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5s}
CONNECTIONS=${CONNECTIONS:-32}
GATEWAYS=${GATEWAYS:-nginx nginx-uds caddy traefik envoy envoy-grpc envoy-rls haproxy}
ROOT_KEY=kg_root_gateway_bench_$(date +%s)_0000
require wrk nginx caddy haproxy curl taskset
bash .ci/gateways.sh >/dev/null
GW_BIN=$(pwd)/target/gateways/bin
LUA=$(pwd)/deploy/haproxy/keygate.lua
cargo build --release -q -p keygate --bin keygate
chmod 755 "$work" # nginx's workers (another user) reach the Unix socket in it
KG=18401 UP=18402 NOTHING204=18403 NOTHING200=18404 KG_GRPC=18405
SOCK=$work/kg.sock
# block MARKER: the fenced block after `<!-- gateway-test: MARKER -->` in docs/gateways.md.
block() {
  awk -v m="<!-- gateway-test: $1 -->" '$0 == m {f = 1; next} f && /^```/ {if (on) exit; on = 1; next} on' docs/gateways.md \
    | sed -e "s/kg_root_replace_with_the_gateways_root_key/$ROOT_KEY/" -e "s/limit=100;/limit=1000000000;/" \
          -e "s/requests_per_unit: 3 /requests_per_unit: 1000000000 /" \
          -e "s/127.0.0.1:9000/127.0.0.1:$UP/" -e "s/port_value: 9000/port_value: $UP/"
}
block "envoy-rls config" >"$work/rls.yaml"
serve_keygate $KG "$work/kg.log" DATABASE_URL="sqlite://$work/k.db" KEYGATE_GRPC_LISTEN=127.0.0.1:$KG_GRPC \
  KEYGATE_ENVOY_RATELIMIT_CONFIG="$work/rls.yaml"
DATABASE_URL="sqlite://$work/k.db" KEYGATE_LISTEN=unix:$SOCK KEYGATE_LISTEN_MODE=0666 KEYGATE_WORKERS=1 \
  RUST_LOG=warn taskset -c 0 "$RELEASE/keygate" 2>"$work/kg-uds.log" &
pids+=($!)
for _ in $(seq 1 50); do curl -s -o /dev/null --unix-socket "$SOCK" http://x/v1/liveness && break; sleep 0.1; done
key=$(create_keys $KG v1/keys.createKey '{"permissions":["documents.read"]}' 1)

# The upstream and the do-nothing auth server: one nginx process, one worker.
cat >"$work/fixed.conf" <<CONF
daemon off; worker_processes 1; pid $work/fixed.pid; error_log $work/fixed-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  server { listen 127.0.0.1:$UP; location / { return 200 "ok"; } }
  server { listen 127.0.0.1:$NOTHING204; location / { return 204; } }
  server { listen 127.0.0.1:$NOTHING200; location / { return 200; } }
}
CONF
taskset -c 0 nginx -p "$work" -c "$work/fixed.conf" &
pids+=($!)


# start NAME GATEWAY AUTH PORT: GATEWAY's inline block asking AUTH (127.0.0.1:PORT or
# unix:PATH) for its decisions, listening on PORT, pinned to CPU 0.
start() {
  local name=$1 gateway=$2 auth=$3 port=$4 dir=$work/$1
  mkdir -p "$dir"
  case $gateway in
    nginx)
      { echo "daemon off; worker_processes 1; pid $dir/nginx.pid; error_log $dir/error.log;"
        echo "events { worker_connections 4096; } http { access_log off;"
        block "nginx inline" | sed -e "s#127.0.0.1:8080#$auth#" -e "s/listen 8000;/listen 127.0.0.1:$port;/"
        echo "}"; } >"$dir/nginx.conf"
      taskset -c 0 nginx -p "$dir" -c "$dir/nginx.conf" &
      ;;
    caddy)
      { printf '{\n  admin off\n  auto_https off\n}\n'
        block "caddy inline" | sed -e "s#127.0.0.1:8080#${auth/unix:/unix\/}#" -e "s/^:8000 {/http:\/\/:$port {\n    bind 127.0.0.1/"
      } >"$dir/Caddyfile"
      (cd "$dir" && HOME=$dir XDG_DATA_HOME=$dir XDG_CONFIG_HOME=$dir \
        exec taskset -c 0 caddy run --config Caddyfile --adapter caddyfile >"$dir/log" 2>&1) &
      ;;
    traefik)
      block "traefik inline" | sed -e "s#127.0.0.1:8080#$auth#" >"$dir/dynamic.yml"
      (cd "$dir" && exec taskset -c 0 "$GW_BIN/traefik" --entryPoints.web.address=127.0.0.1:"$port" \
        --providers.file.filename="$dir/dynamic.yml" --global.checkNewVersion=false \
        --global.sendAnonymousUsage=false --log.level=ERROR >"$dir/log" 2>&1) &
      ;;
    envoy)
      block "envoy inline" | sed -e "s#127.0.0.1:8080#$auth#" -e "s/port_value: 8080/port_value: ${auth##*:}/" \
        -e "s/address: 0.0.0.0, port_value: 8000/address: 127.0.0.1, port_value: $port/" >"$dir/envoy.yaml"
      taskset -c 0 "$GW_BIN/envoy" -c "$dir/envoy.yaml" --concurrency 1 --disable-hot-restart \
        --log-level error >"$dir/log" 2>&1 &
      ;;
    envoy-grpc | envoy-rls | envoy-plain)
      # Envoy's gRPC blocks (AUTH: keygate's gRPC listener); envoy-plain: envoy-rls's block
      # without its rate-limit filter.
      case $gateway in
        envoy-grpc) block "envoy-grpc inline" ;;
        envoy-rls) block "envoy-rls envoy" ;;
        envoy-plain) block "envoy-rls envoy" | awk '/- name: envoy.filters.http.ratelimit/ {skip = 1}
                                                  /- name: envoy.filters.http.router/ {skip = 0} !skip' ;;
      esac | sed -e "s/port_value: 8081/port_value: ${auth##*:}/" \
        -e "s/address: 0.0.0.0, port_value: 8000/address: 127.0.0.1, port_value: $port/" >"$dir/envoy.yaml"
      taskset -c 0 "$GW_BIN/envoy" -c "$dir/envoy.yaml" --concurrency 1 --disable-hot-restart \
        --log-level error >"$dir/log" 2>&1 &
      ;;
    haproxy)
      block "haproxy inline" | sed -e "s#127.0.0.1:8080#$auth#" -e "s/bind :8000/bind 127.0.0.1:$port/" \
        -e "s#/etc/haproxy/keygate.lua#$LUA#" >"$dir/haproxy.cfg"
      taskset -c 0 haproxy -db -f "$dir/haproxy.cfg" >"$dir/log" 2>&1 &
      ;;
  esac
  pids+=($!)
}

port=18410
declare -A at
for g in $GATEWAYS; do
  gateway=${g%-uds}
  case $g in *-uds) kg=unix:$SOCK ;; *) kg=127.0.0.1:$KG ;; esac
  nothing=127.0.0.1:$NOTHING204 plain=$gateway
  case $g in
    envoy) nothing=127.0.0.1:$NOTHING200 ;;
    envoy-grpc) kg=127.0.0.1:$KG_GRPC nothing=127.0.0.1:$NOTHING200 plain=envoy ;;
    envoy-rls) kg=127.0.0.1:$KG_GRPC plain=envoy-plain ;;
  esac
  at[$g-keygate]=$port
  start "$g-keygate" "$gateway" "$kg" $port
  at[$g-nothing]=$((port + 1))
  start "$g-nothing" "$plain" "$nothing" $((port + 1))
  port=$((port + 2))
done
# LIMITADOR_BIN set: envoy-rls's block asking Kuadrant's limitador (memory storage, the same
# limit) too, as `envoy-rls-limitador`: what another RLS costs Envoy in the same set-up.
peers=()
if [ -n "${LIMITADOR_BIN:-}" ] && [[ " $GATEWAYS " == *" envoy-rls "* ]]; then
  cat >"$work/limits.yaml" <<'YAML'
- namespace: api
  max_value: 1000000000
  seconds: 60
  conditions: ["descriptors[0]['generic_key'] == 'docs'"]
  variables: ["descriptors[0]['user']"]
YAML
  LIMITADOR=18406
  serve_limitador $LIMITADOR "$work/limits.yaml" "$work/limitador.log" memory
  at[envoy-rls-limitador]=$port
  start envoy-rls-limitador envoy-rls 127.0.0.1:$((LIMITADOR + 1)) $port
  peers+=(envoy-rls-limitador)
fi
# Each passes a valid key before the rounds start.
for s in "${!at[@]}"; do
  for _ in $(seq 1 100); do
    curl -sf -o /dev/null -H "Authorization: Bearer $key" -H "x-user-id: bench" "http://127.0.0.1:${at[$s]}/x" && continue 2
    sleep 0.1
  done
  echo "$s (port ${at[$s]}) does not pass a valid key:" >&2
  curl -si -H "Authorization: Bearer $key" "http://127.0.0.1:${at[$s]}/x" >&2 || true
  cat "$work/$s"/*log* >&2 || true
  exit 1
done

for r in $(seq 1 "$ROUNDS"); do
  for g in $GATEWAYS; do
    peer=()
    [ "$g" = envoy-rls ] && peer=("${peers[@]}")
    for s in "$g-keygate" "$g-nothing" "${peer[@]}"; do
      out=$(taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -H "Authorization: Bearer $key" -H "x-user-id: bench" \
        "http://127.0.0.1:${at[$s]}/x")
      rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
      p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
      non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
      echo "$s round=$r rps=$rps p50=$p50 p99=$p99 errors=${non2xx:-0}"
    done
  done
done | tee "$work/rounds"
# Per-round ratios of each gateway with keygate to the same with the do-nothing server.
for g in $GATEWAYS; do
  printf '%-10s keygate / nothing: median of %d per-round throughput ratios %s (keygate %s req/s, nothing %s)\n' \
    "$g" "$ROUNDS" "$(ratio "$work/rounds" "$g-keygate" "$g-nothing")" \
    "$(median_of "$work/rounds" "$g-keygate" rps)" "$(median_of "$work/rounds" "$g-nothing" rps)"
done
for p in "${peers[@]}"; do
  printf '%-10s limitador / nothing: median of %d per-round throughput ratios %s (limitador %s req/s)\n' \
    envoy-rls "$ROUNDS" "$(ratio "$work/rounds" "$p" envoy-rls-nothing)" "$(median_of "$work/rounds" "$p" rps)"
done
# Envoy's two ext_authz transports to keygate, gRPC over HTTP.
if [[ " $GATEWAYS " == *" envoy "* && " $GATEWAYS " == *" envoy-grpc "* ]]; then
  printf 'envoy-grpc keygate / envoy keygate (ext_authz gRPC / HTTP): median of per-round ratios %s\n' \
    "$(ratio "$work/rounds" envoy-grpc-keygate envoy-keygate)"
fi
[ "$(errors "$work/rounds")" = 0 ] || { echo "some answers were not 2xx (errors= above)" >&2; exit 1; }
