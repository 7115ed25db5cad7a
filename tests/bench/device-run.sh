#!/bin/sh
# One device run on the GPU machine (2 x H200, CUDA 13, NCCL 2.28 in /usr; no
# liburing, check or libtool there): build a `make dist` tarball against
# unpacked Debian .debs, run the GPU test suite, the completion-latency
# benchmark and the TP2 decode receipt of rk-serve's CUDA backend under three
# wait policies (tests/bench/bench-serve.sh, BENCH_MODE=policies; the CPU backend
# when there is no GPU or no CUDA backend).
# Receipts go to $OUT (at most 8 files); everything important is printed too.
#
#   DEPS=/tmp/deps OUT=/some/dir sh tests/bench/device-run.sh rankrt-2.0.0.tar.gz
#
# Arguments and environment:
#   $1 or TARBALL   the tarball (default: the newest rankrt-*.tar.gz here)
#   DEPS            a folder with usr/include and usr/lib/x86_64-linux-gnu inside
#                   (dpkg -x of liburing2 liburing-dev check libsubunit0
#                   libsubunit-dev); default /tmp/deps
#   DEBS            optional: a folder of those .deb files (and the peers step's),
#                   each unpacked into DEPS once
#   OUT             receipts (default ./device-out)
#   BUDGET_S        wall-clock budget of the whole run (default 540)
#   CUDA_HOME       the toolkit (default /usr/local/cuda, else nvcc's)
#   CONFIGURE_ARGS  more ./configure arguments, e.g. --enable-wait-ablation for
#                   tests/bench/wait-ab.sh and RK_TEST_WAIT_OFF A/Bs
#   RK_BENCH_GPU_ITERS, RK_BENCH_GPU_MAX_RATIO   benchmark knobs (5000, 1.1)
#   DECODE_S        the decode receipt's time limit (default 240 s, less when the
#                   budget is short); DECODE_RUNS (3), DECODE_REQUESTS (48),
#                   DECODE_TOKENS (64), DECODE_IDLE (60 s): its bench-serve.sh knobs
#   STEPS           which steps run (default "gpulat check_gpu threads decode bcast rest"):
#                   gpulat, check_gpu, threads (per-thread CPU of both ranks, busy
#                   under each policy and idle under the default: threads.txt),
#                   decode, bcast (the round-broadcast overhead, tests/bench/bench-bcast.sh:
#                   CUDA at TP2, CPU at TP2 and TP4), rest (the other tests); not by
#                   default: idlefloor (tests/bench/gpu-idle-floor: the idle CPU of a bare
#                   CUDA process, then with a host function, one and two NCCL ranks;
#                   IDLEFLOOR_S seconds each, default 20; then 10 s of a bare one under
#                   tests/bench/wait-probe.so, the waits of its threads: idlefloor.txt)
#                   resident (not by default; runs first when named: tests/bench/
#                   bench-resident.sh, the resident-rounds receipt: publication cost,
#                   GPU ready-to-first-kernel launch against resident, the TP1 decode
#                   receipt and the CPU backend at TP2 and TP4, RK_RESIDENT=off
#                   against on; RESIDENT_RUNS (3), RESIDENT_REQUESTS (32),
#                   RESIDENT_CPU_REQUESTS (16), RESIDENT_S (200), RESIDENT_CPU_S (100):
#                   resident.txt; then TP2 again, resident rounds under RK_WAIT=block
#                   against adaptive, RESIDENT_BLOCK_S (60): resident-block.txt; with
#                   check_gpu named too, CHECK_GPU_S is kept for it)
#                   shm (not by default; issue 17's same-host receipts, shared
#                   memory against TCP in one run: tests/bench/bench-shm.sh's rk-pingpong
#                   p50/p99 per wait mode and idle CPU per rank over SHM_IDLE s, default
#                   60, and CPU decode at TP2/TP4; bench-bcast.sh at TP2/TP4/TP8 over both;
#                   bench-kill.sh's KILL_TRIALS SIGKILLs, default 50: shm.txt; SHM_STEPS
#                   names bench-shm.sh's steps (default "pingpong decode"), SHM_COUNT its
#                   round trips per run (20000), BCAST_RUNS=0 or KILL_TRIALS=0 skips
#                   those benches; SHM_BASE=DIR, a built tree (an earlier run's WORK
#                   source folder): then its rk-pingpong and this one's, alternating,
#                   SHM_AB times each (2); SHM_PERF: perf stat events for each of
#                   those, bench-shm.sh's PERF; SHM_WAITS: its WAITS, the wait modes
#                   each rk-pingpong process measures, e.g. spin: as peers.sh's rows)
#                   peers (not by default: tests/bench/peers.sh, rk-pingpong beside raw
#                   sockets, io_uring, libuv, ZeroMQ and UCX; their .debs in DEBS/DEPS;
#                   PEERS_S seconds, default 300; COUNT, REPS, GAPS, GAP_MS, SQPOLL,
#                   DESIGNS, MODES, DEFER, VARIANTS, ONECPU, SHM, BASE, GAP_REPS, BUSY (0:
#                   the gap run only) and GAPSET pass through (SQPOLL=1 adds the
#                   rk-sqpoll-spin/-adaptive rows, DEFER=1 rk-defer-MODE rows, VARIANTS
#                   rk-VARIANT-MODE rows, BASE=DIR a built tree's rk-pingpong as
#                   rk-base-* rows): peers.txt)
#                   seed (not by default: tests/bench/seed-experiment.sh, the CPU backend
#                   with emulated device time, SEED_CPU_ENV (default QUICK=1), then the CUDA
#                   backend at TP1 with the same policies, SEED_CUDA_ENV; SEED_S seconds
#                   each, default 240: seed.txt, seed-cpu.png, seed-cuda.png)
#   THREADS_IDLE    the threads step's idle period (default 40 s; 30 s are measured)
#   CHECK_GPU_S     the GPU test suite's time limit (default 300 s)
#   WORK            build in this folder and keep it (default: a temporary one, removed)
# NCCL_NVLS_ENABLE=0 is forced for every step (the device README says why).
# Exit: 0 when the build, the GPU tests and the latency bound all passed.

