#!/bin/sh
# The round watchdog, end to end (rk-serve TP2 under rk-launch, a small bound:
# RK_ROUND_TIMEOUT_MS=300). The toy backend's test hook RK_TEST_STALL makes
# rank 1 stall (docs/SERVE.md):
# 1. its worker sits 450 ms on round 4 (a GPU stream stuck in a collective):
#    the requests in flight fail alone with a 500 server_error naming rank 1 and
#    RK_EROUNDTIMEOUT (JSON and streaming), each rank logs which rank was slow,
#    /metrics counts it, and a later request succeeds;
# 2. its launch() blocks its loop thread 4 s on round 3 (a backend blocked
#    inside a collective call): /v1/stats and /metrics still answer, leaving
#    rank 1 out (rankrt_rank_answered 0), and the round fails naming rank 1
#    (a rank whose loop is blocked cannot report itself: the leader's backend
#    names the rank whose partials it still waits for);
# 3. its worker sits 3 s on round 3: the rounds after it queue behind and time
#    out too, and after 3 in a row of rank 1 the leader stops the job.
# It prints what failed and with what, what each rank logged, and the time to
# fail beside the bound (figures, not checks). Skips (77) without rk-serve's
# HTTP server or curl(1). Run from the build directory (tests/Makefile.inc
# sets builddir).
. "$(dirname "$0")/serve-common.sh"
command -v curl >/dev/null || { echo "SKIP: no curl(1)"; exit 77; }

bound=300
export RK_ROUND_TIMEOUT_MS=$bound

# start NAME STALL [PEER_TIMEOUT_MS]: a TP2 job with RK_TEST_STALL=STALL; sets $url
start()
{
	RK_TEST_STALL=$2 RK_PEER_TIMEOUT_MS=${3:-5000} "$launch" --hosts localhost,localhost -- \
		"$serve" --http 127.0.0.1:0 </dev/null >"$tmp/$1.out" 2>"$tmp/$1.err" &
	lpid=$!
	wait_url "$tmp/$1.out" "$lpid" '\[r0\] rk-serve:'
}

# stop: SIGTERM the job and wait for it (a hang guard, not a figure)
stop()
{
	kill -TERM "$lpid" 2>/dev/null
	wait_gone "$lpid" 30 || fail "the job did not stop in 30 s"
	wait "$lpid" 2>/dev/null
	lpid=
}

# post NAME BODY: POST /v1/completions; NAME.body and NAME.code ("STATUS SECONDS")
post()
{
	curl -s -m 60 -o "$tmp/$1.body" -w '%{http_code} %{time_total}' \
		"$url/v1/completions" -d "$2" >"$tmp/$1.code" 2>/dev/null
}

# slow_lines FILE: what each rank logged about the slow rank
slow_lines()
{
	grep -E 'did not finish|rounds in a row|did not answer' "$1" | sed 's/^/    /'
}

# ---- 1. a follower's worker stalls on round 4 -----------------------------------------
start stall 1:4:450
pids=
for i in 1 2 3; do
	post "json$i" '{"prompt":"watchdog '"$i"'","max_tokens":40}' &
	pids="$pids $!"
done
post stream '{"prompt":"watchdog s","max_tokens":40,"stream":true}' &
pids="$pids $!"
for p in $pids; do
	wait "$p"
done
pids=
sleep 1 # rank 1's worker is past its stall: the next round is not queued behind it
post later '{"prompt":"after the stall","max_tokens":8}'
curl -s -m 30 "$url/metrics" >"$tmp/stall.metrics"
echo "1. rank 1's worker stalls 450 ms on round 4 (bound ${bound} ms):"
nfail=0
for n in json1 json2 json3 stream later; do
	read -r code secs <"$tmp/$n.code"
	msg=$(sed -n 's/.*"message":"\([^"]*\)".*/\1/p' "$tmp/$n.body" | head -n 1)
	ms=$(awk -v s="$secs" 'BEGIN { printf "%d", s * 1000 }')
	if [ -n "$msg" ]; then
		echo "  $n: HTTP $code after $ms ms (bound $bound ms): $msg"
		nfail=$((nfail + 1))
		case "$msg" in
		*"rank 1 did not finish"*RK_EROUNDTIMEOUT*) ;;
		*) fail "$n: failed with '$msg', not a round timeout of rank 1" ;;
		esac
		grep -q '"type":"server_error"' "$tmp/$n.body" || fail "$n: no server_error"
		[ "$n" = stream ] || [ "$code" = 500 ] || fail "$n: HTTP $code, not 500"
	else
		echo "  $n: HTTP $code after $ms ms: ok"
		[ "$code" = 200 ] || fail "$n: HTTP $code"
	fi
