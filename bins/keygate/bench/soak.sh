#!/usr/bin/env bash
# The soak (soak.py: a mixed load for --duration seconds, RSS, fds, threads, analytics
# held, p99 and 5xx sampled into soak.csv and soak.png, a verdict in verdict.json), with
# its Python requirements in a venv of its own under target/. Arguments go to soak.py:
#
#   bash bins/keygate/bench/soak.sh --duration 1800 --out docs/soak      # the 30-minute run
#   bash bins/keygate/bench/soak.sh --duration 30 --bin target/debug/keygate   # CI's smoke
set -euo pipefail
cd "$(dirname "$0")/../../.."
command -v wrk >/dev/null || { echo "soak: wrk is missing: apt-get install wrk" >&2; exit 1; }
venv=target/soak-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r bins/keygate/bench/soak/requirements.txt
exec "$venv/bin/python" bins/keygate/bench/soak.py "$@"
