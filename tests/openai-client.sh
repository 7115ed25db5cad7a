#!/bin/sh
# rk-serve as a drop-in server: the official OpenAI client library (the npm
# package "openai", on node) drives rk-serve at TP2 (tests/openai-client.cjs):
# models, completions and chat, streamed and not, stop strings and stop token
# ids, refused fields. The token ids it got hash as the native API's for the
# same prompts and sampling: rk-load's cells (POST /v1/completions with the
# rankrt fields) and rk-serve --bench (the scheduler, no HTTP). Then GET
# /metrics holds every rank's series, counts a port scanner's connection to the
# leader's rank port as a handshake refusal, and passes `promtool check
# metrics` (when promtool is installed), and the log has a timed line per
# request.
# Skips (77) without rk-serve/rk-load, node or npm, or when the package cannot
# be installed. npm installs it into a scratch directory (never the source
# tree); RK_TEST_OPENAI_DIR names a directory that has node_modules/openai
# already (no network needed then). Run from the build directory.
srcdir=${srcdir:-$(dirname "$0")/..}
N=8
M=16
. "$(dirname "$0")/serve-common.sh"
command -v node >/dev/null || { echo "SKIP: no node (Debian: nodejs)"; exit 77; }

# the client library: a given directory, or npm into the scratch directory
mod=
if [ -n "$RK_TEST_OPENAI_DIR" ]; then
	mod=$RK_TEST_OPENAI_DIR/node_modules/openai
	[ -f "$mod/package.json" ] || fail "RK_TEST_OPENAI_DIR=$RK_TEST_OPENAI_DIR has no node_modules/openai"
else
	command -v npm >/dev/null || { echo "SKIP: no npm (Debian: npm)"; exit 77; }
	if ! HOME=$tmp timeout 300 npm install --prefix "$tmp/npm" --no-audit --no-fund \
		--no-package-lock --silent openai@4 >"$tmp/npm.log" 2>&1; then
		tail -n 5 "$tmp/npm.log"
		echo "SKIP: npm could not install the openai package"
		exit 77
	fi
	mod=$tmp/npm/node_modules/openai
fi
ver=$(sed -n 's/^ *"version": "\([^"]*\)".*/\1/p' "$mod/package.json" | head -n 1)
echo "client: the openai package $ver on node $(node --version)"

# the native hashes: the scheduler straight (--bench, TP1) ...
timeout -s KILL 60 "$serve" --bench --bench-streams 1 --bench-modes greedy,sampled \
	--bench-draft plain --bench-requests $N --bench-max-tokens $M --bench-no-warmup \
	>"$tmp/bench.out" 2>"$tmp/bench.err" || fail "rk-serve --bench exited $?"
bench_g=$(sed -n 's/^hash greedy \([0-9a-f]*\): .*/\1/p' "$tmp/bench.out")
bench_s=$(sed -n 's/^hash sampled \([0-9a-f]*\): .*/\1/p' "$tmp/bench.out")
[ -n "$bench_g" ] && [ -n "$bench_s" ] || fail "rk-serve --bench: no hashes"

# ... and rk-load's cells through HTTP, at TP2
"$launch" -v --hosts localhost,localhost -- "$serve" --http 127.0.0.1:0 \
	</dev/null >"$tmp/serve.out" 2>"$tmp/serve.err" &
lpid=$!
wait_url "$tmp/serve.out" "$lpid" "\\[r0\\] rk-serve:"
p0=$(sed -n 's/^rk-launch: rank 0: pid \([0-9]*\) .*/\1/p' "$tmp/serve.err")
[ -n "$p0" ] || fail "no pid for rank 0"
timeout -s KILL 60 "$load" --url "$url" --streams 1 --modes greedy,sampled --draft plain \
	--requests $N --max-tokens $M >"$tmp/load.out" 2>&1 || fail "rk-load exited $?"
load_g=$(sed -n 's/^hash greedy \([0-9a-f]*\): .*/\1/p' "$tmp/load.out")
load_s=$(sed -n 's/^hash sampled \([0-9a-f]*\): .*/\1/p' "$tmp/load.out")
[ -n "$load_g" ] && [ -n "$load_s" ] || fail "rk-load: no hashes"

# the OpenAI client
OPENAI_MODULE=$(cd "$mod" && pwd) timeout -s KILL 120 node "$srcdir/tests/openai-client.cjs" \
	"$url" $N $M >"$tmp/client.out" 2>&1
rc=$?
grep -v '^tokens ' "$tmp/client.out"
[ $rc = 0 ] || fail "the OpenAI client's checks: exit $rc"

