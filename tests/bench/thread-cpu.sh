#!/bin/sh
# Per-thread CPU of running processes, sampled: where a rank's CPU goes.
#
#   tests/bench/thread-cpu.sh sample OUT PERIOD_S PID...   (until every PID has exited)
#   tests/bench/thread-cpu.sh report OUT FROM_S TO_S [tid] (deltas between two sample times)
#
# sample appends lines "T T0 PID TID COMM NS" (T - T0: seconds since the
# sampler started; NS: the thread's time on a CPU, from .../schedstat, exact,
# else from stat's clock ticks; a COMM with blanks has them turned into '_').
# report prints, per process and
# thread name, the CPU seconds used between the samples nearest to FROM_S and
# TO_S (threads of one name summed: NCCL and CUDA start several alike; with
# 'tid', one line per thread, named NAME/TID).
# With THREAD_CPU_LINES=FILE (an rk-serve --bench stdout), each sample also
# appends "T T0 lines HEADERS CELLS": how many column-header and cell lines
# FILE has, so the time of a cell can be found.
cmd=$1
out=$2
case $cmd in
sample)
	period=$3
	shift 3
	pids=$*
	tck=$(getconf CLK_TCK)
	t0=$(date +%s.%N)
	while :; do
		alive=
		now=$(date +%s.%N)
		for pid in $pids; do
			[ -d /proc/"$pid" ] || continue
			alive=1
			for t in /proc/"$pid"/task/*; do
				read -r comm <"$t/comm" 2>/dev/null || continue
				# schedstat: ns on the CPU (exact); else stat's ticks
				if read -r ns _ <"$t/schedstat" 2>/dev/null; then
					:
				else
					# comm may hold blanks and ')': the fields after the last ')'
					read -r stat <"$t/stat" 2>/dev/null || continue
					rest=${stat##*) }
					# shellcheck disable=SC2086
					set -- $rest
					ns=$(((${12} + ${13}) * (1000000000 / tck)))
				fi
				echo "$now $t0 $pid ${t##*/} $(echo "$comm" | tr ' ' '_') $ns"
			done
		done >>"$out"
		# a bench's progress: its column header and cell lines so far
		if [ -n "${THREAD_CPU_LINES:-}" ]; then
			echo "$now $t0 lines $(grep -c '^\[r0\] # *streams' "$THREAD_CPU_LINES")" \
				"$(grep -c '^\[r0\] cell' "$THREAD_CPU_LINES")" >>"$out"
		fi
		[ -n "$alive" ] || break
		sleep "$period"
	done
	;;
report)
	from=$3
	to=$4
	bytid=${5:-}
	awk -v from="$from" -v to="$to" -v bytid="$bytid" '
	$3 == "lines" { next }
	{
		t = $1 - $2
		k = $3 " " $4
		name[k] = bytid == "tid" ? $5 "/" $4 : $5
		pid[k] = $3
		v = $6
		# the first sample at or after FROM, the last at or before TO: a
		# thread counts only with samples inside the window
		if (t >= from && t <= to) {
			if (!(k in a)) a[k] = v
			b[k] = v
		}
	}
	END {
		for (k in b) {
			d = (b[k] - a[k]) / 1e9
			if (d < 0) d = 0
			key = pid[k] " " name[k]
			sum[key] += d
			n[key]++
			tot[pid[k]] += d
		}
		for (key in sum)
			printf "%s %d %.4f\n", key, n[key], sum[key]
		for (p in tot)
			printf "%s TOTAL - %.4f\n", p, tot[p]
	}' "$out" | sort -k1,1n -k4,4nr |
		awk '{ printf "  pid %-8s %-20s threads %3s  cpu_s %s\n", $1, $2, $3, $4 }'
	;;
*)
	echo "usage: $0 sample OUT PERIOD_S PID... | report OUT FROM_S TO_S" >&2
	exit 2
	;;
esac
