#!/bin/sh
# Kill trials on one host: TRIALS times, rk-serve decodes at TP ranks on the
# CPU backend under rk-launch, a random rank gets SIGKILL mid-decode, and each
# survivor's --trace-rounds file says when it first heard of a failure (the
# "RANK failed T" line; CLOCK_MONOTONIC). rk-launch is stopped (SIGSTOP) during
# a trial so that only the ranks' own detection is timed, not its teardown.
# Per transport (TRANSPORTS, default "shm tcp": RK_SHM=on and RK_SHM=off) it
# prints p50/p99/max of the time from the kill (tests/bench/kill-stamp) to the
# last survivor's report, the hangs (a survivor not gone 20 s after the kill),
# the orphans (a rank's process left after rk-launch ended), wrong reports (a
# survivor naming another rank) and the entries of /dev/shm before and after.
#
#   builddir=_build tests/bench/bench-kill.sh [TRIALS] [TP]
#
# TRIALS: per transport (default 50); TP: ranks (default 4). Env: TRANSPORTS,
# RK_WAIT (the ranks' wait policy; default adaptive), SERVE_ARGS (more rk-serve
# options). Exit 0 when no trial hung, left an orphan or reported wrongly, and
# /dev/shm holds what it held before; 1 otherwise.
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
stamp=$b/tests/bench/kill-stamp
trials=${1:-50}
tp=${2:-4}
transports=${TRANSPORTS:-shm tcp}
for p in "$launch" "$serve" "$stamp"; do
	[ -x "$p" ] || { echo "SKIP: no $p (make check builds it)"; exit 77; }
done
tmp=$(mktemp -d) || exit 99
lpid=
cleanup()
{
	[ -n "$lpid" ] && { kill -CONT "$lpid"; kill -KILL "$lpid"; } 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

hosts=localhost
i=1
while [ "$i" -lt "$tp" ]; do
	hosts=$hosts,localhost
	i=$((i + 1))
done

# zombie PID: it exited (its parent, stopped, has not reaped it)
zombie()
{
	st=$(sed -n 's/^[0-9]* (.*) \([A-Z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null)
	[ -z "$st" ] || [ "$st" = Z ]
}

rnd()	# a number in [0, $1)
{
	echo $(($(od -An -N2 -tu2 /dev/urandom) % $1))
}

shm_before=$(ls -A /dev/shm 2>/dev/null | wc -l)
bad=0
echo "bench-kill: $trials SIGKILLs per transport of a random rank of $tp during decode" \
	"(CPU backend, wait ${RK_WAIT:-adaptive})"
echo "host: $(nproc) CPUs, $(uname -r)"
for tr in $transports; do
	case $tr in
	shm) shm=on ;;
	tcp) shm=off ;;
	*) echo "TRANSPORTS: '$tr' is not shm or tcp"; exit 2 ;;
	esac
	hangs=0
	orphans=0
	wrong=0
	: >"$tmp/delays.$tr"
	t=1
	while [ "$t" -le "$trials" ]; do
		rm -f "$tmp"/tr.* "$tmp/out" "$tmp/err"
		# shellcheck disable=SC2086
		RK_SHM=$shm "$launch" -v --hosts "$hosts" -- "$serve" --backend=cpu --bench \
			--bench-streams 4 --bench-modes greedy --bench-draft plain \
			--bench-requests 100000 --bench-max-tokens 64 --trace-rounds="$tmp/tr" \
			$SERVE_ARGS >"$tmp/out" 2>"$tmp/err" </dev/null &
		lpid=$!
		i=0
		until grep -q '# warm-up: ready' "$tmp/out" 2>/dev/null; do
			i=$((i + 1))
			[ $i -le 300 ] && kill -0 "$lpid" 2>/dev/null ||
				{ echo "FAIL: $tr trial $t: the job did not start"; cat "$tmp/err"; exit 1; }
			sleep 0.1
		done
		sleep 0.2	# rounds are flowing
		pids=
		r=0
		while [ "$r" -lt "$tp" ]; do
			pids="$pids $(sed -n "s/^rk-launch: rank $r: pid \([0-9]*\) .*/\1/p" "$tmp/err")"
			r=$((r + 1))
		done
		victim=$(rnd "$tp")
		vpid=$(echo $pids | cut -d' ' -f$((victim + 1)))
		kill -STOP "$lpid"
		t0=$("$stamp" "$vpid") || { kill -CONT "$lpid"; echo "FAIL: kill-stamp"; exit 1; }
		# every survivor exits once it has heard (the leader on the failure,
		# followers on the leader's ERROR or its end)
		i=0
		hung=0
		for p in $pids; do
			while ! zombie "$p"; do
				i=$((i + 1))
				[ $i -ge 2000 ] && { hung=1; break; }
				sleep 0.01
			done
		done
		kill -CONT "$lpid"
		i=0
		while kill -0 "$lpid" 2>/dev/null; do
			i=$((i + 1))
			[ $i -ge 200 ] && { kill -KILL "$lpid"; hung=1; break; }
			sleep 0.1
		done
		wait "$lpid" 2>/dev/null
		lpid=
		for p in $pids; do
			kill -0 "$p" 2>/dev/null && { orphans=$((orphans + 1)); kill -KILL "$p"; }
		done
		if [ $hung = 1 ]; then
			hangs=$((hangs + 1))
		else
			last=0
			r=0
			while [ "$r" -lt "$tp" ]; do
				if [ "$r" != "$victim" ]; then
					line=$(grep ' failed ' "$tmp/tr.r$r" 2>/dev/null)
					who=${line%% *}
					at=${line##* }
					if [ -z "$line" ] || [ "$who" != "$victim" ]; then
						wrong=$((wrong + 1))
						echo "  $tr trial $t: rank $r reported '${line:-nothing}'," \
							"rank $victim was killed"
					elif [ "$at" -gt "$last" ]; then
						last=$at
					fi
				fi
				r=$((r + 1))
			done
			[ "$last" -gt 0 ] && echo "$(((last - t0) / 1000)) $victim" >>"$tmp/delays.$tr"
		fi
		t=$((t + 1))
	done
	sort -n "$tmp/delays.$tr" | awk -v tr="$tr" -v h="$hangs" -v o="$orphans" -v w="$wrong" '
		{ d[NR] = $1; if ($2 == 0) l++ }
		END {
			if (!NR) { printf "%-4s no trial timed\n", tr; exit }
			printf "%-4s %d trials (%d of the leader): until the last survivor knew, " \
			       "p50 %.3f ms p99 %.3f ms max %.3f ms; hangs %d, orphans %d, wrong %d\n",
			       tr, NR, l, d[int((NR - 1) * 0.5) + 1] / 1000,
			       d[int((NR - 1) * 0.99) + 1] / 1000, d[NR] / 1000, h, o, w
		}'
	bad=$((bad + hangs + orphans + wrong))
done
shm_after=$(ls -A /dev/shm 2>/dev/null | wc -l)
echo "/dev/shm: $shm_before entries before, $shm_after after"
[ "$shm_after" -le "$shm_before" ] || bad=$((bad + 1))
[ $bad = 0 ]
