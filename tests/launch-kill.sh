#!/bin/sh
# rk-launch never leaves a rank behind:
#  1. a rank killed: rk-launch reports it, stops the other, exits 128+9;
#  2. a rank of rk-pingpong killed mid-run: the job ends non-zero;
#  3. SIGTERM to rk-launch: forwarded, exit 143; ranks that ignore it get
#     SIGKILL after --grace;
#  4. SIGKILL to rk-launch: the ranks die too (PR_SET_PDEATHSIG);
#  5. the same two through a stand-in ssh whose "remote" command runs in its
#     own session: the wrapper's stdin watch stops the rank.
# Every rank runs 'sleep <unique duration>', so pgrep -f finds this job's
# processes only. Run from the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
pingpong=$b/examples/pingpong/rk-pingpong
[ -x "$launch" ] && [ -x "$pingpong" ] || { echo "no $launch or $pingpong"; exit 99; }
command -v pgrep >/dev/null || { echo "SKIP: no pgrep"; exit 77; }

tmp=$(mktemp -d) || exit 99
lpid=
marker=
cleanup()
{
	[ -n "$lpid" ] && kill -KILL "$lpid" 2>/dev/null
	[ -n "$marker" ] && pkill -KILL -f "$marker" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	[ -n "$marker" ] && pgrep -af "$marker"
	exit 1
}

# start NAME ARGS...: rk-launch -v ARGS in the background; lpid is its pid
start()
{
	name=$1
	shift
	"$launch" -v "$@" </dev/null >"$tmp/$name.out" 2>"$tmp/$name.err" &
	lpid=$!
}

# rank_pid NAME N: the pid rk-launch -v reported for rank N (waits up to 10 s)
rank_pid()
{
	i=0
	while [ $i -lt 100 ]; do
		p=$(sed -n "s/^rk-launch: rank $2: pid \([0-9]*\) .*/\1/p" "$tmp/$1.err")
		[ -n "$p" ] && { echo "$p"; return 0; }
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# running [N]: wait up to 10 s until N (default 2) ranks run the marker command
# (anchored: rk-launch's own command line holds the marker too)
running()
{
	i=0
	while [ $i -lt 100 ]; do
		[ "$(pgrep -cf "^$marker")" -ge "${1:-2}" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# finish SECONDS: wait for rk-launch to exit within SECONDS; rc is its status
finish()
{
	i=0
	while kill -0 "$lpid" 2>/dev/null; do
		[ $i -ge $(($1 * 10)) ] && fail "rk-launch still running after $1 s"
		sleep 0.1
		i=$((i + 1))
	done
	wait "$lpid"
	rc=$?
	lpid=
}

# gone SECONDS: no process matching the marker is left within SECONDS
gone()
{
	i=0
	while pgrep -f "$marker" >/dev/null; do
		[ $i -ge $(($1 * 10)) ] && fail "processes left behind"
		sleep 0.1
		i=$((i + 1))
	done
}

# 1. one rank is killed
marker="sleep 300.$$"
start k1 --hosts localhost,localhost -- sleep 300.$$
p1=$(rank_pid k1 1) || fail "no pid for rank 1"
running || fail "ranks did not start"
kill -KILL "$p1"
finish 5
[ $rc = 137 ] || fail "rank killed: rk-launch exited $rc, expected 137"
grep -q '^rk-launch: rank 1 killed by signal SIGKILL$' "$tmp/k1.err" || fail "no report"
gone 2

# 2. rk-pingpong's rank 1 is killed in the middle of a long run
start pp --hosts localhost,localhost -- "$pingpong" --count 10000000 --runs 1 --wait block
p0=$(rank_pid pp 0) || fail "no pid for rank 0"
p1=$(rank_pid pp 1) || fail "no pid for rank 1"
sleep 1
kill -KILL "$p1"
finish 10
[ $rc != 0 ] || fail "pingpong: rk-launch exited 0"
grep -q '^rk-launch: rank 1 killed by signal SIGKILL$' "$tmp/pp.err" || fail "pingpong: no report"
# a group empties just after its leader is reaped on a loaded machine: 5 s to go
i=0
while pgrep -g "$p0,$p1" >/dev/null; do
	[ $i -ge 50 ] && fail "pingpong: a rank's process group is still there after 5 s"
	sleep 0.1
	i=$((i + 1))
done
kill -0 "$p0" 2>/dev/null && fail "pingpong: rank 0 still running"

# 3. SIGTERM to rk-launch; then ranks that ignore SIGTERM, and --grace
marker="sleep 301.$$"
start t1 --hosts localhost,localhost -- sleep 301.$$
running || fail "ranks did not start"
kill -TERM "$lpid"
finish 5
[ $rc = 143 ] || fail "SIGTERM: rk-launch exited $rc, expected 143"
gone 2

marker="sleep 302.$$"
start t2 --grace 1 --hosts localhost,localhost -- sh -c "trap '' TERM; sleep 302.$$; :"
running || fail "ranks did not start"
kill -TERM "$lpid"
finish 8
[ $rc = 143 ] || fail "SIGTERM ignored: rk-launch exited $rc, expected 143"
grep -q 'left after the grace period: SIGKILL' "$tmp/t2.err" || fail "no SIGKILL notice"
gone 2

# 4. SIGKILL to rk-launch
marker="sleep 303.$$"
start s1 --hosts localhost,localhost,localhost -- sleep 303.$$
running 3 || fail "ranks did not start"
kill -KILL "$lpid"
finish 5
gone 3

# 5. through ssh: the "remote" command lives in its own session, as on another host
if command -v setsid >/dev/null; then
	cat >"$tmp/ssh" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
	case $1 in -o) shift 2 ;; -*) shift ;; *) break ;; esac
done
shift	# the host
exec setsid -w sh -c "$*"
EOF
	chmod +x "$tmp/ssh"
	for sig in TERM KILL; do
		marker="sleep 304.$$"
		start ssh$sig --ssh "$tmp/ssh" --port 1 --hosts node-a,node-b -- sleep 304.$$
		running || fail "ssh: ranks did not start"
		kill -$sig "$lpid"
		finish 5
		gone 3
	done
else
	echo "no setsid(1): the ssh stdin watch is not tried"
fi
marker=
exit 0
