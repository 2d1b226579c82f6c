#!/usr/bin/env bash
# A throwaway Sentinel deployment on loopback for the sentinel tests: one
# master, one replica and three sentinels (quorum 2, down-after 1000ms,
# failover-timeout 3000ms), master name "redisdelay". Redis ports 17100-17101,
# sentinels 17110-17112 (REDISDELAY_SENTINEL_PORT overrides 17100; the
# sentinels use it + 10). Sentinels run as `redis-server <conf> --sentinel`
# (valkey-server alike; servers.sh picks which), so the server package is enough.
#
#   .ci/sentinel.sh start [dir]    start it (state in dir, default a new temp dir),
#                                  wait until healthy, print the env lines
#   .ci/sentinel.sh stop           stop everything, remove the state dir
#   .ci/sentinel.sh kill <port>    SIGKILL one redis-server (a failover test does this itself too)
#   .ci/sentinel.sh restart <port> start it again (sentinels make it a replica)
#   .ci/sentinel.sh wait           wait until healthy: a master with an in-sync replica, known to all sentinels
#   .ci/sentinel.sh env            print the env lines
#
# The state dir is remembered in $STATE (default /tmp/redisdelay-sentinel.state);
# the env lines are also written to <dir>/env:
#   REDISDELAY_TEST_SENTINEL=127.0.0.1:17110,127.0.0.1:17111,127.0.0.1:17112
#   REDISDELAY_TEST_SENTINEL_MASTER=redisdelay
#   REDISDELAY_TEST_SENTINEL_DIR=<dir>    (pid files, for the failover tests)
set -euo pipefail
BASE=${REDISDELAY_SENTINEL_PORT:-17100}
STATE=${STATE:-/tmp/redisdelay-sentinel.state}
NAME=redisdelay
REDIS_PORTS="$BASE $((BASE + 1))"
SENTINEL_PORTS="$((BASE + 10)) $((BASE + 11)) $((BASE + 12))"

die() { echo "sentinel.sh: $*" >&2; exit 1; }
dir() { [ -f "$STATE" ] || die "not started (no $STATE)"; cat "$STATE"; }
# shellcheck source=servers.sh
. "$(dirname "$0")/servers.sh"
cli() { "$CLI" -h 127.0.0.1 -p "$1" "${@:2}"; }

healthy() {
  local p info master mport
  for p in $SENTINEL_PORTS; do
    master=$(cli "$p" sentinel get-master-addr-by-name "$NAME" 2>/dev/null) || return 1
    mport=$(sed -n 2p <<<"$master")
    [ -n "$mport" ] || return 1
    [ -z "${first:-}" ] && first=$mport
    [ "$mport" = "$first" ] || return 1
    info=$(cli "$p" sentinel master "$NAME" 2>/dev/null) || return 1
    # flags exactly "master" (no s_down/o_down/failover_in_progress), 2 other sentinels, 1 replica
    [ "$(sed -n '/^flags$/{n;p}' <<<"$info")" = master ] || return 1
    [ "$(sed -n '/^num-other-sentinels$/{n;p}' <<<"$info")" = 2 ] || return 1
    [ "$(sed -n '/^num-slaves$/{n;p}' <<<"$info")" -ge 1 ] || return 1
  done
  info=$(cli "$first" info replication 2>/dev/null) || return 1
  grep -q '^role:master' <<<"$info" || return 1
  grep -q '^connected_slaves:1' <<<"$info" || return 1
  for p in $REDIS_PORTS; do
    [ "$p" = "$first" ] && continue
    info=$(cli "$p" info replication 2>/dev/null) || return 1
    grep -q '^master_link_status:up' <<<"$info" || return 1
    grep -q "^master_port:$first" <<<"$info" || return 1
    grep -q '^master_sync_in_progress:0' <<<"$info" || return 1
  done
  # every sentinel lists the replica as healthy (not s_down), so it can be promoted
  for p in $SENTINEL_PORTS; do
    cli "$p" sentinel replicas "$NAME" 2>/dev/null | grep -q 's_down' && return 1
  done
  return 0
}

wait_healthy() {
  local i
  for i in $(seq 1 300); do
    first="" healthy && return 0
    sleep 0.2
  done
  for p in $SENTINEL_PORTS; do cli "$p" sentinel master "$NAME" >&2 || true; done
  die "sentinel deployment not healthy after 60s"
}

print_env() {
  local d s=""
  d=$(dir)
  for p in $SENTINEL_PORTS; do s="${s:+$s,}127.0.0.1:$p"; done
  printf 'REDISDELAY_TEST_SENTINEL=%s\nREDISDELAY_TEST_SENTINEL_MASTER=%s\nREDISDELAY_TEST_SENTINEL_DIR=%s\n' "$s" "$NAME" "$d" | tee "$d/env"
}

case "${1:-}" in
start)
  need_bins
  [ -f "$STATE" ] && die "already started ($(cat "$STATE")); run stop first"
  for p in $REDIS_PORTS $SENTINEL_PORTS; do
    if (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
      die "port $p is in use; set REDISDELAY_SENTINEL_PORT"
    fi
  done
  d=${2:-$(mktemp -d /tmp/redisdelay-sentinel.XXXXXX)}
  mkdir -p "$d"
  echo "$d" >"$STATE"
  master=${REDIS_PORTS%% *}
  for p in $REDIS_PORTS; do
    mkdir -p "$d/$p"
    {
      printf 'port %s\nbind 127.0.0.1\ndir %s\ndaemonize yes\npidfile %s/redis.pid\nlogfile %s/redis.log\n' "$p" "$d/$p" "$d/$p" "$d/$p"
      printf 'appendonly yes\nappendfsync everysec\nsave ""\nmaxclients 10000\n'
      [ "$p" != "$master" ] && printf 'replicaof 127.0.0.1 %s\n' "$master"
    } >"$d/$p/redis.conf"
    "$SERVER" "$d/$p/redis.conf" || die "$SERVER on port $p did not start"
  done
  for p in $REDIS_PORTS; do
    for i in $(seq 1 100); do cli "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
  done
  for p in $SENTINEL_PORTS; do
    mkdir -p "$d/$p"
    # sentinels rewrite their config file: it must be writable
    cat >"$d/$p/sentinel.conf" <<CONF
port $p
bind 127.0.0.1
dir $d/$p
daemonize yes
pidfile $d/$p/sentinel.pid
logfile $d/$p/sentinel.log
sentinel resolve-hostnames no
sentinel monitor $NAME 127.0.0.1 $master 2
sentinel down-after-milliseconds $NAME 1000
sentinel failover-timeout $NAME 3000
sentinel parallel-syncs $NAME 1
CONF
    "$SERVER" "$d/$p/sentinel.conf" --sentinel || die "sentinel on port $p did not start"
  done
  wait_healthy
  print_env
  ;;
stop)
  [ -f "$STATE" ] || exit 0
  d=$(cat "$STATE")
  for f in "$d"/*/sentinel.pid "$d"/*/redis.pid; do
    [ -f "$f" ] && { kill -9 "$(cat "$f")" 2>/dev/null || true; }
  done
  rm -rf "$d" "$STATE"
  ;;
kill)
  p=${2:?port}; d=$(dir)
  kill -9 "$(cat "$d/$p/redis.pid")"
  ;;
restart)
  p=${2:?port}; d=$(dir)
  "$SERVER" "$d/$p/redis.conf"
  ;;
wait) dir >/dev/null; wait_healthy ;;
env) print_env ;;
*) sed -n '2,21p' "$0" >&2; exit 2 ;;
esac