export NCCL_NVLS_ENABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
start=$(date +%s)
budget=${BUDGET_S:-540}
OUT=${OUT:-$PWD/device-out}
DEPS=${DEPS:-/tmp/deps}
mkdir -p "$OUT" || exit 1
summary=$OUT/summary.txt
: >"$summary"

say()
{
	echo "$*" | tee -a "$summary"
}

steps=${STEPS:-gpulat check_gpu threads decode bcast rest}
want()
{
	case " $steps " in *" $1 "*) return 0 ;; esac
	return 1
}

left()
{
	echo $((budget - ($(date +%s) - start)))
}

# step NAME LIMIT_S LOG CMD...: run with a time limit, log to LOG and stdout
step()
{
	name=$1
	lim=$2
	log=$3
	shift 3
	t0=$(date +%s)
	timeout -k 10 "$lim" "$@" >>"$log" 2>&1
	rc=$?
	say "== $name: rc=$rc ($(($(date +%s) - t0)) s)$([ $rc = 124 ] && echo ', TIMED OUT')"
	return $rc
}

tarball=${1:-${TARBALL:-}}
[ -n "$tarball" ] || tarball=$(ls -t rankrt-*.tar.gz 2>/dev/null | head -n 1)
[ -f "$tarball" ] || { say "FAIL: no tarball (give it as \$1)"; exit 2; }
tarball=$(cd "$(dirname "$tarball")" && pwd)/$(basename "$tarball")

