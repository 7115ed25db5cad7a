#!/usr/bin/env bash
# Joins under a HELLO flood: THREADS strangers (tests/bench/hello-flood) that
# know the job's session id but not its key loop on the leader's port (connect,
# a valid HELLO for rank 1, never the proof, hold until closed, again) while a
# TP2 job with a secret (two rk-pingpong ranks, a fresh pair per join) starts
# again and again. Each join is timed from the follower's start to the
# leader's "rank 1 joined" (RK_LOG_TIME stamps); the follower's evictions are
# its "retrying" lines (RK_LOG=debug). Prints one row per flood: joins, their
# median and max, the follower's evictions, joins that failed, the leader's
# peak RSS (VmHWM), and what the flood did. The flood comes from this host
# (127.0.0.1, as the follower) and, as root with 'ip netns', from another
# network namespace over a veth pair (its own address). A benchmark: it prints
# figures and fails only when it cannot run.
#
#   builddir=. ../tests/bench/hello-flood.sh          (from the build directory)
#   FLOODS="12 40" TRIALS=3 THREADS=200 MODES="host netns" BENCH_OUT=file (THREADS=0: no flood)
#   FLOOD_TOOL=path   another build's hello-flood (to run main's ranks against it)
#   SLOW_LOGS=dir     keep both ranks' logs of each join that took 1 s or more
set -u
b=${builddir:-.}
pp=$b/examples/pingpong/rk-pingpong
tool=${FLOOD_TOOL:-$b/tests/bench/hello-flood}
floods=${FLOODS:-12 40}
trials=${TRIALS:-3}
threads=${THREADS:-200}
modes=${MODES:-host netns}
[ -x "$pp" ] && [ -x "$tool" ] || { echo "no $pp or $tool"; exit 77; }
tmp=$(mktemp -d) || exit 99
ns=rkhf$$
pids=()
cleanup()
{
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	ip netns delete "$ns" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
out()
{
	echo "$*"
	[ -n "${BENCH_OUT:-}" ] && echo "$*" >>"$BENCH_OUT"
}
now_ns() { date +%s%N; }
hwm_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

port=$(( (($$ * 13) % 20000) + 30000 ))
session=0x68656c6c6f666c64
key=$tmp/job.key
(umask 077 && printf '%s\n' "hello-flood: the job's secret, 32+ bytes" >"$key")
export RK_WORLD_SIZE=2 RK_SESSION=$session RK_SECRET_FILE=$key RK_LOG_TIME=1 \
	RK_CONNECT_TIMEOUT_MS=30000
ppargs="--wait=block --count=100 --warmup=10 --runs=1"

# One join: a fresh leader, the flood fills its table, then the follower.
# Sets join_ms (empty: it failed), evicted, leader_hwm.
join_once()
{
	local lp fp t0 t1 ts i h
	join_ms= evicted=0 leader_hwm=0
	RK_RANK=0 RK_LEADER=$addr:$port RK_LOG=info "$pp" $ppargs >"$tmp/l.out" 2>"$tmp/l.err" &
	lp=$!
	pids+=("$lp")
	for ((i = 0; i < 200; i++)); do
		ss -ltn 2>/dev/null | grep -q "$addr:$port " && break
		sleep 0.01
	done
	sleep 0.3	# the flood finds the new leader
	t0=$(now_ns)
	RK_RANK=1 RK_LEADER=$addr:$port RK_LOG=debug "$pp" $ppargs >"$tmp/f.out" 2>"$tmp/f.err" &
	fp=$!
	pids+=("$fp")
	for ((i = 0; i < 800; i++)); do
		h=$(hwm_kb "$lp")
		[ "${h:-0}" -gt "$leader_hwm" ] && leader_hwm=$h
		kill -0 "$fp" 2>/dev/null || break
		grep -q "rank 1 joined" "$tmp/l.err" && break
		sleep 0.05
	done
	for ((i = 0; i < 100; i++)); do
		kill -0 "$fp" 2>/dev/null || break
		sleep 0.05
	done
	kill -KILL "$fp" "$lp" 2>/dev/null
	wait "$fp" "$lp" 2>/dev/null
	ts=$(sed -n 's/^\([0-9T:.-]*Z\) .*rank 1 joined.*/\1/p' "$tmp/l.err" | head -n 1)
	if [ -n "$ts" ]; then
		t1=$(date -d "$ts" +%s%N)
		join_ms=$(( (t1 - t0) / 1000000 ))
	fi
	evicted=$(grep -c "retrying" "$tmp/f.err")
	grep -q "rank 0 failed" "$tmp/f.err" && join_ms=
	if [ -n "${SLOW_LOGS:-}" ] && [ "${join_ms:-99999}" -ge 1000 ]; then
		mkdir -p "$SLOW_LOGS"
		cp "$tmp/l.err" "$SLOW_LOGS/$t0.leader"
		cp "$tmp/f.err" "$SLOW_LOGS/$t0.follower"
	fi
}

# One flood of $1 seconds from $mode: as many joins as fit, then the row.
flood_once()
{
	local secs=$1 trial=$2 fl end joins=() ev=0 evmax=0 failed=0 hwm=0 med max fs
	if [ "$mode" = netns ]; then
		ip netns exec "$ns" "$tool" "$addr" "$port" "$secs" "$threads" "$session" \
			>"$tmp/flood.out" 2>&1 &
	else
		"$tool" "$addr" "$port" "$secs" "$threads" "$session" >"$tmp/flood.out" 2>&1 &
	fi
	fl=$!
	pids+=("$fl")
	end=$(( $(now_ns) + (secs * 1000 - 1500) * 1000000 ))
	while [ "$(now_ns)" -lt "$end" ]; do
		join_once
		if [ -n "$join_ms" ]; then
			joins+=("$join_ms")
		else
			failed=$((failed + 1))
		fi
		ev=$((ev + evicted))
		[ "$evicted" -gt "$evmax" ] && evmax=$evicted
		[ "$leader_hwm" -gt "$hwm" ] && hwm=$leader_hwm
	done
	wait "$fl"
	if [ ${#joins[@]} -gt 0 ]; then
		med=$(printf '%s\n' "${joins[@]}" | sort -n | awk '{ a[NR] = $1 } END {
			print (NR % 2) ? a[(NR + 1) / 2] : int((a[NR / 2] + a[NR / 2 + 1]) / 2) }')
		max=$(printf '%s\n' "${joins[@]}" | sort -n | tail -n 1)
	else
		med=- max=-
	fi
	fs=$(sed -n 's/^hello-flood: .* s: \([0-9]*\) HELLOs.*held \([0-9.]*\) ms.*/\1, \2 ms/p' \
		"$tmp/flood.out")
	out "| $mode | $secs s | $trial | ${#joins[@]} | $med | $max | $ev ($evmax) | $failed |" \
		"$hwm | $fs |"
}

out "hello-flood: $threads threads of HELLOs with the session and no proof; TP2 rk-pingpong joins"
out "| flood from | flood | trial | joins | median ms | max ms | follower evicted (most in one)" \
	"| failed joins | leader VmHWM KiB | HELLOs sent, held on average |"
out "|---|---|---|---|---|---|---|---|---|---|"
for mode in $modes; do
	case $mode in
	host)
		addr=127.0.0.1
		;;
	netns)
		if [ "$(id -u)" != 0 ] || ! ip netns add "$ns" 2>/dev/null; then
			out "| netns | (skipped: needs root and 'ip netns') |"
			continue
		fi
		ip link add "${ns}a" type veth peer name "${ns}b" &&
			ip link set "${ns}b" netns "$ns" &&
			ip addr add 10.231.0.1/24 dev "${ns}a" && ip link set "${ns}a" up &&
			ip -n "$ns" addr add 10.231.0.2/24 dev "${ns}b" &&
			ip -n "$ns" link set "${ns}b" up && ip -n "$ns" link set lo up ||
			{ echo "cannot set up the veth pair"; exit 99; }
		addr=10.231.0.1
		;;
	*)
		echo "MODES: host or netns, not $mode"
		exit 99
		;;
	esac
	for secs in $floods; do
		for ((t = 1; t <= trials; t++)); do
			flood_once "$secs" "$t"
		done
	done
done
