#!/bin/sh
# A build with CUDA, NCCL and verbs, on a host without them (gpu/load.c and
# rdma/verbs_load.c open them at run time; rk-serve opens its CUDA module only
# for --backend=cuda):
# 1. librankrt.so and every installed program have no DT_NEEDED entry on
#    libcuda, libcudart, libnccl or libibverbs, and librankrt.so leaves no
#    CUDA, NCCL or verbs symbol to the dynamic linker;
# 2. as root with unshare(1), in a mount namespace where every directory
#    holding a CUDA or NCCL library, libibverbs.so.1 itself and its providers'
#    directory are hidden: ldd resolves everything, check_gpu_load and
#    check_verbs_load pass (their -RK_ENOGPU and -RK_ENOVERBS cases), and
#    rk-pingpong --local, rk-launch --version, rk-load --help, rk-serve --demo
#    (cpu, two ranks through rk-launch) and a CPU program (examples/embed)
#    exit 0, while rk-serve --backend=cuda exits 2 naming what is missing;
# 3. RANKRT_SERVE_MODULE_DIR is where rk-serve looks for that module.
# Run from the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
lib=$b/.libs/librankrt.so
[ -f "$lib" ] || { echo "SKIP: no shared librankrt ($lib)"; exit 77; }
for t in readelf nm; do
	command -v $t >/dev/null || { echo "SKIP: no $t"; exit 77; }
done
gpulibs='libcuda\.so|libcudart\.so|libnccl\.so'
hidelibs="$gpulibs|libibverbs\\.so"

fail()
{
	echo "FAIL: $*"
	exit 1
}

# the ELF file of a build-tree program (libtool keeps it in .libs/ when it links librankrt.so)
elf_of()
{
	d=$(dirname "$1")
	n=$(basename "$1")
	if [ -f "$d/.libs/$n" ]; then
		echo "$d/.libs/$n"
	else
		echo "$1"
	fi
}

# 1. nothing installed links them
progs="$b/examples/serve/rk-serve $b/examples/pingpong/rk-pingpong $b/examples/launch/rk-launch"
[ -e "$b/examples/load/rk-load" ] && progs="$progs $b/examples/load/rk-load"
readelf -d "$lib" | grep NEEDED
for f in "$lib" $progs; do
	e=$(elf_of "$f")
	[ -f "$e" ] || fail "no $e"
	readelf -d "$e" | grep NEEDED | grep -E "$hidelibs" && fail "$e needs a library it must open"
done
nm -D --undefined-only "$lib" | awk '{ print $NF }' | grep -E '^((cu|cuda|nccl)[A-Z]|ibv_)' &&
	fail "librankrt.so leaves CUDA, NCCL or verbs symbols to the dynamic linker"
echo "PASS: librankrt.so and the installed programs link no GPU or verbs library"

# 2. hide them
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! unshare -m true 2>/dev/null; then
	echo "SKIP: hiding the libraries needs root and unshare -m"
	exit 0
fi
command -v ldconfig >/dev/null || { echo "SKIP: no ldconfig to find the libraries"; exit 0; }
for t in timeout ldd; do
	command -v $t >/dev/null || { echo "SKIP: no $t"; exit 0; }
done
# where the loader finds CUDA and NCCL: its cache, and the run paths of rk-serve's CUDA module
mod=$b/examples/serve/.libs/rk-serve-cuda.so
dirs=$( (ldconfig -p | grep -E "^[[:space:]]*($gpulibs)" | sed 's/.* => //'
	[ -f "$mod" ] && ldd "$mod" | grep -E "^[[:space:]]*($gpulibs)" | sed -n 's/.* => \([^ ]*\) .*/\1/p') |
	while read -r f; do dirname "$(readlink -f "$f")"; done | sort -u)
[ -n "$dirs" ] || echo "note: the dynamic loader knows no GPU library here"
for d in $dirs; do
	# never hide the system's own libraries
	[ -e "$d/libc.so.6" ] && { echo "SKIP: GPU libraries in $d, with libc"; exit 0; }
done
# libibverbs lives with libc: hide the file itself, and its providers' directory
ibv=$(ldconfig -p | grep -E '^[[:space:]]*libibverbs\.so\.1 ' | sed 's/.* => //' | head -n 1)
[ -n "$ibv" ] && ibv=$(readlink -f "$ibv")
[ -n "$ibv" ] || echo "note: the dynamic loader knows no libibverbs.so.1 here"
provs=
[ -n "$ibv" ] && [ -d "$(dirname "$ibv")/libibverbs" ] && provs=$(dirname "$ibv")/libibverbs
for p in examples/pingpong/rk-pingpong examples/launch/rk-launch examples/serve/rk-serve \
	examples/embed/embed; do
	[ -x "$b/$p" ] || fail "no $b/$p"