if [ -n "${DEBS:-}" ]; then
	# each .deb once (a stamp per file): a later run can bring more of them
	mkdir -p "$DEPS"
	for f in "$DEBS"/*.deb; do
		st=$DEPS/.unpacked-$(basename "$f")
		[ -e "$st" ] && continue
		dpkg -x "$f" "$DEPS" && : >"$st" || exit 2
	done
fi
[ -e "$DEPS/usr/include/liburing.h" ] || { say "FAIL: no liburing under $DEPS/usr/include"; exit 2; }
dlib=$DEPS/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$dlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$dlib/pkgconfig:$DEPS/usr/share/pkgconfig
# the toolkit: $CUDA_HOME, else /usr/local/cuda, else wherever nvcc is
if [ -z "${CUDA_HOME:-}" ]; then
	CUDA_HOME=/usr/local/cuda
	[ -x $CUDA_HOME/bin/nvcc ] || CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc || echo /x/x)")")
fi
export PATH=$CUDA_HOME/bin:$PATH

# ---- the machine -------------------------------------------------------------------
{
	echo "# $(date -u) $(uname -srm), $(nproc) CPUs"
	sed -n 's/^model name[[:space:]]*: /cpu: /p' /proc/cpuinfo | head -n 1
	echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>&1)"
	sed -n 's/^PRETTY_NAME=//p' /etc/os-release
	nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1
	nvidia-smi topo -m 2>&1 | head -n 6
	nvcc --version 2>&1 | tail -n 2
	grep -h '^#define NCCL_\(MAJOR\|MINOR\|PATCH\)' /usr/include/nccl.h 2>/dev/null
	ls -l /usr/lib/x86_64-linux-gnu/libnccl.so* 2>&1 | head -n 3
	gcc --version | head -n 1
	echo "tarball: $tarball"
	env | grep -E '^(NCCL_|CUDA_|RK_)' | sort
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
say "device-run: $(basename "$tarball"), budget ${budget} s, receipts in $OUT"

# ---- build ---------------------------------------------------------------------------
if [ -n "${WORK:-}" ]; then
	work=$WORK	# kept after the run: a later command of the same call can use the build
	rm -rf "$work" && mkdir -p "$work" || exit 1
else
	work=$(mktemp -d /tmp/rk-device.XXXXXX) || exit 1
fi
build=$OUT/build.log
: >"$build"
tar -C "$work" -xzf "$tarball" || { say "FAIL: tar"; exit 2; }
src=$(ls -d "$work"/rankrt-*/ | head -n 1)
cd "$src" || exit 2
# no --enable-werror: a warning new in the device's gcc must not cost the run
# shellcheck disable=SC2086	# CONFIGURE_ARGS: words
step configure 120 "$build" ./configure --with-cuda="$CUDA_HOME" --with-nccl=yes \
	CPPFLAGS="-I$DEPS/usr/include" LDFLAGS="-L$dlib -Wl,-rpath,$dlib" ${CONFIGURE_ARGS:-}
crc=$?
sed -n '/configured:/,$p' "$build" | tee -a "$summary"
brc=1
if [ $crc = 0 ]; then
	step make 240 "$build" make -j"$(nproc)"
	brc=$?
	[ $brc = 0 ] && { step make-check-programs 120 "$build" make -j"$(nproc)" check TESTS=; brc=$?; }
fi
if [ $brc != 0 ]; then
	tail -n 40 "$build"
	say "FAIL: build (see build.log)"
	exit 1
fi

