#!/bin/sh
# rk-pingpong started by OpenMPI's mpirun instead of rk-launch, twice: with no
# RK_LEADER, the ranks take rank, size and the leader's address from PMIx
# (rank 0 posts its host and RK_PORT); with RK_LEADER (-x), from PMIx too, the
# leader from RK_LEADER. librankrt has no DT_NEEDED on libpmix (readelf), which
# it opens at run time. Skips (77) without mpirun, or when mpirun cannot start
# two processes here at all; the PMIx run needs a build with PMIx (configure
# --with-pmix) and libpmix.so.2 here, else it is left out. Run from the build
# directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
pingpong=$b/examples/pingpong/rk-pingpong
[ -x "$pingpong" ] || { echo "no $pingpong"; exit 99; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/mpi-probe.sh"

if command -v readelf >/dev/null; then
	for so in "$b"/.libs/librankrt.so; do
		[ -e "$so" ] || continue
		readelf -d "$so" | grep -q 'NEEDED.*libpmix' && { echo "FAIL: $so needs libpmix"; exit 1; }
	done
fi

# run NAME VARS: rk-pingpong under mpirun with -x VARS, where @P@ is a port from
# the pid; another one if it happens to be taken
run()
{
	name=$1
	shift
	for try in 0 1 2; do
		port=$((20000 + ($$ * 7 + try * 4099) % 40000))
		x=$(echo "$*" | sed "s/@P@/$port/g")
		# shellcheck disable=SC2086
		$mpi $opts $x "$pingpong" --count 200 --warmup 20 --runs 1 \
			>"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
		rc=$?
		grep -q 'cannot listen' "$tmp/$name.err" || break
	done
	cat "$tmp/$name.out" "$tmp/$name.err"
	[ $rc = 0 ] || { echo "FAIL: $name: mpirun exited $rc"; exit 1; }
	grep -q '^mode  *p50_us' "$tmp/$name.out" || { echo "FAIL: $name: no table from rank 0"; exit 1; }
	for m in adaptive spin block; do
		grep -q "^$m  *[0-9]" "$tmp/$name.out" || { echo "FAIL: $name: no '$m' row"; exit 1; }
	done
}

run leader -x RK_LEADER=127.0.0.1:@P@
if grep -q '^#define RK_HAVE_PMIX 1' "$b/config.h" 2>/dev/null &&
   { ldconfig -p 2>/dev/null | grep -q 'libpmix\.so\.2 '; }; then
	run pmix -x RK_PORT=@P@ -x RK_LOG=info
	grep -q 'launcher skipped' "$tmp/pmix.err" && { echo "FAIL: pmix: PMIx was skipped"; exit 1; }
	grep -q 'rank 1 joined' "$tmp/pmix.err" || { echo "FAIL: pmix: no join logged"; exit 1; }
else
	echo "no PMIx here (configure --with-pmix, libpmix.so.2): the run without RK_LEADER is left out"
fi
exit 0
