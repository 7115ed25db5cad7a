#!/bin/sh
# The round-broadcast overhead: the time from the leader's ROUND send to the
# last follower's launch of that round, at each world size, under each wait
# policy, over each transport, in one run. Ranks are processes on this host
# under rk-launch, so every rank's CLOCK_MONOTONIC is the same clock; the
# times come from rk-serve --trace-rounds (the scheduler's round tracer).
#
#   builddir=_build tests/bench/bench-bcast.sh [TPS] [RUNS] [REQUESTS]
#
# TPS: world sizes (default "2 4"); RUNS: runs per cell, interleaved, medians
# reported (default 5); REQUESTS: 1-stream requests of 64 tokens per run
# (default 16, so about 1000 rounds). Env: POLICIES (default "adaptive spin
# block"), TRANSPORTS (default "tcp": RK_SHM=off, TCP loopback; "shm":
# RK_SHM=on, same-host shared memory and the one-write broadcast ring),
# BACKEND (cpu; cuda on a GPU machine), SERVE_ARGS (more rk-serve options).
# The first 32 rounds of a run (warm-up) are left out.
# Prints per cell p50/p99 in us (median over the runs), per policy and
# transport the ratio of each world size to the first, and with two transports
# the ratio of the second to the first. Exit 0, or 1 when a run failed.
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
tps=${1:-2 4}
runs=${2:-5}
reqs=${3:-16}
policies=${POLICIES:-adaptive spin block}
transports=${TRANSPORTS:-tcp}
backend=${BACKEND:-cpu}
if [ ! -x "$launch" ] || [ ! -x "$serve" ]; then
	echo "SKIP: no $launch or $serve"
	exit 77
fi
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# hosts N: localhost,localhost,...
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

# overhead TRACE N: "p50 p99" in us over the rounds past the warm-up
overhead()
{
	tr=$1
	n=$2
	i=1
	files=
	while [ "$i" -lt "$n" ]; do
		files="$files $tr.r$i"
		i=$((i + 1))
	done
	# shellcheck disable=SC2086
	awk -v n="$n" '
		FNR == 1 { f++ }
		f == 1 && $2 == "sent" { sent[$1] = $3 }
		f > 1 && $2 == "launch" { if (!($1 in last) || $3 > last[$1]) last[$1] = $3; cnt[$1]++ }
		END {
			k = 0
			for (r in sent)
				if (r + 0 > 32 && cnt[r] == n - 1)
					d[++k] = (last[r] - sent[r]) / 1000
			if (!k) { print "- -"; exit }
			for (i = 2; i <= k; i++) {	# insertion sort: ~1000 rounds
				v = d[i]
				for (j = i - 1; j >= 1 && d[j] > v; j--)
					d[j + 1] = d[j]
				d[j + 1] = v
			}
			printf "%.1f %.1f\n", d[int((k - 1) * 0.5) + 1], d[int((k - 1) * 0.99) + 1]
		}' "$tr.r0" $files
}

median()
{
	sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
}

echo "bench-bcast: ROUND sent (leader) to last follower launch, backend $backend," \
	"1 stream x $reqs requests x 64 tokens, $runs runs per cell (medians)"
echo "host: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
r=1
while [ "$r" -le "$runs" ]; do
	for pol in $policies; do
		for n in $tps; do
			for tp in $transports; do
				case $tp in
				shm) shm=on ;;
				tcp) shm=off ;;
				*) echo "TRANSPORTS: '$tp' is not tcp or shm"; exit 2 ;;
				esac
				tr=$tmp/tr.$n.$pol.$tp.$r
				# shellcheck disable=SC2086
				if ! RK_SHM=$shm RK_WAIT=$pol timeout -s KILL 120 "$launch" \
					--hosts "$(hosts "$n")" -- "$serve" --backend="$backend" --bench \
					--bench-streams 1 --bench-modes greedy --bench-draft plain \
					--bench-requests "$reqs" --bench-max-tokens 64 \
					--trace-rounds="$tr" $SERVE_ARGS >"$tmp/out" 2>&1; then
					echo "FAIL: TP$n $pol $tp run $r:"
					cat "$tmp/out"
					exit 1
				fi
				overhead "$tr" "$n" >>"$tmp/res.$n.$pol.$tp"
				rm -f "$tr".r*
			done
		done
	done
	r=$((r + 1))
done

first=${transports%% *}
printf '%-9s %-4s %4s %10s %10s %8s %8s %9s\n' policy link TP p50_us p99_us \
	p50/TP${tps%% *} p99/TP${tps%% *} "p50/$first"
for pol in $policies; do
	for tp in $transports; do
		base50=
		base99=
		for n in $tps; do
			p50=$(awk '{ print $1 }' "$tmp/res.$n.$pol.$tp" | median)
			p99=$(awk '{ print $2 }' "$tmp/res.$n.$pol.$tp" | median)
			f50=$(awk '{ print $1 }' "$tmp/res.$n.$pol.$first" | median)
			[ -n "$base50" ] || { base50=$p50; base99=$p99; }
			awk -v pol="$pol" -v tp="$tp" -v n="$n" -v a="$p50" -v b="$p99" -v c="$base50" \
				-v d="$base99" -v f="$f50" \
				'BEGIN { x = c > 0 ? a / c : 0; y = d > 0 ? b / d : 0; z = f > 0 ? a / f : 0
				         printf "%-9s %-4s %4s %10s %10s %8.2f %8.2f %9.2f\n", pol, tp,
				                n, a, b, x, y, z }'
		done
	done
done
