#!/bin/sh
# rk-serve's shutdown, trial after trial: two ranks under rk-launch, streams
# and JSON requests in flight (rk-load), then a stop of one kind:
#   follower  SIGTERM to rank 1 during decode
#   leader    SIGTERM to rank 0
#   launch    SIGTERM to rk-launch (forwarded to every rank)
#   timeout   timeout(1) SHUTDOWN_TIMEOUT s around rk-launch (it signals twice)
#   repeat    SIGTERM to both ranks, again and again until they are gone
# A trial passes when no rank crashed or was killed, no sanitizer spoke, every
# rank exited 0, every stream that began ended with [DONE] (after its last
# tokens or an error event), every JSON request that reached the server got a
# reply, rk-launch (or timeout) exited as it should (0, 0, 143, 124, 0), and no
# process is left. One line of counts per kind; exit 1 if any trial failed.
#
# SHUTDOWN_TRIALS (3) trials of each of SHUTDOWN_KINDS
# (follower,leader,launch,timeout,repeat); docs/BENCH.md has a 20-trial
# receipt from an ASan+UBSan build. Skips (77) without rk-serve's HTTP server
# or rk-load. Run from the build directory (tests/Makefile.inc sets builddir).
. "$(dirname "$0")/serve-common.sh"
trials=${SHUTDOWN_TRIALS:-3}
kinds=${SHUTDOWN_KINDS:-follower,leader,launch,timeout,repeat}
tmo=${SHUTDOWN_TIMEOUT:-5}

# count PATTERN FILE: matching lines (0 when none)
count()
{
	c=$(grep -c -- "$1" "$2" 2>/dev/null)
	echo "${c:-0}"
}

bad_total=0

