#!/usr/bin/env bash
# The wait policy's A/B: does each estimator and rule still earn its place?
# rk-pingpong over TCP loopback (RK_SHM=off), client and server pinned to CPUs 0
# and 1 as tests/bench/peers.sh's rk-* rows: the periodic-gap rows (a round trip
# every G us, so its RTT is the wake latency of a server idle G us) and the busy
# rows, for the default policy, spin, block, and the default with each ablation
# bit set (off-NAME: RK_TEST_WAIT_OFF=NAME, runtime/wait_int.h's RK__WAIT_OFF_*),
# interleaved rep by rep. Prints per gap and design the medians of p50, p99 and
# the server's CPU per round trip, and each one's ratio to the default and to
# spin. Needs a build made with ./configure --enable-wait-ablation (the default
# build never reads RK_TEST_WAIT_OFF). A measurement, not a test: run it on a
# quiet machine.
#
#   tests/bench/wait-ab.sh [BUILD_DIR]
#
# Environment (defaults in brackets):
#   REPS [5]                          interleaved reps; medians are reported
#   GAPS ["1000 10000 30000 100000"]  the periodic gaps, us
#   GAP_MS [6000]                     per design and gap: GAP_MS*1000/gap round trips (>= 20)
#   BUSY [1]                          0: no busy rows
#   COUNT [20000] WARMUP [1000]       busy round trips per design and rep
#   BITS                              the bits to run off-NAME rows for (default: every one)
#   OUT [./wait-ab-raw.txt]           the raw rows: rep gap design p50 p99 cpu_s_r1 round_trips
set -euo pipefail
b=${1:-.}
REPS=${REPS:-5}
GAPS=${GAPS:-1000 10000 30000 100000}
GAP_MS=${GAP_MS:-6000}
COUNT=${COUNT:-20000}
WARMUP=${WARMUP:-1000}
BITS=${BITS:-gaps gapwin cold winq late hold boost fade prewarm ohi rate}
OUT=${OUT:-$PWD/wait-ab-raw.txt}
pp="$b/examples/pingpong/rk-pingpong"
[ -x "$pp" ] || { echo "wait-ab.sh: no $pp: build rankrt first" >&2; exit 1; }
grep -q '^#define RK_WAIT_ABLATION 1' "$b/config.h" 2>/dev/null || {
	echo "wait-ab.sh: $b was not configured with --enable-wait-ablation" >&2
	exit 1
}
designs=(adaptive spin block)
for n in $BITS; do designs+=(off-"$n"); done

# row DESIGN GAP_US COUNT WARMUP: "p50 p99 cpu_s_r1" of one rk-pingpong run
row()
{
	local mode=adaptive env=(env)

	case $1 in
	spin | block) mode=$1 ;;
	off-*) env+=(RK_TEST_WAIT_OFF="${1#off-}") ;;
	esac
	"${env[@]}" RK_SHM=off "$pp" --local --pin --wait "$mode" --count "$3" --warmup "$4" \
		--runs 1 --gap-us "$2" 2>/dev/null | tail -1 | awk '{print $2, $3, $6}'
}

: >"$OUT"
for rep in $(seq "$REPS"); do
	for g in $GAPS; do
		n=$((GAP_MS * 1000 / g))
		[ "$n" -ge 20 ] || n=20
		for d in "${designs[@]}"; do
			r=$(row "$d" "$g" "$n" 5) && echo "$rep $g $d $r $((n + 5))" >>"$OUT" ||
				echo "wait-ab.sh: $d at $g us failed" >&2
		done
	done
	[ "${BUSY:-1}" = 1 ] || continue
	for d in "${designs[@]}"; do
		r=$(row "$d" 0 "$COUNT" "$WARMUP") &&
			echo "$rep 0 $d $r $((COUNT + WARMUP))" >>"$OUT" ||
			echo "wait-ab.sh: $d busy failed" >&2
	done
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)
echo "## wait-ab: $(date -u +%F), $(nproc) CPUs:$cpu, $(uname -r);" \
	"REPS=$REPS GAP_MS=$GAP_MS COUNT=$COUNT"
echo "gap 0 = busy round trips; cpu = server CPU us per round trip; medians over the reps"
awk '
function med(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++)
		for (j = i + 1; j <= n; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function div(a, b) { return b > 0 ? a / b : 0 }
{
	k = $2 " " $3
	if (!(k in seen)) { seen[k] = 1; order[++no] = k }
	p50[k] = p50[k] " " $4; p99[k] = p99[k] " " $5; cpu[k] = cpu[k] " " ($6 * 1e6 / $7)
}
END {
	printf "%7s %-13s %9s %9s %9s | %-21s | %-21s\n", "gap_us", "design", "p50_us", "p99_us",
	       "cpu_us", "/ default p50 p99 cpu", "/ spin p50 p99 cpu"
	for (i = 1; i <= no; i++) {
		split(order[i], x, " "); a = x[1] " adaptive"; s = x[1] " spin"; k = order[i]
		printf "%7s %-13s %9.1f %9.1f %9.2f | %6.2f %6.2f %7.2f | %6.2f %6.2f %7.3f\n",
		       x[1], x[2], med(p50[k]), med(p99[k]), med(cpu[k]),
		       div(med(p50[k]), med(p50[a])), div(med(p99[k]), med(p99[a])),
		       div(med(cpu[k]), med(cpu[a])), div(med(p50[k]), med(p50[s])),
		       div(med(p99[k]), med(p99[s])), div(med(cpu[k]), med(cpu[s]))
	}
}' "$OUT" | sort -k1,1n -s
