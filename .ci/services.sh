#!/usr/bin/env bash
# Makes sure the local PostgreSQL (127.0.0.1:5432, database `test`) and Redis
# (127.0.0.1:6379) are up, starting them when they are not. Exits non-zero, loudly, when
# one cannot be reached.
set -uo pipefail

wait_for() { # name, probe command...
  local name=$1; shift
  for _ in $(seq 1 30); do
    if "$@" >/dev/null 2>&1; then echo "$name: up"; return 0; fi
    sleep 1
  done
  echo "FATAL: $name is not reachable; the tests that need it cannot run" >&2
  return 1
}

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q && psql -h 127.0.0.1 -U postgres -d test -Atqc 'SELECT 1' | grep -q 1; }
if ! pg_up 2>/dev/null; then
  echo "PostgreSQL: not answering, starting it"
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi
wait_for PostgreSQL pg_up || exit 1

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
if ! redis_up 2>/dev/null; then
  echo "Redis: not answering, starting it"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
fi
wait_for Redis redis_up || exit 1
