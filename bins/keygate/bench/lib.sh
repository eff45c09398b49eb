# What the benchmark scripts share, sourced by each after `set -euo pipefail` and a `cd` to
# the workspace root: tool checks, a scratch directory removed on exit with every process
# started, the database, keygate servers, keys, wrk rounds and their medians.
#
# Rounds are lines `NAME round=N rps=... p50_us=... p99_us=... errors=...` (wrk's RESULT
# line from limit.lua, verify.lua, verify-v2.lua or hello.lua, named); the summaries read
# them back.

# require TOOL...: stops with the package to install when a tool is missing.
require() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install $tool" >&2; exit 1; }
  done
}

work=$(mktemp -d)
pids=()
schema=""
bench_cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "$schema" ]; then
    psql -q -h 127.0.0.1 -U postgres test -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap bench_cleanup EXIT

# bench_database: DATABASE_URL for the servers. SCALE_OUT=1: a fresh schema of the local
# PostgreSQL (dropped on exit) and the local Redis under a key prefix of its own; else a
# SQLite file in the scratch directory.
bench_database() {
  if [ "${SCALE_OUT:-0}" = 1 ]; then
    require psql
    schema=kg_bench_$$
    psql -q -h 127.0.0.1 -U postgres test -c "CREATE SCHEMA $schema" >/dev/null
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/test?options=--search_path%3D$schema"
    export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379} KEYGATE_REDIS_KEY_PREFIX="kgbench$$:"
  else
    export DATABASE_URL="sqlite://$work/bench.db"
  fi
}

# wait_up PORT [PATH]: waits (10 s at most) until http://127.0.0.1:PORT/PATH answers.
wait_up() {
  local path=${2-v1/liveness}
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$1/$path" && return
    sleep 0.1
  done
  echo "nothing answers on port $1" >&2
  exit 1
}

# Where cargo puts release builds: CARGO_TARGET_DIR's, when set (e.g. a build with other
# profile settings kept apart from the usual one).
RELEASE=${CARGO_TARGET_DIR:-target}/release

# serve_keygate PORT LOG [VAR=VALUE...]: $KEYGATE_BIN (default $RELEASE/keygate) with ROOT_KEY, one worker
# pinned to CPU 0, the variables given added to its environment; waits until it answers.
serve_keygate() {
  local port=$1 log=$2
  shift 2
  env KEYGATE_LISTEN="127.0.0.1:$port" KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY="$ROOT_KEY" RUST_LOG=warn "$@" \
    taskset -c 0 "${KEYGATE_BIN:-$RELEASE/keygate}" 2>"$log" &
  pids+=($!)
  wait_up "$port"
}

# serve_limitador HTTP_PORT LIMITS_FILE LOG STORAGE...: Kuadrant's limitador-server
# ($LIMITADOR_BIN, built by hand: bench/rls.sh says how) on CPU 0 with the limits file and
# storage (`memory`, or `redis URL`), its RLS on HTTP_PORT + 1; back once it answers.
serve_limitador() {
  local port=$1 limits=$2 log=$3
  shift 3
  RUST_LOG=error taskset -c 0 "$LIMITADOR_BIN" --http-port "$port" --rls-port $((port + 1)) \
    "$limits" "$@" >"$log" 2>&1 &
  pids+=($!)
  wait_up "$port" status
}

# create_keys PORT PATH BODY COUNT: COUNT keys created through PATH (v1/keys.createKey or
# v2/keys.createKey) with BODY; their secrets, one per line.
create_keys() {
  for _ in $(seq 1 "$4"); do
    curl -s "http://127.0.0.1:$1/$2" -H "Authorization: Bearer $ROOT_KEY" \
      -H 'Content-Type: application/json' -d "$3" | sed -E 's/.*"key":"([^"]+)".*/\1/'
    echo
  done
}

# create_api PORT NAME: a new API's id (v2 apis.createApi).
create_api() {
  curl -sS "http://127.0.0.1:$1/v2/apis.createApi" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d "{\"name\":\"$2\"}" | sed -E 's/.*"apiId":"([^"]+)".*/\1/'
}

