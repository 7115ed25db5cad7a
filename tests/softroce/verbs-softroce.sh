#!/bin/bash
# verbs-softroce.sh - verbs on Soft-RoCE, for real, in qemu guests (softroce.sh).
#
# One guest, rxeA <-veth-> rxeB (two devices, two addresses, one kernel):
#   check_verbs        the verbs unit tests, RK_TEST_RDMA_A/B = dev,gid,ip
#   pingpong-roce      rk-pingpong, leader roce:// on rxeA, follower on rxeB
#   pingpong-tcp       rk-pingpong over tcp:// between the same addresses
#                      (RK_SHM=off: two ranks of one guest would move to shm)
#   ib_send_lat        perftest on the same devices: the verbs floor
#   check_loop*@6.1, check_wait*@6.1, check_world*@6.1   the runtime's suites on
#                      the guest's kernel
# and the medians with the ratios rk-pingpong/ib_send_lat (both as RTT).
# Two guests wired by a virtual cable (a true two-node RoCEv2 run):
#   2node-roce, 2node-tcp   rk-pingpong, rank 0 on node 0, rank 1 on node 1
#   2node-ib_send_lat       the floor for those two
#
# A step whose program is not built (check_verbs without libibverbs) or that
# reports that this build has no roce:// transport is skipped, not passed.
# Exit 0 when every step that could run passed, 77 when the guests cannot
# run here (softroce.sh says why), 1 otherwise. Run from the build directory
# (tests/Makefile.inc sets builddir); about 1-2 minutes on 2 TCG cores, plus
# ~15 s to fetch and unpack the kernel on the first run. RK_SOFTROCE_ONLY=1
# or 2 runs only the one-guest or the two-guest boot (debugging).
set -eu

b=$(cd "${builddir:-.}" && pwd)
softroce=$(dirname "$0")/softroce.sh

# The ELF behind a libtool wrapper script, or the file itself.
real_prog()
{
	local p=$1

	[ -e "$p" ] || return 1
	[ "$(head -c4 "$p" | tr -d '\0')" = $'\x7fELF' ] && { echo "$p"; return 0; }
	p=$(dirname "$1")/.libs/$(basename "$1")
	[ "$(head -c4 "$p" 2>/dev/null | tr -d '\0')" = $'\x7fELF' ] && { echo "$p"; return 0; }
	p=$(dirname "$1")/.libs/lt-$(basename "$1")
	[ "$(head -c4 "$p" 2>/dev/null | tr -d '\0')" = $'\x7fELF' ] && { echo "$p"; return 0; }
	return 1
}

pingpong=$(real_prog "$b/examples/pingpong/rk-pingpong") || { echo "FAIL: no rk-pingpong in $b"; exit 99; }
check_verbs=$(real_prog "$b/tests/check_verbs") || check_verbs=
# The runtime's own suites on the guest's 6.1 kernel: the oldest one it runs
# on, with fewer io_uring features than the host's.
runtime_checks=
for t in check_loop check_loop_wake check_loop_stats check_wait check_wait_predict \
	check_wait_learn check_world check_world_link check_world_fail check_world_strangers; do
	p=$(real_prog "$b/tests/$t") && runtime_checks="$runtime_checks $p"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# librankrt.so is found in $b/.libs by the harness's ldd and by the guest.
export LD_LIBRARY_PATH=$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
adds=(--add "$pingpong")
for p in $check_verbs $runtime_checks; do
	adds+=(--add "$p")
done
# rk-pingpong's share of the run: enough round trips for a median, few enough
# that a host whose CPUs are busy elsewhere (a TCG round trip is then tens of
# times slower) stays inside the steps' and the boots' time bounds.
# RK_SOFTROCE_PPARGS sets others (docs/BENCH.md's figures: 2000, 200 warm-up).
ppargs=${RK_SOFTROCE_PPARGS:---count=500 --warmup=50 --runs=3 --wait=adaptive}
envs=(--env "LD_LIBRARY_PATH=$b/.libs" --env "SR_PINGPONG=$pingpong"
      --env "SR_CHECK_VERBS=$check_verbs" --env "SR_RUNTIME_CHECKS=$runtime_checks"
      --env "SR_PPARGS=$ppargs")

