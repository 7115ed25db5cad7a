#!/usr/bin/env bash
# Wait-policy benchmark: rk-pingpong over TCP loopback for every wait shape,
# all in one run so the figures compare as ratios. Usage:
#   tests/bench/bench-wait.sh [BUILD_DIR] [ROUND_TRIPS] [RUNS] [IDLE_S]
# Prints markdown tables; docs/BENCH.md holds a recorded run.
set -euo pipefail
b=${1:-.}
n=${2:-20000}
runs=${3:-5}
idle=${4:-60}
pp="$b/examples/pingpong/rk-pingpong"
[ -x "$pp" ] || { echo "no $pp: build first" >&2; exit 1; }
# TCP loopback: the two ranks share a host, so tcp:// links would move to shm
export RK_SHM=off

echo "## $(date -u +%F) $(uname -r), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo
echo "### 1. Busy round trips, each mode (both ranks pinned, rank r on CPU r)"
echo '```'
"$pp" --local --pin --count "$n" --runs "$runs"
echo '```'
echo
echo "### 2. Ring flags and wait shapes (busy round trips, p50/p99 us)"
echo
echo "| shape | settings | p50_us | p99_us | cpu_s_r0 | cpu_s_r1 |"
echo "|---|---|---|---|---|---|"
row() {
	local name=$1 mode=$2; shift 2
	local out
	out=$(env "$@" "$pp" --local --pin --count "$n" --runs "$runs" --wait "$mode" | tail -1)
	read -r _ p50 p99 _ c0 c1 <<<"$out"
	echo "| $name | \`$* --wait=$mode\` | $p50 | $p99 | $c0 | $c1 |"
}
row "default (spin window, then block)" adaptive RK_LOG=warn
row "peek spin, COOP_TASKRUN" spin RK_COOP_TASKRUN=1
row "peek spin, default ring flags" spin RK_COOP_TASKRUN=0
row "blocking wait" block RK_LOG=warn
row "SQPOLL + default policy" adaptive RK_SQPOLL=1
row "SQPOLL + peek spin" spin RK_SQPOLL=1
echo
echo "### 3. Wake-up after an idle gap (p50/p99 us of a round trip that follows a gap)"
echo
echo "| gap | default p50 | default p99 | spin p50 | block p50 | default cpu_s r1 | spin cpu_s r1 | block cpu_s r1 |"
echo "|---|---|---|---|---|---|---|---|"
for gap in 100 1000 5000 15000 40000; do
	cnt=$(( gap >= 15000 ? 100 : 400 ))
	out=$("$pp" --local --pin --count "$cnt" --warmup 5 --runs 3 --gap-us "$gap")
	a=$(grep '^adaptive' <<<"$out"); s=$(grep '^spin' <<<"$out"); k=$(grep '^block' <<<"$out")
	echo "| ${gap} us | $(awk '{print $2}' <<<"$a") | $(awk '{print $3}' <<<"$a") | $(awk '{print $2}' <<<"$s") | $(awk '{print $2}' <<<"$k") | $(awk '{print $6}' <<<"$a") | $(awk '{print $6}' <<<"$s") | $(awk '{print $6}' <<<"$k") |"
done
if [ "$idle" -gt 0 ]; then
	echo
	echo "### 4. Idle CPU after the traffic"
	echo '```'
	"$pp" --local --pin --count 2000 --runs 1 --idle "$idle" | tail -1
	echo '```'
fi
