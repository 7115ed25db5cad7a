#!/bin/sh
# The HTTP burst receipt: rk-serve (the default toy model, TP2 on this host
# under rk-launch, or TP1) and BURST_CLIENTS streaming clients at once
# (tests/http-burst: every connect() before any answer is read), BURST_ROUNDS
# times in a row against the same server: the answers by status (200, 429,
# 503, other, none: no HTTP answer at all), the whole stream or not, and rank
# 0's peak resident memory (VmHWM). Not in TESTS; run from the build
# directory (docs/BENCH.md):
#   /work/ab/quiet.sh sh ../tests/bench/http-burst.sh
# Knobs: BURST_CLIENTS (2000), BURST_ROUNDS (2), BURST_TP (2), BURST_TOKENS
# (64 per request), BURST_ARGS (more rk-serve options, e.g.
# "--http-max-conns 64"), BURST_CLIENT (the client binary; default the build's
# tests/http-burst, so another build's rk-serve can be measured with it).
# Exit 0 when every client of every round got a whole answer.
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
client=${BURST_CLIENT:-$b/tests/http-burst}
clients=${BURST_CLIENTS:-2000}
rounds=${BURST_ROUNDS:-2}
tp=${BURST_TP:-2}
tokens=${BURST_TOKENS:-64}
for f in "$launch" "$serve" "$client"; do
	[ -x "$f" ] || { echo "no $f: build first (make check builds tests/http-burst)"; exit 77; }
done
"$serve" --help | grep -q -- '--http=' || { echo "rk-serve without HTTP"; exit 77; }
# each client is a descriptor here, each connection up to two in rank 0
ulimit -n "$(ulimit -Hn)" 2>/dev/null
need=$((clients + 64))
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge "$need" ] ||
	{ echo "ulimit -n $(ulimit -n): $need descriptors needed"; exit 77; }

tmp=$(mktemp -d) || exit 1
spid=
trap '[ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null; rm -rf "$tmp"' EXIT
hosts=localhost
i=1
while [ "$i" -lt "$tp" ]; do
	hosts=$hosts,localhost
	i=$((i + 1))
done
# shellcheck disable=SC2086
"$launch" -v --hosts "$hosts" -- "$serve" --http 127.0.0.1:0 $BURST_ARGS </dev/null \
	>"$tmp/serve.out" 2>"$tmp/serve.err" &
spid=$!
url=
i=0
while [ -z "$url" ]; do
	[ $i -ge 300 ] && { echo "not serving after 30 s"; cat "$tmp/serve.err"; exit 1; }
	sleep 0.1
	i=$((i + 1))
	url=$(sed -n 's/^\[r0\] rk-serve: .* listening on \(http:[^ ]*\)$/\1/p' "$tmp/serve.out")
done
port=${url##*:}
p0=$(sed -n 's/^rk-launch: rank 0: pid \([0-9]*\) .*/\1/p' "$tmp/serve.err")
echo "rk-serve: $(sed -n 's/^\[r0\] rk-serve: \(.*\), listening.*/\1/p' "$tmp/serve.out")," \
	"$BURST_ARGS${BURST_ARGS:+, }$clients streaming clients x $rounds, $tokens tokens each;" \
	"ulimit -n $(ulimit -n); net.core.somaxconn $(cat /proc/sys/net/core/somaxconn)"
rc=0
r=1
while [ "$r" -le "$rounds" ]; do
	t0=$(date +%s.%N)
	"$client" 127.0.0.1 "$port" "$clients" \
		"{\"model\":\"rankrt-toy\",\"prompt\":\"burst $r\",\"max_tokens\":$tokens,\"stream\":true}" \
		>"$tmp/round$r" 2>&1 || rc=1
	t1=$(date +%s.%N)
	printf 'round %d: %s; %.1f s\n' "$r" \
		"$(tr '\n' ' ' <"$tmp/round$r" | sed 's/ $//; s/clients [0-9]* //')" \
		"$(awk "BEGIN { print $t1 - $t0 }")"
	r=$((r + 1))
done
rss=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$p0/status" 2>/dev/null)
echo "rank 0 peak RSS: $((${rss:-0} / 1024)) MiB (VmHWM)"
kill -TERM "$spid"
wait "$spid"
spid=
[ $rc -eq 0 ] && echo "every client of every round got a whole answer" ||
	echo "some clients got no whole answer"
exit $rc
