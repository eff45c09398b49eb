#!/usr/bin/env bash
# Issue 79's legacy-key figures on one server (one worker, the whole process on CPU 0,
# SQLite; wrk on CPU 1): keys imported under a legacy migration with PyPI bcrypt hashes
# (cost COST), the time of each one's first verification (one bcrypt check, then stored
# under keygate's hash), then v2 keys.verifyKey of those keys against plain keys in
# interleaved rounds, and the p99 of plain verifications with and without a flood of wrong
# secrets for one waiting key's lookup (FLOOD of them, 32 at a time, sent once at the
# start of wrk's round, from CPU 1), and with as many secrets whose lookup matches no key
# (the same requests, no old-hash check: what the flood costs besides its checks).
#
#   bash bins/keygate/bench/legacy-keys.sh   # ROUNDS=5 DURATION=5s CONNECTIONS=64 KEYS=100 COST=12 FLOOD=1000
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh
require wrk curl taskset python3
ROUNDS=${ROUNDS:-5}
KEYS=${KEYS:-100}
COST=${COST:-12}
FLOOD=${FLOOD:-1000}
export DURATION=${DURATION:-5s} CONNECTIONS=${CONNECTIONS:-64}
export ROOT_KEY=kg_root_legacy_bench_$(date +%s)_00000
port=18712
python3 -m venv "$work/venv" && "$work/venv/bin/pip" install -q --disable-pip-version-check bcrypt==5.0.0
bench_database
serve_keygate "$port" "$work/server.log" DATABASE_URL="$DATABASE_URL" KEYGATE_MIGRATIONS=pk=legacy:_:1
api=$(create_api "$port" legacy)
create_keys "$port" v2/keys.createKey "{\"apiId\":\"$api\",\"prefix\":\"acme\"}" "$KEYS" >"$work/plain.txt"

# The old system's keys (`acme_<lookup>_<secret>`), hashed by bcrypt, imported; one more
# waiting key whose lookup the flood aims at.
"$work/venv/bin/python" - "$KEYS" "$COST" "$work" "$api" <<'PY'
import bcrypt, json, secrets, sys
n, cost, work, api = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
keys = [f"acme_{secrets.token_hex(4)}_{secrets.token_urlsafe(18)}" for _ in range(n + 1)]
entries = [{"hash": bcrypt.hashpw(k.encode(), bcrypt.gensalt(cost)).decode(), "lookup": k.split("_")[1]} for k in keys]
open(f"{work}/migrated.txt", "w").write("".join(k + "\n" for k in keys[:n]))
open(f"{work}/flooded.txt", "w").write(keys[n].split("_")[1] + "\n")
json.dump({"migrationId": "pk", "apiId": api, "keys": entries}, open(f"{work}/import.json", "w"))
PY
curl -sS "http://127.0.0.1:$port/v2/keys.migrateKeys" -H "Authorization: Bearer $ROOT_KEY" \
  -H 'Content-Type: application/json' -d @"$work/import.json" | grep -q '"failed":\[\]'

# First verifications, one at a time: each one bcrypt check and the key's rewrite.
first=$(python3 - "$port" "$ROOT_KEY" "$work/migrated.txt" <<'PY'
import json, sys, time, urllib.request
port, root, path = sys.argv[1:]
times = []
for key in open(path).read().split():
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/keys.verifyKey", data=json.dumps({"key": key}).encode(),
                                 headers={"Authorization": f"Bearer {root}", "Content-Type": "application/json"})
    t = time.perf_counter()
    body = json.load(urllib.request.urlopen(req))
    times.append((time.perf_counter() - t) * 1000)
    assert body["data"]["code"] == "VALID", body
times.sort()
print(f"median {times[len(times) // 2]:.1f} ms, max {times[-1]:.1f} ms over {len(times)} keys")
PY
)
checks_after_first=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^keygate_legacy_hash_checks_total /{print $2}')

flood() { # LOOKUP: FLOOD wrong secrets for it, 32 at a time; prints how long they took
  taskset -c 1 python3 - "$port" "$ROOT_KEY" "$1" "$FLOOD" <<'PY'
import json, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
import secrets
run = secrets.token_hex(4)
port, root, lookup, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def one(i):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/keys.verifyKey",
                                 data=json.dumps({"key": f"acme_{lookup}_wrong{run}{i}"}).encode(),
                                 headers={"Authorization": f"Bearer {root}", "Content-Type": "application/json"})
    assert json.load(urllib.request.urlopen(req))["data"]["code"] == "NOT_FOUND"
t = time.perf_counter()
with ThreadPoolExecutor(32) as pool:
    list(pool.map(one, range(n)))
print(f"{lookup}: {time.perf_counter() - t:.2f} s", file=sys.stderr)
PY
}
one() { # NAME: one round of it
  case $1 in
    plain | migrated) KEYS_FILE="$work/$1.txt" wrk_round "$1" "$port" bins/keygate/bench/verify-v2.lua ;;
    flooded | unknown)
      local lookup=nosuchlk
      [ "$1" = flooded ] && lookup=$(cat "$work/flooded.txt")
      (sleep 0.5 && flood "$lookup" 2>>"$work/floods") &
      KEYS_FILE="$work/plain.txt" wrk_round "$1" "$port" bins/keygate/bench/verify-v2.lua
      wait
      ;;
  esac
}
kinds=(plain migrated flooded unknown)
for r in $(seq 0 $((ROUNDS - 1))); do
  for i in 0 1 2 3; do one "${kinds[$(((i + r) % 4))]}"; done
done | tee "$work/rounds"
checks=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^keygate_legacy_hash_checks_total /{print $2}')
echo "first verification of a bcrypt (cost $COST) key: $first"
for name in plain migrated flooded unknown; do
  echo "$name: median $(median_of "$work/rounds" "$name" rps) req/s, p99 $(median_of "$work/rounds" "$name" p99_us) us"
done
echo "migrated (second and later) / plain: $(ratio "$work/rounds" migrated plain)"
p99() { median_of "$work/rounds" "$1" p99_us; }
echo "plain p99 under the flood / under as many unknown keys: $(python3 -c "print(round($(p99 flooded) / $(p99 unknown), 2))")"
echo "plain p99 under the flood / without: $(python3 -c "print(round($(p99 flooded) / $(p99 plain), 2))")"
echo "old-hash checks: $checks_after_first after the first verifications, $checks at the end (the floods' $ROUNDS x $FLOOD wrong secrets ran the rest)"
echo "floods (lookup: seconds): $(sort "$work/floods" | tr '\n' ' ')"
echo "errors: $(errors "$work/rounds")"
