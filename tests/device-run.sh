#!/bin/sh
# One device run on the GPU machine (2 x H200, CUDA 13, NCCL 2.28 in /usr; no
# liburing, check or libtool there): build a `make dist` tarball against
# unpacked Debian .debs, run the GPU test suite, the completion-latency
# benchmark and the TP2 decode receipt of rk-serve's CUDA backend under three
# wait policies (tests/bench-serve.sh, BENCH_MODE=policies; the CPU backend
# when there is no GPU or no CUDA backend).
# Receipts go to $OUT (at most 8 files); everything important is printed too.
#
#   DEPS=/tmp/deps OUT=/some/dir sh tests/device-run.sh rankrt-0.1.0.tar.gz
#
# Arguments and environment:
#   $1 or TARBALL   the tarball (default: the newest rankrt-*.tar.gz here)
#   DEPS            a folder with usr/include and usr/lib/x86_64-linux-gnu inside
#                   (dpkg -x of liburing2 liburing-dev check libsubunit0
#                   libsubunit-dev); default /tmp/deps
#   DEBS            optional: a folder of those .deb files, unpacked into DEPS
#                   first when DEPS has no liburing yet
#   OUT             receipts (default ./device-out)
#   BUDGET_S        wall-clock budget of the whole run (default 540)
#   CUDA_HOME       the toolkit (default /usr/local/cuda, else nvcc's)
#   RK_BENCH_GPU_ITERS, RK_BENCH_GPU_MAX_RATIO   benchmark knobs (5000, 1.1)
#   DECODE_S        the decode receipt's time limit (default 240 s, less when the
#                   budget is short); DECODE_RUNS (3), DECODE_REQUESTS (48),
#                   DECODE_TOKENS (64), DECODE_IDLE (60 s): its bench-serve.sh knobs
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

if [ ! -e "$DEPS/usr/include/liburing.h" ] && [ -n "${DEBS:-}" ]; then
	mkdir -p "$DEPS"
	for f in "$DEBS"/*.deb; do dpkg -x "$f" "$DEPS" || exit 2; done
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
work=$(mktemp -d /tmp/rk-device.XXXXXX) || exit 1
build=$OUT/build.log
: >"$build"
tar -C "$work" -xzf "$tarball" || { say "FAIL: tar"; exit 2; }
src=$(ls -d "$work"/rankrt-*/ | head -n 1)
cd "$src" || exit 2
# no --enable-werror: a warning new in the device's gcc must not cost the run
step configure 120 "$build" ./configure --with-cuda="$CUDA_HOME" --with-nccl=yes \
	CPPFLAGS="-I$DEPS/usr/include" LDFLAGS="-L$dlib -Wl,-rpath,$dlib"
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

# ---- the completion-latency benchmark (first: it is the measurement) -----------------
lat=$OUT/gpulat.txt
: >"$lat"
step gpulat 90 "$lat" env RK_BENCH_GPU_LAT=1 RK_BENCH_GPU_ITERS="${RK_BENCH_GPU_ITERS:-5000}" \
	RK_BENCH_GPU_MAX_RATIO="${RK_BENCH_GPU_MAX_RATIO:-1.1}" tests/check_gpu
lrc=$?
cat "$lat"
grep GPULAT-VERDICT "$lat" >>"$summary"

# ---- the GPU test suite ---------------------------------------------------------------
glog=$OUT/check_gpu.log
: >"$glog"
step check_gpu 300 "$glog" env CK_VERBOSITY=verbose CHECK_GPU_VERBOSE=1 tests/check_gpu
grc=$?
grep -E '^(check_gpu|[0-9]+%|test_|notify |toy |SKIP)|:[EF]:' "$glog" | tail -n 60
grep -E '^[0-9]+%' "$glog" >>"$summary"
grep -E ':[EF]:' "$glog" | head -n 20 >>"$summary"

# ---- TP2 decode receipt: rk-serve --bench under three wait policies ------------------------
# default (RK_WAIT=adaptive, --notify=auto) against pure blocking (block, wake) and
# pure spinning (spin, poll), interleaved run by run, small and large work per round;
# decode-tp2.txt has every table and the summary (ratios, verdicts, 60 s idle CPU).
# The machine has 32 CPUs for 2 ranks: no pinning.
drc=skipped
dlog=$OUT/decode-tp2.txt
if [ -x examples/rk-serve ]; then
	dbackend=cpu
	if examples/rk-serve --help 2>&1 | grep -q 'with the CUDA backend' &&
		nvidia-smi -L >/dev/null 2>&1; then
		dbackend=cuda
	fi
	: >"$dlog"
	dlim=$(($(left) - 60))
	[ "$dlim" -gt "${DECODE_S:-240}" ] && dlim=${DECODE_S:-240}
	if [ "$dlim" -gt 90 ]; then
		step decode-tp2-$dbackend "$dlim" "$dlog" env BENCH_MODE=policies \
			BENCH_BACKEND=$dbackend BENCH_DEADLINE=$((dlim - 40)) BENCH_GRACE=25 \
			BENCH_RUNS="${DECODE_RUNS:-3}" BENCH_REQUESTS="${DECODE_REQUESTS:-48}" \
			BENCH_TOKENS="${DECODE_TOKENS:-64}" BENCH_IDLE="${DECODE_IDLE:-60}" \
			builddir=. sh tests/bench-serve.sh
		drc=$?
		sed -n '/^== summary/,$p' "$dlog" | tee -a "$summary"
	else
		say "decode-tp2: no time left ($(left) s)"
	fi
else
	say "decode-tp2: examples/rk-serve was not built"
fi

# ---- the rest of the suite (not the GPU tests again), for information, in the time left --
alog=$OUT/check-all.log
rem=$(left)
others=$(printf 'print-tests:\n\t@echo $(TESTS)\n' | make -s -f Makefile -f - print-tests 2>/dev/null |
	tr ' ' '\n' | grep -v -e check_gpu -e gpu-lat | tr '\n' ' ')
if [ "$rem" -gt 90 ] && [ -n "$others" ]; then
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
rm -rf "$work"
[ $lrc = 0 ] && [ $grc = 0 ]