# trial KIND N: one trial; adds to the kind's counters; a failure is said
trial()
{
	kind=$1
	nr=$2
	d=$tmp/$kind.$nr
	mkdir -p "$d"
	p0=
	p1=
	set -- "$launch" -v --hosts localhost,localhost -- "$serve" --http 127.0.0.1:0 --hidden 4096
	if [ "$kind" = timeout ]; then
		timeout "$tmo" "$@" </dev/null >"$d/out" 2>"$d/err" &
	else
		"$@" </dev/null >"$d/out" 2>"$d/err" &
	fi
	lpid=$!
	url=
	i=0
	while [ -z "$url" ] && kill -0 "$lpid" 2>/dev/null && [ $i -lt 600 ]; do
		sleep 0.1
		i=$((i + 1))
		url=$(sed -n 's/^\[r0\] rk-serve: .* listening on \(http:[^ ]*\)$/\1/p' "$d/out")
	done
	p0=$(sed -n 's/^rk-launch: rank 0: pid \([0-9]*\) .*/\1/p' "$d/err")
	p1=$(sed -n 's/^rk-launch: rank 1: pid \([0-9]*\) .*/\1/p' "$d/err")
	pids="$p0 $p1" # the ranks, until the trial's end
	busy=0
	if [ -n "$url" ]; then
		"$load" --url "$url" --streams 4 --modes sampled --draft plain --requests 400 \
			--max-tokens 512 --timeout 120 >"$d/streams" 2>&1 &
		spid=$!
		"$load" --url "$url" --streams 2 --modes greedy --draft plain --requests 100 \
			--max-tokens 512 --no-stream --timeout 120 >"$d/json" 2>&1 &
		jpid=$!
		i=0
		while [ $i -lt 300 ] && kill -0 "$lpid" 2>/dev/null; do
			"$load" --url "$url" --get /v1/stats 2>/dev/null |
				grep -q '"active":[1-9]' && { busy=1; break; }
			sleep 0.1
			i=$((i + 1))
		done
	fi
	[ $busy = 1 ] && sleep 0.3 # a few rounds in
	case $kind in
	follower) [ -n "$p1" ] && kill -TERM "$p1" ;;
	leader) [ -n "$p0" ] && kill -TERM "$p0" ;;
	launch) kill -TERM "$lpid" ;;
	repeat)
		# and again while they stop, until they are gone: a signal in the
		# last steps of a rank's teardown must not end it either
		i=0
		while [ -n "$p0" ] && [ $i -lt 200 ] && kill -TERM "$p1" "$p0" 2>/dev/null; do
			sleep 0.05
			i=$((i + 1))
		done
		;;
	esac
	why=
	if wait_gone "$lpid" 120; then
		wait "$lpid"
		rc=$?
	else
		rc=timeout
		why="$why rk-launch still running;"
	fi
	lpid=
	for p in $spid $jpid; do
		wait_gone "$p" 60 || why="$why rk-load still running;"
	done
	spid=
	jpid=
	sleep 0.2 # rk-launch's last reaping of the ranks' groups
	for p in $p0 $p1; do
		kill -0 "$p" 2>/dev/null && why="$why rank pid $p left;"
		pgrep -g "$p" >/dev/null 2>&1 && why="$why a process of group $p left;"
	done

	case $kind in
	follower | leader | repeat) want=0 ;;
	launch) want=143 ;;
	timeout) want=124 ;;
	esac
	[ "$rc" = "$want" ] || why="$why rk-launch exited $rc, not $want;"
	[ $busy = 1 ] || why="$why no request was running at the stop;"
	crash=$(count '^rk-launch: rank [0-9]* killed by signal' "$d/err")
	san=$(cat "$d"/* | grep -c 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:')
	ok=$(count '^rk-launch: rank [0-9]* exited with status 0$' "$d/err")
	[ "$crash" = 0 ] || why="$why $crash rank(s) killed by a signal;"
	[ "$san" = 0 ] || why="$why $san sanitizer report(s);"
	[ "$ok" = 2 ] || why="$why $ok of 2 ranks exited 0;"
	# rk-load names each request that did not run to its end, with why
	s_err=$(count '): server: ' "$d/streams")
	s_open=$(count 'the stream ended without \[DONE\]' "$d/streams")
	s_cut=$(grep ': request [0-9]* (' "$d/streams" 2>/dev/null |
		grep -v '): server: \|HTTP 503\|Couldn.t connect\|without \[DONE\]' | wc -l)
	j_stop=$(count 'HTTP 503: {"error":"RK_ESTOPPED' "$d/json")
	j_cut=$(grep ': request [0-9]* (' "$d/json" 2>/dev/null |
		grep -v 'HTTP 503\|Couldn.t connect' | wc -l)
	[ "$s_open" = 0 ] || why="$why $s_open stream(s) without [DONE];"
	[ "$s_cut" = 0 ] || why="$why $s_cut stream(s) cut;"
	[ "$j_cut" = 0 ] || why="$why $j_cut JSON request(s) without a reply;"

	k_crash=$((k_crash + crash))
	k_san=$((k_san + san))
	k_ok=$((k_ok + ok))
	k_streams=$((k_streams + s_err + s_open + s_cut))
	k_closed=$((k_closed + s_err))
	k_json=$((k_json + j_stop + j_cut))
	k_replied=$((k_replied + j_stop))
	k_rc="$k_rc$rc "
	if [ -n "$why" ]; then
		k_bad=$((k_bad + 1))
		echo "FAIL: $kind trial $nr:$why"
		for f in "$d"/*; do
			echo "--- $f"
			# requests refused once the server had gone say nothing
			grep -v 'Couldn.t connect' "$f" | tail -n 40
		done
	fi
	rm -rf "$d"
	p0=
	p1=
	pids=
}

printf '%-9s %6s %7s %9s %11s %14s %7s %13s %7s  %s\n' kind trials crashes sanitizer \
	ranks_exit0 streams_at_stop closed json_at_stop replied launcher_rc
for kind in $(echo "$kinds" | tr , ' '); do
	case $kind in
	follower | leader | launch | timeout | repeat) ;;
	*) echo "unknown kind $kind"; exit 99 ;;
	esac
	k_crash=0 k_san=0 k_ok=0 k_streams=0 k_closed=0 k_json=0 k_replied=0 k_bad=0 k_rc=
	n=1
	while [ $n -le "$trials" ]; do
		trial "$kind" $n
		n=$((n + 1))
	done
	printf '%-9s %6s %7s %9s %11s %14s %7s %13s %7s  %s\n' "$kind" "$trials" "$k_crash" \
		"$k_san" "$k_ok/$((2 * trials))" "$k_streams" "$k_closed" "$k_json" "$k_replied" \
		"$k_rc"
	bad_total=$((bad_total + k_bad))
done
[ $bad_total = 0 ] || { echo "$bad_total trial(s) failed"; exit 1; }
exit 0
