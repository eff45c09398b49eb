#!/usr/bin/env bash
# Keys hashed by the real libraries of the systems teams come from (PyPI bcrypt,
# argon2-cffi, Django; Python's hashlib.scrypt; pinned in requirements.txt) in the shape
# npm prefixed-api-key gives them (pinned in package-lock.json), imported into the real
# binary on the embedded default under a legacy migration (docs/api-v2.md, *Keys from
# systems that kept a slow hash*) and verified: see verify.py. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"
source ../lib.sh

kg_build
npm ci --silent --no-audit --no-fund 2>&1 | grep -v 'Unknown user config' || true
kg_venv . requirements.txt
kg_work
export KEYGATE_ROOT_KEY="kg_root_legacy_$(date +%s)_${RANDOM}${RANDOM}"
export DATABASE_URL="sqlite://$KG_WORK/legacy.db"
kg_start KEYGATE_MIGRATIONS=pk=legacy:_:1 KEYGATE_WORKERS=1 RUST_LOG=warn
export KEYGATE_URL=$KG_URL KG_BIN
node keys.mjs 8 | .venv/bin/python verify.py
