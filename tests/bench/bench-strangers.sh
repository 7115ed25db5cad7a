#!/usr/bin/env bash
# The bounded-stranger receipt: a TP2 rk-serve job with a secret, whose leader's
# port gets 200 idle connections and then 1000 rapid ones (connect, a few bytes,
# close) while its follower joins, and again during a decode. Prints: how long
# the real follower took to join, the leader's RSS before, during (the highest
# sampled) and after, the leader's log lines per second during the floods, the
# refusal counts the leader summed up, and whether rk-load --check-ref passed.
# A benchmark: it prints figures and fails only when the job itself fails.
#
#   builddir=. ../tests/bench/bench-strangers.sh      (from the build directory)
#   IDLE=200 RAPID=1000 BENCH_OUT=file          (defaults; BENCH_OUT: also write there)
set -u
b=${builddir:-.}
serve=$b/examples/serve/rk-serve
load=$b/examples/load/rk-load
idle=${IDLE:-200}
rapid=${RAPID:-1000}
[ -x "$serve" ] && [ -x "$load" ] || { echo "no $serve or $load"; exit 77; }
tmp=$(mktemp -d) || exit 99
pids=()
cleanup()
{
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
out()
{
	echo "$*"
	[ -n "${BENCH_OUT:-}" ] && echo "$*" >>"$BENCH_OUT"
}
now_ms() { date +%s%3N; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

port=$(( (($$ * 13) % 20000) + 30000 ))
key=$tmp/job.key
(umask 077 && printf '%s\n' "bench-strangers: the job's secret, 32+ bytes" >"$key")
model="--hidden 512 --model-seed 3"
export RK_LOG=info RK_CONNECT_TIMEOUT_MS=30000 RK_REFUSED_LOG_MS=${REFUSED_LOG_MS:-500}

RK_RANK=0 RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$port RK_SECRET_FILE=$key \
	"$serve" --http 127.0.0.1:0 $model </dev/null >"$tmp/r0.out" 2>"$tmp/r0.err" &
p0=$!
pids+=("$p0")
for _ in $(seq 100); do
	ss -ltn 2>/dev/null | grep -q "127.0.0.1:$port " && break
	sleep 0.05
done
sleep 0.2
rss_before=$(rss_kb "$p0")

# flood N: N connections one after another, each sends a little garbage and closes
flood()
{
	local i c
	for ((i = 0; i < $1; i++)); do
		exec {c}<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null || continue
		printf 'GET / HTTP/1.0\r\n\r\n' >&$c 2>/dev/null
		exec {c}>&-
	done
}
# sample the leader's RSS into $tmp/rss until $tmp/stop exists
sampler()
{
	while [ ! -e "$tmp/stop" ]; do
		rss_kb "$p0" >>"$tmp/rss"
		sleep 0.02
	done
}
sampler &
pids+=($!)

# 1. 200 idle connections held open, then 1000 rapid ones, while the follower joins
lines0=$(wc -l <"$tmp/r0.err")
t_flood=$(now_ms)
declare -a held
for ((i = 0; i < idle; i++)); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$port" && held+=("$fd")
done
flood "$rapid" &
fp=$!
pids+=("$fp")
t0=$(now_ms)
RK_RANK=1 RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$port RK_SECRET_FILE=$key \
	"$serve" $model </dev/null >"$tmp/r1.out" 2>"$tmp/r1.err" &
p1=$!
pids+=("$p1")
t_join=
for _ in $(seq 2000); do
	if grep -q "rank 1 joined" "$tmp/r0.err"; then
		t_join=$(now_ms)
		break
	fi
	sleep 0.005
done
wait "$fp"
[ -n "$t_join" ] || { echo "FAIL: the follower did not join"; tail "$tmp"/r*.err; exit 1; }
join_ms=$((t_join - t0))

# 2. a decode while another flood runs
url=
for _ in $(seq 300); do
	url=$(sed -n 's/^rk-serve: .* listening on \(http:[^ ]*\)$/\1/p' "$tmp/r0.out" "$tmp/r0.err")
	[ -n "$url" ] && break
	sleep 0.1
done
flood "$rapid" &
fp=$!
pids+=("$fp")
"$load" --url "$url" --streams 1,4 --modes greedy,sampled --draft plain --requests 8 \
	--max-tokens 32 --check-ref >"$tmp/load" 2>&1
load_rc=$?
wait "$fp"
t_end=$(now_ms)
for fd in "${held[@]}"; do exec {fd}>&-; done
touch "$tmp/stop"
rss_during=$(sort -n "$tmp/rss" | tail -n 1)
sleep 3	# the held ones' handshake time runs out; the summaries are logged
rss_after=$(rss_kb "$p0")
lines1=$(wc -l <"$tmp/r0.err")
secs=$(awk -v a="$t_flood" -v b="$(now_ms)" 'BEGIN { printf "%.2f", (b - a) / 1000 }')
flood_s=$(awk -v a="$t_flood" -v b="$t_end" 'BEGIN { printf "%.2f", (b - a) / 1000 }')

out "bench-strangers: $idle idle + 2 x $rapid rapid connections to a TP2 leader with a secret"
out "  follower joined after:       $join_ms ms (during the first flood)"
out "  leader RSS before/during/after: $rss_before / $rss_during / $rss_after KiB"
out "  floods and decode took:       $flood_s s"
out "  leader log lines:            $((lines1 - lines0)) in $secs s, the floods and 3 s after ($(awk -v n=$((lines1 - lines0)) -v s="$secs" 'BEGIN { printf "%.1f", n / s }')/s)"
out "  rk-load --check-ref:         $([ $load_rc = 0 ] && echo passed || echo "FAILED ($load_rc)")"
grep -E "refused (a connection|[0-9]+ more)" "$tmp/r0.err" | sed 's/^/  log: /' | while read -r l; do out "$l"; done
out "  rk-load during the second flood:"
grep -E '^ *(streams|[0-9]+ ) ' "$tmp/load" | while read -r l; do out "    $l"; done
kill -TERM "$p0" "$p1" 2>/dev/null
wait "$p0" "$p1" 2>/dev/null
[ $load_rc = 0 ]