cat >"$tmp/guest.sh" <<'EOF'
# Runs in the guest(s); reports '@@STEP name pass|fail|skip detail' and
# '@@MEDIAN name us' lines for the host to sum up.
PP=$SR_PINGPONG
PPARGS=$SR_PPARGS
# TCG is slow and both ranks share 1-2 vCPUs: generous bounds.
export RK_CONNECT_TIMEOUT_MS=90000 RK_PEER_TIMEOUT_MS=30000 RK_HANDSHAKE_MS=30000
# The guests' addresses are not loopback, so the ranks authenticate, as every
# such world must: one fixed test secret in a 0600 file, the same in each guest.
(umask 077 && printf '%s\n' "verbs-softroce: a fixed test secret, 32+ bytes" >/tmp/rk.key)
export RK_SECRET_FILE=/tmp/rk.key
fails=0
last=$(cut -d' ' -f1 /proc/uptime)

# step NAME pass|fail|skip [DETAIL]: the verdict, with the time since the last
step()
{
	local now

	now=$(cut -d' ' -f1 /proc/uptime)
	echo "@@STEP $1 $2 ${3:-}${3:+, }$(awk -v a="$last" -v b="$now" 'BEGIN { printf "%.0f", b - a }') s"
	last=$now
	[ "$2" = fail ] && fails=$((fails + 1))
	return 0
}

# pp_verdict NAME ROCE RC OUT...: one rank's (or both ranks') verdict
pp_verdict()
{
	local name=$1 roce=$2 rc=$3 f p50
	shift 3

	for f in "$@"; do
		sed "s/^/  $(basename "$f"): /" "$f"
	done
	if [ "$rc" = 0 ]; then
		p50=$(awk '$1 == "adaptive" { print $2 }' "$@")
		if [ -n "$p50" ]; then
			echo "@@MEDIAN ${name%@*} $p50"
			step "$name" pass "p50 RTT $p50 us"
		else
			step "$name" pass
		fi
	elif [ "$roce" = 1 ] && grep -qE "built without verbs|not available in this build|Operation not supported|unknown variable RK_RDMA" "$@"; then
		step "$name" skip "rk-pingpong has no roce:// transport in this build"
	else
		step "$name" fail "exit status $rc"
	fi
}

# pp_pair NAME ROCE ADDR [VAR=VALUE...]: both ranks in this guest; the
# variables go to the follower
pp_pair()
{
	local name=$1 roce=$2 addr=$3 lpid lrc frc
	shift 3

	RK_RANK=0 RK_WORLD_SIZE=2 timeout 150 "$PP" --leader="$addr" $PPARGS \
		>"/tmp/$name.r0" 2>&1 &
	lpid=$!
	env RK_RANK=1 RK_WORLD_SIZE=2 "$@" timeout 150 "$PP" --leader="$addr" $PPARGS \
		>"/tmp/$name.r1" 2>&1
	frc=$?
	wait $lpid
	lrc=$?
	pp_verdict "$name" "$roce" $((lrc ? lrc : frc)) "/tmp/$name.r0" "/tmp/$name.r1"
}

# send_lat NAME SERVER_DEV SERVER_GID CLIENT_DEV CLIENT_GID SERVER_IP: ib_send_lat
# with both ends here. perftest sometimes prints 'inf' under TCG (its
# cycles-to-us conversion fails): try again.
send_lat()
{
	local name=$1 i spid rc t

	for i in 1 2 3; do
		timeout 150 ib_send_lat -d "$2" -x "$3" -n 1000 -F -p 18515 >/tmp/isl.srv 2>&1 &
		spid=$!
		sleep 1
		timeout 150 ib_send_lat -d "$4" -x "$5" -n 1000 -F -p 18515 "$6" >/tmp/isl.cli 2>&1
		rc=$?
		wait $spid || rc=${rc:-1}
		send_lat_verdict "$name" $rc /tmp/isl.cli && return
		echo "ib_send_lat printed '$t' (try $i)"
	done
	step "$name" pass "no median: perftest printed '$t' three times"
}

# send_lat_verdict NAME RC OUT: 1 when there is no median to be had ('inf')
send_lat_verdict()
{
	sed -n '/#bytes/,$p' "$3"
	[ "$2" = 0 ] || { step "$1" fail "exit status $2"; return 0; }
	# t_typical, the median one-way latency
	t=$(awk 'f { print $5; exit } /#bytes/ { f = 1 }' "$3")
	echo "$t" | grep -qE '^[0-9]+(\.[0-9]+)?$' || return 1
	echo "@@MEDIAN $1 $(awk -v t="$t" 'BEGIN { printf "%.2f", 2 * t }')"
	step "$1" pass "t_typical $t us one-way"
}

