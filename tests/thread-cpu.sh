#!/bin/sh
# Per-thread CPU of running processes, sampled: where a rank's CPU goes.
#
#   tests/thread-cpu.sh sample OUT PERIOD_S PID...   (until every PID has exited)
#   tests/thread-cpu.sh report OUT FROM_S TO_S       (deltas between two sample times)
#
# sample appends lines "T PID TID COMM UTIME STIME" (T: seconds since the
# sampler started, UTIME/STIME in clock ticks from /proc/PID/task/TID/stat; a
# COMM with blanks has them turned into '_'). report prints, per process and
# thread name, the CPU seconds used between the samples nearest to FROM_S and
# TO_S (threads of one name summed: NCCL and CUDA start several alike).
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
	t0=$(date +%s.%N)
	while :; do
		alive=
		now=$(date +%s.%N)
		for pid in $pids; do
			[ -d /proc/"$pid" ] || continue
			alive=1
			for t in /proc/"$pid"/task/*; do
				# comm may hold blanks and ')': take the fields after the last ')'
				{ read -r comm <"$t/comm" && read -r stat <"$t/stat"; } 2>/dev/null ||
					continue
				rest=${stat##*) }
				# shellcheck disable=SC2086
				set -- $rest
				echo "$now $t0 $pid ${t##*/} $(echo "$comm" | tr ' ' '_') ${12} ${13}"
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
	tck=$(getconf CLK_TCK)
	awk -v from="$from" -v to="$to" -v tck="$tck" '
	$3 == "lines" { next }
	{
		t = $1 - $2
		k = $3 " " $4
		name[k] = $5
		pid[k] = $3
		v = $6 + $7
		# the first sample at or after FROM, the last at or before TO
		if (t >= from && !(k in a)) { a[k] = v }
		if (t <= to) { b[k] = v }
		if (!(k in a0) ) { a0[k] = v }
	}
	END {
		for (k in b) {
			base = (k in a) ? a[k] : a0[k]
			d = (b[k] - base) / tck
			if (d < 0) d = 0
			key = pid[k] " " name[k]
			sum[key] += d
			n[key]++
			tot[pid[k]] += d
		}
		for (key in sum)
			printf "%s %d %.3f\n", key, n[key], sum[key]
		for (p in tot)
			printf "%s TOTAL - %.3f\n", p, tot[p]
	}' "$out" | sort -k1,1n -k4,4nr |
		awk '{ printf "  pid %-8s %-20s threads %3s  cpu_s %s\n", $1, $2, $3, $4 }'
	;;
*)
	echo "usage: $0 sample OUT PERIOD_S PID... | report OUT FROM_S TO_S" >&2
	exit 2
	;;
esac
