#!/bin/sh
# rk-serve under rk-launch, two ranks, with streams in flight:
#  1. SIGKILL to the follower: the leader notices (peer_error), says which rank
#     failed and exits non-zero; rk-launch exits non-zero; the client's
#     requests fail; no process is left. rk-launch is stopped (SIGSTOP) while
#     the leader reacts, or its own teardown (SIGTERM to the leader) would race
#     the leader's noticing; then the same once more without stopping it.
#  2. SIGTERM to the leader: pending requests end with an error event, the
#     leader says BYE, every rank exits 0, and so does rk-launch.
#  3. rk-launch killed with SIGKILL: the ranks go with it.
# Skips (77) without rk-serve/rk-load. Run from the build directory
# (tests/Makefile.inc sets builddir).
. "$(dirname "$0")/serve-common.sh"

# start NAME: two ranks of rk-serve; sets lpid, url, p0, p1
start()
{
	name=$1
	"$launch" -v --hosts localhost,localhost -- "$serve" --http 127.0.0.1:0 --hidden 4096 \
		</dev/null >"$tmp/$name.out" 2>"$tmp/$name.err" &
	lpid=$!
	url=
	i=0
	while [ -z "$url" ]; do
		[ $i -ge 300 ] && fail "$name: not serving after 30 s"
		kill -0 "$lpid" 2>/dev/null || fail "$name: rk-launch exited before serving"
		sleep 0.1
		i=$((i + 1))
		url=$(sed -n 's/^\[r0\] rk-serve: .* listening on \(http:[^ ]*\)$/\1/p' "$tmp/$name.out")
	done
	p0=$(sed -n 's/^rk-launch: rank 0: pid \([0-9]*\) .*/\1/p' "$tmp/$name.err")
	p1=$(sed -n 's/^rk-launch: rank 1: pid \([0-9]*\) .*/\1/p' "$tmp/$name.err")
	[ -n "$p0" ] && [ -n "$p1" ] || fail "$name: no pids"
}

# busy NAME: start a long load in the background (cpid), wait until tokens flow
busy()
{
	"$load" --url "$url" --streams 4 --modes sampled --draft plain,drafted --requests 64 \
		--max-tokens 512 --timeout 60 >"$tmp/$1.load" 2>&1 &
	cpid=$!
	i=0
	until "$load" --url "$url" --get /v1/stats 2>/dev/null | grep -q '"active":[1-9]'; do
		[ $i -ge 100 ] && fail "$1: no request became active"
		sleep 0.1
		i=$((i + 1))
	done
	sleep 0.3
}

# finish SECONDS: rk-launch ends within SECONDS; rc is its status
finish()
{
	wait_gone "$lpid" "$1" || fail "rk-launch still running after $1 s"
	wait "$lpid"
	rc=$?
	lpid=
}

# client: the background rk-load ends within 20 s; crc is its status
client()
{
	wait_gone "$cpid" 20 || fail "rk-load still running 20 s after the server went"
	wait "$cpid"
	crc=$?
	cpid=
}

# gone: neither rank's process nor process group is left
gone()
{
	i=0
	while kill -0 "$p0" 2>/dev/null || kill -0 "$p1" 2>/dev/null ||
	      pgrep -g "$p0,$p1" >/dev/null 2>&1; do
		[ $i -ge 50 ] && fail "$1: a rank is left"
		sleep 0.1
		i=$((i + 1))
	done
}

# zombie PID: PID has exited (its parent, stopped, has not reaped it yet)
zombie()
{
	[ "$(sed -n 's/^[0-9]* (.*) \([A-Z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null)" = Z ]
}

# 1. the follower is killed mid-stream; the leader alone must notice
start k1
busy k1
kill -STOP "$lpid"
kill -KILL "$p1"
i=0
until zombie "$p0"; do
	[ $i -ge 150 ] && { kill -CONT "$lpid"; fail "the leader still runs 15 s after its peer died"; }
	sleep 0.1
	i=$((i + 1))
done
kill -CONT "$lpid"
finish 20
[ $rc != 0 ] || fail "follower killed: rk-launch exited 0"
grep -q '^rk-launch: rank 1 killed by signal SIGKILL$' "$tmp/k1.err" || fail "no report of rank 1"
grep -q '^rk-launch: rank 0 exited with status 1$' "$tmp/k1.err" || fail "rank 0's status"
grep -q '^\[r0\] rk-serve\[r0\]: rank 1 failed: ' "$tmp/k1.err" ||
	fail "the leader did not say that rank 1 failed"
gone "follower killed"
client
[ $crc = 1 ] || fail "follower killed: rk-load exited $crc, expected 1"

# and with rk-launch running: it ends the job, non-zero, nothing left
start k2
busy k2
kill -KILL "$p1"
finish 20
[ $rc != 0 ] || fail "follower killed: rk-launch exited 0"
gone "follower killed, rk-launch running"
client
[ $crc = 1 ] || fail "follower killed, rk-launch running: rk-load exited $crc, expected 1"

# 2. SIGTERM to the leader under load: a clean end
start t1
busy t1
kill -TERM "$p0"
finish 20
[ $rc = 0 ] || fail "SIGTERM to the leader: rk-launch exited $rc"
grep -q '^\[r0\] rk-serve: Terminated: stopping$' "$tmp/t1.out" || fail "no 'stopping' line"
for r in 0 1; do
	grep -q "^rk-launch: rank $r exited with status 0$" "$tmp/t1.err" || fail "rank $r status"
done
gone "SIGTERM"
client
[ $crc = 1 ] || fail "SIGTERM: rk-load exited $crc, expected 1"
grep -q 'RK_ESTOPPED\|HTTP 503\|Connection refused\|Couldn' "$tmp/t1.load" ||
	fail "SIGTERM: the client saw no error"

# 3. rk-launch itself killed
start l1
busy l1
kill -KILL "$lpid"
finish 5
gone "rk-launch killed"
client
[ $crc != 0 ] || fail "rk-launch killed: rk-load exited 0"
exit 0
