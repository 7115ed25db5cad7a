#!/bin/sh
# rk-serve answers every client, every error in OpenAI's shape:
#  1. a burst of 64 streaming clients against --http-max-conns 4, while the
#     first ones hold their slots: every client gets an HTTP answer, a 200
#     stream or a 503 with Retry-After in OpenAI's shape, and none is reset
#     or closed unanswered (tests/http-burst);
#  2. an unknown model is 404 model_not_found, the served one (what
#     /v1/models lists) is answered;
#  3. the errors libmicrohttpd makes itself (a malformed request line, an
#     unsupported HTTP version, a header over its memory limit, a
#     Content-Length it cannot hold) and rk-serve's own (a body over 1 MiB, an
#     unsupported method) are application/json {"error":{...}}.
# rk-serve runs alone (TP1). Skips (77) without rk-serve's HTTP server or
# rk-load. Run from the build directory (tests/Makefile.inc sets builddir).
. "$(dirname "$0")/serve-common.sh"
burst=$b/tests/http-burst
[ -x "$burst" ] || { echo "no $burst"; exit 99; }

# 1. 4 completions at once; each holds its slot for 2048 rounds of ~1 ms
"$serve" --http 127.0.0.1:0 --http-max-conns 4 --hidden 32768 </dev/null \
	>"$tmp/serve.out" 2>"$tmp/serve.err" &
spid=$!
wait_url "$tmp/serve.out" "$spid" "rk-serve:"
timeout 300 "$burst" 127.0.0.1 "$port" 64 '{"prompt":"burst","max_tokens":2048,"stream":true}' \
	>"$tmp/burst" 2>&1 || fail "http-burst: not every client got a whole answer"
n503=$(sed -n 's/^503 //p' "$tmp/burst")
n200=$(sed -n 's/^200 //p' "$tmp/burst")
[ "${n503:-0}" -ge 1 ] || fail "no 503 past --http-max-conns 4"
[ "${n200:-0}" -ge 4 ] || fail "fewer than 4 streams served"
echo "64 clients, --http-max-conns 4: $n200 streams, $n503 answered 503 with Retry-After," \
	"none unanswered"
"$load" --url "$url" --get /v1/stats --timeout 60 >"$tmp/stats" 2>&1 || fail "/v1/stats"
full=$(sed -n 's/.*"full":\([0-9]*\).*/\1/p' "$tmp/stats")
[ "$full" = "$n503" ] || fail "/v1/stats full: '$full', expected $n503"

# 2. the model's name
"$load" --url "$url" --post '{"model":"gpt-4","prompt":"a","max_tokens":2}' --timeout 60 \
	>"$tmp/model" 2>&1
grep -q '^HTTP 404$' "$tmp/model" || fail "unknown model: $(head -n 1 "$tmp/model")"
grep -q '"type":"invalid_request_error","param":null,"code":"model_not_found"' "$tmp/model" ||
	fail "unknown model: not OpenAI's model_not_found"
grep -q 'The model `gpt-4` does not exist' "$tmp/model" || fail "unknown model: its message"
served=$("$load" --url "$url" --get /v1/models --timeout 60 |
	sed -n 's/.*"data":\[{"id":"\([^"]*\)".*/\1/p')
[ -n "$served" ] || fail "/v1/models: no model id"
"$load" --url "$url" --post "{\"model\":\"$served\",\"prompt\":\"a\",\"max_tokens\":2}" \
	--timeout 60 >"$tmp/served" 2>&1
grep -q '^HTTP 200$' "$tmp/served" || fail "model $served: $(head -n 1 "$tmp/served")"

# 3. raw requests; each answer must be one error in OpenAI's shape
# error NAME STATUS: the answer to stdin's request
error()
{
	timeout 60 "$burst" --raw 127.0.0.1 "$port" >"$tmp/$1" 2>&1 || fail "$1: no answer"
	head -n 1 "$tmp/$1" | grep -q "^HTTP/1.1 $2 " || fail "$1: $(head -n 1 "$tmp/$1")"
	grep -qi '^Content-Type: application/json' "$tmp/$1" || fail "$1: not application/json"
	grep -q '^{"error":{"message":"[^"]*","type":"[a-z_]*","param":' "$tmp/$1" ||
		fail "$1: not OpenAI's error shape"
}
printf 'GARBAGE LINE\r\n\r\n' | error request-line 400
printf 'GET /health HTTP/9.9\r\nHost: x\r\n\r\n' | error version 505
big=$(head -c 65536 /dev/zero | tr '\0' a)
printf 'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n' "$big" | error header 431
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n' |
	error content-length 413
{
	printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1100000\r\n\r\n'
	head -c 1100000 /dev/zero | tr '\0' ' '
} | error body 413
printf 'DELETE /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n' | error method 405
echo "404 model_not_found; 400, 505, 431, 413 (libmicrohttpd's), 413 and 405 (rk-serve's)" \
	"in OpenAI's shape"
kill -TERM "$spid"
wait "$spid" || fail "rk-serve exited $? on SIGTERM"
spid=
exit 0
