#!/usr/bin/env bash
# The structure rules (docs/architecture.md): every library and binary source file at most
# 600 lines (tests, benches and examples aside), the binary at most 3,000, each library crate
# but the two adapters at most 6,000, no import circle inside a crate (.ci/circles.py),
# docs/performance.md at most 250 lines, and the crates' dependencies pointing one way, as
# the crate graph draws them (no library below keygate-http names it; keygate-http names
# nothing of a process).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0

while read -r lines file; do
  [ "$file" = total ] && continue
  if [ "$lines" -gt 600 ]; then
    echo "FATAL: $file has $lines lines (at most 600: move a whole responsibility into a room of its own)" >&2
    fail=1
  fi
done < <(find crates/*/src bins/*/src -name '*.rs' -print0 | xargs -0 wc -l)

# The binary only starts the process (docs/architecture.md): at most 3,000 lines, tests aside.
bin_lines=$(find bins/keygate/src -name '*.rs' -exec awk '/^#\[cfg\(test\)\]/{exit} {n++} END{print n+0}' {} \; | paste -sd+ | bc)
if [ "$bin_lines" -gt 3000 ]; then
  echo "FATAL: bins/keygate/src has $bin_lines lines besides tests (at most 3,000: what serves requests belongs in keygate-http)" >&2
  fail=1
fi

# No library crate over ~6,000 lines besides tests, but the two adapters (docs/architecture.md):
# keygate-store (the storage's side of every capability) and keygate-http (the wire's).
for dir in crates/*/; do
  name=$(basename "$dir")
  case $name in store | http) continue ;; esac
  crate_lines=$(find "$dir/src" -name '*.rs' -exec awk '/^#\[cfg\(test\)\]/{exit} {n++} END{print n+0}' {} \; | paste -sd+ | bc)
  if [ "$crate_lines" -gt 6000 ]; then
    echo "FATAL: crates/$name has $crate_lines lines besides tests (at most 6,000: a capability that stands on its own becomes a crate)" >&2
    fail=1
  fi
done

# No import circle inside a crate (a chain of files importing each other back to the first).
python3 .ci/circles.py || fail=1

lines=$(wc -l < docs/performance.md)
if [ "$lines" -gt 250 ]; then
  echo "FATAL: docs/performance.md has $lines lines (at most 250: details go to docs/performance/<area>.md)" >&2
  fail=1
fi

# crate:crates it must not depend on (normal dependencies, directly or through others).
for rule in \
  "keygate-vault:keygate-domain keygate-ratelimit keygate-rbac keygate-usage keygate-analytics keygate-store keygate-runtime" \
  "keygate-cache:keygate-ratelimit keygate-rbac keygate-usage keygate-analytics keygate-store keygate-runtime" \
  "keygate-domain:keygate-cache keygate-ratelimit keygate-rbac keygate-usage keygate-analytics keygate-store keygate-runtime" \
  "keygate-ratelimit:keygate-rbac keygate-usage keygate-analytics keygate-store keygate-runtime" \
  "keygate-rbac:keygate-usage keygate-analytics keygate-portal keygate-store keygate-runtime" \
  "keygate-usage:keygate-analytics keygate-store keygate-runtime" \
  "keygate-analytics:keygate-usage keygate-portal keygate-store keygate-runtime" \
  "keygate-portal:keygate-usage keygate-store keygate-runtime" \
  "keygate-namespaces:keygate-usage keygate-analytics keygate-portal keygate-webhooks keygate-store keygate-runtime" \
  "keygate-operators:keygate-usage keygate-analytics keygate-portal keygate-webhooks keygate-store keygate-runtime" \
  "keygate-legacy:keygate-usage keygate-analytics keygate-portal keygate-webhooks keygate-store keygate-runtime" \
  "keygate-scanning:keygate-usage keygate-analytics keygate-portal keygate-webhooks keygate-store keygate-runtime" \
  "keygate-store:keygate-runtime keygate-http" \
  "keygate-runtime:keygate-http keygate" \
  "keygate-http:keygate keygate-grpc clap env_logger anyhow opentelemetry-otlp" \
  "keygate-grpc:keygate clap env_logger anyhow opentelemetry-otlp"; do
  crate=${rule%%:*}
  # (What the crate's code can name: a proc macro's own dependencies run in the compiler.)
  deps=$(cargo tree -q -p "$crate" -e normal,no-proc-macro --prefix none | awk '{print $1}' | sort -u)
  for banned in ${rule#*:}; do
    if grep -qx "$banned" <<<"$deps"; then
      echo "FATAL: $crate depends on $banned (dependencies point one way: docs/architecture.md)" >&2
      fail=1
    fi
  done
done
exit "$fail"
