#!/bin/sh
# rk-launch, the basics: rk-pingpong as two local ranks (exit 0, every line
# rank-prefixed, rank 0's table printed), the rank environment, stdout/stderr
# separation, exit status pass-through, strict options, and the ssh path
# through a stand-in ssh that runs the remote command here (quoting, RK_*).
# Run from the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
pingpong=$b/examples/pingpong/rk-pingpong
[ -x "$launch" ] && [ -x "$pingpong" ] || { echo "no $launch or $pingpong"; exit 99; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

# run NAME ARGS...: rk-launch ARGS > NAME.out 2> NAME.err; sets rc
run()
{
	name=$1
	shift
	timeout -s KILL 40 "$launch" "$@" </dev/null >"$tmp/$name.out" 2>"$tmp/$name.err"
	rc=$?
}

# 1. rk-pingpong, two local ranks
run pp --hosts localhost,localhost -- "$pingpong" --count 200 --warmup 20 --runs 1
[ $rc = 0 ] || fail "pingpong: rk-launch exited $rc"
grep -v '^\[r[01]\] ' "$tmp/pp.out" && fail "pingpong: a stdout line without a rank prefix"
grep -v '^\[r[01]\] ' "$tmp/pp.err" && fail "pingpong: a stderr line without a rank prefix"
grep -q '^\[r0\] mode  *p50_us' "$tmp/pp.out" || fail "pingpong: no table header from rank 0"
for m in adaptive spin block; do
	grep -q "^\[r0\] $m  *[0-9]" "$tmp/pp.out" || fail "pingpong: no '$m' row from rank 0"
done

# 2. the rank environment: one session and leader for all, ranks in host order
run env --hosts localhost,127.0.0.1,localhost -- \
	sh -c 'echo "rank=$RK_RANK size=$RK_WORLD_SIZE leader=$RK_LEADER session=$RK_SESSION"'
[ $rc = 0 ] || fail "env: rk-launch exited $rc"
[ "$(wc -l <"$tmp/env.out")" = 3 ] || fail "env: expected 3 lines"
for r in 0 1 2; do
	grep -q "^\[r$r\] rank=$r size=3 leader=127\.0\.0\.1:[0-9][0-9]* session=0x[0-9a-f]\{16\}$" \
		"$tmp/env.out" || fail "env: rank $r"
done
[ "$(sed 's/^\[r.\] rank=. //' "$tmp/env.out" | sort -u | wc -l)" = 1 ] ||
	fail "env: the ranks disagree on leader or session"

# 3. stdout and stderr apart, a partial last line, the failing rank's status
run st --hosts localhost,localhost -- \
	sh -c 'echo "out $RK_RANK"; echo "err $RK_RANK" >&2; printf "tail $RK_RANK"
	       [ "$RK_RANK" = 1 ] && exit 3; exit 0'
[ $rc = 3 ] || fail "status: rk-launch exited $rc, expected 3 (rank 1's status)"
grep -q '^\[r1\] out 1$' "$tmp/st.out" || fail "status: rank 1 stdout"
grep -q '^\[r1\] tail 1$' "$tmp/st.out" || fail "status: rank 1 partial line"
grep -q '^\[r1\] err 1$' "$tmp/st.err" || fail "status: rank 1 stderr"
grep -q 'err' "$tmp/st.out" && fail "status: stderr on stdout"
grep -q '^rk-launch: rank 1 exited with status 3$' "$tmp/st.err" || fail "status: no report"

run nf --hosts localhost -- ./no-such-program-$$
[ $rc = 127 ] || fail "missing program: rk-launch exited $rc, expected 127"
grep -q "^\[r0\] rk-launch: rank 0: cannot run" "$tmp/nf.err" || fail "missing program: no message"

# 4. strict options: refused by name, exit 2
while read -r args; do
	# shellcheck disable=SC2086
	run opt $args
	[ $rc = 2 ] || fail "'$args': exit $rc, expected 2"
	[ -s "$tmp/opt.err" ] || fail "'$args': no message"
done <<EOF
--port=0 --hosts=localhost -- true
--port=x --hosts=localhost -- true
--grace=-1 --hosts=localhost -- true
--grace=1s --hosts=localhost -- true
--bogus --hosts=localhost -- true
--hosts=localhost,,localhost -- true
--hosts=-oProxyCommand=x -- true
--hosts=localhost --hosts=localhost -- true
--netns --hosts=localhost,remote-host-$$ -- true
--hosts=remote-host-$$ -- true
--hosts=localhost
EOF
run opt --hosts remote-host-$$ -- true
grep -q -- '--port' "$tmp/opt.err" || fail "remote leader without --port: no hint"
# a rank's unknown RK_* variable: refused by name, with the whole list of known ones
RK_NO_SUCH_KNOB=1 "$pingpong" --local >/dev/null 2>"$tmp/knob.err"
rc=$?
[ $rc = 2 ] || fail "RK_NO_SUCH_KNOB=1 rk-pingpong: exit $rc, expected 2"
grep -q '^rk-pingpong: unknown variable RK_NO_SUCH_KNOB (known: RK_[A-Z_ ]*)$' "$tmp/knob.err" ||
	fail "RK_NO_SUCH_KNOB=1 rk-pingpong: the message is not whole"
run help --help
[ $rc = 0 ] && grep -q '^usage: rk-launch' "$tmp/help.out" || fail "--help"

# 5. the ssh path: a stand-in ssh runs the command line as sshd would ($SHELL -c),
# in its own session like a remote process (no group signal reaches it)
cat >"$tmp/ssh" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
	case $1 in -o) shift 2 ;; -*) shift ;; *) break ;; esac
done
shift	# the host
if command -v setsid >/dev/null; then exec setsid -w sh -c "$*"; fi
exec sh -c "$*"
EOF
chmod +x "$tmp/ssh"
port=$((20000 + $$ % 20000))
RK_LOG=warn run ssh --ssh "$tmp/ssh" --port $port --hosts node-a,user@node-b -- \
	sh -c 'printf "%s|" "$@" "$RK_RANK" "$RK_LEADER" "$RK_LOG"; echo' x 'a b' "c'd" '$HOME' \
	'"q"' '`true`'
[ $rc = 0 ] || fail "ssh: rk-launch exited $rc"
for r in 0 1; do
	grep -qxF "[r$r] a b|c'd|\$HOME|\"q\"|\`true\`|$r|node-a:$port|warn|" "$tmp/ssh.out" ||
		fail "ssh: rank $r's arguments or environment"
done
run ssh --ssh "$tmp/ssh" --port $port --hosts node-a,node-b -- sh -c 'exit 5'
[ $rc = 5 ] || fail "ssh: exit status: $rc, expected 5"

# rk-pingpong over the ssh path needs an address of this machine that is not loopback
addr=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | head -n 1)
if [ -n "$addr" ]; then
	run sspp --ssh "$tmp/ssh" --port $port --hosts "$addr,localhost" -- \
		"$(cd "$b/examples/pingpong" && pwd)/rk-pingpong" --count 200 --warmup 20 --runs 1 --wait spin
	[ $rc = 0 ] || fail "ssh: pingpong: rk-launch exited $rc"
	grep -q '^\[r0\] spin  *[0-9]' "$tmp/sspp.out" || fail "ssh: pingpong: no table"
else
	echo "no non-loopback IPv4 address: rk-pingpong over ssh not tried"
fi
exit 0
