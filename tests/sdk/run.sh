#!/usr/bin/env bash
# Drives Unkey's published v1 SDKs (npm @unkey/api 0.38, @unkey/ratelimit 0.5, PyPI
# unkey-py 0.10; versions pinned in package-lock.json and requirements.txt) and v2 SDKs
# (npm @unkey/api 2.5.1, @unkey/ratelimit 2.1.4, PyPI unkey.py 3.2.2; pinned in v2/)
# against the real keygate binary on the embedded default, and validates its
# /openapi.json with openapi-spec-validator. Exits non-zero on any incompatibility.
set -euo pipefail
cd "$(dirname "$0")"
source ../lib.sh

kg_build
for dir in . v2; do
  (cd "$dir" && npm ci --silent --no-audit --no-fund 2>&1 | grep -v 'Unknown user config' || true)
  kg_venv "$dir" "$dir/requirements.txt"
done

kg_work
export KEYGATE_ROOT_KEY="kg_root_sdk_$(date +%s)_${RANDOM}${RANDOM}${RANDOM}"
export DATABASE_URL="sqlite://$KG_WORK/sdk.db"
# Recoverable keys need an encryption keyring: a fresh one for this run.
KEYGATE_ENCRYPTION_KEYS=$("$KG_BIN" encryption new-key --id sdk | python3 -c 'import json, sys; print(json.load(sys.stdin)["entry"])')
export KEYGATE_ENCRYPTION_KEYS
kg_start KEYGATE_WORKERS=1 RUST_LOG=warn
export KEYGATE_URL=$KG_URL
KEYGATE_KEY_ID=$("$KG_BIN" keys create --workspace default | python3 -c 'import json, sys; print(json.load(sys.stdin)["keyId"])')
export KEYGATE_KEY_ID

node ts_sdk.mjs
.venv/bin/python py_sdk.py
(cd v2 && node ts_sdk.mjs && .venv/bin/python py_sdk.py)
