#!/usr/bin/env bash
# Runs every fuzz target (or those named) for MINUTES each, from its seed corpus, and
# reports the coverage libFuzzer reached: at the start (the seeds alone) and at the end.
#
#   bash tests/fuzz/run.sh [MINUTES] [TARGET...]     # MINUTES: 1 by default
#   KEEP=1 bash tests/fuzz/run.sh 10                 # add what was found to corpus/
#
# With a stable toolchain the targets build without a sanitizer (`-s none`: libFuzzer's
# coverage, Rust's own checks); with nightly, SANITIZER=address adds AddressSanitizer.
# A crash stops the run with its input in artifacts/<target>/: fix it, and pin it with a
# regression test beside the parser (docs/security.md, "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")"
minutes=${1:-1}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request_body permission_query override_pattern sql_analytics import_line config_file)
sanitizer=${SANITIZER:-none}

if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "0.13.2" ]; then
  echo "== installing cargo-fuzz 0.13.2 (once per machine)"
  cargo install -q --locked cargo-fuzz@0.13.2
fi
cargo fuzz build -s "$sanitizer"

printf '%-18s %10s %10s %12s %8s\n' target "cov start" "cov end" runs corpus
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  cp -r "corpus/$t/." "$work/"
  log=$work.log
  cargo fuzz run -s "$sanitizer" "$t" "$work" -- -max_total_time=$((minutes * 60)) -print_final_stats=1 >"$log" 2>&1 \
    || { echo "FAILED: $t (see $log and artifacts/$t/)"; tail -30 "$log"; exit 1; }
  start=$(grep -m1 -o 'INITED cov: [0-9]*' "$log" | awk '{print $3}')
  end=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{print $2}')
  printf '%-18s %10s %10s %12s %8s\n' "$t" "${start:-?}" "${end:-?}" "${runs:-?}" "$(ls "$work" | wc -l)"
  if [ "${KEEP:-0}" = 1 ]; then
    cargo fuzz cmin -s "$sanitizer" "$t" "$work" >/dev/null 2>&1 || true
    cp -n "$work"/* "corpus/$t/" 2>/dev/null || true
  fi
  rm -rf "$work" "$log"
done
