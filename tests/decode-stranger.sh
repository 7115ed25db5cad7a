#!/bin/sh
# Strangers who know the leader's port cannot join a job or change its output.
#
# 1. A TP2 rk-serve job with a secret (RK_SECRET_FILE, mode 0600) is bootstrapping:
#    rank 0 is up, rank 1 is not. Strangers try to take rank 1 first: a real
#    rk-serve follower with no secret, one with a wrong secret, one with the
#    secret's file readable by others (refused by name before it starts), and
#    port scanners' garbage. Each one is refused (RK_EAUTH, or its own config
#    error); a stranger's follower holds a different model shard (--model-seed),
#    so had it joined, every token would change. Then the real follower joins and
#    rk-load's --check-ref passes against the toy model's TP1 reference, and the
#    leader's log names the refusals without a byte of the secret.
# 2. A leader on a non-loopback address without a secret refuses to start,
#    saying how to fix it; RK_AUTH=off starts it with one warning.
# 3. rk-launch hands its ranks a fresh secret and the session: while the job
#    runs, no process's argv holds either, for local ranks and for ranks reached
#    through (a stand-in for) ssh; each rank can read its secret file.
# Skips (77) without rk-serve/rk-load, or when rankrt was built without OpenSSL.
# Run from the build directory (tests/Makefile.inc sets builddir).
. "$(dirname "$0")/serve-common.sh"
command -v ss >/dev/null || { echo "SKIP: no ss(8)"; exit 77; }
grep -q '^#define RK_HAVE_OPENSSL 1' "$b/config.h" 2>/dev/null ||
	{ echo "SKIP: built without OpenSSL: ranks cannot authenticate"; exit 77; }

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err "$tmp"/*.load; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }
	done
	exit 1
}

# a port from the PID; another test may hold it: the leader below then tries another
port=$(( (($$ * 7) % 20000) + 30000 ))
key=$tmp/job.key
wrong=$tmp/wrong.key
(umask 077 && printf '%s\n' "decode-stranger: the job's secret, 32+ bytes long" >"$key")
(umask 077 && printf '%s\n' "decode-stranger: a stranger's guess, 32+ bytes" >"$wrong")
model="--hidden 256 --model-seed 7"
export RK_LOG=info RK_CONNECT_TIMEOUT_MS=20000 RK_HANDSHAKE_MS=2000

# 1. the leader waits for rank 1; strangers come first. A port that another
# process holds ("Address already in use") is not this test's failure: next port.
try=1
while :; do
	RK_RANK=0 RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$port RK_SECRET_FILE=$key \
		"$serve" --http 127.0.0.1:0 $model </dev/null >"$tmp/r0.out" 2>"$tmp/r0.err" &
	p0=$!
	pids="$pids $p0"
	i=0
	until ss -ltn 2>/dev/null | grep -q "127.0.0.1:$port "; do
		[ $i -ge 100 ] && fail "the leader is not listening on $port"
		kill -0 "$p0" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	kill -0 "$p0" 2>/dev/null && break
	grep -q "Address already in use" "$tmp/r0.err" && [ $try -lt 5 ] ||
		fail "the leader exited"
	echo "port $port is taken (try $try): another"
	port=$(( ((port - 30000 + 7919) % 20000) + 30000 ))
	try=$((try + 1))
done
sleep 0.3

# stranger FOLLOWER-ENV...: an rk-serve follower with another model shard; it must fail
stranger()
{
	name=$1
	shift
	env RK_RANK=1 RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$port "$@" timeout -s KILL 30 \
		"$serve" --hidden 256 --model-seed 8 </dev/null >"$tmp/$name.out" 2>"$tmp/$name.err"
	rc=$?
	[ $rc != 0 ] || fail "$name: a stranger's follower ran to the end (exit 0)"
	[ $rc != 137 ] || fail "$name: a stranger's follower hung until killed"
	kill -0 "$p0" 2>/dev/null || fail "$name: the leader died"
}

stranger nokey
grep -q "RK_EAUTH" "$tmp/nokey.err" || fail "nokey: no RK_EAUTH in the follower's log"
stranger wrongkey RK_SECRET_FILE="$wrong"
grep -q "RK_EAUTH" "$tmp/wrongkey.err" || fail "wrongkey: no RK_EAUTH in the follower's log"
cp "$key" "$tmp/open.key"
chmod 644 "$tmp/open.key"
stranger openkey RK_SECRET_FILE="$tmp/open.key"
grep -q "RK_SECRET_FILE='.*open.key': mode 0644 lets group or others" "$tmp/openkey.err" ||
	fail "openkey: a readable secret file was not refused by name"
# port scanners: an HTTP request, random bytes, a silent connection
if command -v bash >/dev/null; then
	bash -c "printf 'GET / HTTP/1.1\r\n\r\n' >/dev/tcp/127.0.0.1/$port" 2>/dev/null
	bash -c "head -c 4096 /dev/urandom >/dev/tcp/127.0.0.1/$port" 2>/dev/null
fi

# the real follower joins, and the output is the model's
RK_RANK=1 RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$port RK_SECRET_FILE=$key \
	"$serve" $model </dev/null >"$tmp/r1.out" 2>"$tmp/r1.err" &
p1=$!
pids="$pids $p1"
url=
i=0
while [ -z "$url" ]; do
	[ $i -ge 300 ] && fail "not serving after 30 s"
	kill -0 "$p0" 2>/dev/null || fail "the leader exited before serving"
	sleep 0.1
	i=$((i + 1))
	url=$(sed -n 's/^rk-serve: .* listening on \(http:[^ ]*\)$/\1/p' "$tmp/r0.out" "$tmp/r0.err")
done
timeout -s KILL 60 "$load" --url "$url" --streams 1,4 --modes greedy,sampled \
	--draft plain,drafted --requests 4 --max-tokens 16 --check-ref >"$tmp/run.load" 2>&1 ||
	fail "rk-load --check-ref: the job's tokens are not the model's (exit $?)"
grep -q "rank 1 joined from 127.0.0.1:[0-9]* (2/2), authenticated" "$tmp/r0.err" ||
	fail "the leader did not log the real follower's authenticated join"
grep -q "refused a connection from 127.0.0.1:[0-9]* before its handshake: auth (RK_EAUTH)" \
	"$tmp/r0.err" || fail "the leader did not log a refusal for RK_EAUTH"
grep -q "decode-stranger:" "$tmp"/*.err "$tmp"/*.out && fail "a secret reached a log"
kill -TERM "$p0" "$p1"
wait "$p0" "$p1"
pids=
echo "strangers: refused; the real follower joined; rk-load --check-ref passed"

# 2. safe by default: no secret, not loopback
addr=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | grep -v '^127\.' |
	head -n 1)
if [ -n "$addr" ]; then
	env -u RK_SECRET_FILE RK_RANK=0 RK_WORLD_SIZE=2 RK_LEADER="$addr:$port" \
		timeout -s KILL 10 "$serve" --http 127.0.0.1:0 </dev/null >"$tmp/open.out" \
		2>"$tmp/open.err"
	rc=$?
	[ $rc != 0 ] && [ $rc != 137 ] || fail "no secret on $addr: the leader did not refuse"
	grep -q "is not a loopback address and no secret is set" "$tmp/open.err" &&
		grep -q "RK_SECRET_FILE" "$tmp/open.err" && grep -q "RK_AUTH=off" "$tmp/open.err" ||
		fail "no secret on $addr: no message saying how to fix it"
	RK_AUTH=off RK_RANK=1 RK_WORLD_SIZE=2 RK_LEADER="$addr:$port" timeout -s KILL 60 \
		"$serve" --hidden 256 </dev/null >"$tmp/off1.out" 2>"$tmp/off1.err" &
	p1=$!
	pids="$pids $p1"
	RK_AUTH=off RK_RANK=0 RK_WORLD_SIZE=2 RK_LEADER="$addr:$port" timeout -s KILL 60 \
		"$serve" --demo --hidden 256 </dev/null >"$tmp/off0.out" 2>"$tmp/off0.err" ||
		fail "RK_AUTH=off: the demo did not run on $addr"
	wait "$p1" || fail "RK_AUTH=off: the follower exited $?"
	pids=
	[ "$(grep -c "RK_AUTH=off: any process that reaches" "$tmp/off0.err")" = 1 ] ||
		fail "RK_AUTH=off: not one warning"
	echo "safe by default: refused on $addr without a secret; RK_AUTH=off warns once"
else
	echo "no non-loopback IPv4 address: the safe-by-default refusal is not tried"
fi

# 3. rk-launch: no session or secret in any argv, locally or through ssh
cat >"$tmp/ssh" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
	case $1 in -o) shift 2 ;; -*) shift ;; *) break ;; esac
done
shift	# the host
exec sh -c "$*"
EOF
chmod +x "$tmp/ssh"
# each rank prints what it was given, then stays for the scan
rankcmd='printf "S=%s K=%s\n" "$RK_SESSION" "$(cat "$RK_SECRET_FILE")"; sleep 4'
"$launch" --hosts localhost,localhost -- sh -c "$rankcmd" >"$tmp/ll.out" 2>"$tmp/ll.err" &
lp=$!
"$launch" --ssh "$tmp/ssh" --port "$port" --hosts node-a,node-b -- sh -c "$rankcmd" \
	>"$tmp/ls.out" 2>"$tmp/ls.err" &
sp=$!
pids="$lp $sp"
i=0
while [ "$(grep -c 'K=' "$tmp/ll.out" "$tmp/ls.out" | awk -F: '{ s += $2 } END { print s }')" != 4 ]; do
	[ $i -ge 100 ] && fail "rk-launch: the ranks did not report within 10 s"
	sleep 0.1
	i=$((i + 1))
done
scans=0
for f in "$tmp/ll.out" "$tmp/ls.out"; do
	while read -r _ s k; do
		s=${s#S=}
		k=${k#K=}
		[ ${#k} = 64 ] || fail "rk-launch: a rank's secret is not 64 hex digits: '$k'"
		[ ${#s} = 18 ] || fail "rk-launch: a rank's session is not 0x + 16 digits: '$s'"
		for c in /proc/[0-9]*/cmdline; do
			tr '\0' ' ' <"$c" 2>/dev/null >"$tmp/cmdline"
			if grep -q -e "$k" -e "${s#0x}" "$tmp/cmdline"; then
				fail "rk-launch: $c holds the secret or the session: $(cat "$tmp/cmdline")"
			fi
			scans=$((scans + 1))
		done
	done <"$f"
done
[ "$(sed 's/^\[r.\] //' "$tmp/ll.out" | sort -u | wc -l)" = 1 ] ||
	fail "rk-launch: local ranks got different secrets or sessions"
[ "$(sed 's/^\[r.\] //' "$tmp/ls.out" | sort -u | wc -l)" = 1 ] ||
	fail "rk-launch: remote ranks got different secrets or sessions"
[ "$(sed 's/^\[r.\] //' "$tmp/ll.out" | sort -u)" != "$(sed 's/^\[r.\] //' "$tmp/ls.out" | sort -u)" ] ||
	fail "rk-launch: two jobs got the same secret"
wait "$lp" || fail "rk-launch (local) exited $?"
wait "$sp" || fail "rk-launch (ssh) exited $?"
pids=
echo "rk-launch: $scans argv scans while 4 ranks ran: no secret, no session"
exit 0
