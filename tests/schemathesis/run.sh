#!/usr/bin/env bash
# schemathesis (pinned in requirements.txt) against the running server's /openapi.json and
# /openapi-v2.json,
# with every check, on PostgreSQL (a database of its own, dropped afterwards): the
# document must describe exactly what the server accepts and refuses (issue 16). Exits
# non-zero on any failure. Needs python3 and a PostgreSQL at 127.0.0.1:5432.
#   bash tests/schemathesis/run.sh                 # 40 examples per operation
#   EXAMPLES=200 SEED=7 bash tests/schemathesis/run.sh
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)

cargo build -q -p keygate --manifest-path "$root/Cargo.toml"
bin="$root/target/debug/keygate"
[ -x .venv/bin/schemathesis ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r requirements.txt

db="keygate_st_$$"
pg() { psql -h 127.0.0.1 -U postgres -d test -qAtc "$1"; }
pg "CREATE DATABASE $db"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
root_key="kg_root_schemathesis_$(date +%s)_${RANDOM}"
work=$(mktemp -d)
DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db" KEYGATE_LISTEN="127.0.0.1:$port" KEYGATE_WORKERS=2 \
  KEYGATE_ROOT_KEY="$root_key" RUST_LOG=error "$bin" 2>"$work/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; pg "DROP DATABASE IF EXISTS $db" || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$port/v1/liveness" >/dev/null && break
  sleep 0.1
done

# One worker: schemathesis's workers are threads, and CPython 3.11's ast.parse (which
# hypothesis calls to describe strategies) is not thread-safe (cpython gh-106905: a
# spurious "AST constructor recursion depth mismatch" failed a CI run). One worker takes
# about as long here.
# Both documents: v1's /openapi.json and v2's /openapi-v2.json (DOCS narrows it). v2 answers
# a missing Authorization header with 400 (API-v2.md §1.1, as Unkey v2 does), which two
# checks take for a 401 that did not come: those two are left out for v2 alone (the HTTP
# tests check that 400 on every v2 route, tests/tests/v2_routes.rs).
for doc in ${DOCS:-openapi.json openapi-v2.json}; do
  echo "== schemathesis: /$doc"
  exclude=()
  [ "$doc" = openapi-v2.json ] && exclude=(--exclude-checks ignored_auth,missing_required_header)
  SCHEMATHESIS_HOOKS=hooks PYTHONPATH=. .venv/bin/schemathesis run "http://127.0.0.1:$port/$doc" \
    -H "Authorization: Bearer $root_key" --checks all "${exclude[@]}" -n "${EXAMPLES:-40}" --seed "${SEED:-1}" \
    --workers 1 --no-shrink
done
