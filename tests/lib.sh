# Shared setup of the runners that drive the real keygate binary from outside Rust
# (tests/sdk/run.sh, tests/schemathesis/run.sh): sourced, never run. Each helper fails
# loudly (the runner has `set -euo pipefail`); nothing is skipped.
#
#   source "$(dirname "$0")/../lib.sh"
#   kg_build                       # KG_BIN: the debug binary, built (KG_PREBUILT=1: as built)
#   kg_venv DIR REQUIREMENTS       # a Python venv in DIR with REQUIREMENTS installed
#   kg_work                        # KG_WORK: a temp dir, removed on exit
#   kg_postgres_db NAME            # a PostgreSQL database NAME (dropped on exit): its URL
#                                  # in KG_DATABASE_URL
#   kg_start [ENV=VALUE ...]       # keygate on a free port (KG_PORT, KG_URL, KG_PID),
#                                  # waited for until /v1/liveness answers
#   kg_stop                        # stops it (also done on exit)

KG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KG_CLEANUP=()

kg_on_exit() { KG_CLEANUP+=("$1"); }
kg_exit() {
  local i
  for ((i = ${#KG_CLEANUP[@]} - 1; i >= 0; i--)); do eval "${KG_CLEANUP[i]}" || true; done
}
trap kg_exit EXIT

kg_build() {
  # CI builds the binary once, with the tests (`cargo test --workspace --no-run`), and says
  # so with KG_PREBUILT=1: no cargo here then (a cargo run beside it holds the build lock).
  if [ "${KG_PREBUILT:-}" = 1 ] && [ -x "$KG_ROOT/target/debug/keygate" ]; then
    KG_BIN="$KG_ROOT/target/debug/keygate"
    return 0
  fi
  cargo build -q -p keygate --manifest-path "$KG_ROOT/Cargo.toml"
  KG_BIN="$KG_ROOT/target/debug/keygate"
}

kg_venv() {
  local dir=$1 requirements=$2
  [ -x "$dir/.venv/bin/python" ] || python3 -m venv "$dir/.venv"
  "$dir/.venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
}

kg_work() {
  KG_WORK=$(mktemp -d)
  kg_on_exit 'rm -rf "$KG_WORK"'
}

kg_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

kg_psql() { psql -h 127.0.0.1 -U postgres -d test -qAtc "$1"; }

kg_postgres_db() {
  local name=$1
  kg_psql "CREATE DATABASE $name" >/dev/null
  kg_on_exit "kg_psql 'DROP DATABASE IF EXISTS $name WITH (FORCE)' >/dev/null"
  # A variable, not output: in a command substitution's subshell the clean-up above would
  # be registered in the subshell and lost.
  KG_DATABASE_URL="postgres://postgres@127.0.0.1:5432/$name"
}

# keygate with the given environment (on top of the caller's) on a free port, its log in
# $KG_WORK/server.log; waits up to 30 s for /v1/liveness, else prints the log and fails.
kg_start() {
  [ -n "${KG_WORK:-}" ] || kg_work
  KG_PORT=$(kg_free_port)
  KG_URL="http://127.0.0.1:$KG_PORT"
  env KEYGATE_LISTEN="127.0.0.1:$KG_PORT" "$@" "$KG_BIN" 2>>"$KG_WORK/server.log" &
  KG_PID=$!
  kg_on_exit 'kg_stop'
  local _
  for _ in $(seq 1 300); do
    if curl -fs "$KG_URL/v1/liveness" >/dev/null; then return 0; fi
    kill -0 "$KG_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "FATAL: keygate did not start; its log:" >&2
  cat "$KG_WORK/server.log" >&2
  return 1
}

kg_stop() {
  if [ -n "${KG_PID:-}" ]; then
    kill "$KG_PID" 2>/dev/null || true
    wait "$KG_PID" 2>/dev/null || true
    KG_PID=
  fi
}
