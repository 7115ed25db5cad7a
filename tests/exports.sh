#!/bin/sh
# librankrt's exports, checked three ways: the names librankrt.map lists one
# by one, the functions the installed headers declare RK_EXPORT, and the
# symbols .libs/librankrt.so exports (each in the map's version node). Any
# difference fails, with the name and what to do about it, so an ABI change
# is always deliberate. Skips (77) without a shared library or nm. Run from
# the build directory (tests/Makefile.inc sets builddir, srcdir, and
# rankrt_headers to the installed headers; by hand it takes every rk_*.h of
# the modules).
b=${builddir:-.}
top=${srcdir:-$(dirname "$0")/..}
LC_ALL=C
export LC_ALL
map=$top/librankrt.map
so=$b/.libs/librankrt.so
[ -f "$so" ] || { echo "SKIP: no $so (a build without the shared library)"; exit 77; }
command -v nm >/dev/null || { echo "SKIP: no nm"; exit 77; }
[ -f "$map" ] || { echo "FAIL: no $map"; exit 1; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
bad=0
problem()
{
	echo "FAIL: $*"
	bad=1
}

# 1. the map: between "global:" and "local:", one "name;" a line, no pattern
sed -e 's|/\*.*\*/||' "$map" | sed -n '/global:/,/local:/p' | sed '1d;$d' |
	sed 's/[[:space:]]//g' | grep -v '^$' >"$tmp/global"
grep -v '^[A-Za-z_][A-Za-z0-9_]*;$' "$tmp/global" | while read -r l; do
	echo "FAIL: librankrt.map lists '$l' under global: one exported name a line, no patterns"
done | grep . && bad=1
sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\);$/\1/p' "$tmp/global" | sort >"$tmp/map"
sort -c "$tmp/global" 2>/dev/null || problem "librankrt.map: keep the names sorted"
node=$(sed -e 's|/\*.*\*/||' "$map" | sed -n 's/^[[:space:]]*\([A-Za-z0-9_.]*\)[[:space:]]*{.*/\1/p' |
	head -n 1)

# 2. the headers: every function declared RK_EXPORT (comments and #defines left out)
if [ -n "${rankrt_headers:-}" ]; then
	hdrs=
	for h in $rankrt_headers; do
		if [ -f "$h" ]; then hdrs="$hdrs $h"; else hdrs="$hdrs $top/$h"; fi
	done
else
	hdrs=$(ls "$top"/rankrt.h "$top"/wire/rk_*.h "$top"/runtime/rk_*.h "$top"/rdma/rk_*.h \
		"$top"/gpu/rk_*.h 2>/dev/null)
fi
for h in $hdrs; do
	grep -v '^[[:space:]]*#' "$h" | tr '\n' ' ' |
		awk -v h="${h#"$top"/}" '{
			gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, " ")
			n = split($0, d, ";")
			for (i = 1; i <= n; i++)
				if (match(d[i], /RK_EXPORT[^(]*\(/)) {
					s = substr(d[i], RSTART, RLENGTH - 1)
					sub(/[ \t]+$/, "", s)
					k = split(s, w, /[^A-Za-z0-9_]+/)
					print w[k], h
				}
		}'
done | sort >"$tmp/decl.h"
cut -d' ' -f1 "$tmp/decl.h" | sort -u >"$tmp/decl"
[ -s "$tmp/decl" ] || problem "no RK_EXPORT declaration found in: $hdrs"

# 3. the library: defined dynamic symbols, each in the map's version node
nm -D --defined-only "$so" | awk '$2 != "A" { print $3 }' >"$tmp/so.v"
grep -v "@@$node\$" "$tmp/so.v" | while read -r s; do
	echo "FAIL: librankrt.so exports $s outside the version node $node"
done | grep . && bad=1
sed 's/@.*//' "$tmp/so.v" | sort -u >"$tmp/so"

comm -23 "$tmp/decl" "$tmp/map" | while read -r s; do
	echo "FAIL: $s is declared RK_EXPORT in $(awk -v s="$s" '$1 == s { print $2; exit }' \
		"$tmp/decl.h") but not listed in librankrt.map, so it is not exported: add it there"
done | grep . && bad=1
comm -13 "$tmp/decl" "$tmp/map" | while read -r s; do
	echo "FAIL: $s is listed in librankrt.map but no installed header declares it RK_EXPORT"
done | grep . && bad=1
comm -23 "$tmp/map" "$tmp/so" | while read -r s; do
	echo "FAIL: $s is listed in librankrt.map but librankrt.so does not define it" \
		"(compiled out without its stub?)"
done | grep . && bad=1
comm -13 "$tmp/map" "$tmp/so" | while read -r s; do
	echo "FAIL: librankrt.so exports $s, which librankrt.map does not list"
done | grep . && bad=1

[ $bad = 0 ] || exit 1
echo "PASS: $(wc -l <"$tmp/map") exports, in librankrt.map, in the headers and in librankrt.so ($node)"