# ---- resident rounds (tests/bench/bench-resident.sh): RK_RESIDENT=off against on ------------
# First when asked for: it is the measurement. TP1 on the GPU's backend (CUDA when
# rk-serve has it and a GPU answers), then the CPU backend at TP2 and TP4.
if want resident; then
	rlog=$OUT/resident.txt
	: >"$rlog"
	# the GPU suites (check_gpu, named too) keep their time: they test these kernels
	reserve=0
	want check_gpu && reserve=${CHECK_GPU_S:-300}
	rlim=$((($(left) - reserve) / 2))
	[ "$rlim" -gt "${RESIDENT_S:-200}" ] && rlim=${RESIDENT_S:-200}
	# no job starts when it could not end inside the step (the summary is printed last);
	# TP1 CUDA: off and on (the CUDA backend launches either way), plain and drafted
	step resident-tp1 "$rlim" "$rlog" env TPS=1 TIMEOUT=30 \
		DEADLINE=$((rlim > 50 ? rlim - 35 : rlim / 2)) RUNS="${RESIDENT_RUNS:-3}" \
		REQUESTS="${RESIDENT_REQUESTS:-32}" builddir=. sh tests/bench/bench-resident.sh
	rlim=$((($(left) - reserve) / 3))
	[ "$rlim" -gt "${RESIDENT_CPU_S:-100}" ] && rlim=${RESIDENT_CPU_S:-100}
	step resident-cpu "$rlim" "$rlog" env BACKEND=cpu TPS="2 4" TIMEOUT=30 ITERS=5000 \
		DEADLINE=$((rlim > 50 ? rlim - 35 : rlim / 2)) DRAFTS=plain \
		RUNS="${RESIDENT_RUNS:-3}" REQUESTS="${RESIDENT_CPU_REQUESTS:-16}" \
		builddir=. sh tests/bench/bench-resident.sh
	grep -E '^(== bench-resident|PUB|GPULAT|SUMMARY|FAIL|SKIP)' "$rlog" | tee -a "$summary"
	grep -E '^PATH .*mode=on run=1 ' "$rlog" | tee -a "$summary"
	# issue 18 item 4: can a follower block through decode? TP2 again, resident rounds
	# with every rank under RK_WAIT=block against the default (adaptive), interleaved,
	# and the posted worker blocking too
	blog=$OUT/resident-block.txt
	: >"$blog"
	rlim=$((($(left) - reserve) / 4))
	[ "$rlim" -gt "${RESIDENT_BLOCK_S:-60}" ] && rlim=${RESIDENT_BLOCK_S:-60}
	step resident-cpu-block "$rlim" "$blog" env MODES="on on-block off-block" BASE=on \
		BACKEND=cpu TPS=2 TIMEOUT=30 DEADLINE=$((rlim > 50 ? rlim - 35 : rlim / 2)) \
		DRAFTS=plain ITERS=1000 RUNS="${RESIDENT_RUNS:-3}" REQUESTS="${RESIDENT_CPU_REQUESTS:-16}" \
		builddir=. sh tests/bench/bench-resident.sh
	grep -E '^(SUMMARY|FAIL|PATH .*mode=on-block run=1 )' "$blog" | sed 's/^/BLOCK /' |
		tee -a "$summary"
fi

# ---- the completion-latency benchmark (first: it is the measurement) -----------------
lrc=0
if want gpulat; then
lat=$OUT/gpulat.txt
: >"$lat"
step gpulat 90 "$lat" env RK_BENCH_GPU_LAT=1 RK_BENCH_GPU_ITERS="${RK_BENCH_GPU_ITERS:-5000}" \
	RK_BENCH_GPU_MAX_RATIO="${RK_BENCH_GPU_MAX_RATIO:-1.1}" tests/check_gpu
lrc=$?
cat "$lat"
grep GPULAT-VERDICT "$lat" >>"$summary"
fi

# ---- the GPU test suite ---------------------------------------------------------------
grc=0
if want check_gpu; then
glog=$OUT/check_gpu.log
: >"$glog"
glim=${CHECK_GPU_S:-300}
[ "$glim" -gt $(($(left) - 5)) ] && glim=$(($(left) - 5))
[ "$glim" -lt 30 ] && glim=30
step check_gpu "$glim" "$glog" env CK_VERBOSITY=verbose CHECK_GPU_VERBOSE=1 \
	sh -c 'tests/check_gpu; r=$?; tests/check_toy_cuda || r=$?
	       echo "check_toy_cuda: again with CHECK_GPU_GRAPHS=1 (the scheduler worlds as CUDA graphs)"
	       CHECK_GPU_GRAPHS=1 tests/check_toy_cuda || r=$?; exit $r'
grc=$?
grep -E '^(check_gpu|check_toy_cuda|[0-9]+%|test_|notify |toy |SKIP)|:[EF]:' "$glog" | tail -n 60
grep -E '^[0-9]+%' "$glog" >>"$summary"
grep -E ':[EF]:' "$glog" | head -n 20 >>"$summary"
fi

