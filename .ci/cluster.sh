#!/usr/bin/env bash
# A throwaway Redis Cluster on loopback for the cluster tests: 3 masters and
# 3 replicas, ports 17000-17005 (REDISDELAY_CLUSTER_PORT overrides the first).
#
#   .ci/cluster.sh start [dir]   start it (state in dir, default a new temp dir),
#                                wait until healthy, print the env line
#   .ci/cluster.sh stop          stop every node, remove the state dir
#   .ci/cluster.sh kill <port>   SIGKILL one node (a failover test does this itself too)
#   .ci/cluster.sh restart <port> start a killed node again (it rejoins as a replica)
#   .ci/cluster.sh wait          wait until the cluster is healthy again
#   .ci/cluster.sh env           print the env line
#
# The state dir is remembered in $STATE (default /tmp/redisdelay-cluster.state);
# the env line is also written to <dir>/env:
#   REDISDELAY_TEST_CLUSTER=127.0.0.1:17000,...,127.0.0.1:17005
#   REDISDELAY_TEST_CLUSTER_DIR=<dir>   (pid files, for the failover tests)
set -euo pipefail
BASE=${REDISDELAY_CLUSTER_PORT:-17000}
STATE=${STATE:-/tmp/redisdelay-cluster.state}
PORTS=$(seq "$BASE" $((BASE + 5)))

die() { echo "cluster.sh: $*" >&2; exit 1; }
dir() { [ -f "$STATE" ] || die "not started (no $STATE)"; cat "$STATE"; }
# shellcheck source=servers.sh
. "$(dirname "$0")/servers.sh"
cli() { "$CLI" -h 127.0.0.1 -p "$1" "${@:2}"; }

start_node() { # port dir
  "$SERVER" "$2/$1/redis.conf" || die "$SERVER on port $1 did not start"
}

healthy() { # every node: state ok, all slots, 3 masters each with an in-sync replica
  local p info nodes
  for p in $PORTS; do
    info=$(cli "$p" cluster info 2>/dev/null) || return 1
    grep -q '^cluster_state:ok' <<<"$info" || return 1
    grep -q '^cluster_slots_ok:16384' <<<"$info" || return 1
    grep -q '^cluster_known_nodes:6' <<<"$info" || return 1
  done
  nodes=$(cli "$BASE" cluster nodes 2>/dev/null) || return 1
  [ "$(grep -c 'master' <<<"$nodes" | tr -d ' ')" -ge 3 ] || return 1
  [ "$(grep -E ' (master|myself,master) ' <<<"$nodes" | grep -vc fail)" = 3 ] || return 1
  grep -q 'fail' <<<"$nodes" && return 1
  for p in $PORTS; do
    info=$(cli "$p" info replication 2>/dev/null) || return 1
    if grep -q '^role:slave' <<<"$info"; then
      grep -q '^master_link_status:up' <<<"$info" || return 1
      grep -q '^master_sync_in_progress:0' <<<"$info" || return 1
    else
      grep -q '^connected_slaves:1' <<<"$info" || return 1
    fi
  done
}

wait_healthy() {
  local i
  for i in $(seq 1 300); do
    healthy && return 0
    sleep 0.2
  done
  cli "$BASE" cluster nodes >&2 || true
  die "cluster not healthy after 60s"
}

print_env() {
  local d seeds=""
  d=$(dir)
  for p in $PORTS; do seeds="${seeds:+$seeds,}127.0.0.1:$p"; done
  printf 'REDISDELAY_TEST_CLUSTER=%s\nREDISDELAY_TEST_CLUSTER_DIR=%s\n' "$seeds" "$d" | tee "$d/env"
}

case "${1:-}" in
start)
  need_bins
  [ -f "$STATE" ] && die "already started ($(cat "$STATE")); run stop first"
  for p in $PORTS; do
    if cli "$p" ping >/dev/null 2>&1 || (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null \
      || (exec 3<>/dev/tcp/127.0.0.1/$((p + 10000))) 2>/dev/null; then
      die "port $p (or its cluster bus port $((p + 10000))) is in use; set REDISDELAY_CLUSTER_PORT"
    fi
  done
  d=${2:-$(mktemp -d /tmp/redisdelay-cluster.XXXXXX)}
  mkdir -p "$d"
  echo "$d" >"$STATE"
  for p in $PORTS; do
    mkdir -p "$d/$p"
    cat >"$d/$p/redis.conf" <<CONF
port $p
bind 127.0.0.1
dir $d/$p
daemonize yes
pidfile $d/$p/redis.pid
logfile $d/$p/redis.log
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 2000
cluster-replica-validity-factor 0
appendonly yes
appendfsync everysec
save ""
maxclients 10000
CONF
    start_node "$p" "$d"
  done
  for p in $PORTS; do
    for i in $(seq 1 100); do cli "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
  done
  addrs=""
  for p in $PORTS; do addrs="$addrs 127.0.0.1:$p"; done
  # shellcheck disable=SC2086
  "$CLI" --cluster create $addrs --cluster-replicas 1 --cluster-yes >"$d/create.log" 2>&1 \
    || { cat "$d/create.log" >&2; die "cluster create failed"; }
  wait_healthy
  print_env
  ;;
stop)
  [ -f "$STATE" ] || exit 0
  d=$(cat "$STATE")
  for p in $PORTS; do
    if [ -f "$d/$p/redis.pid" ]; then
      kill -9 "$(cat "$d/$p/redis.pid")" 2>/dev/null || true
    fi
  done
  rm -rf "$d" "$STATE"
  ;;
kill)
  p=${2:?port}; d=$(dir)
  kill -9 "$(cat "$d/$p/redis.pid")"
  ;;
restart)
  p=${2:?port}; d=$(dir)
  start_node "$p" "$d"
  ;;
wait) dir >/dev/null; wait_healthy ;;
env) print_env ;;
*) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
