#!/bin/sh
# Same-host links (shared memory) against TCP loopback, in one run, the two
# transports alternating run by run (RK_SHM=on and RK_SHM=off):
#  1. rk-pingpong --local --pin: p50 and p99 round trip of 64-byte frames per
#     wait mode (adaptive: spinning in the busy window; spin; block: every
#     frame found through a wake-up), medians over the runs, and shm/tcp;
#     then each rank's CPU seconds over IDLE idle seconds (once per transport).
#  2. rk-serve --bench on the CPU backend at each TP of TPS, per wait policy of
#     POLICIES: tokens/s and the CPU seconds of all ranks per cell, medians
#     over the runs, and shm/tcp.
#
#   builddir=_build tests/bench/bench-shm.sh
#
# Each pingpong run is one process measuring the modes of WAITS (default all:
# adaptive, spin, block, in that order, each after its own 1000-round-trip
# warmup), so its spin row comes second in its process; tests/bench/peers.sh's
# rk-shm-spin row is a process of its own (--wait spin). WAITS=spin measures
# what that row measures.
# Env: RUNS (5), COUNT (20000 round trips per run), IDLE (60; 0: skip), TPS
# ("2 4"), POLICIES ("adaptive block"), REQUESTS (32), TOKENS (64), STREAMS
# ("1,4"), SERVE_ARGS (more rk-serve options, e.g. "--hidden 4096"), STEPS
# ("pingpong decode"), PERF (empty: none; else perf stat event names, comma
# separated, e.g. "cycles,instructions,cache-misses": after the pingpong table,
# one rk-pingpong --wait=spin run per transport under perf stat, both ranks
# counted, each event per round trip; events this perf does not know are left
# out, those the machine cannot count print "-").
# Exit 0 when every run completed, 1 otherwise.
b=${builddir:-.}
pingpong=$b/examples/pingpong/rk-pingpong
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
runs=${RUNS:-5}
count=${COUNT:-20000}
idle=${IDLE:-60}
tps=${TPS:-2 4}
policies=${POLICIES:-adaptive block}
steps=${STEPS:-pingpong decode}
for p in "$pingpong" "$launch" "$serve"; do
	[ -x "$p" ] || { echo "SKIP: no $p"; exit 77; }
done
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

median()
{
	sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
}

# ratio A B: A/B with two decimals, or -
ratio()
{
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-";
					 else printf "%.2f\n", a / b }'
}

shm_of()
{
	[ "$1" = shm ] && echo on || echo off
}

echo "bench-shm: shared-memory links (RK_SHM=on) against TCP loopback (RK_SHM=off)," \
	"$runs runs each, alternating"
echo "host: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
# --pin puts rank r on CPU r: two SMT siblings share one core's execution units
# (a spinning rank slows the working one) where two cores pay for line transfers
sib()
{
	cat "/sys/devices/system/cpu/cpu$1/topology/thread_siblings_list" 2>/dev/null || echo "?"
}
echo "pinned CPUs: 0 (siblings $(sib 0)), 1 (siblings $(sib 1))"

case " $steps " in *" pingpong "*)
	echo
	echo "1. rk-pingpong --local --pin${WAITS:+ --wait=$WAITS}, 64-byte frames, $count round trips per run"
	r=1
	while [ "$r" -le "$runs" ]; do
		for tr in tcp shm; do
			[ $((r % 2)) = 0 ] && tr=$([ $tr = tcp ] && echo shm || echo tcp)
			if ! RK_SHM=$(shm_of $tr) timeout 300 "$pingpong" --local --pin --runs 1 \
				--count "$count" ${WAITS:+--wait=$WAITS} >"$tmp/pp" 2>&1; then
				echo "FAIL: rk-pingpong over $tr, run $r:"
				cat "$tmp/pp"
				exit 1
			fi
			grep -q "ranks over $tr," "$tmp/pp" ||
				{ echo "FAIL: run $r did not go over $tr:"; cat "$tmp/pp"; exit 1; }
			awk -v tr="$tr" -v d="$tmp" '$1 ~ /^(adaptive|spin|block)$/ {
				print $2 >> (d "/p50." tr "." $1); print $3 >> (d "/p99." tr "." $1) }' \
				"$tmp/pp"
		done
		r=$((r + 1))
	done
	printf '%-9s %10s %10s %10s %10s %8s %8s\n' mode tcp_p50 shm_p50 tcp_p99 shm_p99 \
		p50_ratio p99_ratio
	for m in adaptive spin block; do
		[ -s "$tmp/p50.shm.$m" ] || continue	# not in WAITS
		t50=$(median <"$tmp/p50.tcp.$m")
		s50=$(median <"$tmp/p50.shm.$m")
		t99=$(median <"$tmp/p99.tcp.$m")
		s99=$(median <"$tmp/p99.shm.$m")
		printf '%-9s %10s %10s %10s %10s %8s %8s\n' "$m" "$t50" "$s50" "$t99" "$s99" \
			"$(ratio "$s50" "$t50")" "$(ratio "$s99" "$t99")"
	done
	if [ -n "${PERF:-}" ]; then
		# counters per round trip: the warmup's 1000 are counted too, and the setup
		ev=
		if command -v perf >/dev/null; then
			for e in $(echo "$PERF" | tr ',' ' '); do	# the events this perf knows
				perf stat -x, -e "$e" true >/dev/null 2>&1 && ev=${ev:+$ev,}$e
			done
		fi
		if [ -z "$ev" ]; then
			echo "perf: SKIP (no perf, or none of: $PERF)"
		else
			PERF=$ev
			for tr in tcp shm; do
				RK_SHM=$(shm_of $tr) timeout 300 perf stat -x, -o "$tmp/perf.$tr" \
					-e "$PERF" "$pingpong" --local --pin --runs 1 --count "$count" \
					--wait spin >"$tmp/pp" 2>&1 || { echo "FAIL: perf over $tr"; exit 1; }
				awk -F, -v tr="$tr" -v n="$((count + 1000))" '
					$3 != "" && $1 !~ /^#/ { v = $1 + 0
						printf "perf %s: %s %s per round trip\n", tr, $3,
						       ($1 ~ /not/ ? "-" : sprintf("%.4g%s", v / n, $2 == "" ? "" : " " $2)) }' \
					"$tmp/perf.$tr"
			done
		fi
	fi
	if [ "$idle" -gt 0 ]; then
		# both transports idle side by side (idle ranks do not compete)
		for tr in tcp shm; do
			RK_SHM=$(shm_of $tr) timeout $((idle + 120)) "$pingpong" --local --pin \
				--runs 1 --count 2000 --wait adaptive --idle "$idle" \
				>"$tmp/idle.$tr" 2>&1 &
			echo $! >"$tmp/idle.$tr.pid"
		done
		for tr in tcp shm; do
			wait "$(cat "$tmp/idle.$tr.pid")" ||
				{ echo "FAIL: idle over $tr"; cat "$tmp/idle.$tr"; exit 1; }
			sed -n "s/^idle \(.*\)$/$tr: idle \1/p" "$tmp/idle.$tr"
		done
	fi
	;;