# its tokens hash as the native API's
bad=0
for name in greedy-json greedy-stream sampled-json sampled-stream; do
	sed -n "s/^tokens $name //p" "$tmp/client.out" | "$load" --hash >"$tmp/hash.out" ||
		fail "rk-load --hash"
	read -r h n <"$tmp/hash.out"
	case $name in
	greedy-*) want_b=$bench_g want_l=$load_g ;;
	*) want_b=$bench_s want_l=$load_s ;;
	esac
	echo "hash $name $h ($n tokens): rk-load $want_l, rk-serve --bench $want_b"
	[ "$n" = $((N * M)) ] && [ "$h" = "$want_l" ] && [ "$h" = "$want_b" ] || bad=1
done
[ $bad = 0 ] || fail "the OpenAI client's tokens hash differently from the native API's"

# a port scanner's bytes at the leader's rank port: a handshake refusal to count
leader=$(sed -n 's/^rk-launch: .* leader \([0-9.]*\):\([0-9]*\),.*/\2/p' "$tmp/serve.err")
[ -n "$leader" ] || fail "no leader port in rk-launch's output"
timeout -s KILL 10 node -e '
const s = require("net").connect(Number(process.argv[1]), "127.0.0.1", () =>
	s.write("GET / HTTP/1.1\r\nHost: scanner\r\nUser-Agent: a port scanner, 64 bytes\r\n\r\n"));
s.on("error", () => {});
s.on("close", () => process.exit(0));
setTimeout(() => process.exit(0), 5000);' "$leader"

# GET /metrics: every rank, the requests above, the refusal, the text format
i=0
while :; do
	timeout -s KILL 20 "$load" --url "$url" --get /metrics >"$tmp/metrics.get" 2>&1 ||
		fail "GET /metrics"
	head -n 1 "$tmp/metrics.get" | grep -q '^HTTP 200$' || fail "GET /metrics: not 200"
	sed 1d "$tmp/metrics.get" >"$tmp/metrics.txt"
	refused=$(sed -n 's/^rankrt_handshake_refused_total{rank="0",cause="[a-z]*"} \([0-9]*\)$/\1/p' \
		"$tmp/metrics.txt" | awk '{ n += $1 } END { print n + 0 }')
	[ "$refused" -ge 1 ] && break
	[ $i -ge 50 ] && fail "/metrics: the scanner's connection was not counted as refused"
	sleep 0.1
	i=$((i + 1))
done
echo "metrics: the scanner's connection refused:"
grep '^rankrt_handshake_refused_total{rank="0",.*} [1-9]' "$tmp/metrics.txt"
for want in 'rankrt_loop_events_total{rank="0"}' 'rankrt_loop_events_total{rank="1"}' \
	'rankrt_link_frames_total{rank="0",peer="1",direction="tx"}' \
	'rankrt_link_frames_total{rank="1",peer="0",direction="rx"}' \
	'rankrt_handshake_refused_total{rank="0",cause="auth"}' \
	'rankrt_backend_rounds_total{rank="1"}' 'rankrt_num_requests_running{' \
	'rankrt_time_to_first_token_seconds_count{' 'rankrt_inter_token_latency_seconds_bucket{' \
	'rankrt_e2e_request_latency_seconds_sum{'; do
	grep -qF "$want" "$tmp/metrics.txt" || fail "/metrics has no $want"
done
stops=$(sed -n 's/^rankrt_request_success_total{.*finished_reason="stop"} \([0-9]*\)$/\1/p' \
	"$tmp/metrics.txt")
[ "${stops:-0}" -ge 4 ] || fail "/metrics: $stops requests finished by a stop, expected 4"
echo "metrics: $(grep -vc '^#' "$tmp/metrics.txt") series, every rank's; e.g.:"
grep -E '^rankrt_(loop_wakeups_total|link_bytes_total|time_to_first_token_seconds_count)' \
	"$tmp/metrics.txt"
if command -v promtool >/dev/null; then
	promtool check metrics <"$tmp/metrics.txt" >"$tmp/promtool.out" 2>&1 ||
		fail "promtool check metrics"
	echo "promtool check metrics: clean"
else
	echo "promtool check metrics: not run, no promtool (Debian: prometheus)"
fi

# the log: a timed info line per finished request
lines=$(grep -c '^\[r0\] [0-9-]*T[0-9:.]*Z rk-serve\[r0\] info: \(chat\)\{0,1\}cmpl-[0-9]* (stream [0-9]*): prompt [0-9]* tokens, output [0-9]* tokens, .* finish \(stop\|length\)$' \
	"$tmp/serve.err")
echo "log: $lines request lines, e.g.:"
grep 'rk-serve\[r0\] info: cmpl-' "$tmp/serve.err" | head -n 1
[ "$lines" -ge $((4 * N + 10)) ] || fail "$lines request lines in the log"

kill -TERM "$p0"
wait_gone "$lpid" 20 || fail "still running 20 s after SIGTERM"
wait "$lpid"
rc=$?
lpid=
[ $rc = 0 ] || fail "rk-launch exited $rc after SIGTERM to rank 0"
echo "PASS"
