#!/usr/bin/env bash
# A local three-node Redis Cluster for the tests:
#   bash .ci/redis-cluster.sh [BASE [REPLICAS]]   (masters on 127.0.0.1:BASE+1..BASE+3, BASE 7000)
# No replicas by default; REPLICAS=1 adds one per master (nodes BASE+1..BASE+6; which of a
# pair is the master changes when the tests fail one over). Nothing kept on disk but each
# node's cluster config (in /tmp/keygate-redis-cluster-BASE). Starts the nodes that do not answer and creates the cluster when it is not
# whole; does nothing when it is up. Exits non-zero, loudly, when it cannot. Used by .ci/run
# and by the tests' helper (keygate_store::testing::local_redis_cluster).
set -uo pipefail

base=${1:-7000}
replicas=${2:-0}
ports=($((base + 1)) $((base + 2)) $((base + 3)))
[ "$replicas" = 1 ] && ports+=($((base + 4)) $((base + 5)) $((base + 6)))
first=${ports[0]}
dir=/tmp/keygate-redis-cluster-$base
mkdir -p "$dir"

ping() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }
# Every node, not only the first: right after `--cluster create` the first node may say ok
# while another still answers CLUSTERDOWN or knows only part of the slots (a test's first
# command then failed).
cluster_ok() {
  local p info
  for p in "${ports[@]}"; do
    info=$(redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null)
    grep -q 'cluster_state:ok' <<<"$info" && grep -q 'cluster_slots_ok:16384' <<<"$info" \
      && grep -q "cluster_known_nodes:${#ports[@]}" <<<"$info" || return 1
  done
}
whole() { # three masters (and their replicas) of the one cluster, all slots covered
  local nodes
  nodes=$(redis-cli -h 127.0.0.1 -p "$first" cluster nodes 2>/dev/null | grep -v fail)
  cluster_ok && [ "$(grep -c master <<<"$nodes")" -eq 3 ] && [ "$(grep -c slave <<<"$nodes")" -eq $((3 * replicas)) ]
}

command -v redis-server >/dev/null || { echo "FATAL: redis-server is missing (apt-get install redis-server)" >&2; exit 1; }

for p in "${ports[@]}"; do
  if ! ping "$p"; then
    redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 2000 \
      --save "" --appendonly no --dir "$dir" --logfile "$dir/$p.log" --daemonize yes >/dev/null
  fi
done
for _ in $(seq 1 50); do
  up=1; for p in "${ports[@]}"; do ping "$p" || up=0; done
  [ "$up" = 1 ] && break; sleep 0.1
done
for p in "${ports[@]}"; do ping "$p" || { echo "FATAL: Redis Cluster node 127.0.0.1:$p did not start ($dir/$p.log)" >&2; exit 1; }; done

# Nodes restarted with their config rejoin by themselves: give them a moment.
for _ in $(seq 1 30); do whole && break; sleep 0.1; done
if ! whole; then
  # Not a cluster yet, or the remains of another one: start it afresh.
  for p in "${ports[@]}"; do
    redis-cli -h 127.0.0.1 -p "$p" flushall >/dev/null 2>&1
    redis-cli -h 127.0.0.1 -p "$p" cluster reset hard >/dev/null 2>&1
  done
  redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" \
    --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1 \
    || { echo "FATAL: redis-cli --cluster create failed ($dir/create.log)" >&2; cat "$dir/create.log" >&2; exit 1; }
fi
for _ in $(seq 1 100); do whole && { echo "Redis Cluster: up (127.0.0.1:${ports[0]}-${ports[-1]})"; exit 0; }; sleep 0.1; done
echo "FATAL: the Redis Cluster on 127.0.0.1:${ports[0]}-${ports[-1]} did not become ready" >&2
exit 1
