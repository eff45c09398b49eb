#!/usr/bin/env bash
# keygate's usage export read by the CloudEvents Python SDK (PyPI cloudevents, pinned in
# requirements.txt, used unchanged) against the real binary on the embedded default: the
# batch a closed minute sends to an OpenMeter-shaped receiver on loopback parses as
# CloudEvents 1.0, with the identity's credits and verifications. A minute must close
# (plus the 15 s export delay), so this takes up to about 80 s. Exits non-zero on any
# failure.
set -euo pipefail
cd "$(dirname "$0")"
source ../lib.sh

kg_build
kg_venv . requirements.txt
kg_work
export KEYGATE_ROOT_KEY="kg_root_metering_$(date +%s)_${RANDOM}${RANDOM}"
SINK_PORT=$(kg_free_port)
export SINK_PORT
kg_start DATABASE_URL="sqlite://$KG_WORK/metering.db" KEYGATE_WORKERS=1 RUST_LOG=warn \
  KEYGATE_USAGE_EXPORT_CLOUDEVENTS_URL="http://127.0.0.1:$SINK_PORT/api/v1/events" \
  KEYGATE_USAGE_EXPORT_CLOUDEVENTS_TOKEN=om_metering_token
KEYGATE_URL=$KG_URL .venv/bin/python verify.py
