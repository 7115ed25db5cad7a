#!/bin/sh
# rk-serve --demo as two ranks, each in its own network namespace
# (rk-launch --netns): the follower reaches the leader over a veth bridge, not
# loopback; every request equals the TP1 reference, the job exits 0 and leaves
# no namespace behind. Skips (77) without rk-serve, unless root with a working
# 'ip netns'. Run from the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
[ -x "$launch" ] || { echo "no $launch"; exit 99; }
[ -x "$serve" ] || { echo "SKIP: rk-serve not built (libmicrohttpd, jansson)"; exit 77; }
. "$(dirname "$0")/netns-common.sh"

fail()
{
	echo "FAIL: $*"
	cat "$tmp/out" "$tmp/err"
	ip netns list
	exit 1
}

timeout -s KILL 50 "$launch" --netns --hosts localhost,localhost -- "$serve" --demo \
	</dev/null >"$tmp/out" 2>"$tmp/err" &
lpid=$!
wait $lpid
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || fail "rk-launch exited $rc"
grep -q '^\[r0\] rk-serve demo: TP2 (2 ranks)' "$tmp/out" || fail "no demo header"
grep -q '^\[r0\] receipt: ' "$tmp/out" || fail "no receipt"
grep -q '^\[r0\] \([0-9]*\) of \1 requests equal the TP1 reference$' "$tmp/out" ||
	fail "not every request equals the reference"
grep -q '^\[r0\] cpu_s: r0=[0-9.]* r1=[0-9.]*$' "$tmp/out" || fail "no CPU line for both ranks"
ip netns list | grep "^rkl$lpid-" && fail "namespaces left behind"
lpid=
exit 0
