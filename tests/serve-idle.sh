#!/bin/sh
# rk-serve's HTTP connections cannot lock clients out:
#  1. with more idle connections open than --http-max-conns (clients that
#     connect and send nothing, for over a second), a new client is still
#     served: the connection idle longest is closed to make room (/v1/stats
#     says how many were), and the idle timeout plays no part (an hour);
#     The same when the idle connections fill every slot rk-serve accepts
#     (2N) and more wait in the listen backlog;
#  2. idle connections are closed after --http-idle-timeout;
#  3. a request that waits for the model longer than that timeout still gets
#     its whole reply (waiting for tokens is not idleness).
# rk-serve runs alone (TP1). Skips (77) without rk-serve's HTTP server or
# rk-load. Run from the build directory (tests/Makefile.inc sets builddir).
. "$(dirname "$0")/serve-common.sh"
hold=$b/tests/hold-conns
[ -x "$hold" ] || { echo "no $hold"; exit 99; }

# start NAME ARGS...: rk-serve ARGS alone; sets spid, url and port
start()
{
	name=$1
	shift
	"$serve" --http 127.0.0.1:0 "$@" </dev/null >"$tmp/$name.out" 2>"$tmp/$name.err" &
	spid=$!
	wait_url "$tmp/$name.out" "$spid" "rk-serve:"
}

stop()
{
	kill -TERM "$spid"
	wait "$spid" || fail "rk-serve exited $? on SIGTERM"
	spid=
}

# 1. 8 connections allowed, 12 idle ones open; the idle timeout is an hour
start limit --http-max-conns 8 --http-idle-timeout 3600
"$hold" 127.0.0.1 "$port" 12 >"$tmp/hold.out" 2>&1 &
hpid=$!
i=0
until grep -q '^open 12$' "$tmp/hold.out" 2>/dev/null; do
	[ $i -ge 100 ] && fail "hold-conns did not connect"
	kill -0 "$hpid" 2>/dev/null || fail "hold-conns exited"
	sleep 0.1
	i=$((i + 1))
done
sleep 1.5 # quiet for longer than HTTP_QUIET_NS: a connection that just opened is not idle
"$load" --url "$url" --get /health --timeout 60 >"$tmp/health" 2>&1 ||
	fail "a new client was not served with 12 idle connections open"
grep -q '^HTTP 200$' "$tmp/health" || fail "/health: $(head -n 1 "$tmp/health")"
"$load" --url "$url" --post '{"prompt":"idle","max_tokens":8}' --timeout 60 >"$tmp/post" 2>&1 ||
	fail "a completion was not served with 12 idle connections open"
grep -q '^HTTP 200$' "$tmp/post" || fail "POST: $(head -n 1 "$tmp/post")"
"$load" --url "$url" --get /v1/stats --timeout 60 >"$tmp/stats" 2>&1 || fail "/v1/stats"
evicted=$(sed -n 's/.*"evicted":\([0-9]*\).*/\1/p' "$tmp/stats")
conns=$(sed -n 's/.*"http":{"connections":\([0-9]*\).*/\1/p' "$tmp/stats")
[ -n "$evicted" ] && [ "$evicted" -ge 4 ] || fail "evicted: '$evicted', expected 4 or more"
[ -n "$conns" ] && [ "$conns" -le 9 ] || fail "connections: '$conns', expected 9 or fewer"
echo "12 idle connections, limit 8: served; $evicted idle connections closed, $conns open"
kill -KILL "$hpid"
hpid=
stop

# 1b. 2 allowed: 4 accepted, the other 6 idle ones in the backlog
start full --http-max-conns 2 --http-idle-timeout 3600
"$hold" 127.0.0.1 "$port" 10 >"$tmp/hold1b.out" 2>&1 &
hpid=$!
i=0
until grep -q '^open 10$' "$tmp/hold1b.out" 2>/dev/null; do
	[ $i -ge 100 ] && fail "hold-conns did not connect"
	kill -0 "$hpid" 2>/dev/null || fail "hold-conns exited"
	sleep 0.1
	i=$((i + 1))
done
sleep 1.5
"$load" --url "$url" --get /health --timeout 60 >"$tmp/health1b" 2>&1 ||
	fail "a new client was not served with 10 idle connections open, 4 accepted"
grep -q '^HTTP 200$' "$tmp/health1b" || fail "/health: $(head -n 1 "$tmp/health1b")"
echo "10 idle connections, limit 2 (4 accepted): served"
kill -KILL "$hpid"
hpid=
stop

# 2. and 3. an idle timeout of 1 s, one stream per round, rounds of ~1 ms
start timeout --http-idle-timeout 1 --hidden 32768 --max-batch 1
timeout 60 "$hold" 127.0.0.1 "$port" 3 until-closed >"$tmp/hold2.out" 2>&1 ||
	fail "idle connections were not closed within 60 s of a 1 s idle timeout"
grep -q '^closed 3$' "$tmp/hold2.out" || fail "hold-conns: $(cat "$tmp/hold2.out")"
# a JSON request of 4096 tokens holds the batch; a stream queued behind it
# waits that long for its first token, and both get their whole reply
t0=$(date +%s)
"$load" --url "$url" --post '{"prompt":"a long wait","max_tokens":4096}' --timeout 120 \
	>"$tmp/long" 2>&1 &
hpid=$!
i=0
until "$load" --url "$url" --get /v1/stats 2>/dev/null | grep -q '"active":1'; do
	[ $i -ge 300 ] && fail "the long request did not start"
	sleep 0.1
	i=$((i + 1))
done
"$load" --url "$url" --post '{"prompt":"queued","max_tokens":8,"stream":true}' --timeout 120 \
	>"$tmp/queued" 2>&1 || fail "the queued stream got no reply"
t1=$(date +%s)
wait "$hpid" || fail "the long JSON request got no reply"
hpid=
grep -q '^HTTP 200$' "$tmp/long" || fail "long POST: $(head -n 1 "$tmp/long")"
grep -q '"completion_tokens":4096' "$tmp/long" || fail "long POST: not 4096 tokens"
grep -q '^data: \[DONE\]' "$tmp/queued" || fail "the queued stream has no [DONE]"
grep -q '^data: {"error"' "$tmp/queued" && fail "the queued stream failed"
echo "idle timeout 1 s: 3 idle connections closed; a stream queued about $((t1 - t0)) s" \
	"behind a JSON request, both whole"
stop
exit 0
