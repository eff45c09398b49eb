#!/usr/bin/env bash
# The cost of OpenTelemetry traces on the hot paths: one keygate binary with tracing off
# against the same binary with tracing on (every trace sampled, exported over OTLP/HTTP to
# a sink that answers 200 and keeps nothing), side by side in ab.sh's interleaved rounds.
#
#   bash bins/keygate/bench/tracing.sh [BINARY]   # default target/release/keygate; ROUNDS, DURATION as ab.sh
#   RATIO=0.01 bash bins/keygate/bench/tracing.sh  # the on side samples 1 % of traces
#
# "before" is tracing off, "after" tracing on. The sink runs on CPU 1 beside wrk; the
# exporter's batches are keygate's own work, on CPU 0 with its worker.
set -euo pipefail
bin=$(realpath "${1:-target/release/keygate}")
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
sink_port=18699
trap 'kill $sink 2>/dev/null || true; rm -rf "$dir"' EXIT
cat >"$dir/sink.py" <<'PY'
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
PY
taskset -c 1 python3 "$dir/sink.py" "$sink_port" &
sink=$!
cat >"$dir/keygate-traced" <<SH
#!/bin/sh
KEYGATE_OTLP_ENDPOINT=http://127.0.0.1:$sink_port KEYGATE_OTLP_SAMPLE_RATIO=${RATIO:-1} exec "$bin" "\$@"
SH
chmod +x "$dir/keygate-traced"
bash "$here/ab.sh" "$bin" "$dir/keygate-traced"
