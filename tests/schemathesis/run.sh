#!/usr/bin/env bash
# schemathesis (pinned in requirements.txt) against the running server's /openapi.json and
# /openapi-v2.json, with every check, on SQLite and on PostgreSQL (a database of its own,
# dropped afterwards): the documents must describe exactly what the server accepts and
# refuses. Exits non-zero on any failure. Needs python3 and a PostgreSQL at 127.0.0.1:5432.
#   bash tests/schemathesis/run.sh                          # 40 examples per operation
#   EXAMPLES=200 SEED=7 BACKENDS=sqlite bash tests/schemathesis/run.sh
set -euo pipefail
cd "$(dirname "$0")"
source ../lib.sh

kg_build
kg_venv . requirements.txt
kg_work

# One backend's runs (both documents), on a server of its own.
run_backend() {
  local backend=$1 database root_key keyring doc
  case $backend in
    sqlite) database="sqlite://$KG_WORK/schemathesis-$backend.db" ;;
    postgres) kg_postgres_db "keygate_st_$$" && database=$KG_DATABASE_URL ;;
    *) echo "FATAL: unknown backend $backend (sqlite, postgres)" >&2; return 2 ;;
  esac
  root_key="kg_root_schemathesis_$(date +%s)_${RANDOM}${RANDOM}"
  # An encryption keyring, as a deployment that offers recoverable keys has: without one,
  # a schema-valid `recoverable: true` is refused (412).
  keyring=$("$KG_BIN" encryption new-key --id st | python3 -c 'import json, sys; print(json.load(sys.stdin)["entry"])')
  kg_start DATABASE_URL="$database" KEYGATE_WORKERS=2 KEYGATE_ROOT_KEY="$root_key" KEYGATE_ENCRYPTION_KEYS="$keyring" RUST_LOG=error

  # One worker: schemathesis's workers are threads, and CPython 3.11's ast.parse (which
  # hypothesis calls to describe strategies) is not thread-safe (cpython gh-106905: a
  # spurious "AST constructor recursion depth mismatch" failed a CI run). One worker takes
  # about as long here.
  # Both documents: v1's /openapi.json (every route but /v2) and v2's /openapi-v2.json (DOCS
  # narrows it). v2 answers a missing Authorization header with 400 (API-v2.md §1.1, as
  # Unkey v2 does), which two checks take for a 401 that did not come: those two are left
  # out for v2 alone (the HTTP tests check that 400 on every v2 route, tests/tests/v2_routes.rs).
  for doc in ${DOCS:-openapi.json openapi-v2.json}; do
    echo "== schemathesis on $backend: /$doc"
    exclude=()
    [ "$doc" = openapi-v2.json ] && exclude=(--exclude-checks ignored_auth,missing_required_header)
    SCHEMATHESIS_HOOKS=hooks PYTHONPATH=. .venv/bin/schemathesis run "$KG_URL/$doc" \
      -H "Authorization: Bearer $root_key" -H "X-Keygate-Root-Key: $root_key" --checks all "${exclude[@]}" -n "${EXAMPLES:-40}" --seed "${SEED:-1}" \
      --workers 1 --no-shrink
  done
  kg_stop
}

# The backends side by side, each in a subshell with its own server, database and log
# (printed whole when it ends): one run is a Python process and a server taking about one
# core of this 2-core machine between them.
pids=()
for backend in ${BACKENDS:-sqlite postgres}; do
  (
    KG_CLEANUP=()
    trap kg_exit EXIT
    KG_WORK=$KG_WORK/$backend && mkdir -p "$KG_WORK"
    run_backend "$backend"
  ) >"$KG_WORK/$backend.out" 2>&1 &
  pids+=("$!:$backend")
done
failed=0
for entry in "${pids[@]}"; do
  pid=${entry%%:*} backend=${entry#*:}
  if wait "$pid"; then status=passed; else status=FAILED; failed=1; fi
  cat "$KG_WORK/$backend.out"
  echo "== schemathesis on $backend: $status"
done
exit "$failed"
