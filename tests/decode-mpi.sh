#!/bin/sh
# rk-serve --demo started by OpenMPI's mpirun instead of rk-launch: each rank
# finds its rank and world size in OMPI_COMM_WORLD_RANK/SIZE
# (rk_config_from_launcher_env) and the leader in RK_LEADER (-x). Every request
# equals the TP1 reference and both ranks exit 0. Skips (77) without rk-serve,
# without mpirun, or when mpirun cannot start two processes here (the probe of
# tests/launch-mpi.sh). Run from the build directory (tests/Makefile.inc sets
# builddir).
b=${builddir:-.}
serve=$b/examples/serve/rk-serve
[ -x "$serve" ] || { echo "SKIP: rk-serve not built (libmicrohttpd, jansson)"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/mpi-probe.sh"

# a port from the pid; another one if it happens to be taken
for try in 0 1 2; do
	port=$((20000 + ($$ * 7 + try * 4099 + 17) % 40000))
	# shellcheck disable=SC2086
	$mpi $opts -x RK_LEADER=127.0.0.1:$port "$serve" --demo \
		>"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	grep -q 'cannot listen' "$tmp/err" || break
done
cat "$tmp/out" "$tmp/err"
[ $rc = 0 ] || { echo "FAIL: mpirun exited $rc"; exit 1; }
grep -q '^rk-serve demo: TP2 (2 ranks)' "$tmp/out" || { echo "FAIL: no demo header"; exit 1; }
grep -q '^\([0-9]*\) of \1 requests equal the TP1 reference$' "$tmp/out" ||
	{ echo "FAIL: not every request equals the reference"; exit 1; }
exit 0
