#!/usr/bin/env bash
# Drives Unkey's published v1 SDKs (npm @unkey/api 0.38, @unkey/ratelimit 0.5, PyPI
# unkey-py 0.10; versions pinned in package-lock.json and requirements.txt) and v2 SDKs
# (npm @unkey/api 2.5.1, @unkey/ratelimit 2.1.4, PyPI unkey.py 3.2.2; pinned in v2/)
# against the real keygate binary on the embedded default, and validates its
# /openapi.json with openapi-spec-validator. Exits non-zero on any incompatibility.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)

cargo build -q -p keygate --manifest-path "$root/Cargo.toml"
bin="$root/target/debug/keygate"
for dir in . v2; do
  (cd "$dir" && npm ci --silent --no-audit --no-fund 2>&1 | grep -v 'Unknown user config' || true)
  [ -x "$dir/.venv/bin/python" ] || python3 -m venv "$dir/.venv"
  "$dir/.venv/bin/pip" install -q --disable-pip-version-check -r "$dir/requirements.txt"
done

work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export KEYGATE_ROOT_KEY="kg_root_sdk_$(date +%s)_${RANDOM}${RANDOM}${RANDOM}"
export DATABASE_URL="sqlite://$work/sdk.db"
KEYGATE_LISTEN="127.0.0.1:$port" KEYGATE_WORKERS=1 RUST_LOG=warn "$bin" 2>"$work/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$port/v1/liveness" >/dev/null && break
  sleep 0.1
done
export KEYGATE_URL="http://127.0.0.1:$port"
KEYGATE_KEY_ID=$("$bin" keys create --workspace default | python3 -c 'import json, sys; print(json.load(sys.stdin)["keyId"])')
export KEYGATE_KEY_ID

node ts_sdk.mjs
.venv/bin/python py_sdk.py
(cd v2 && node ts_sdk.mjs && .venv/bin/python py_sdk.py)
