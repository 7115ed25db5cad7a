#!/usr/bin/env bash
# rankrt beside its peers: 64-byte TCP loopback ping-pong through rk-pingpong
# (--wait=spin, adaptive, block) and through tests/bench/peers.c's designs (raw
# sockets spinning and blocking, plain io_uring blocking and peek-spinning,
# libuv, ZeroMQ PAIR, UCX ucp busy and armed), all in one run, interleaved rep
# by rep, client and server pinned to CPUs 0 and 1; rk-pingpong runs with
# RK_SHM=off for the TCP rows, and again as rk-shm-* rows over its same-host
# shared-memory link (not TCP: beside the others for scale). Then the periodic-gap run:
# a round trip every G us, so its RTT is the wake latency of a server idle G us,
# with the server's CPU per round trip. Needs no network.
#
#   tests/bench/peers.sh [BUILD_DIR]          (make bench-peers runs it)
#
# Environment (defaults in brackets):
#   COUNT [20000] WARMUP [1000]   busy round trips per design and rep
#   REPS [3]                      interleaved reps; medians are reported
#   GAPS ["1000 10000 100000"]    the periodic gaps, us
#   GAP_MS [2000]                 per design and gap: COUNT = GAP_MS*1000/gap (at least 20)
#   GAP_REPS [1]                  interleaved reps of the gap run
#   OUT [./peers-out]             peers.md (the tables), *.dat, peers.gp, PNGs (gnuplot)
#   DEPS                          a dpkg -x root holding the libraries' headers and .so
#                                 files (usr/include, usr/lib/x86_64-linux-gnu): used
#                                 first, found at run time through an rpath and
#                                 LD_LIBRARY_PATH (also for rk-pingpong's liburing)
#   CC [cc]   UCX_TLS [tcp]       UCX's transports: tcp, so UCX crosses loopback TCP too
#   SHM [1]                       0: leave the rk-shm-* rows out
#   DESIGNS                       the peers' designs to run (default: every one built)
#   BASE                          another build directory (e.g. main's): its rk-pingpong
#                                 runs too, as rk-base-* rows beside this build's, for a
#                                 before/after in the same run (the gap run: rk-base-adaptive)
#   BUSY [1]                      0: skip the busy round trips (only the gap run)
#   GAPSET                        the gap run's designs (default: rk-spin rk-adaptive
#                                 rk-nolearn rk-block sock-spin sock-block, and
#                                 rk-base-adaptive with BASE); rk-spin is the reference;
#                                 rk-marginN: rk-adaptive with RK_PREDICT_MARGIN_US=N (a
#                                 longer spin before each learned arrival)
#   GAP_STATS [0]                 1: the gap run's rk-* rows run with --stats; each
#                                 rank's counters (late wakes, overslept, overdue...)
#                                 go to OUT/peers-gap-stats.txt, printed at the end
#   SQPOLL [0]                    1: also the busy rows rk-sqpoll-spin and rk-sqpoll-adaptive
#                                 (RK_SQPOLL=1: a kernel SQ thread per rank, unpinned; on a
#                                 host with cores to spare, against rk-spin in the same run)
#   MODES ["spin adaptive block"] the rk-* (and rk-base-*) busy rows' wait modes (not RK_*:
#                                 rankrt refuses RK_ variables it does not know)
#   DEFER [0]                     1: also rk-defer-MODE busy rows for those modes
#                                 (RK_DEFER_TASKRUN=1: a SINGLE_ISSUER|DEFER_TASKRUN ring)
#   VARIANTS                      more rk-VARIANT-MODE busy rows for those modes, each
#                                 VARIANT one of: defer (as DEFER=1), coop (RK_COOP_TASKRUN=1),
#                                 nocoop (RK_COOP_TASKRUN=0), nocoopdefer (RK_COOP_TASKRUN=0
#                                 RK_DEFER_TASKRUN=1), noyield (RK_SPIN_YIELD=0: a spin
#                                 that never yields its core)
#   ONECPU [0]                    1: client and server both on CPU 0 (rk-pingpong under
#                                 taskset -c 0, the peers with --cpus 0,0): each round trip
#                                 is then both ends' CPU path plus two context switches,
#                                 without the cross-CPU wake, so software cost shows
#                                 through a VM's noisy idle wakes
#   GAPS=none                     skips the periodic-gap run
# The gap run also has rk-nolearn (RK_LEARN=0: the wait before links learned their gaps)
# beside rk-adaptive (the default, learning), so both compare in one run.
# A design whose library is missing is left out (named on stderr). Without
# gnuplot the .dat files and peers.gp are written; `gnuplot peers.gp` in OUT plots.
set -euo pipefail
b=${1:-.}
src=$(cd "$(dirname "$0")" && pwd)
COUNT=${COUNT:-20000}
WARMUP=${WARMUP:-1000}
REPS=${REPS:-3}
GAPS=${GAPS:-1000 10000 100000}
GAP_MS=${GAP_MS:-2000}
GAP_REPS=${GAP_REPS:-1}
OUT=${OUT:-$PWD/peers-out}
CC=${CC:-cc}
export UCX_TLS=${UCX_TLS:-tcp}
pp="$b/examples/pingpong/rk-pingpong"
[ -x "$pp" ] || { echo "peers.sh: no $pp: build rankrt first" >&2; exit 1; }
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- build the peers binary with every library that links ----
flags=(-O2 -Wall)
libs=()
if [ -n "${DEPS:-}" ]; then
	dlib=$DEPS/usr/lib/x86_64-linux-gnu
	flags+=(-I"$DEPS/usr/include")
	libs+=(-L"$dlib" -Wl,-rpath,"$dlib")
	# the rpath finds the libraries named at link time, not what they need in turn
	export LD_LIBRARY_PATH=$dlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
