#!/usr/bin/env bash
# Supply-chain checks (deny.toml): known vulnerabilities, unmaintained and yanked crates,
# licences, duplicate and banned crates, sources. Fails on any finding.
#
# cargo-deny is installed once per machine (a pinned version, kept in ~/.cargo/bin between
# runs). The RustSec advisory database is fetched from GitHub; where GitHub cannot be
# reached (this project's CI machines reach crates.io but not GitHub), the snapshot
# committed beside this script is used instead, and its age is printed:
# refresh it with `bash .ci/supply-chain.sh --refresh-snapshot PATH-TO-ADVISORY-DB-CHECKOUT`.
set -euo pipefail
cd "$(dirname "$0")/.."

DENY_VERSION=0.20.2
SNAPSHOT=.ci/advisory-db.tar.xz
# The snapshot's advisory-db commit and its date (kept with the archive).
SNAPSHOT_COMMIT=bf5c0d245a92671908518d7e765914d437954ed6
SNAPSHOT_DATE=2026-08-21T08:28:40+02:00
CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
# Where cargo-deny keeps the default database (deny.toml's db-path; the directory's name is
# derived from the database's URL).
DB="$CARGO_HOME/advisory-dbs/advisory-db-3157b0e258782691"

if [ "${1:-}" = "--refresh-snapshot" ]; then
  src=${2:?the path of a checkout of github.com/rustsec/advisory-db}
  commit=$(git -C "$src" rev-parse HEAD)
  date=$(git -C "$src" show -s --format=%cI HEAD)
  git -C "$src" archive --format=tar HEAD crates rust support.toml | xz -9 > "$SNAPSHOT"
  sed -i "s/^SNAPSHOT_COMMIT=.*/SNAPSHOT_COMMIT=$commit/; s/^SNAPSHOT_DATE=.*/SNAPSHOT_DATE=$date/" "$0"
  echo "snapshot: $commit ($date)"
  exit 0
fi

if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $DENY_VERSION" ]; then
  echo "== installing cargo-deny $DENY_VERSION (once per machine)"
  cargo install -q --locked "cargo-deny@$DENY_VERSION" \
    || { echo "FATAL: cargo-deny could not be installed" >&2; exit 1; }
fi

if timeout 120 cargo deny fetch db >/dev/null 2>&1; then
  echo "advisory database: fetched from GitHub ($(git -C "$DB" show -s --format='%h, %cs' HEAD))"
else
  # The committed snapshot, as a git repository (cargo-deny reads the commit's date).
  rm -rf "$DB" && mkdir -p "$DB"
  tar -xJf "$SNAPSHOT" -C "$DB"
  git -C "$DB" init -q
  git -C "$DB" add -A
  GIT_AUTHOR_DATE=$SNAPSHOT_DATE GIT_COMMITTER_DATE=$SNAPSHOT_DATE \
    git -C "$DB" -c user.name=keygate-ci -c user.email=ci@localhost commit -q -m "advisory-db $SNAPSHOT_COMMIT"
  age=$(( ($(date +%s) - $(date -d "$SNAPSHOT_DATE" +%s)) / 86400 ))
  echo "advisory database: GitHub unreachable, the committed snapshot ${SNAPSHOT_COMMIT:0:7} of ${SNAPSHOT_DATE:0:10} ($age days old)"
fi

cargo deny --offline check
