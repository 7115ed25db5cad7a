#!/bin/sh
# Every installed program answers --version with "PROG (rankrt) VERSION" on
# stdout alone and exits 0, and its --help lists --version (the GNU coding
# standards' form). Run by make check (tests/Makefile.inc passes
# rankrt_programs, the installed programs, and PACKAGE_VERSION).
b=${builddir:-.}
[ -n "$rankrt_programs" ] && [ -n "$PACKAGE_VERSION" ] ||
	{ echo "rankrt_programs or PACKAGE_VERSION unset: run through make check"; exit 99; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
bad=0
n=0
fail()
{
	echo "FAIL: $*"
	bad=$((bad + 1))
}

for p in $rankrt_programs; do
	prog=$b/$p
	name=${p##*/}
	name=${name%"$EXEEXT"}
	[ -x "$prog" ] || { fail "$prog not built"; continue; }
	n=$((n + 1))
	timeout -s KILL 20 "$prog" --version </dev/null >"$tmp/out" 2>"$tmp/err"
	rc=$?
	want="$name (rankrt) $PACKAGE_VERSION"
	[ $rc -eq 0 ] || fail "$name --version exited $rc"
	[ "$(cat "$tmp/out")" = "$want" ] ||
		fail "$name --version printed '$(head -3 "$tmp/out")', expected '$want'"
	[ -s "$tmp/err" ] && fail "$name --version wrote to stderr: $(head -3 "$tmp/err")"
	timeout -s KILL 20 "$prog" --help </dev/null >"$tmp/out" 2>/dev/null
	rc=$?
	[ $rc -eq 0 ] || fail "$name --help exited $rc"
	grep -q -- '--version' "$tmp/out" || fail "$name --help does not mention --version"
done
[ $n -gt 0 ] || { echo "FAIL: no program in rankrt_programs ($rankrt_programs)"; exit 1; }
if [ $bad -gt 0 ]; then
	echo "$bad problem(s) in $n programs"
	exit 1
fi
echo "ok: $n programs print '(rankrt) $PACKAGE_VERSION'"
