#!/bin/sh
# Decode benchmark: rk-serve as two ranks under rk-launch (TP2 over loopback,
# CPU backend), driven by rk-load at 1/4/8 concurrent streams x greedy/sampled
# x plain/drafted, each cell the median of several runs, then idle to show what
# the ranks burn when nothing happens. Prints rk-load's receipt table. Not in
# TESTS (a benchmark); run it from the build directory:
#   builddir=. ../tests/bench-serve.sh          (or from the source tree: tests/bench-serve.sh)
# Knobs (environment): BENCH_RUNS (5), BENCH_REQUESTS (64), BENCH_TOKENS (64),
# BENCH_IDLE (60 s), BENCH_ARGS (extra rk-serve options, e.g. "--hidden 4096"),
# BENCH_LOAD_ARGS (extra rk-load options, e.g. "--prompt-set repeat").
b=${builddir:-.}
launch=$b/examples/rk-launch
serve=$b/examples/rk-serve
load=$b/examples/rk-load
if [ ! -x "$serve" ] || [ ! -x "$load" ] || [ ! -x "$launch" ]; then
	echo "no $serve, $load or $launch: build first (they need libmicrohttpd, jansson, libcurl)"
	exit 77
fi
runs=${BENCH_RUNS:-5}
requests=${BENCH_REQUESTS:-64}
tokens=${BENCH_TOKENS:-64}
idle=${BENCH_IDLE:-60}

tmp=$(mktemp -d) || exit 1
lpid=
cleanup()
{
	[ -n "$lpid" ] && kill -KILL "$lpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$launch" -v --hosts localhost,localhost -- "$serve" --http 127.0.0.1:0 $BENCH_ARGS \
	</dev/null >"$tmp/out" 2>"$tmp/err" &
lpid=$!
url=
i=0
while [ -z "$url" ]; do
	if [ $i -ge 300 ] || ! kill -0 "$lpid" 2>/dev/null; then
		echo "rk-serve did not start:"
		cat "$tmp/out" "$tmp/err"
		exit 1
	fi
	sleep 0.1
	i=$((i + 1))
	url=$(sed -n 's/^\[r0\] rk-serve: .* listening on \(http:[^ ]*\)$/\1/p' "$tmp/out")
done
p0=$(sed -n 's/^rk-launch: rank 0: pid \([0-9]*\) .*/\1/p' "$tmp/err")

echo "# $(uname -sr), $(nproc) CPUs,"\
	"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "# rk-serve $BENCH_ARGS; RK_* in effect: $(env | grep '^RK_' | tr '\n' ' ')"
# shellcheck disable=SC2086
"$load" --url "$url" --streams 1,4,8 --modes greedy,sampled --draft plain,drafted \
	--requests "$requests" --max-tokens "$tokens" --prompt-set fixed --runs "$runs" \
	--idle "$idle" $BENCH_LOAD_ARGS
rc=$?

kill -TERM "$p0"
wait "$lpid"
lrc=$?
lpid=
[ $lrc = 0 ] || { echo "rk-launch exited $lrc"; cat "$tmp/err"; }
[ $rc = 0 ] && [ $lrc = 0 ]