done
[ $nfail -ge 1 ] || fail "no request failed: the stall did not hit a round in flight"
read -r code secs <"$tmp/later.code"
grep -q '"finish_reason":"length"' "$tmp/later.body" || fail "the request after the stall failed"
echo "  each rank's log:"
slow_lines "$tmp/stall.err"
grep -q '\[r0\].*rank 1 did not finish' "$tmp/stall.err" || fail "rank 0 did not log rank 1"
grep -q '\[r1\].*rank 1 did not finish' "$tmp/stall.err" || fail "rank 1 did not hear of rank 1"
n=$(sed -n 's/^rankrt_sched_round_timeouts_total{[^}]*} \([0-9]*\)$/\1/p' "$tmp/stall.metrics")
echo "  rankrt_sched_round_timeouts_total $n"
[ "${n:-0}" -ge 1 ] || fail "/metrics counts no round timeout"
stop

# ---- 2. a follower's loop blocks 4 s on round 3 ---------------------------------------
# (its heartbeats stop meanwhile: a peer timeout above the block keeps it alive)
start loop 1:3:4000:loop 20000
post blocked '{"prompt":"watchdog loop","max_tokens":40}' &
cpid=$!
# asked once round 3 has failed: rank 1's loop is blocked until well after
i=0
until grep -q 'round 3: rank 1 did not finish' "$tmp/loop.err"; do
	[ $i -ge 300 ] && fail "round 3 did not time out in 30 s"
	sleep 0.1
	i=$((i + 1))
done
curl -s -m 30 -o "$tmp/loop.stats" -w '%{http_code} %{time_total}' "$url/v1/stats" \
	>"$tmp/stats.code"
curl -s -m 30 -o "$tmp/loop.metrics" -w '%{http_code} %{time_total}' "$url/metrics" \
	>"$tmp/metrics.code"
wait "$cpid"
cpid=
echo "2. rank 1's loop blocks 4 s in launch() of round 3:"
for n in stats metrics; do
	read -r code secs <"$tmp/$n.code"
	[ $n = stats ] && path=/v1/stats || path=/metrics
	echo "  $path during the block: HTTP $code after $secs s"
	[ "$code" = 200 ] || fail "$path: HTTP $code during the block"
done
grep -q '^rankrt_rank_answered{rank="1"} 0$' "$tmp/loop.metrics" ||
	fail "/metrics does not say rank 1 left the scrape out"
read -r code secs <"$tmp/blocked.code"
echo "  the request in round 3: HTTP $code after $secs s:" \
	"$(sed -n 's/.*"message":"\([^"]*\)".*/\1/p' "$tmp/blocked.body")"
grep -q 'RK_EROUNDTIMEOUT' "$tmp/blocked.body" || fail "the blocked round did not time out"
echo "  each rank's log:"
slow_lines "$tmp/loop.err"
stop

# ---- 3. rank 1 misses 3 rounds in a row: the job stops -------------------------------
start rule 1:3:3000
nreq=0
while kill -0 "$lpid" 2>/dev/null && [ $nreq -lt 20 ]; do
	post "rule$nreq" '{"prompt":"watchdog rule","max_tokens":40}'
	nreq=$((nreq + 1))
done
wait_gone "$lpid" 30 || fail "the job did not stop after 3 timeouts in a row"
wait "$lpid"
rc=$?
lpid=
echo "3. rank 1's worker stalls 3 s on round 3: $nreq requests, the job exited $rc:"
slow_lines "$tmp/rule.err"
grep -q 'rank 1 missed 3 rounds in a row: stopping the job' "$tmp/rule.err" ||
	fail "the leader did not stop the job by the rule"
[ $rc != 0 ] || fail "the job stopped by the rule exited 0"
echo "PASS"
