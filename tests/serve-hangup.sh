#!/bin/sh
# A client that hangs up cancels its request (rk-serve, two ranks under
# rk-launch): a JSON client killed while its request runs, and streaming
# clients that close the connection after their first tokens. The server's
# counters say so (requests.cancelled; far fewer tokens than were asked for),
# and requests running beside them are unaffected (rk-load --check-ref over
# the same time, and the token hashes after). Skips (77) without rk-serve's
# HTTP server or rk-load. Run from the build directory (tests/Makefile.inc
# sets builddir).
. "$(dirname "$0")/serve-common.sh"

# counter NAME: one counter of /v1/stats ("cancelled", "active", "tokens", ...)
counter()
{
	"$load" --url "$url" --get /v1/stats 2>/dev/null | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"
}

# until_counter NAME VALUE WHAT: wait until the counter is VALUE (the harness's bound)
until_counter()
{
	i=0
	until [ "$(counter "$1")" = "$2" ]; do
		[ $i -ge 600 ] && fail "$3: $1 is $(counter "$1"), not $2"
		sleep 0.1
		i=$((i + 1))
	done
}

# V=256 H=16384 at TP2: 4096 tokens take seconds, a cancel a round
"$launch" --hosts localhost,localhost -- "$serve" --http 127.0.0.1:0 --hidden 16384 \
	</dev/null >"$tmp/serve.out" 2>"$tmp/serve.err" &
lpid=$!
wait_url "$tmp/serve.out" "$lpid" '\[r0\] rk-serve:'

# 1. a JSON client killed while its request runs (alone: "active" is its own).
# On a loaded machine the request can finish before the kill lands (kill finds
# no process): then it was not hung up on, and the next try starts afresh.
try=1
while :; do
	tok0=$(counter tokens)
	"$load" --url "$url" --post '{"prompt":"hang up","max_tokens":4096}' --timeout 120 \
		>"$tmp/json.out" 2>&1 &
	cpid=$!
	i=0
	until [ "$(counter active)" = 1 ] && [ "$(counter tokens)" -gt "$tok0" ] 2>/dev/null; do
		# done between two looks (a loaded machine): the kill below finds no process
		kill -0 "$cpid" 2>/dev/null || break
		[ $i -ge 300 ] && fail "the JSON request did not start"
		sleep 0.1
		i=$((i + 1))
	done
	kill -KILL "$cpid" 2>/dev/null
	killed=$?
	wait "$cpid" 2>/dev/null
	cpid=
	[ $killed = 0 ] && break
	[ $try -ge 5 ] && fail "the JSON request finished before its client was killed, 5 times"
	echo "try $try: the JSON request finished before its client was killed; again"
	until_counter active 0 "a finished JSON request"
	try=$((try + 1))
done
until_counter cancelled 1 "the JSON client hung up"
until_counter active 0 "the JSON client hung up"
tok1=$(counter tokens)
[ $((tok1 - tok0)) -lt 4096 ] || fail "the hung-up JSON request ran on: $((tok1 - tok0)) tokens of 4096"

# 2. streaming clients that hang up after their first tokens, with requests
# beside them that are checked against the TP1 reference
"$load" --url "$url" --streams 2 --modes greedy,sampled --draft plain --requests 8 \
	--max-tokens 64 --check-ref --timeout 120 >"$tmp/beside.load" 2>&1 &
bpid=$!
"$load" --url "$url" --streams 4 --modes sampled --draft plain --requests 8 --max-tokens 4096 \
	--hang-up --timeout 120 >"$tmp/hangup.load" 2>&1 || fail "rk-load --hang-up failed"
wait "$bpid"
rc=$?
bpid=
[ $rc = 0 ] || fail "the requests beside the hang-ups: rk-load exited $rc"
until_counter cancelled 9 "8 streams hung up"
until_counter active 0 "after the hang-ups"
[ "$(counter failed)" = 0 ] || fail "$(counter failed) requests failed"
tok2=$(counter tokens)
# beside: 16 x 64 tokens; the 8 hung-up streams together less than one full request
[ $((tok2 - tok1)) -lt $((16 * 64 + 4096)) ] ||
	fail "$((tok2 - tok1)) tokens for 16 x 64 and 8 hung-up streams: they ran on"
echo "a hung-up JSON request: $((tok1 - tok0)) of 4096 tokens (try $try); 8 hung-up streams and 16 x 64 beside:" \
	"$((tok2 - tok1)) tokens; 9 cancelled, 0 failed"

# and the server is as before
"$load" --url "$url" --streams 2 --modes greedy,sampled --draft plain --requests 8 \
	--max-tokens 64 --check-ref --timeout 120 >"$tmp/after.load" 2>&1 ||
	fail "after the hang-ups: rk-load exited $?"
kill -TERM "$lpid"
wait "$lpid"
rc=$?
lpid=
[ $rc = 143 ] || fail "SIGTERM: rk-launch exited $rc"
exit 0
