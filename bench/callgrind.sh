#!/usr/bin/env bash
# Counts the instructions redis-server spends per script call of a fixed
# workload (internal/store's TestInstructions_Workload), under callgrind:
# the same count on a busy machine as on a quiet one. Needs valgrind,
# redis-server and redis-cli (Debian: apt-get install -y valgrind
# redis-server); REDISDELAY_REDIS_SERVER names another server binary, as
# for the tests (a valkey-server, say).
#
#   bash bench/callgrind.sh                 # every workload
#   bash bench/callgrind.sh delayed tick    # some (append delayed keyed tick tickidle reclaim farpub unpack pull look near cold fill)
#
# Compare two trees by running it in each (git worktree add).
# REDISDELAY_CALLGRIND_COMMANDS=1 counts the commands' instructions only
# (Redis's call(), scripts with what they call): without the server's
# timers and network reads, whose share grows with the machine's load
# (callgrind slows the server fifty-fold), so two trees compare on a busy
# machine too.
# REDISDELAY_INSTRUCTIONS_KEYED=1 gives every message of the far workloads
# (farpub unpack pull look fill) a business key of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
works=("$@")
[ ${#works[@]} -gt 0 ] || works=(append delayed keyed tick tickidle reclaim farpub unpack pull look near cold fill)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/store.test" ./internal/store/
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# count WORK: the instructions of a server that ran workload WORK
count() {
	local out="$tmp/cg.$1"
	valgrind --tool=callgrind --callgrind-out-file="$out" \
		"${REDISDELAY_REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/vg.log" 2>&1 &
	local pid=$!
	for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
	REDISDELAY_INSTRUCTIONS_ADDR=127.0.0.1:$port REDISDELAY_INSTRUCTIONS=${1%-first} REDISDELAY_INSTRUCTIONS_FIRST=${1#"${1%-first}"} \
		"$tmp/store.test" -test.run '^TestInstructions_Workload$' -test.count=1 >"$tmp/test.log" 2>&1 ||
		{ cat "$tmp/test.log" >&2; exit 1; }
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$pid" || true
	if [ "${REDISDELAY_CALLGRIND_COMMANDS:-}" = 1 ]; then
		callgrind_annotate --inclusive=yes --threshold=100 "$out" | awk '/[?]:call \[/ && !n++ {gsub(",", "", $1); print $1}'
	else
		awk '/^summary:|^totals:/ {print $2; exit}' "$out"
	fi
}

base=$(count none)
declare -A total
for w in "${works[@]}" ; do
	case $w in
	farpub) for x in far2 far3; do [ -n "${total[$x]:-}" ] || total[$x]=$(count "$x"); done ;;
	fill) for x in fill2 fill2-first fill3 fill3-first; do total[$x]=$(count "$x"); done ;;
	unpack | pull | look) for x in far2 far3 "${w}2" "${w}3"; do [ -n "${total[$x]:-}" ] || total[$x]=$(count "$x"); done ;;
	near) for x in far3 near; do [ -n "${total[$x]:-}" ] || total[$x]=$(count "$x"); done ;;
	cold) for x in far3 cold3; do [ -n "${total[$x]:-}" ] || total[$x]=$(count "$x"); done ;;
	*) total[$w]=$(count "$w") ;;
	esac
done
per() { echo $(( ($1 - $2) / 1000 )); } # TestInstructions_Workload runs 1,000 of each
for w in "${works[@]}"; do
	case $w in
	append | delayed | keyed) echo "$w: $(per "${total[$w]}" "$base") instructions a publish" ;;
	fill)
		for f in 2 3; do
			echo "fill, format $f: $(( (total[fill$f] - total[fill$f-first]) / 1000 )) instructions a message (far messages 500 a call, the filter past its size)"
		done
		;;
	reclaim) echo "reclaim: $(per "${total[$w]}" "$base") instructions a sweep (10 messages held, none out of time; with the publishes and the read before them)" ;;
	farpub)
		for f in 2 3; do
			echo "farpub, format $f: $(per "${total[far$f]}" "$base") instructions a publish (1,000 messages of 100 B into one far bucket)"
		done
		;;
	unpack | pull | look)
		# the far tier, format 2 against 3: each less the fill it starts from
		n=1000
		[ "$w" = pull ] && n=100
		for f in 2 3; do
			echo "$w, format $f: $(( (total[$w$f] - total[far$f]) / n )) instructions a message"
		done
		;;
	cold) echo "cold: $(( (total[cold3] - total[far3]) / 1000 )) instructions a message (look3's publishes with the far filter past its size: each looked up in the index; less far3)" ;;
	near) echo "near: $(( (total[near] - total[far3]) / 1000 )) instructions a message (look's publishes, 100 a call, into a partition without a far tier; less far3's fill of another, as look3 is)" ;;
	tick) echo "tick: $(per "${total[$w]}" "$base") instructions a round (2 delayed publishes + a tick moving them)" ;;
	tickidle)
		echo "tickidle: $(per "${total[$w]}" "$base") instructions a round (tick's, and two idle ticks)"
		[ -n "${total[tick]:-}" ] && echo "  an idle tick: $(( (total[tickidle] - total[tick]) / 2000 )) instructions"
		;;
	esac
done
