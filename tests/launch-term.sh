#!/bin/sh
# rk-launch and repeated signals. A rank that is slow to stop is never
# SIGKILLed before --grace, however many SIGTERMs and SIGINTs rk-launch gets:
#  1. SIGTERM to rk-launch, then SIGTERM and SIGINT again while the ranks stop;
#  2. timeout(1) around rk-launch, which sends SIGTERM twice (to rk-launch, and
#     to its own process group, rk-launch in it; the two may coalesce).
# Each rank traps SIGTERM and exits 0 only once the test lets it (after
# rk-launch has said that it got the repeated signals), so nothing here races
# the clock. Run from the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
[ -x "$launch" ] || { echo "no $launch"; exit 99; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
lpid=
cleanup()
{
	[ -n "$lpid" ] && kill -KILL "$lpid" 2>/dev/null
	touch "$tmp/go" # lets any rank left go
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

# the rank: up, then on SIGTERM wait for the test's go, then exit 0
rank="trap 'touch $tmp/term.\$RK_RANK; while [ ! -e $tmp/go ]; do sleep 0.05; done; exit 0' TERM
touch $tmp/up.\$RK_RANK
while :; do sleep 0.05; done"

# wait_file FILE...: until every FILE exists (the harness's bound)
wait_file()
{
	for f in "$@"; do
		i=0
		until [ -e "$f" ]; do
			[ $i -ge 300 ] && fail "no $f after 30 s"
			sleep 0.1
			i=$((i + 1))
		done
	done
}

# wait_log FILE N TEXT: until FILE has N lines with TEXT
wait_log()
{
	i=0
	until [ "$(grep -c -- "$3" "$1")" -ge "$2" ]; do
		kill -0 "$lpid" 2>/dev/null || fail "rk-launch exited before $2 x '$3'"
		[ $i -ge 300 ] && fail "not $2 x '$3' in $1 after 30 s"
		sleep 0.1
		i=$((i + 1))
	done
}

# check NAME RC: rk-launch exited RC, both ranks 0, nothing SIGKILLed
check()
{
	wait "$lpid"
	rc=$?
	lpid=
	[ $rc = "$2" ] || fail "$1: rk-launch exited $rc, expected $2"
	for r in 0 1; do
		grep -q "^rk-launch: rank $r exited with status 0$" "$tmp/$1.err" ||
			fail "$1: rank $r did not exit 0"
	done
	grep -q 'killed by signal\|left after the grace period' "$tmp/$1.err" &&
		fail "$1: a rank was killed"
	rm -f "$tmp"/up.* "$tmp"/term.* "$tmp/go"
}

# 1. SIGTERM, then SIGTERM and SIGINT again
"$launch" -v --grace 3600 --hosts localhost,localhost -- sh -c "$rank" \
	</dev/null >"$tmp/repeat.out" 2>"$tmp/repeat.err" &
lpid=$!
wait_file "$tmp/up.0" "$tmp/up.1"
kill -TERM "$lpid"
wait_file "$tmp/term.0" "$tmp/term.1"
kill -TERM "$lpid"
wait_log "$tmp/repeat.err" 1 'again: the ranks are stopping'
kill -INT "$lpid"
wait_log "$tmp/repeat.err" 2 'again: the ranks are stopping'
touch "$tmp/go"
check repeat 143

# 2. timeout(1): its two SIGTERMs coalesce when both are pending at once, so
# the second is not always seen; when it is, it must change nothing
timeout 5 "$launch" -v --grace 3600 --hosts localhost,localhost -- sh -c "$rank" \
	</dev/null >"$tmp/timeout.out" 2>"$tmp/timeout.err" &
lpid=$!
wait_file "$tmp/up.0" "$tmp/up.1" "$tmp/term.0" "$tmp/term.1"
touch "$tmp/go"
check timeout 124
exit 0