try() # NAME HEADER LIBS...: adds -DPEERS_HAVE_NAME when HEADER compiles and LIBS link
{
	local name=$1 hdr=$2
	shift 2
	printf '#include <%s>\nint main(void) { return 0; }\n' "$hdr" >"$tmp/t.c"
	if "$CC" "${flags[@]}" "$tmp/t.c" -o "$tmp/t" "${libs[@]}" "$@" 2>/dev/null; then
		flags+=(-DPEERS_HAVE_"$name")
		libs+=("$@")
	else
		echo "peers.sh: no $name ($hdr, $*): its designs are left out" >&2
	fi
}
try URING liburing.h -luring
try UV uv.h -luv
try ZMQ zmq.h -lzmq
try UCX ucp/api/ucp.h -lucp -lucs
"$CC" "${flags[@]}" "$src/peers.c" -o "$tmp/peers" "${libs[@]}"
peers="$tmp/peers"
if [ -n "${DESIGNS:-}" ]; then
	read -r -a designs <<<"$DESIGNS"
else
	mapfile -t designs < <("$peers" --list)
fi
base=()
if [ -n "${BASE:-}" ]; then
	[ -x "$BASE/examples/pingpong/rk-pingpong" ] ||
		{ echo "peers.sh: no $BASE/examples/pingpong/rk-pingpong" >&2; exit 1; }
	base=()
	for m in ${MODES:-spin adaptive block}; do base+=(rk-base-"$m"); done
fi
pin=(--pin)
cpus=()
onecpu=()
if [ "${ONECPU:-0}" = 1 ]; then
	pin=()
	cpus=(--cpus 0,0)
	onecpu=(taskset -c 0)
fi

host="$(nproc) CPUs:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(uname -r)"
div() { awk -v a="$1" -v b="$2" 'BEGIN {print (b > 0) ? a / b : 0}'; }
med() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }

