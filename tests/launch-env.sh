#!/bin/sh
# rk-pingpong started with nothing but a launcher's variables, as its tasks
# would get them (no Slurm or torchrun runs here), and no RK_LEADER:
# - a Slurm step: SLURM_PROCID/SLURM_NTASKS, the leader the first host of
#   SLURM_STEP_NODELIST ("localhost,...") on RK_PORT;
# - srun -> torchrun: every worker is Slurm's task 0 of 1, but TORCHELASTIC_*
#   makes torchrun's RANK/WORLD_SIZE/MASTER_ADDR answer, and the leader binds
#   RK_PORT while another socket listens on MASTER_PORT (torch's TCPStore).
# Skips (77) without timeout(1) or python3 (which holds MASTER_PORT). Run from
# the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
pingpong=$b/examples/pingpong/rk-pingpong
[ -x "$pingpong" ] || { echo "no $pingpong"; exit 99; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
# variables of an outer launcher would be read first
unset RK_RANK RK_WORLD_SIZE RK_LEADER RK_PORT RANK WORLD_SIZE MASTER_ADDR MASTER_PORT \
	LWS_LEADER_ADDRESS LWS_GROUP_SIZE LWS_WORKER_INDEX PMIX_RANK PMIX_NAMESPACE \
	OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS SLURM_STEP_NODELIST \
	SLURM_JOB_NODELIST TORCHELASTIC_RUN_ID 2>/dev/null

tmp=$(mktemp -d) || exit 99
holder=
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$tmp"' EXIT

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

# pair NAME VARS...: ranks 0 and 1 with VARS, where @R@ stands for the rank;
# retried on another RK_PORT (in $port) if the one picked is taken
pair()
{
	name=$1
	shift
	for try in 0 1 2; do
		port=$((20000 + ($$ * 7 + try * 4099) % 40000))
		for r in 0 1; do
			vars=$(echo "$*" | sed "s/@R@/$r/g")
			# shellcheck disable=SC2086
			env RK_PORT=$port $vars timeout -s KILL 60 "$pingpong" --count 200 \
				--warmup 20 --runs 1 >"$tmp/$name$r.out" 2>"$tmp/$name$r.err" \
				</dev/null &
			eval "pid$r=\$!"
		done
		# shellcheck disable=SC2154
		wait "$pid0"
		rc0=$?
		wait "$pid1"
		rc1=$?
		grep -q 'cannot listen' "$tmp/${name}0.err" || break
	done
	[ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "$name: ranks exited $rc0 and $rc1"
	grep -q '^mode  *p50_us' "$tmp/${name}0.out" || fail "$name: no table from rank 0"
	grep -q '^adaptive  *[0-9]' "$tmp/${name}0.out" || fail "$name: no adaptive row"
}

pair slurm SLURM_PROCID=@R@ SLURM_NTASKS=2 'SLURM_STEP_NODELIST=localhost,gpu[01-04]' \
	SLURM_JOB_NODELIST=login1

# MASTER_PORT held, as torch's TCPStore holds it on the leader's host
python3 -c 'import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(120)' >"$tmp/held" &
holder=$!
i=0
until [ -s "$tmp/held" ]; do
	[ $i -ge 100 ] && fail "the MASTER_PORT holder did not start"
	sleep 0.1
	i=$((i + 1))
done
held=$(cat "$tmp/held")
pair torchrun SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NODELIST=localhost \
	TORCHELASTIC_RUN_ID=rk RANK=@R@ WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$held
grep -q "127.0.0.1:$held" "$tmp"/torchrun*.err && fail "torchrun: MASTER_PORT was used"
exit 0
