#!/bin/sh
# A man in the middle cannot change a job's output (WIRE.md, "Frame tags").
#
# A TP2 rk-serve job with a secret and RK_FRAME_AUTH=on, its link on TCP
# (RK_SHM=off), the follower reaching the leader through tests/mitm-relay,
# which parses every frame after the handshake as tagged. rk-load --check-ref
# passes through it (the tags are on the wire and verify). Then the relay flips
# one bit of a token in the leader's next ROUND and fixes both CRCs: the
# follower fails its link with RK_EFRAMEAUTH, the round never reaches its
# scheduler, and no request is answered with other tokens than the model's
# (rk-load never exits 4, "differs from the TP1 reference").
# Skips (77) without rk-serve/rk-load, or when rankrt was built without OpenSSL.
# Run from the build directory (tests/Makefile.inc sets builddir).
. "$(dirname "$0")/serve-common.sh"
grep -q '^#define RK_HAVE_OPENSSL 1' "$b/config.h" 2>/dev/null ||
	{ echo "SKIP: built without OpenSSL: no frame tags"; exit 77; }
relay=$b/tests/mitm-relay
[ -x "$relay" ] || { echo "no $relay"; exit 99; }

key=$tmp/job.key
(umask 077 && printf '%s\n' "decode-mitm: the job's secret, 32+ bytes long" >"$key")
model="--hidden 256 --model-seed 7"
export RK_LOG=info RK_CONNECT_TIMEOUT_MS=20000 RK_SHM=off RK_FRAME_AUTH=on RK_SECRET_FILE="$key"

# the leader, on a port from the PID (another one when it is taken)
port=$(( (($$ * 11) % 20000) + 30000 ))
try=1
while :; do
	RK_RANK=0 RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$port \
		"$serve" --http 127.0.0.1:0 $model </dev/null >"$tmp/r0.out" 2>"$tmp/r0.err" &
	p0=$!
	pids="$pids $p0"
	sleep 0.5
	kill -0 "$p0" 2>/dev/null && break
	grep -q "Address already in use" "$tmp/r0.err" && [ $try -lt 5 ] ||
		fail "the leader exited"
	port=$(( ((port - 30000 + 7919) % 20000) + 30000 ))
	try=$((try + 1))
done

"$relay" --tags "$port" >"$tmp/relay.out" 2>"$tmp/relay.err" &
rp=$!
pids="$pids $rp"
i=0
until rport=$(sed -n 's/^port \([0-9]*\)$/\1/p' "$tmp/relay.out") && [ -n "$rport" ]; do
	[ $i -ge 100 ] && fail "the relay did not listen"
	sleep 0.1
	i=$((i + 1))
done
RK_RANK=1 RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$rport \
	"$serve" $model </dev/null >"$tmp/r1.out" 2>"$tmp/r1.err" &
p1=$!
pids="$pids $p1"
wait_url "$tmp/r0.out" "$p0" "rk-serve:"

# 1. through the relay, tagged: the model's tokens
timeout -s KILL 60 "$load" --url "$url" --streams 1,4 --modes greedy,sampled \
	--draft plain --requests 4 --max-tokens 16 --check-ref >"$tmp/clean.load" 2>&1 ||
	fail "rk-load --check-ref through the relay: exit $?"
grep -q "rank 1 joined from .*, authenticated" "$tmp/r0.err" ||
	fail "the follower did not join through the relay"

# 2. one bit of the next ROUND flipped, its CRCs fixed
kill -USR1 "$rp"
timeout -s KILL 60 "$load" --url "$url" --streams 1 --modes greedy --draft plain \
	--requests 4 --max-tokens 16 --check-ref >"$tmp/flip.load" 2>&1
rc=$?
grep -q "^flipped ROUND seq" "$tmp/relay.out" || fail "the relay flipped no ROUND"
[ $rc != 4 ] || fail "a request was answered with other tokens than the model's"
[ $rc != 0 ] || fail "every request succeeded after a flipped ROUND"
wait_gone "$p1" 20 || fail "the follower still runs after a flipped ROUND"
grep -q "RK_EFRAMEAUTH" "$tmp/r1.err" || fail "the follower's log names no RK_EFRAMEAUTH"
grep -q "differs from the TP1 reference" "$tmp/flip.load" &&
	fail "rk-load saw tokens other than the model's"
echo "decode-mitm: $(sed -n 's/^flipped //p' "$tmp/relay.out") refused:" \
	"$(grep -m1 -o 'RK_EFRAMEAUTH[^)]*' "$tmp/r1.err"); rk-load exit $rc, no token changed"
exit 0
