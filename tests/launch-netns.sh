#!/bin/sh
# rk-launch --netns: every rank in its own network namespace, joined by a
# bridge. rk-pingpong passes between two of them; three ranks each see their
# own namespace and 10.x address, and RK_LEADER is rank 0's; no namespace is
# left afterwards, also after a failing rank and after SIGTERM, and those of a
# launcher killed with SIGKILL are removed by the next run; without
# CAP_SYS_ADMIN it says so and exits 2. Skips (77) unless root with a working
# 'ip netns'. Run from the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
pingpong=$b/examples/pingpong/rk-pingpong
[ -x "$launch" ] && [ -x "$pingpong" ] || { echo "no $launch or $pingpong"; exit 99; }
. "$(dirname "$0")/netns-common.sh"

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	ip netns list
	exit 1
}

# run NAME ARGS...: rk-launch ARGS, in the background so that its pid (the
# namespaces' names) is known; rc is its status
run()
{
	name=$1
	shift
	timeout -s KILL 40 "$launch" "$@" </dev/null >"$tmp/$name.out" 2>"$tmp/$name.err" &
	lpid=$!
	wait $lpid
	rc=$?
}

# no namespace of launcher $lpid is left
none_left()
{
	ip netns list | grep "^rkl$lpid-" && fail "$1: namespaces left behind"
	lpid=
}

# namespaces of a launcher that was killed with SIGKILL go at the next --netns run
dead=$(sh -c 'echo $$')
ip netns add "rkl$dead-b" || fail "cannot add a namespace"

run pp --netns --hosts localhost,localhost -- "$pingpong" --count 200 --warmup 20 --runs 1
[ $rc = 0 ] || fail "pingpong: rk-launch exited $rc"
grep -q '^\[r0\] mode  *p50_us' "$tmp/pp.out" || fail "pingpong: no table from rank 0"
grep -q '^\[r0\] adaptive  *[0-9]' "$tmp/pp.out" || fail "pingpong: no adaptive row"
none_left pingpong
ip netns list | grep "^rkl$dead-" && { ip netns delete "rkl$dead-b"; fail "stale namespace kept"; }
grep -q "removing stale namespace rkl$dead-b" "$tmp/pp.err" || fail "no notice of the stale namespace"

# who is where: namespace inode, eth0 address, RK_LEADER
host_ns=$(readlink /proc/self/ns/net)
run who --netns --hosts localhost,localhost,localhost -- sh -c \
	'echo "$RK_RANK $(readlink /proc/self/ns/net) $(ip -4 -o addr show dev eth0 |
	 sed -n "s|.* inet \([0-9.]*\)/24 .*|\1|p") $RK_LEADER"'
[ $rc = 0 ] || fail "who: rk-launch exited $rc"
[ "$(wc -l <"$tmp/who.out")" = 3 ] || fail "who: expected 3 lines"
lead=$(sed -n 's/^\[r0\] 0 [^ ]* \(10\.[0-9]*\.[0-9]*\.1\) .*/\1/p' "$tmp/who.out")
[ -n "$lead" ] || fail "who: rank 0 has no 10.x.y.1 address on eth0"
net=${lead%.1}
for r in 0 1 2; do
	grep -q "^\[r$r\] $r net:\[[0-9]*\] $net\.$((r + 1)) $lead:[0-9]*$" "$tmp/who.out" ||
		fail "who: rank $r's address or RK_LEADER"
done
grep -qF "$host_ns" "$tmp/who.out" && fail "who: a rank ran in this namespace"
[ "$(awk '{ print $3 }' "$tmp/who.out" | sort -u | wc -l)" = 3 ] ||
	fail "who: two ranks shared a namespace"
none_left who

# a failing rank, then SIGTERM: the namespaces go either way
run fail --netns --hosts localhost,localhost -- sh -c '[ "$RK_RANK" = 1 ] && exit 4; sleep 30'
[ $rc = 4 ] || fail "failing rank: rk-launch exited $rc, expected 4"
none_left "failing rank"

timeout -s KILL 40 "$launch" -v --netns --hosts localhost,localhost -- sleep 30 \
	</dev/null >"$tmp/term.out" 2>"$tmp/term.err" &
lpid=$!
i=0
until grep -q '^rk-launch: rank 1: pid' "$tmp/term.err"; do
	[ $i -ge 100 ] && fail "SIGTERM: ranks did not start"
	sleep 0.1
	i=$((i + 1))
done
kill -TERM $lpid
wait $lpid
rc=$?
[ $rc = 143 ] || fail "SIGTERM: rk-launch exited $rc, expected 143"
none_left SIGTERM

# without CAP_SYS_ADMIN: a clear refusal, exit 2
if command -v setpriv >/dev/null; then
	setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin -- \
		"$launch" --netns --hosts localhost,localhost -- true 2>"$tmp/nocap.err"
	rc=$?
	[ $rc = 2 ] || fail "no CAP_SYS_ADMIN: exit $rc, expected 2"
	grep -q 'needs root' "$tmp/nocap.err" || fail "no CAP_SYS_ADMIN: no message"
fi
exit 0