done
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/empty"
# shellcheck disable=SC2016 # expanded by the inner shell
unshare -m --propagation private sh -c '
	b=$2
	for d in $1; do
		mount -t tmpfs -o ro,size=4k rk-no-gpu "$d" || exit 99
	done
	if [ -n "$3" ]; then
		mount --bind "$5/empty" "$3" || exit 99
	fi
	if [ -n "$4" ]; then
		mount -t tmpfs -o ro,size=4k rk-no-verbs "$4" || exit 99
	fi
	echo "hidden: $1 $3 $4"
	echo "--- ldd librankrt.so"
	ldd "$b/.libs/librankrt.so" || exit 1
	ldd "$b/.libs/librankrt.so" | grep -q "not found" && exit 1
	for t in check_gpu_load check_verbs_load; do
		if [ -x "$b/tests/$t" ]; then
			echo "--- $t"
			"$b/tests/$t" || exit 1
		fi
	done
	unset LD_LIBRARY_PATH
	echo "--- rk-pingpong --local"
	timeout -s KILL 60 "$b/examples/pingpong/rk-pingpong" --local --count=200 --warmup=20 \
		--runs=1 --wait=adaptive </dev/null || exit 1
	echo "--- rk-launch --version"
	"$b/examples/launch/rk-launch" --version || exit 1
	if [ -x "$b/examples/load/rk-load" ]; then
		echo "--- rk-load --help"
		"$b/examples/load/rk-load" --help >/dev/null || exit 1
	fi
	echo "--- rk-launch -- rk-serve --demo (cpu, TP2)"
	timeout -s KILL 60 "$b/examples/launch/rk-launch" --hosts localhost,localhost -- \
		"$b/examples/serve/rk-serve" --demo </dev/null >"$5/demo" 2>&1
	rc=$?
	grep "receipt:" "$5/demo"
	[ $rc = 0 ] || { cat "$5/demo"; echo "rk-serve --demo exited $rc"; exit 1; }
	echo "--- examples/embed, a world of one (it opens no socket), ended by SIGTERM"
	RK_LOG=info RK_RANK=0 RK_WORLD_SIZE=1 RK_LEADER=127.0.0.1:1 "$b/examples/embed/embed" \
		</dev/null 2>"$5/embed" &
	pid=$!
	i=0
	while ! grep -q "world ready" "$5/embed" && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -TERM $pid
	wait $pid
	rc=$?
	grep "world ready" "$5/embed" || { cat "$5/embed"; echo "embed never got ready"; exit 1; }
	[ $rc = 0 ] || { cat "$5/embed"; echo "embed exited $rc"; exit 1; }
	echo "--- rk-serve --backend=cuda"
	"$b/examples/serve/rk-serve" --demo --backend=cuda </dev/null >"$5/cuda" 2>&1
	rc=$?
	cat "$5/cuda"
	[ $rc = 2 ] || { echo "rk-serve --backend=cuda exited $rc, not 2"; exit 1; }
	grep -q "^rk-serve: --backend=cuda: " "$5/cuda" || exit 1
' sh "$dirs" "$b" "$ibv" "$provs" "$tmp"
rc=$?
[ $rc = 0 ] || fail "without the GPU and verbs libraries: exit $rc"
echo "PASS: librankrt, the tools and a CPU program run without the GPU and verbs libraries"

# 3. the variable that names the module's directory is read, not refused as an
# unknown RK_* knob: an empty directory gives "not found" there, before any device
# (a build without CUDA has no module, and refuses --backend=cuda at once)
ls "$b"/examples/serve/.libs/rk-serve-cuda.so >/dev/null 2>&1 ||
	{ echo "PASS: no CUDA module in this build: nothing more to check"; exit 0; }
mkdir "$tmp/nomodule" || fail "mkdir"
RANKRT_SERVE_MODULE_DIR=$tmp/nomodule "$b/examples/serve/rk-serve" --demo --backend=cuda \
	</dev/null >"$tmp/nomodule.out" 2>&1
rc=$?
cat "$tmp/nomodule.out"
[ $rc = 2 ] || fail "RANKRT_SERVE_MODULE_DIR: rk-serve --backend=cuda exited $rc, not 2"
grep -q "not found: looked for $tmp/nomodule/" "$tmp/nomodule.out" ||
	fail "RANKRT_SERVE_MODULE_DIR was not where rk-serve looked"
echo "PASS: RANKRT_SERVE_MODULE_DIR names where rk-serve looks for its CUDA module"