# expect_valid PORT PATH BODY: the verification answers valid, or the benchmark stops (a
# benchmark of refusals would measure the wrong path).
expect_valid() {
  curl -s "http://127.0.0.1:$1/$2" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d "$3" | grep -q '"valid":true' \
    || { echo "a benchmark key does not verify VALID on port $1 ($2)" >&2; exit 1; }
}

# wrk_round NAME PORT SCRIPT: one round of wrk (one thread, CONNECTIONS connections, DURATION)
# on CPU 1 with the Lua SCRIPT (a path from the workspace root); its RESULT line, named.
# With CPU=1, also `cpu_us=`: the CPU time the last server started (all its threads, user
# and system) spent per request in the round. A VM's noise moves throughput more than it
# moves that (time the server did not get is not counted), so builds compare closer on it.
wrk_round() {
  local before line
  before=$(server_cpu_ticks)
  line=$(taskset -c 1 wrk -t1 -c"${CONNECTIONS:-64}" -d"${DURATION:-10s}" -s "$3" "http://127.0.0.1:$2" \
    | grep '^RESULT' | sed "s/^RESULT/$1/")
  if [ -n "${CPU:-}" ]; then
    line=$(echo "$line" | awk -v t="$(($(server_cpu_ticks) - before))" -v hz="$(getconf CLK_TCK)" \
      '{ for (i = 2; i <= NF; i++) if (index($i, "requests=") == 1) n = substr($i, 10);
         printf "%s cpu_us=%.2f\n", $0, (n > 0 ? t / hz * 1e6 / n : 0) }')
  fi
  echo "$line"
}

# server_cpu_ticks: the user and system clock ticks of the last server started (0 if none).
server_cpu_ticks() {
  local pid=${pids[-1]:-}
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || { echo 0; return; }
  # Fields 14 and 15 (utime, stime), counted after the command's parenthesised name.
  sed -E 's/^.*\) //' "/proc/$pid/stat" | awk '{ print $12 + $13 }'
}

# median: the median of the numbers on standard input, one per line.
median() {
  sort -g | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'
}

# field FILE NAME FIELD: FIELD of every round of NAME in FILE, one per line, in order.
field() {
  awk -v name="$2" -v f="$3" '$1 == name { for (i = 2; i <= NF; i++) if (index($i, f "=") == 1) print substr($i, length(f) + 2) }' "$1"
}

# median_of FILE NAME FIELD: the median of FIELD over the rounds of NAME, rounded.
median_of() {
  field "$@" | median | awk '{ printf "%.0f\n", $1 }'
}

# ratio FILE A B [FIELD]: the median of the per-round ratios of FIELD (rps) of A over B
# (the rounds paired in order), to three decimals.
ratio() {
  paste <(field "$1" "$2" "${4:-rps}") <(field "$1" "$3" "${4:-rps}") \
    | awk '$2 > 0 { print $1 / $2 }' | median | awk '{ printf "%.3f\n", $1 }'
}

# errors FILE: the non-2xx answers and socket errors of every round in FILE.
errors() {
  awk '{ for (i = 2; i <= NF; i++) if (index($i, "errors=") == 1) n += substr($i, 8) } END { print n + 0 }' "$1"
}

# algorithm_namespace PORT ALGORITHM: the namespace named ALGORITHM created on the keygate
# at PORT, set to that algorithm (v2 ratelimit.updateNamespace), and warmed (its caches and
# limit.lua's 10,000 budgets).
algorithm_namespace() {
  curl -sS -o /dev/null "http://127.0.0.1:$1/v2/ratelimit.limit" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' \
    -d "{\"namespace\":\"$2\",\"identifier\":\"warm\",\"limit\":1,\"duration\":60000}"
  curl -sS "http://127.0.0.1:$1/v2/ratelimit.updateNamespace" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d "{\"namespace\":\"$2\",\"algorithm\":\"$2\"}" \
    | grep -q '"data":{}' || { echo "updateNamespace $2 failed" >&2; exit 1; }
  NAMESPACE=$2 CONNECTIONS=8 DURATION=2s wrk_round warm "$1" bins/keygate/bench/limit.lua >/dev/null
}
