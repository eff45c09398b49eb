#!/usr/bin/env bash
# keygate's webhook deliveries verified by the Standard Webhooks reference library (PyPI
# standardwebhooks, pinned in requirements.txt, used unchanged) against the real binary on
# the embedded default, with a receiver on loopback (KEYGATE_WEBHOOKS_ALLOW_PRIVATE=true):
# every event type the server sends verifies with the endpoint's secret, both secrets verify
# during a rotation, and a wrong secret does not. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"
source ../lib.sh

kg_build
kg_venv . requirements.txt
kg_work
export KEYGATE_ROOT_KEY="kg_root_webhooks_$(date +%s)_${RANDOM}${RANDOM}"
kg_start DATABASE_URL="sqlite://$KG_WORK/webhooks.db" KEYGATE_WEBHOOKS_ALLOW_PRIVATE=true KEYGATE_WORKERS=1 RUST_LOG=warn
KEYGATE_URL=$KG_URL .venv/bin/python verify.py