# rk_row MODE COUNT WARMUP [GAP]: "p50 p99 cpu_client cpu_server rts" from rk-pingpong.
# The rk-* rows are TCP loopback like every peer's (RK_SHM=off: two ranks of one host
# would otherwise move to shared memory); the rk-shm-* rows are that same-host link.
rk_row()
{
	local out shm=off mode=$1 bin=$pp sq=0 defer=0 learn=(env RK_LEARN=1) st=() err=/dev/stderr
	case $mode in base-*) bin=$BASE/examples/pingpong/rk-pingpong mode=${mode#base-} learn=(env) ;; esac
	case $mode in defer-*) defer=1 mode=${mode#defer-} ;; esac
	case $mode in coop-*) learn+=(RK_COOP_TASKRUN=1) mode=${mode#coop-} ;; esac
	case $mode in nocoop-*) learn+=(RK_COOP_TASKRUN=0) mode=${mode#nocoop-} ;; esac
	case $mode in nocoopdefer-*) defer=1 learn+=(RK_COOP_TASKRUN=0) mode=${mode#nocoopdefer-} ;; esac
	case $mode in noyield-*) learn+=(RK_SPIN_YIELD=0) mode=${mode#noyield-} ;; esac
	case $mode in shm-*) shm=on mode=${mode#shm-} ;; esac
	case $mode in sqpoll-*) sq=1 mode=${mode#sqpoll-} ;; esac
	case $mode in nolearn) learn=(env RK_LEARN=0) mode=adaptive ;; esac
	case $mode in margin[0-9]*) learn=(env RK_LEARN=1 RK_PREDICT_MARGIN_US=${mode#margin}) mode=adaptive ;; esac
	[ "$defer" = 0 ] || learn+=(RK_DEFER_TASKRUN=1)
	if [ "${GAP_STATS:-0}" = 1 ] && [ "${4:-0}" != 0 ]; then
		st=(--stats) err=$tmp/stats
		: >"$err"
	fi
	out=$("${onecpu[@]}" "${learn[@]}" RK_SHM=$shm RK_SQPOLL=$sq "$bin" --local "${pin[@]}" --wait "$mode" \
		--count "$2" --warmup "$3" --runs 1 --gap-us "${4:-0}" "${st[@]}" 2>>"$err" | tail -1)
	[ ${#st[@]} = 0 ] || sed "s/^/gap $4 rk-$1: /" "$tmp/stats" >>"$OUT/peers-gap-stats.txt"
	awk -v n=$(($2 + $3)) '{print $2, $3, $5, $6, n}' <<<"$out"
}
peer_row() # DESIGN COUNT WARMUP [GAP]
{
	"$peers" "$1" --count "$2" --warmup "$3" --gap-us "${4:-0}" "${cpus[@]}" |
		awk '{print $2, $3, $4, $5, $6}'
}
row() # NAME COUNT WARMUP GAP
{
	case $1 in
	rk-*) rk_row "${1#rk-}" "$2" "$3" "$4" ;;
	*) peer_row "$1" "$2" "$3" "$4" ;;
	esac
}

# ---- busy round trips ----
all=()
for m in ${MODES:-spin adaptive block}; do all+=(rk-"$m"); done
if [ "${DEFER:-0}" = 1 ]; then
	for m in ${MODES:-spin adaptive block}; do all+=(rk-defer-"$m"); done
fi
for v in ${VARIANTS:-}; do
	for m in ${MODES:-spin adaptive block}; do all+=(rk-"$v"-"$m"); done
done
all+=("${base[@]}" "${designs[@]}")
[ "${SHM:-1}" = 0 ] || all+=(rk-shm-spin rk-shm-adaptive rk-shm-block)
[ "${SQPOLL:-0}" = 1 ] && all+=(rk-sqpoll-spin rk-sqpoll-adaptive)
[ "${BUSY:-1}" = 0 ] && REPS=0
: >"$tmp/busy"
for rep in $(seq "$REPS"); do
	for d in "${all[@]}"; do
		r=$(row "$d" "$COUNT" "$WARMUP" 0) || { echo "peers.sh: $d failed" >&2; continue; }
		echo "$d $r" >>"$tmp/busy"
	done
done
# the floor: sock-spin, or sock-block when the run has no sock-spin
fl=sock-spin
grep -q '^sock-spin ' "$tmp/busy" || fl=sock-block
floor=$(awk -v f=$fl '$1 == f {print $2}' "$tmp/busy" | med)
floor99=$(awk -v f=$fl '$1 == f {print $3}' "$tmp/busy" | med)
{
	echo "## Peers: 64-byte TCP loopback ping-pong, $(date -u +%F), $host"
	echo
	echo "Command: \`COUNT=$COUNT WARMUP=$WARMUP REPS=$REPS GAPS=\"$GAPS\" GAP_MS=$GAP_MS GAP_REPS=$GAP_REPS SQPOLL=${SQPOLL:-0} DEFER=${DEFER:-0}${VARIANTS:+ VARIANTS=\"$VARIANTS\"} ONECPU=${ONECPU:-0} MODES=\"${MODES:-spin adaptive block}\" BUSY=${BUSY:-1}${BASE:+ BASE=$BASE} tests/bench/peers.sh\`"
	if [ "${ONECPU:-0}" = 1 ]; then where="client and server both on CPU 0"; else where="client on CPU 0, server on CPU 1"; fi
	echo "(UCX_TLS=$UCX_TLS). Medians of $REPS interleaved reps of $COUNT round trips; $where;"
	echo "CPU is both processes' user+system time per round trip, warmup included."
	echo
	echo "| design | p50 RTT us | p99 us | p50 / $fl | p99 / $fl | CPU us per round trip |"
	echo "|---|---|---|---|---|---|"
} >"$OUT/peers.md"
: >"$OUT/peers-busy.dat"
for d in "${all[@]}"; do
	grep -q "^$d " "$tmp/busy" || continue
	p50=$(awk -v d="$d" '$1 == d {print $2}' "$tmp/busy" | med)
	p99=$(awk -v d="$d" '$1 == d {print $3}' "$tmp/busy" | med)
	cpu=$(awk -v d="$d" '$1 == d {print ($4 + $5) * 1e6 / $6}' "$tmp/busy" | med)
	printf '| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n' "$d" "$p50" "$p99" \
		"$(div "$p50" "$floor")" "$(div "$p99" "$floor99")" "$cpu" \
		>>"$OUT/peers.md"
	printf '%s %s %s %s\n' "$d" "$p50" "$p99" "$cpu" >>"$OUT/peers-busy.dat"
done

# ---- periodic gaps ----
gapset=(rk-spin rk-adaptive rk-nolearn rk-block sock-spin sock-block)
[ -n "${BASE:-}" ] && gapset=(rk-spin rk-base-adaptive rk-adaptive rk-nolearn rk-block sock-spin sock-block)
[ -n "${GAPSET:-}" ] && read -r -a gapset <<<"$GAPSET"
[ "$GAPS" != none ] || GAPS=
[ "${GAP_STATS:-0}" = 1 ] && : >"$OUT/peers-gap-stats.txt"
for rep in $(seq "$GAP_REPS"); do
	for g in $GAPS; do
		n=$((GAP_MS * 1000 / g))
		[ "$n" -ge 20 ] || n=20
		for d in "${gapset[@]}"; do
			r=$(row "$d" "$n" 5 "$g") || { echo "peers.sh: $d at $g us failed" >&2; continue; }
			echo "$g $d $r" >>"$tmp/gap"
		done
	done
done
[ -z "$GAPS" ] || {
	echo
	echo "### Periodic gaps: wake latency of a server idle G us, against pure spinning (rk-spin)"
	echo
	echo "$GAP_REPS rep(s) of GAP_MS=$GAP_MS ms of round trips per design and gap. Server CPU us per round trip."
	echo
	echo "| gap us | design | p50 us | p99 us | p50 / rk-spin | p99 / rk-spin | server CPU us per RT | CPU / rk-spin |"
	echo "|---|---|---|---|---|---|---|---|"
} >>"$OUT/peers.md"
: >"$OUT/peers-gap.dat"
for g in $GAPS; do
	s50=$(awk -v g="$g" '$1 == g && $2 == "rk-spin" {print $3}' "$tmp/gap" | med)
	s99=$(awk -v g="$g" '$1 == g && $2 == "rk-spin" {print $4}' "$tmp/gap" | med)
	scpu=$(awk -v g="$g" '$1 == g && $2 == "rk-spin" {print $6 * 1e6 / $7}' "$tmp/gap" | med)
	for d in "${gapset[@]}"; do
		grep -q "^$g $d " "$tmp/gap" || continue
		p50=$(awk -v g="$g" -v d="$d" '$1 == g && $2 == d {print $3}' "$tmp/gap" | med)
		p99=$(awk -v g="$g" -v d="$d" '$1 == g && $2 == d {print $4}' "$tmp/gap" | med)
		cpu=$(awk -v g="$g" -v d="$d" '$1 == g && $2 == d {print $6 * 1e6 / $7}' "$tmp/gap" | med)
		printf '| %s | %s | %.1f | %.1f | %.2f | %.2f | %.1f | %.3f |\n' "$g" "$d" "$p50" "$p99" \
			"$(div "$p50" "$s50")" "$(div "$p99" "$s99")" "$cpu" \
			"$(div "$cpu" "$scpu")" >>"$OUT/peers.md"
		printf '%s %s %s %s %s\n' "$d" "$g" "$p50" "$p99" "$cpu" >>"$OUT/peers-gap.dat"
	done
done

# ---- plots ----
cat >"$OUT/peers.gp" <<'EOF'
set terminal pngcairo size 900,600 noenhanced
set output 'peers-busy.png'
set title 'Busy ping-pong: p50 RTT against CPU per round trip'
set xlabel 'CPU us per round trip (both processes)'
set ylabel 'p50 RTT us'
set logscale y
set grid
set key off
plot 'peers-busy.dat' using 4:2 with points pt 7 ps 1.5, \
     '' using 4:2:1 with labels offset 1,0.6 left
set output 'peers-gap.png'
set title 'Wake latency after a periodic gap (p50; dashed: p99)'
set xlabel 'gap us'
set ylabel 'RTT us'
set logscale xy
set xrange [500:200000]
set key left top
L = "@GAPSET@"
plot for [i=1:words(L)] '< grep "^'.word(L, i).' " peers-gap.dat' \
	using 2:3 with linespoints lc i title word(L, i), \
     for [i=1:words(L)] '< grep "^'.word(L, i).' " peers-gap.dat' \
	using 2:4 with lines dt 2 lc i notitle
EOF
sed -i "s/@GAPSET@/${gapset[*]}/" "$OUT/peers.gp"
if command -v gnuplot >/dev/null; then
	# without a gap run (GAPS=none) the second plot has no points: not an error
	(cd "$OUT" && gnuplot peers.gp 2>/dev/null) || [ -z "$GAPS" ] ||
		echo "peers.sh: gnuplot failed: run 'gnuplot peers.gp' in $OUT" >&2
else
	echo "peers.sh: no gnuplot: run 'gnuplot peers.gp' in $OUT to plot" >&2
fi
cat "$OUT/peers.md"
if [ "${GAP_STATS:-0}" = 1 ]; then
	echo
	echo "### rk-pingpong --stats of the gap run (r1 is the server; in run order)"
	echo
	cat "$OUT/peers-gap-stats.txt"
fi
