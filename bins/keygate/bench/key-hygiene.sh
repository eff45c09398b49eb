#!/usr/bin/env bash
# Issue 79's figures on one server (one worker on CPU 0, SQLite, wrk on CPU 1), rounds
# interleaved: v2 keys.verifyKey of plain keys, of checksummed keys (keyFormat "checksum"),
# of keys under an allowedIps list (the call's ip inside it), and of checksum-shaped strings
# whose checksum is wrong (refused before the cache and the store).
#
#   bash bins/keygate/bench/key-hygiene.sh     # ROUNDS=5 DURATION=5s CONNECTIONS=64 KEYS=200
set -euo pipefail
cd "$(dirname "$0")/../../.."
. bins/keygate/bench/lib.sh
require wrk curl taskset python3
ROUNDS=${ROUNDS:-5}
KEYS=${KEYS:-200}
export DURATION=${DURATION:-5s} CONNECTIONS=${CONNECTIONS:-64}
export ROOT_KEY=kg_root_hygiene_bench_$(date +%s)_00000
port=18711
bench_database
serve_keygate "$port" "$work/server.log" DATABASE_URL="$DATABASE_URL"

api() { # NAME BODY-FIELDS: a new API's id
  curl -sS "http://127.0.0.1:$port/v2/apis.createApi" -H "Authorization: Bearer $ROOT_KEY" \
    -H 'Content-Type: application/json' -d "{\"name\":\"$1\"$2}" | sed -E 's/.*"apiId":"([^"]+)".*/\1/'
}
plain=$(api plain "")
checksum=$(api checksummed ',"keyFormat":"checksum"')
create_keys "$port" v2/keys.createKey "{\"apiId\":\"$plain\",\"prefix\":\"acme\"}" "$KEYS" >"$work/plain.txt"
create_keys "$port" v2/keys.createKey "{\"apiId\":\"$checksum\",\"prefix\":\"acme\"}" "$KEYS" >"$work/checksum.txt"
create_keys "$port" v2/keys.createKey \
  "{\"apiId\":\"$plain\",\"prefix\":\"acme\",\"allowedIps\":[\"10.0.0.0/8\",\"127.0.0.0/8\",\"2001:db8::/32\"]}" \
  "$KEYS" >"$work/fenced.txt"
python3 - "$KEYS" >"$work/invalid.txt" <<'PY'
import random, string, sys
alphabet = string.digits + string.ascii_uppercase + string.ascii_lowercase
for _ in range(int(sys.argv[1])):
    print("acme_" + "".join(random.choice(alphabet) for _ in range(36)))
PY
expect_valid "$port" v2/keys.verifyKey "{\"key\":\"$(head -1 "$work/checksum.txt")\"}"
expect_valid "$port" v2/keys.verifyKey "{\"key\":\"$(head -1 "$work/fenced.txt")\",\"ip\":\"127.0.0.1\"}"

one() { # NAME: one round of it
  case $1 in
    plain | checksum) KEYS_FILE="$work/$1.txt" wrk_round "$1" "$port" bins/keygate/bench/verify-v2.lua ;;
    fenced) KEYS_FILE="$work/fenced.txt" EXTRA=',"ip":"127.0.0.1"' wrk_round fenced "$port" bins/keygate/bench/verify-v2.lua ;;
    invalid) KEYS_FILE="$work/invalid.txt" EXPECT='"code":"NOT_FOUND"' \
      wrk_round invalid "$port" bins/keygate/bench/verify-v2.lua ;;
  esac
}
# Each round in another order (the kinds rotated), so that no kind always runs first.
kinds=(plain checksum fenced invalid)
for r in $(seq 0 $((ROUNDS - 1))); do
  for i in 0 1 2 3; do one "${kinds[$(((i + r) % 4))]}"; done
done | tee "$work/rounds"
loads=$(curl -s "http://127.0.0.1:$port/metrics" -H "Authorization: Bearer $ROOT_KEY" \
  | grep '^keygate_cache_requests_total' | grep 'cache="verifications"' | grep 'result="miss"' | awk '{print $2}')
for name in plain checksum fenced invalid; do
  echo "$name: median $(median_of "$work/rounds" "$name" rps) req/s, p99 $(median_of "$work/rounds" "$name" p99_us) us"
done
echo "checksummed / plain: $(ratio "$work/rounds" checksum plain)"
echo "allowedIps / plain:  $(ratio "$work/rounds" fenced plain)"
echo "verification loads from the store over the whole run: ${loads:-?} (the keys' first loads only)"
echo "errors: $(errors "$work/rounds")"
