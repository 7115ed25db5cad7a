#!/bin/sh
# librankrt's exports, checked three ways: the names librankrt.map lists one
# by one, the functions the installed headers declare RK_EXPORT, and the
# symbols .libs/librankrt.so exports (each in the map's version node that
# lists it). Any difference fails, with the name and what to do about it, so
# an ABI change is always deliberate. Then the one version (docs/STABILITY.md):
# the package's major (configure.ac) is the soname's, every node's
# (RANKRT_<major>.<minor>) and RK_VERSION_MAJOR's; its minor is
# RK_VERSION_MINOR's and no node is newer. Skips (77) without a shared library,
# nm or readelf. Run from the build directory (tests/Makefile.inc sets
# builddir, srcdir, PACKAGE_VERSION, and rankrt_headers to the installed
# headers; by hand it takes every rk_*.h of the modules and config.h's
# version).
b=${builddir:-.}
top=${srcdir:-$(dirname "$0")/..}
LC_ALL=C
export LC_ALL
map=$top/librankrt.map
so=$b/.libs/librankrt.so
[ -f "$so" ] || { echo "SKIP: no $so (a build without the shared library)"; exit 77; }
for t in nm readelf; do
	command -v $t >/dev/null || { echo "SKIP: no $t"; exit 77; }
done
[ -f "$map" ] || { echo "FAIL: no $map"; exit 1; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
bad=0
problem()
{
	echo "FAIL: $*"
	bad=1
}

# 1. the map: nodes in order, each "NAME {" ... "};" or "} PARENT;"; between
#    "global:" and "local:" (or the node's end), one "name;" a line, no pattern
sed -e 's|/\*.*\*/||' -e '/\/\*/,/\*\//d' "$map" | awk -v nodes="$tmp/nodes" '
	/^[[:space:]]*[A-Za-z0-9_.]+[[:space:]]*\{/ {
		node = $1; sub(/\{.*/, "", node); sect = ""; next
	}
	/^[[:space:]]*\}/ {
		parent = $0; gsub(/[\};[:space:]]/, "", parent)
		print node, (parent == "" ? "-" : parent) >nodes
		node = ""; next
	}
	/global:/ { sect = "global"; next }
	/local:/ { sect = "local"; next }
	sect == "global" && node != "" { gsub(/[[:space:]]/, ""); if ($0 != "") print $0, node }
' >"$tmp/global"
[ -s "$tmp/nodes" ] || problem "librankrt.map: no version node found"
grep -v '^[A-Za-z_][A-Za-z0-9_]*; ' "$tmp/global" | while read -r l node; do
	echo "FAIL: librankrt.map lists '$l' under $node's global: one exported name a line, no patterns"
done | grep . && bad=1
sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\); \(.*\)$/\1 \2/p' "$tmp/global" | sort >"$tmp/map.nv"
cut -d' ' -f1 "$tmp/map.nv" | sort -u >"$tmp/map"
cut -d' ' -f1 "$tmp/map.nv" | uniq -d | while read -r s; do
	echo "FAIL: librankrt.map lists $s in more than one node"
done | grep . && bad=1
while read -r node _; do
	awk -v n="$node" '$2 == n { print $1 }' "$tmp/global" >"$tmp/node.names"
	sort -c "$tmp/node.names" 2>/dev/null || problem "librankrt.map: keep $node's names sorted"
done <"$tmp/nodes"
node=$(head -n 1 "$tmp/nodes" | cut -d' ' -f1)

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

# 3. the library: defined dynamic symbols, each the default version of the node the map lists
#    it in
nm -D --defined-only "$so" | awk '$2 != "A" { print $3 }' >"$tmp/so.v"
grep -v '@@' "$tmp/so.v" | while read -r s; do
	echo "FAIL: librankrt.so exports $s outside every version node"
done | grep . && bad=1
grep '@@' "$tmp/so.v" | sed 's/@@/ /' | sort >"$tmp/so.nv"
cut -d' ' -f2 "$tmp/so.nv" | sort -u | while read -r n; do
	grep -q "^$n " "$tmp/nodes" ||
		echo "FAIL: librankrt.so exports in the node $n, which librankrt.map does not have"
done | grep . && bad=1
join "$tmp/map.nv" "$tmp/so.nv" | awk '$2 != $3' | while read -r s want got; do
	echo "FAIL: librankrt.so exports $s in the node $got, librankrt.map lists it in $want"
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

# 4. one version: package MAJOR.MINOR.PATCH is librankrt.so.MAJOR, nodes RANKRT_MAJOR.0 up to
#    at most RANKRT_MAJOR.MINOR (each inheriting the one before) and RK_VERSION_MAJOR/MINOR
ver=${PACKAGE_VERSION:-$(awk '$2 == "PACKAGE_VERSION" { gsub(/"/, "", $3); print $3 }' "$b/config.h")}
major=$(echo "$ver" | sed -n 's/^\([0-9]\{1,\}\)\.\([0-9]\{1,\}\)\.[0-9]\{1,\}$/\1/p')
minor=$(echo "$ver" | sed -n 's/^\([0-9]\{1,\}\)\.\([0-9]\{1,\}\)\.[0-9]\{1,\}$/\2/p')
if [ -z "$major" ]; then
	problem "package version '$ver' (configure.ac's AC_INIT) is not MAJOR.MINOR.PATCH"
else
	soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
	[ "$soname" = "librankrt.so.$major" ] ||
		problem "package $ver but the soname is '$soname', not librankrt.so.$major" \
			"(configure.ac derives RK_LT_VERSION from the version: regenerate)"
	hdr=$top/wire/rk_common.h
	hmajor=$(awk '$1 == "#define" && $2 == "RK_VERSION_MAJOR" { print $3 }' "$hdr")
	hminor=$(awk '$1 == "#define" && $2 == "RK_VERSION_MINOR" { print $3 }' "$hdr")
	[ "$hmajor" = "$major" ] && [ "$hminor" = "$minor" ] ||
		problem "package $ver but wire/rk_common.h says RK_VERSION_MAJOR '$hmajor'," \
			"RK_VERSION_MINOR '$hminor': set them to $major and $minor"
	prev=-
	last=-1
	while read -r n parent; do
		nminor=$(echo "$n" | sed -n "s/^RANKRT_$major\\.\\([0-9]\\{1,\\}\\)\$/\\1/p")
		if [ -z "$nminor" ]; then
			problem "librankrt.map's node $n does not name the major $major (RANKRT_$major.<minor>)"
		elif [ "$prev" = - ] && [ "$nminor" != 0 ]; then
			problem "librankrt.map's first node is $n, not RANKRT_$major.0"
		elif [ "$nminor" -le "$last" ] || [ "$nminor" -gt "$minor" ]; then
			problem "librankrt.map's node $n is out of order or newer than the package $ver"
		fi
		[ "$parent" = "$prev" ] ||
			problem "librankrt.map's node $n inherits '$parent', not the node before it ($prev)"
		prev=$n
		[ -n "$nminor" ] && last=$nminor
	done <"$tmp/nodes"
fi

[ $bad = 0 ] || exit 1
echo "PASS: $(wc -l <"$tmp/map") exports, in librankrt.map, in the headers and in librankrt.so" \
	"($(cut -d' ' -f1 "$tmp/nodes" | tr '\n' ' ' | sed 's/ $//')); version $ver is $soname"
