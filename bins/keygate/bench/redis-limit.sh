#!/usr/bin/env bash
# ratelimits.limit over HTTP: the in-process store against the Redis store, alternating
# rounds in one run (docs/performance.md section 6). Needs wrk, taskset and a Redis at
# REDIS_URL (default redis://127.0.0.1:6379). Each keygate: one worker pinned to CPU 0;
# wrk on CPU 1; Redis wherever it runs.
cd "$(dirname "$0")/../../.."
cargo build --release -q -p keygate --bin keygate
export ROOT_KEY=kg_root_redis_bench_$(date +%s)
w=$(mktemp -d)
DATABASE_URL="sqlite://$w/a.db" KEYGATE_LISTEN=127.0.0.1:18190 KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn taskset -c 0 target/release/keygate 2>$w/a.log &
a=$!
DATABASE_URL="sqlite://$w/b.db" REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379} KEYGATE_LISTEN=127.0.0.1:18191 KEYGATE_WORKERS=1 KEYGATE_ROOT_KEY=$ROOT_KEY RUST_LOG=warn taskset -c 0 target/release/keygate 2>$w/b.log &
b=$!
sleep 1.5
for p in 18190 18191; do taskset -c 1 wrk -t1 -c8 -d2s -s bins/keygate/bench/limit.lua http://127.0.0.1:$p >/dev/null; done
for r in 1 2 3; do
  for p in 18190 18191; do name=memory; [ $p = 18191 ] && name=redis; echo "store=$name round=$r $(taskset -c 1 wrk -t1 -c64 -d5s -s bins/keygate/bench/limit.lua http://127.0.0.1:$p | grep ^RESULT)"; done
done
kill $a $b; rm -rf "$w"