# barrier: two guests start each step together, so that a rank slow to exit
# fails its own step only (its peer would give up connecting meanwhile).
barrier()
{
	local i

	if [ "$SOFTROCE_NODE" = 0 ]; then
		for i in $(seq 150); do
			echo go | nc -w 2 "$SOFTROCE_PEER_IP" 7399 2>/dev/null && return 0
			sleep 1
		done
		echo "barrier: node 1 never listened"
	else
		timeout 200 nc -l -p 7399 >/dev/null || echo "barrier: node 0 never came"
	fi
}

if [ -z "${SOFTROCE_NODE:-}" ]; then
	A=$SOFTROCE_A_DEV,$SOFTROCE_A_GID,$SOFTROCE_A_IP
	B=$SOFTROCE_B_DEV,$SOFTROCE_B_GID,$SOFTROCE_B_IP
	echo "rdma A=$A B=$B, kernel $(uname -r)"
	if [ -n "$SR_CHECK_VERBS" ]; then
		# setsid: Check answers SIGTERM (our timeout) by killing its
		# whole process group, which would include this script.
		RK_TEST_RDMA_A=$A RK_TEST_RDMA_B=$B CK_TIMEOUT_MULTIPLIER=10 \
			timeout 150 setsid "$SR_CHECK_VERBS" >/tmp/check.out 2>&1
		rc=$?
		cat /tmp/check.out
		case $rc in
		0) step check_verbs pass ;;
		77) step check_verbs skip "check_verbs skipped itself" ;;
		124|143) step check_verbs fail "not done in 150 s (a test hung?)" ;;
		*) step check_verbs fail "exit status $rc" ;;
		esac
	else
		step check_verbs skip "not built (configure found no libibverbs, or no verbs tests yet)"
	fi
	pp_pair pingpong-roce 1 "roce://$SOFTROCE_A_IP:7311?dev=$SOFTROCE_A_DEV&gid=$SOFTROCE_A_GID" \
		RK_RDMA_DEV="$SOFTROCE_B_DEV" RK_RDMA_GID="$SOFTROCE_B_GID"
	# both ranks (bash exports a function's temporary assignments to its commands)
	RK_SHM=off pp_pair pingpong-tcp 0 "tcp://$SOFTROCE_A_IP:7312"
	send_lat ib_send_lat "$SOFTROCE_A_DEV" "$SOFTROCE_A_GID" "$SOFTROCE_B_DEV" \
		"$SOFTROCE_B_GID" "$SOFTROCE_A_IP"
	echo "veth vA counters (RoCE frames that crossed the wire):"
	ip -s link show vA | sed -n '3,6p'
	for t in $SR_RUNTIME_CHECKS; do
		CK_TIMEOUT_MULTIPLIER=10 timeout 300 setsid "$t" >/tmp/check.out 2>&1
		rc=$?
		grep -E '^[0-9]+%: Checks' /tmp/check.out
		if [ $rc = 0 ]; then
			step "$(basename "$t")@$(uname -r | cut -d. -f1,2)" pass
		else
			grep -vE ':P:|Passed' /tmp/check.out | tail -n 20
			step "$(basename "$t")@$(uname -r | cut -d. -f1,2)" fail "exit status $rc"
		fi
	done
else
	# Both guests have the same layout: rank 0's device and GID index are ours.
	roce="roce://10.91.2.1:7321?dev=$SOFTROCE_DEV&gid=$SOFTROCE_GID"
	tcp=tcp://10.91.2.1:7322
	me=node$SOFTROCE_NODE
	if [ "$SOFTROCE_NODE" = 0 ]; then
		RK_RANK=0 RK_WORLD_SIZE=2 timeout 150 "$PP" --leader="$roce" $PPARGS >/tmp/r0 2>&1
		pp_verdict "2node-roce@$me" 1 $? /tmp/r0
		barrier
		RK_SHM=off RK_RANK=0 RK_WORLD_SIZE=2 timeout 150 "$PP" --leader="$tcp" $PPARGS \
			>/tmp/r0 2>&1
		pp_verdict "2node-tcp@$me" 0 $? /tmp/r0
		barrier
		timeout 150 ib_send_lat -d "$SOFTROCE_DEV" -x "$SOFTROCE_GID" -n 1000 -F -p 18516 \
			>/tmp/isl 2>&1
		rc=$?
		tail -n 3 /tmp/isl
		[ $rc = 0 ] || step "2node-ib_send_lat@$me" fail "server exit status $rc"
	else
		for i in $(seq 100); do
			ping -c1 -W1 "$SOFTROCE_PEER_IP" >/dev/null 2>&1 && break
			sleep 0.2
		done
		RK_RANK=1 RK_WORLD_SIZE=2 RK_RDMA_DEV=$SOFTROCE_DEV RK_RDMA_GID=$SOFTROCE_GID \
			timeout 150 "$PP" --leader="$roce" $PPARGS >/tmp/r1 2>&1
		pp_verdict "2node-roce@$me" 1 $? /tmp/r1
		barrier
		RK_SHM=off RK_RANK=1 RK_WORLD_SIZE=2 timeout 150 "$PP" --leader="$tcp" $PPARGS \
			>/tmp/r1 2>&1
		pp_verdict "2node-tcp@$me" 0 $? /tmp/r1
		barrier
		for i in 1 2 3 4 5 6; do	# until node 0's server listens
			sleep 1
			timeout 150 ib_send_lat -d "$SOFTROCE_DEV" -x "$SOFTROCE_GID" -n 1000 -F \
				-p 18516 "$SOFTROCE_PEER_IP" >/tmp/isl 2>&1
			rc=$?
			grep -q "Couldn't connect" /tmp/isl || break
		done
		send_lat_verdict "2node-ib_send_lat" $rc /tmp/isl ||
			step "2node-ib_send_lat" pass "no median: perftest printed '$t'"
	fi
	echo "eth0 counters:"
	ip -s link show eth0 | sed -n '3,6p'
