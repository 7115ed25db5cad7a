#!/bin/sh
# rk-serve --demo as a LeaderWorkerSet group of two pods would run it: two
# network namespaces stand for the pods, joined by a veth pair, each with the
# name of the leader pod in its /etc/hosts (ip netns exec mounts
# /etc/netns/NAME/hosts there) as cluster DNS would answer it. Each rank gets
# nothing but the LWS_* variables LeaderWorkerSet sets and the job's secret
# file (mode 0400, as docs/KUBERNETES.md mounts it): no RK_RANK, RK_LEADER,
# RK_PORT. Every request equals the TP1 reference and both exit 0. Skips (77)
# without rk-serve, unless root with a working 'ip netns'. Run from the build
# directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
serve=$b/examples/serve/rk-serve
[ -x "$serve" ] || { echo "SKIP: rk-serve not built (libmicrohttpd, jansson)"; exit 77; }
. "$(dirname "$0")/netns-common.sh"
unset RK_RANK RK_WORLD_SIZE RK_LEADER RK_PORT RK_SECRET_FILE RANK WORLD_SIZE MASTER_ADDR \
	PMIX_RANK PMIX_NAMESPACE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID \
	TORCHELASTIC_RUN_ID 2>/dev/null

pod0=rkl$$-lws0
pod1=rkl$$-lws1
net=10.$((200 + $$ % 50)).$(($$ / 50 % 250))
lws_cleanup()
{
	ip netns delete "$pod0" 2>/dev/null
	ip netns delete "$pod1" 2>/dev/null
	rm -rf "/etc/netns/$pod0" "/etc/netns/$pod1"
	cleanup
}
trap lws_cleanup EXIT

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

ip netns add "$pod0" && ip netns add "$pod1" || fail "cannot add the namespaces"
ip link add rkl$$a netns "$pod0" type veth peer name rkl$$b netns "$pod1" ||
	fail "cannot add a veth pair"
for i in 0 1; do
	ns=$(eval echo "\$pod$i")
	dev=rkl$$$(echo ab | cut -c$((i + 1)))
	ip -n "$ns" link set lo up
	ip -n "$ns" link set "$dev" name eth0
	ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0
	ip -n "$ns" link set eth0 up
	mkdir -p "/etc/netns/$ns"
	printf '127.0.0.1 localhost\n%s.1 rk-0.rk.default.svc.cluster.local rk-0.rk\n' "$net" \
		>"/etc/netns/$ns/hosts"
done

# the Secret, mounted with defaultMode 0400
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp/secret"
chmod 0400 "$tmp/secret"

for i in 0 1; do
	ns=$(eval echo "\$pod$i")
	ip netns exec "$ns" env LWS_LEADER_ADDRESS=rk-0.rk.default.svc.cluster.local \
		LWS_GROUP_SIZE=2 LWS_WORKER_INDEX=$i LWS_NAME=rk LWS_GROUP_INDEX=0 \
		RK_SECRET_FILE="$tmp/secret" timeout -s KILL 60 "$serve" --demo \
		</dev/null >"$tmp/pod$i.out" 2>"$tmp/pod$i.err" &
	eval "pid$i=\$!"
done
# shellcheck disable=SC2154
wait "$pid0"
rc0=$?
wait "$pid1"
rc1=$?
cat "$tmp/pod0.out"
[ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "the pods exited $rc0 and $rc1"
grep -q '^rk-serve demo: TP2 (2 ranks)' "$tmp/pod0.out" || fail "no demo header"
grep -q '^\([0-9]*\) of \1 requests equal the TP1 reference$' "$tmp/pod0.out" ||
	fail "not every request equals the reference"
grep -q '^receipt: ' "$tmp/pod0.out" || fail "no receipt"
exit 0
