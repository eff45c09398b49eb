#!/usr/bin/env bash
# The structure rules (docs/architecture.md): every library and binary source file at most
# 600 lines (tests, benches and examples aside), docs/performance.md at most 250 lines, and
# the crates' dependencies pointing one way, as the crate graph draws them.
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

lines=$(wc -l < docs/performance.md)
if [ "$lines" -gt 250 ]; then
  echo "FATAL: docs/performance.md has $lines lines (at most 250: details go to docs/performance/<area>.md)" >&2
  fail=1
fi

# crate:crates it must not depend on (normal dependencies, directly or through others).
for rule in \
  "keygate-vault:keygate-domain keygate-ratelimit keygate-rbac keygate-usage keygate-analytics keygate-store keygate-runtime" \
  "keygate-domain:keygate-ratelimit keygate-rbac keygate-usage keygate-analytics keygate-store keygate-runtime" \
  "keygate-ratelimit:keygate-rbac keygate-usage keygate-analytics keygate-store keygate-runtime" \
  "keygate-rbac:keygate-usage keygate-analytics keygate-portal keygate-store keygate-runtime" \
  "keygate-usage:keygate-analytics keygate-store keygate-runtime" \
  "keygate-analytics:keygate-usage keygate-portal keygate-store keygate-runtime" \
  "keygate-portal:keygate-usage keygate-store keygate-runtime" \
  "keygate-store:keygate-runtime"; do
  crate=${rule%%:*}
  deps=$(cargo tree -q -p "$crate" -e normal --prefix none | awk '{print $1}' | sort -u)
  for banned in ${rule#*:}; do
    if grep -qx "$banned" <<<"$deps"; then
      echo "FATAL: $crate depends on $banned (dependencies point one way: docs/architecture.md)" >&2
      fail=1
    fi
  done
done
exit "$fail"
