#!/bin/sh
# librankrt built with CUDA and NCCL, on a host without them (gpu/load.c opens
# them at run time): the shared library has no DT_NEEDED entry on libcuda,
# libcudart or libnccl and no undefined CUDA or NCCL symbol; and, as root with
# unshare(1), in a mount namespace where every directory holding one of those
# libraries is hidden, ldd resolves everything, check_gpu_load passes (the
# -RK_ENOGPU cases) and rk-pingpong --local runs.
# Run from the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
lib=$b/.libs/librankrt.so
[ -f "$lib" ] || { echo "SKIP: no shared librankrt ($lib)"; exit 77; }
for t in readelf nm; do
	command -v $t >/dev/null || { echo "SKIP: no $t"; exit 77; }
done
gpulibs='libcuda\.so|libcudart\.so|libnccl\.so'

fail()
{
	echo "FAIL: $*"
	exit 1
}

# 1. nothing links them
readelf -d "$lib" | grep NEEDED
readelf -d "$lib" | grep NEEDED | grep -E "$gpulibs" && fail "librankrt.so needs a GPU library"
nm -D --undefined-only "$lib" | awk '{ print $NF }' | grep -E '^(cu|cuda|nccl)[A-Z]' &&
	fail "librankrt.so leaves CUDA or NCCL symbols to the dynamic linker"
echo "PASS: librankrt.so links no GPU library"

# 2. hide them
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! unshare -m true 2>/dev/null; then
	echo "SKIP: hiding the GPU libraries needs root and unshare -m"
	exit 0
fi
command -v ldconfig >/dev/null || { echo "SKIP: no ldconfig to find the GPU libraries"; exit 0; }
dirs=$(ldconfig -p | grep -E "^[[:space:]]*($gpulibs)" | sed 's/.* => //' |
	while read -r f; do dirname "$f"; done | sort -u)
[ -n "$dirs" ] || echo "note: the dynamic loader knows no GPU library here"
for d in $dirs; do
	# never hide the system's own libraries
	[ -e "$d/libc.so.6" ] && { echo "SKIP: GPU libraries in $d, with libc"; exit 0; }
done
pingpong=$b/examples/pingpong/rk-pingpong
[ -x "$pingpong" ] || fail "no $pingpong"
# shellcheck disable=SC2016 # expanded by the inner shell
unshare -m --propagation private sh -c '
	for d in $1; do
		mount -t tmpfs -o ro,size=4k rk-no-gpu "$d" || exit 99
	done
	echo "hidden: $1"
	echo "--- ldd librankrt.so"
	ldd "$2/.libs/librankrt.so" || exit 1
	ldd "$2/.libs/librankrt.so" | grep -q "not found" && exit 1
	if [ -x "$2/tests/check_gpu_load" ]; then
		echo "--- check_gpu_load"
		"$2/tests/check_gpu_load" || exit 1
	fi
	echo "--- rk-pingpong --local"
	unset LD_LIBRARY_PATH
	timeout -s KILL 60 "$2/examples/pingpong/rk-pingpong" --local --count=200 --warmup=20 --runs=1 \
		--wait=adaptive </dev/null
' sh "$dirs" "$b"
rc=$?
[ $rc = 0 ] || fail "without the GPU libraries: exit $rc"
echo "PASS: librankrt loads and rk-pingpong runs without the GPU libraries"