esac

hosts()
{
	h=localhost
	i=1
	while [ "$i" -lt "$1" ]; do
		h=$h,localhost
		i=$((i + 1))
	done
	echo "$h"
}

case " $steps " in *" decode "*)
	echo
	echo "2. rk-serve --bench, CPU backend, streams ${STREAMS:-1,4} x ${REQUESTS:-32}" \
		"requests x ${TOKENS:-64} tokens, greedy, plain ${SERVE_ARGS:+($SERVE_ARGS)}"
	r=1
	while [ "$r" -le "$runs" ]; do
		for pol in $policies; do
			for n in $tps; do
				for tr in tcp shm; do
					[ $((r % 2)) = 0 ] && tr=$([ $tr = tcp ] && echo shm || echo tcp)
					# shellcheck disable=SC2086
					if ! RK_SHM=$(shm_of $tr) RK_WAIT=$pol timeout 300 "$launch" \
						--hosts "$(hosts "$n")" -- "$serve" --backend=cpu --bench \
						--bench-streams "${STREAMS:-1,4}" --bench-modes greedy \
						--bench-draft plain --bench-requests "${REQUESTS:-32}" \
						--bench-max-tokens "${TOKENS:-64}" $SERVE_ARGS \
						>"$tmp/sv" 2>&1; then
						echo "FAIL: TP$n $pol over $tr, run $r:"
						tail -20 "$tmp/sv"
						exit 1
					fi
					# cell STREAMS MODE DRAFT TOKENS TOK/S ROUNDS ACCEPT HASH CPU...
					awk -v f="$tmp/dc.$n.$pol.$tr" '$2 == "cell" {
						c = 0; for (i = 11; i <= NF; i++) c += $i
						print $3, $7, c >> f }' "$tmp/sv"
					grep '^\[r0\] hash ' "$tmp/sv" | sed 's/^\[r0\] //' \
						>>"$tmp/hash.$n.$tr"
				done
			done
		done
		r=$((r + 1))
	done
	printf '%-9s %3s %7s %11s %11s %7s %9s %9s %7s\n' policy TP streams tcp_tok/s shm_tok/s \
		ratio tcp_cpu_s shm_cpu_s ratio
	for pol in $policies; do
		for n in $tps; do
			for st in $(awk '{ print $1 }' "$tmp/dc.$n.$pol.tcp" | sort -un); do
				tt=$(awk -v s="$st" '$1 == s { print $2 }' "$tmp/dc.$n.$pol.tcp" | median)
				ts=$(awk -v s="$st" '$1 == s { print $2 }' "$tmp/dc.$n.$pol.shm" | median)
				ct=$(awk -v s="$st" '$1 == s { print $3 }' "$tmp/dc.$n.$pol.tcp" | median)
				cs=$(awk -v s="$st" '$1 == s { print $3 }' "$tmp/dc.$n.$pol.shm" | median)
				printf '%-9s %3s %7s %11s %11s %7s %9s %9s %7s\n' "$pol" "$n" "$st" \
					"$tt" "$ts" "$(ratio "$ts" "$tt")" "$ct" "$cs" \
					"$(ratio "$cs" "$ct")"
			done
		done
	done
	for n in $tps; do
		if [ "$(sort -u "$tmp/hash.$n.tcp" "$tmp/hash.$n.shm" | wc -l)" != 1 ]; then
			echo "FAIL: TP$n: the token hashes differ between runs or transports:"
			sort -u "$tmp/hash.$n.tcp" "$tmp/hash.$n.shm"
			exit 1
		fi
		echo "TP$n: $(sort -u "$tmp/hash.$n.shm"), over tcp and shm"
	done
	;;
esac
exit 0
