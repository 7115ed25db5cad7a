#!/bin/sh
# examples/python/tp_serve.py at TP2, TP4 and TP3 (uneven shards) through rk-launch, then at TP1: each
# says drafted == plain and concurrent == solo, and all print the same tokens' hash
# (integer arithmetic: bit-exact across the split). Skips (77) without python3
# or torch (PYTHON names another interpreter, e.g. /usr/bin/python3 where a
# pyenv python3 without Debian's torch comes first in PATH). Run from the build
# directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
src=${srcdir:-$(dirname "$0")/..}
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || { echo "SKIP: no $PYTHON"; exit 77; }
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "SKIP: no torch"; exit 77; }
launch=$b/examples/launch/rk-launch
[ -x "$launch" ] || { echo "no $launch"; exit 99; }
RANKRT_LIB=$(cd "$b/.libs" && pwd)/librankrt.so.2
export RANKRT_LIB
tp=$(cd "$src" && pwd)/examples/python/tp_serve.py
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*.out; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

timeout -s KILL 300 "$launch" --hosts localhost,localhost -- "$PYTHON" "$tp" --requests 6 \
	--max-tokens 24 >"$tmp/tp2.out" 2>&1 || fail "TP2 exited $?"
timeout -s KILL 300 "$launch" --hosts localhost,localhost,localhost,localhost -- "$PYTHON" "$tp" \
	--requests 6 --max-tokens 24 >"$tmp/tp4.out" 2>&1 || fail "TP4 exited $?"
timeout -s KILL 300 "$launch" --hosts localhost,localhost,localhost -- "$PYTHON" "$tp" \
	--requests 6 --max-tokens 24 >"$tmp/tp3.out" 2>&1 || fail "TP3 exited $?"
timeout -s KILL 300 "$PYTHON" "$tp" \
	--requests 6 --max-tokens 24 >"$tmp/tp1.out" 2>&1 || fail "TP1 exited $?"
for f in tp2 tp4 tp3 tp1; do
	grep -q 'drafted == plain: yes' "$tmp/$f.out" || fail "$f: drafted != plain"
	grep -q 'concurrent == solo: yes' "$tmp/$f.out" || fail "$f: concurrent != solo"
done
h2=$(sed -n 's/.*tp_serve: hash \([0-9a-f]*\) .*/\1/p' "$tmp/tp2.out")
h1=$(sed -n 's/.*tp_serve: hash \([0-9a-f]*\) .*/\1/p' "$tmp/tp1.out")
h4=$(sed -n 's/.*tp_serve: hash \([0-9a-f]*\) .*/\1/p' "$tmp/tp4.out")
[ -n "$h2" ] && [ "$h1" = "$h2" ] || fail "TP1's hash '$h1' differs from TP2's '$h2'"
[ "$h1" = "$h4" ] || fail "TP1's hash '$h1' differs from TP4's '$h4'"
h3=$(sed -n 's/.*tp_serve: hash \([0-9a-f]*\) .*/\1/p' "$tmp/tp3.out")
[ "$h1" = "$h3" ] || fail "TP1's hash '$h1' differs from TP3's (uneven shards) '$h3'"
grep -q 'rank 1 CPU' "$tmp/tp2.out" || fail "the follower did not end cleanly"
cat "$tmp/tp2.out"
exit 0
