#!/bin/sh
# The README's embedding example: README.md's code block under "## Embedding"
# is examples/embed/embed.c to the letter (past its SPDX line), so what make
# builds is what a reader copies; then it runs: a two-rank world over loopback
# TCP that comes up, ends cleanly when the follower gets SIGTERM (the leader
# hears of it through peer_error and stops), and an unknown RK_* variable that
# is refused by name with the whole message. Run from the build directory
# (tests/Makefile.inc sets builddir).
b=${builddir:-.}
top=$(dirname "$0")/..
embed=$b/examples/embed/embed
[ -x "$embed" ] || { echo "no $embed"; exit 99; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
p0=
p1=
cleanup()
{
	for p in $p0 $p1; do
		kill -KILL "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*.err; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

# 1. the README's block is embed.c
awk '/^## Embedding/ { f = 1 } f && /^```c$/ { p = 1; next } p && /^```$/ { exit } p' \
	"$top/README.md" >"$tmp/readme.c"
[ -s "$tmp/readme.c" ] || fail "README.md has no C block under '## Embedding'"
sed 1d "$top/examples/embed/embed.c" >"$tmp/embed.c"
diff -u "$tmp/embed.c" "$tmp/readme.c" ||
	fail "README.md's embedding example and examples/embed/embed.c differ (diff above)"

# 2. two ranks: up, then the follower's SIGTERM ends both with status 0
ready()
{
	grep -q 'world ready: 2 ranks' "$1"
}

# reap PID within 30 s (else kill it and fail); sets rc to its exit status
reap()
{
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -0 "$1" 2>/dev/null && { kill -KILL "$1"; fail "$2 did not exit"; }
	wait "$1"
	rc=$?
}
up=
for attempt in 1 2 3 4 5; do
	port=$((20000 + ($$ * 7 + attempt * 7919) % 40000))
	RK_SHM=off RK_LOG=info RK_RANK=0 RK_WORLD_SIZE=2 RK_LEADER="127.0.0.1:$port" \
		"$embed" </dev/null 2>"$tmp/r0.err" &
	p0=$!
	RK_SHM=off RK_LOG=info RK_RANK=1 RK_WORLD_SIZE=2 RK_LEADER="127.0.0.1:$port" \
		"$embed" </dev/null 2>"$tmp/r1.err" &
	p1=$!
	i=0
	while [ $i -lt 300 ]; do
		ready "$tmp/r0.err" && ready "$tmp/r1.err" && { up=1; break; }
		kill -0 "$p0" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	[ -n "$up" ] && break
	# the port was taken (the leader exited): the follower goes too, try another
	kill -KILL "$p1" 2>/dev/null
	wait "$p0" "$p1"
	p0=
	p1=
	grep -q 'Address already in use' "$tmp/r0.err" || fail "the world did not come up"
done
[ -n "$up" ] || fail "no free port in 5 tries"
kill -TERM "$p1"
reap "$p1" "the follower, after SIGTERM,"
rc1=$rc
p1=
reap "$p0" "the leader, after the follower left,"
rc0=$rc
p0=
[ "$rc1" = 0 ] || fail "the follower exited $rc1 after SIGTERM, expected 0"
[ "$rc0" = 0 ] || fail "the leader exited $rc0 after the follower left, expected 0"
grep -q '^rank 1 failed: ' "$tmp/r0.err" || fail "the leader's peer_error did not run"

# 3. an unknown variable: exit 2, named, and the whole list of known ones
env RK_NO_SUCH_KNOB=1 timeout -s KILL 20 "$embed" </dev/null 2>"$tmp/bad.err"
rc=$?
[ "$rc" = 2 ] || fail "an unknown RK_* variable: exit $rc, expected 2"
grep -q '^unknown variable RK_NO_SUCH_KNOB (known: RK_[A-Z_ ]*)$' "$tmp/bad.err" ||
	fail "the unknown variable's message is not whole"
exit 0
