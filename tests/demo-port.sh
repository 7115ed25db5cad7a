#!/bin/sh
# examples/serve/demo.sh takes its ports: with --port P the two-rank demo
# serves HTTP on 127.0.0.1:P, where rk-load is answered (/health and a
# completion), and with --leader-port Q rank 0 listens on Q for the other rank;
# arguments after -- still go to rk-serve (--max-batch here). Skips (77)
# without rk-serve's HTTP server or rk-load. Run from the build directory
# (tests/Makefile.inc sets builddir and srcdir).
. "$(dirname "$0")/serve-common.sh"
demo=${srcdir:-.}/examples/serve/demo.sh
[ -r /proc/net/tcp ] || { echo "SKIP: no /proc/net/tcp"; exit 77; }

# listening PORT: whether a TCP socket of this namespace listens on PORT
listening()
{
	awk -v p="$(printf ':%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
		END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# a port nobody listens on now, from this test's pid (another may take it
# before the demo binds: then the next try picks again)
free_port()
{
	p=$((20000 + ($$ * 7 + $1 * 7919) % 40000))
	while listening "$p"; do
		p=$((p + 1))
	done
	echo "$p"
}

try=1
while :; do
	hport=$(free_port $try)
	qport=$(free_port $((try + 100)))
	[ "$qport" = "$hport" ] && qport=$((qport + 1))
	builddir=$b sh "$demo" --port "$hport" --leader-port "$qport" -- --max-batch 4 \
		</dev/null >"$tmp/demo.out" 2>"$tmp/demo.err" &
	lpid=$!
	i=0
	until grep -q ' listening on http:' "$tmp/demo.out" 2>/dev/null; do
		kill -0 "$lpid" 2>/dev/null || break
		[ $i -ge 300 ] && fail "not serving after 30 s"
		sleep 0.1
		i=$((i + 1))
	done
	kill -0 "$lpid" 2>/dev/null && break
	wait "$lpid"
	lpid=
	grep -q 'Address already in use' "$tmp/demo.err" "$tmp/demo.out" && [ $try -lt 5 ] ||
		fail "demo.sh --port $hport --leader-port $qport exited"
	try=$((try + 1))
done
wait_url "$tmp/demo.out" "$lpid" '\[r0\] rk-serve:'
[ "$url" = "http://127.0.0.1:$hport" ] || fail "serving on $url, not on port $hport"
listening "$qport" || fail "rank 0 does not listen on the leader port $qport"
grep -q "127.0.0.1:$hport" "$tmp/demo.err" || fail "demo.sh did not say where it serves"

"$load" --url "http://127.0.0.1:$hport" --get /health --timeout 60 >"$tmp/health" 2>&1 ||
	fail "/health on port $hport"
grep -q '^HTTP 200$' "$tmp/health" || fail "/health: $(head -n 1 "$tmp/health")"
"$load" --url "http://127.0.0.1:$hport" --post '{"prompt":"port","max_tokens":8}' --timeout 60 \
	>"$tmp/post" 2>&1 || fail "a completion on port $hport"
grep -q '^HTTP 200$' "$tmp/post" || fail "POST: $(head -n 1 "$tmp/post")"
echo "demo.sh served on port $hport, its leader on port $qport"

kill -TERM "$lpid"
wait_gone "$lpid" 30 || fail "demo.sh did not stop on SIGTERM"
lpid=

# a bad port is refused before anything starts
builddir=$b sh "$demo" --port 70000 >"$tmp/bad.out" 2>&1 && fail "--port 70000 was taken"
grep -q "want a port" "$tmp/bad.out" || fail "--port 70000: $(head -n 1 "$tmp/bad.out")"
exit 0