# ---- per-thread CPU of both ranks (tests/bench/thread-cpu.sh): where the CPU goes ---------
# One large cell (1 stream, plain) under each policy, sampled every 0.5 s; the busy
# window is the cell (from the column header to the cell line), then, under the
# default policy, THREADS_IDLE s idle of which all but 10 s are reported; then two
# idle jobs that split the idle CPU: rankrt alone (CPU backend), CUDA without NCCL.
dbackend=cpu
if [ -x examples/serve/rk-serve ] && examples/serve/rk-serve --help 2>&1 | grep -q 'with the CUDA backend' &&
	nvidia-smi -L >/dev/null 2>&1; then
	dbackend=cuda
fi
if want threads && [ "$dbackend" = cuda ] && [ "$(left)" -gt 200 ]; then
	trace=$OUT/threads.txt
	: >"$trace"
	tdir=$(mktemp -d)
	tidle0=${THREADS_IDLE:-40}
	# tjob NAME LIMIT_S "ENV=.. ..." IDLE_S RK-SERVE-ARGS...   (IDLE_S 0: none)
	tjob()
	{
		tname=$1
		tlim=$2
		tenv=$3
		tidle=$4
		shift 4
		[ "$tidle" -gt 0 ] && set -- "$@" --bench-idle "$tidle"
		t0=$(date +%s)
		# the machine's steal and total CPU ticks, to see how much a spinner is stolen
		st0=$(awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
		# shellcheck disable=SC2086
		env $tenv timeout -k 5 "$tlim" examples/launch/rk-launch -v --hosts "$thosts" -- \
			examples/serve/rk-serve --bench --bench-runs 1 "$@" \
			</dev/null >"$tdir/$tname.out" 2>"$tdir/$tname.err" &
		lp=$!
		tp=
		i=0
		while [ $i -lt 200 ] && [ "$(echo $tp | wc -w)" -lt 2 ] && kill -0 $lp 2>/dev/null; do
			sleep 0.05
			i=$((i + 1))
			tp=$(sed -n 's/^rk-launch: rank [0-9]*: pid \([0-9]*\) .*/\1/p' \
				"$tdir/$tname.err" | tr '\n' ' ')
		done
		THREAD_CPU_LINES="$tdir/$tname.out" sh tests/bench/thread-cpu.sh sample \
			"$tdir/$tname.s" 0.5 $tp &
		sp=$!
		wait $lp
		trc=$?
		wait $sp
		st1=$(awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
		steal=$(echo "$st0 $st1" | awk '{ d = $4 - $2; s = d > 0 ? 100 * ($3 - $1) / d : 0
			printf "%.1f%%", s }')
		{
			echo
			echo "== threads $tname ($tenv; $*): exit $trc, $(($(date +%s) - t0)) s," \
				"pids $tp; machine steal $steal of all CPU time"
			sed 's/^\[r0\] //' "$tdir/$tname.out" | grep -v '^\[r[0-9]*\] '
			grep -E '^\[r[1-9][0-9]*\] (notify|enqueue)' "$tdir/$tname.out"
			[ $trc = 0 ] || tail -n 15 "$tdir/$tname.err"
			# the cell: from the column header ('#' line) to the cell line
			win=$(awk '$3 == "lines" { t = $1 - $2
				if ($4 >= 1 && !h) h = t; if ($5 >= 1 && !c) c = t }
				END { if (h && c) print h, c }' "$tdir/$tname.s")
			if [ -n "$win" ]; then
				echo "busy (the cell, ${win% *} .. ${win#* } s after the start):"
				sh tests/bench/thread-cpu.sh report "$tdir/$tname.s" $win tid
			fi
			if [ "$tidle" -gt 0 ]; then
				end=$(awk '$3 != "lines" { t = $1 - $2 } END { print t }' "$tdir/$tname.s")
				from=$(awk -v e="$end" -v i="$tidle" 'BEGIN { print e - i + 4 }')
				to=$(awk -v f="$from" -v i="$tidle" 'BEGIN { print f + i - 10 }')
				echo "idle ($((tidle - 10)) s: $from .. $to s after the start):"
				sh tests/bench/thread-cpu.sh report "$tdir/$tname.s" "$from" "$to" tid
			fi
			echo "whole job:"
			sh tests/bench/thread-cpu.sh report "$tdir/$tname.s" 0 100000
		} >>"$trace" 2>&1
	}
	t0t=$(date +%s)
	targs="--vocab 4096 --hidden 32768 --bench-streams 1 --bench-modes greedy --bench-draft plain --bench-requests 160 --bench-max-tokens 64"
	thosts=localhost,localhost
	# shellcheck disable=SC2086
	tjob default 120 "RK_WAIT=adaptive" "$tidle0" --backend=cuda --notify=auto $targs
	# shellcheck disable=SC2086
	tjob spin 60 "RK_WAIT=spin" 0 --backend=cuda --notify=poll $targs
	# shellcheck disable=SC2086
	tjob block 60 "RK_WAIT=block" 0 --backend=cuda --notify=wake $targs
	sargs="--vocab 256 --hidden 1024 --bench-streams 1 --bench-modes greedy --bench-draft plain"
	# shellcheck disable=SC2086
	tjob default-small 60 "RK_WAIT=adaptive" 0 --backend=cuda --notify=auto $sargs \
		--bench-requests 160
	# whose is the idle CPU: rankrt alone (the CPU backend), CUDA without NCCL (TP1)
	# shellcheck disable=SC2086
	tjob idle-cpu-backend 60 "RK_WAIT=adaptive" 30 --backend=cpu --hidden 1024 \
		--bench-streams 1 --bench-modes greedy --bench-draft plain --bench-requests 8
	thosts=localhost
	# shellcheck disable=SC2086
	tjob idle-cuda-tp1 60 "RK_WAIT=adaptive" 30 --backend=cuda --notify=auto $sargs \
		--bench-requests 8
	say "== threads: $(($(date +%s) - t0t)) s (threads.txt)"
	grep -E '^== threads|TOTAL|^(busy|idle)|^loop r|notify r|enqueue r' "$trace" | tee -a "$summary"
	tar -C "$tdir" -czf "$OUT/threads-raw.tar.gz" . 2>/dev/null
	rm -rf "$tdir"
fi

# ---- the idle floor: a process with a CUDA context (and NCCL) but no rankrt -------------
if want idlefloor && [ -x tests/bench/gpu-idle-floor ]; then
	flog=$OUT/idlefloor.txt
	: >"$flog"
	for m in bare hostfn nccl1 nccl2; do
		step "idlefloor-$m" $((${IDLEFLOOR_S:-20} + 60)) "$flog" \
			tests/bench/gpu-idle-floor "${IDLEFLOOR_S:-20}" $m
	done
	grep TOTAL "$flog" | tee -a "$summary"
	# what the driver's event thread waits on: its polls, their timeouts, how they end
	if [ -f tests/bench/.libs/wait-probe.so ]; then
		step "idlefloor-waits" 70 "$flog" env LD_PRELOAD="$PWD/tests/bench/.libs/wait-probe.so" \
			tests/bench/gpu-idle-floor 10 bare
		grep '^WAITS cuda' "$flog" | tee -a "$summary"
	fi
fi

# ---- TP2 decode receipt: rk-serve --bench under three wait policies ------------------------
# default (RK_WAIT=adaptive, --notify=auto) against pure blocking (block, wake) and
# pure spinning (spin, poll), interleaved run by run, small and large work per round;
# decode-tp2.txt has every table and the summary (ratios, verdicts, 60 s idle CPU).
# The machine has 32 CPUs for 2 ranks: no pinning.
drc=skipped
dlog=$OUT/decode-tp2.txt
if want decode && [ -x examples/serve/rk-serve ]; then
	: >"$dlog"
	dlim=$(($(left) - 60))
	[ "$dlim" -gt "${DECODE_S:-240}" ] && dlim=${DECODE_S:-240}
	if [ "$dlim" -gt 90 ]; then
		step decode-tp2-$dbackend "$dlim" "$dlog" env BENCH_MODE=policies \
			BENCH_BACKEND=$dbackend BENCH_DEADLINE=$((dlim - 40)) BENCH_GRACE=25 \
			BENCH_RUNS="${DECODE_RUNS:-3}" BENCH_REQUESTS="${DECODE_REQUESTS:-48}" \
			BENCH_TOKENS="${DECODE_TOKENS:-64}" BENCH_IDLE="${DECODE_IDLE:-60}" \
			builddir=. sh tests/bench/bench-serve.sh
		drc=$?
		sed -n '/^== summary/,$p' "$dlog" | tee -a "$summary"
	else
		say "decode-tp2: no time left ($(left) s)"
	fi
elif want decode; then
	say "decode-tp2: examples/serve/rk-serve was not built"
fi

# ---- the seed experiment (tests/bench/seed-experiment.sh; STEPS=seed, not by default) -------
# the CPU backend with emulated device time (this host's 16 cores: SEED_CPU_ENV, default the
# QUICK cells), then the CUDA backend's own rounds at sizes of 1-5 ms (SEED_CUDA_ENV); SEED_S
# bounds each (default 240 s); seed.txt and the plots
if want seed && [ -x examples/serve/rk-serve ]; then
	zlog=$OUT/seed.txt
	: >"$zlog"
	zlim=${SEED_S:-240}
	# shellcheck disable=SC2086
	step seed-cpu "$zlim" "$zlog" env ${SEED_CPU_ENV:-QUICK=1} OUT="$work/seed-cpu" \
		TIMEOUT=$((zlim - 10)) builddir=. sh tests/bench/seed-experiment.sh
	if [ "$dbackend" = cuda ] && [ "$(left)" -gt 120 ]; then
		zlim=$(($(left) - 60 < zlim ? $(left) - 60 : zlim))
		# shellcheck disable=SC2086
		step seed-cuda "$zlim" "$zlog" env BACKEND=cuda TPS=1 QUICK=1 ${SEED_CUDA_ENV:-} \
			OUT="$work/seed-cuda" TIMEOUT=$((zlim - 10)) builddir=. \
			sh tests/bench/seed-experiment.sh
	fi
	for f in "$work"/seed-*/seed-experiment.png; do
		[ -f "$f" ] && cp "$f" "$OUT/$(basename "$(dirname "$f")").png"
	done
	grep -E '^(tp|[0-9]+ |seed goal|hashes|idle|per cell|==)' "$zlog" | tee -a "$summary"
fi

# ---- rankrt beside its peers (tests/bench/peers.sh; STEPS=peers, not by default) -----------
# raw sockets, io_uring, libuv, ZeroMQ and UCX from the .debs in DEPS (flake-device.md lists
# them); a design whose library is missing is left out and named in peers.txt
if want peers; then
	plog=$OUT/peers.txt
	: >"$plog"
	step peers "${PEERS_S:-300}" "$plog" env DEPS="$DEPS" OUT="$work/peers" bash tests/bench/peers.sh .
	for f in peers-busy.dat peers-gap.dat; do
		[ -f "$work/peers/$f" ] && { echo "== $f"; cat "$work/peers/$f"; } >>"$plog"
	done
	grep -E '^(\||#|peers)' "$plog" | tee -a "$summary"
fi

# ---- the round-broadcast overhead (tests/bench/bench-bcast.sh): CUDA at TP2, CPU at TP2 and TP4 --
if want bcast && [ -x examples/serve/rk-serve ]; then
	blog=$OUT/bcast.txt
	: >"$blog"
	if [ "$dbackend" = cuda ]; then
		step bcast-cuda 90 "$blog" env BACKEND=cuda builddir=. sh tests/bench/bench-bcast.sh 2 \
			"${BCAST_RUNS:-3}" 16
	fi
	step bcast-cpu 90 "$blog" env BACKEND=cpu builddir=. sh tests/bench/bench-bcast.sh "2 4" \
		"${BCAST_RUNS:-3}" 16
	grep -v '^host:' "$blog" | tee -a "$summary"
fi

# ---- same-host links (issue 17): shared memory against TCP, each bench in one run ----------
# Budget: pingpong+idle about 100 s, decode about 120 s, bcast about 90 s, kill about 120 s.
if want shm && [ -x examples/serve/rk-serve ]; then
	slog=$OUT/shm.txt
	: >"$slog"
	lim=$(($(left) - 20))
	[ $lim -gt 240 ] && lim=240
	# STEPS is bench-shm.sh's own knob too: name its steps, or it sees ours
	step shm-pingpong-decode $lim "$slog" env STEPS="${SHM_STEPS:-pingpong decode}" \
		RUNS="${SHM_RUNS:-3}" IDLE="${SHM_IDLE:-60}" COUNT="${SHM_COUNT:-20000}" \
		WAITS="${SHM_WAITS:-}" \
		TPS="2 4" POLICIES=adaptive REQUESTS=32 builddir=. sh tests/bench/bench-shm.sh
	# SHM_BASE: another build of the same tree kind (a kept WORK of an earlier run
	# of this script, e.g. main's tarball): its rk-pingpong and this one's, SHM_AB
	# times each, alternating, for a before/after of one call
	if [ -n "${SHM_BASE:-}" ]; then
		i=0
		while [ $i -lt "${SHM_AB:-2}" ]; do
			for b in "$SHM_BASE" .; do
				echo "== shm A/B $((i + 1)), builddir=$b" >>"$slog"
				lim=$(($(left) - 20))
				[ $lim -gt 120 ] && lim=120
				step shm-ab $lim "$slog" env STEPS=pingpong RUNS="${SHM_RUNS:-3}" \
					IDLE=0 COUNT="${SHM_COUNT:-20000}" PERF="${SHM_PERF:-}" \
					WAITS="${SHM_WAITS:-}" \
					builddir="$b" \
					sh tests/bench/bench-shm.sh
			done
			i=$((i + 1))
		done
	fi
	if [ "${BCAST_RUNS:-3}" != 0 ]; then
		lim=$(($(left) - 20))
		[ $lim -gt 150 ] && lim=150
		step shm-bcast $lim "$slog" env TRANSPORTS="tcp shm" POLICIES="adaptive block" \
			BACKEND=cpu builddir=. sh tests/bench/bench-bcast.sh "2 4 8" \
			"${BCAST_RUNS:-3}" 16
	fi
	if [ "${KILL_TRIALS:-50}" != 0 ]; then
		lim=$(($(left) - 15))
		[ $lim -gt 200 ] && lim=200
		step shm-kill $lim "$slog" env builddir=. sh tests/bench/bench-kill.sh \
			"${KILL_TRIALS:-50}" 4
	fi
	grep -v '^host:' "$slog" | tee -a "$summary"
fi

# ---- the rest of the suite (not the GPU tests again), for information, in the time left --
alog=$OUT/check-all.log
rem=$(left)
others=$(printf 'print-tests:\n\t@echo $(TESTS)\n' | make -s -f Makefile -f - print-tests 2>/dev/null |
	tr ' ' '\n' | grep -v -e check_gpu -e check_toy_cuda -e gpu-lat | tr '\n' ' ')
if want rest && [ "$rem" -gt 90 ] && [ -n "$others" ]; then
	: >"$alog"
	step make-check $((rem - 30)) "$alog" make -j"$(nproc)" -k check TESTS="$others"
	grep -E '^(# |PASS|FAIL|SKIP|XFAIL|ERROR)' "$alog" | tee -a "$summary"
	cat tests/*.log test-suite.log 2>/dev/null | grep -E '^(FAIL|ERROR)' | head -n 20 \
		| tee -a "$summary"
else
	say "make check: skipped (${rem} s left)"
fi

say "device-run: build ok, gpulat rc=$lrc, check_gpu rc=$grc, decode-tp2 $drc," \
	"$(($(date +%s) - start)) s"
[ -n "${WORK:-}" ] || rm -rf "$work"
[ $lrc = 0 ] && [ $grc = 0 ]
