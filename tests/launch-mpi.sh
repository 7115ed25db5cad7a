#!/bin/sh
# rk-pingpong started by OpenMPI's mpirun instead of rk-launch: each rank finds
# its rank and world size in OMPI_COMM_WORLD_RANK/SIZE (rk_config_from_launcher_env)
# and the leader in RK_LEADER (-x). Skips (77) without mpirun, or when mpirun
# cannot start two processes here at all. Run from the build directory
# (tests/Makefile.inc sets builddir).
b=${builddir:-.}
pingpong=$b/examples/pingpong/rk-pingpong
[ -x "$pingpong" ] || { echo "no $pingpong"; exit 99; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/mpi-probe.sh"

# a port from the pid; another one if it happens to be taken
for try in 0 1 2; do
	port=$((20000 + ($$ * 7 + try * 4099) % 40000))
	# shellcheck disable=SC2086
	$mpi $opts -x RK_LEADER=127.0.0.1:$port "$pingpong" --count 200 --warmup 20 --runs 1 \
		>"$tmp/pp.out" 2>"$tmp/pp.err" </dev/null
	rc=$?
	grep -q 'cannot listen' "$tmp/pp.err" || break
done
cat "$tmp/pp.out" "$tmp/pp.err"
[ $rc = 0 ] || { echo "FAIL: mpirun exited $rc"; exit 1; }
grep -q '^mode  *p50_us' "$tmp/pp.out" || { echo "FAIL: no table from rank 0"; exit 1; }
for m in adaptive spin block; do
	grep -q "^$m  *[0-9]" "$tmp/pp.out" || { echo "FAIL: no '$m' row"; exit 1; }
done
exit 0
