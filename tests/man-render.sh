#!/bin/sh
# Every page in dist_man_MANS renders without a single groff warning (-ww: all
# of them, at the terminal width man(1) uses) and with no line wider than 80
# columns, laid out as installed (man1/, man3/, ...) so that the ".so
# man3/x.3" alias pages resolve as they do for man(1). Needs groff (Debian:
# groff-base); skips (77) without it.
# Run by make check (tests/Makefile.inc passes rankrt_man_pages).
s=${srcdir:-.}
[ -n "$rankrt_man_pages" ] || { echo "rankrt_man_pages unset: run through make check"; exit 99; }
command -v groff >/dev/null || { echo "SKIP: no groff (Debian: groff-base)"; exit 77; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
for page in $rankrt_man_pages; do
	sec=${page##*.}
	mkdir -p "$tmp/man$sec"
	cp "$s/$page" "$tmp/man$sec/" || exit 99
done

bad=0
n=0
cd "$tmp" || exit 99
for page in $rankrt_man_pages; do
	f=man${page##*.}/${page##*/}
	n=$((n + 1))
	# -t: tbl, as man(1) runs it for pages that start with '\" t
	out=$(LC_ALL=C.UTF-8 groff -t -man -Tutf8 -ww -z -rLL=78n "$f" 2>&1)
	rc=$?
	if [ $rc -ne 0 ] || [ -n "$out" ]; then
		echo "FAIL: $page (groff exit $rc):"
		printf '%s\n' "$out" | sed 's/^/    /'
		bad=$((bad + 1))
	fi
	# an empty rendering means a broken page (or a .so that found nothing);
	# a line past 80 columns (a long SYNOPSIS line) wraps on a terminal
	LC_ALL=C.UTF-8 groff -t -man -Tutf8 -P-cbou -rLL=78n "$f" >"$tmp/out" 2>/dev/null
	lines=$(grep -c . "$tmp/out")
	if [ "$lines" -lt 5 ]; then
		echo "FAIL: $page renders to $lines non-empty lines"
		bad=$((bad + 1))
	fi
	if LC_ALL=C.UTF-8 grep -qE '^.{81}' "$tmp/out"; then
		echo "FAIL: $page has lines wider than 80 columns (break them by hand):"
		LC_ALL=C.UTF-8 grep -E '^.{81}' "$tmp/out" | sed 's/^/    /'
		bad=$((bad + 1))
	fi
done
if [ "$bad" -gt 0 ]; then
	echo "$bad of $n pages failed"
	exit 1
fi
echo "ok: $n pages render without warnings ($(groff --version | head -1))"