fi
[ $fails = 0 ]
EOF

# boot LOG ARGS...: one softroce.sh run, its output shown and kept. It runs
# in the background so that a signal to this script reaches it (it then
# stops its guests) instead of waiting behind a foreground pipeline.
child=
boot()
{
	local log=$1 rc=0

	shift
	"$softroce" --script "$tmp/guest.sh" "${adds[@]}" "${envs[@]}" "$@" >"$log" 2>&1 &
	child=$!
	tail -n +1 -f --pid=$child "$log" &
	wait $child || rc=$?
	child=
	wait $! || true
	return $rc
}

on_signal()
{
	[ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child"
	exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM HUP

# RK_SOFTROCE_ONLY=1 or 2 (debugging): only the one-guest or the two-guest boot
rc1=0
rc2=0
[ "${RK_SOFTROCE_ONLY:-1}" = 1 ] && { boot "$tmp/one.log" --nodes 1 --timeout 900 || rc1=$?; }
[ "${RK_SOFTROCE_ONLY:-2}" = 2 ] && [ $rc1 != 77 ] && { boot "$tmp/two.log" --nodes 2 --timeout 720 || rc2=$?; }
[ $rc1 = 77 ] && rc2=77

# ---------------------------------------------------------------- summary
cat "$tmp"/*.log | sed -n 's/^\(\[node[01]\] \)\{0,1\}@@\(STEP\|MEDIAN\) /\2 /p' >"$tmp/res"
echo
echo "==== verbs on Soft-RoCE: summary"
grep -h 'from qemu start to power-off' "$tmp"/*.log | sed 's/^softroce: /boot: /' || true
grep -h 'ready at' "$tmp"/*.log | sed 's/^.*softroce-guest: /guest /' || true
awk '$1 == "STEP" { d = ""; for (i = 4; i <= NF; i++) d = d " " $i;
		    printf "%-22s %-5s%s\n", $2, $3, d }' "$tmp/res"
# rk-pingpong's p50 RTT against the RTT of ib_send_lat (2 x t_typical) on
# the same devices: single-guest steps against ib_send_lat, 2node-* against
# 2node-ib_send_lat.
awk '$1 == "MEDIAN" { m[$2] = $3 }
     END {
	for (k in m) {
		f = k ~ /^2node-/ ? "2node-ib_send_lat" : "ib_send_lat"
		if (k == f || !(f in m) || m[f] <= 0)
			continue
		printf "ratio %s (p50 RTT %s us) / %s (RTT %s us) = %.2f\n", k, m[k], f, m[f],
		       m[k] / m[f]
	}
     }' "$tmp/res" | sort
pass=$(grep -c '^STEP [^ ]* pass' "$tmp/res" || true)
fail=$(grep -c '^STEP [^ ]* fail' "$tmp/res" || true)
skip=$(grep -c '^STEP [^ ]* skip' "$tmp/res" || true)
echo "steps: $pass passed, $fail failed, $skip skipped (guest boots: status $rc1, $rc2)"

if [ $rc1 = 77 ]; then
	echo "SKIP: the Soft-RoCE guests cannot run on this host (see above)"
	exit 77
fi
for rc in $rc1 $rc2; do
	case $rc in
	0) ;;
	77) echo "FAIL: one boot ran, the other was skipped"; exit 1 ;;
	*) echo "FAIL: a guest run ended with status $rc"; exit 1 ;;
	esac
done
[ "$fail" = 0 ] && [ "$pass" -gt 0 ] || exit 1
exit 0
