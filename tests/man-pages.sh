#!/bin/sh
# The manual covers the API: every exported function has a section-3 page in
# docs/man/ (its own, or a one-line ".so man3/PAGE.3" alias to the page of its
# group) that names it under NAME and declares it under SYNOPSIS; every
# installed program has a section-1 page; every page is installed (listed in
# dist_man_MANS) and has the sections the house style asks for. The exported
# names are the RK_EXPORT declarations of the installed headers, plus what
# librankrt.so really exports (nm), so a name missed by either is still found.
# Run by make check (tests/Makefile.inc passes the lists below).
s=${srcdir:-.}
b=${builddir:-.}
[ -n "$rankrt_man_pages" ] && [ -n "$rankrt_headers" ] && [ -n "$rankrt_programs" ] ||
	{ echo "rankrt_man_pages, rankrt_headers, rankrt_programs unset: run through make check"; exit 99; }

relver=$(sed -n 's/^#define PACKAGE_VERSION "\([0-9]*\.[0-9]*\).*/\1/p' "$b/config.h" 2>/dev/null)
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
bad=0
fail()
{
	echo "FAIL: $*"
	bad=$((bad + 1))
}

listed()	# listed docs/man/x.3: is it in dist_man_MANS?
{
	case " $rankrt_man_pages " in *" $1 "*) return 0 ;; esac
	return 1
}

# sect PAGE NAME: the body of section NAME of PAGE (.SH NAME up to the next .SH)
sect()
{
	awk -v want="$2" '
		/^\.SH/ { cur = $0; sub(/^\.SH[ \t]+/, "", cur); gsub(/"/, "", cur); next }
		cur == want { print }' "$1"
}

# alias PAGE: the target of a ".so man3/x.3" page, or nothing
alias_of()
{
	sed -n 's|^\.so man[1-9]/\([^ ]*\)$|\1|p' "$1" | head -1
}

# 1. the exported names, each with the header that declares it
for h in $rankrt_headers; do
	[ -f "$s/$h" ] || { fail "installed header $h not found in $s"; continue; }
	grep -n '^RK_EXPORT' "$s/$h" | while IFS= read -r line; do
		name=$(printf '%s\n' "$line" |
			sed -n 's/^[0-9]*:RK_EXPORT[^(]*[^a-z0-9_]\(rk_[a-z0-9_]*\)(.*/\1/p')
		if [ -n "$name" ]; then
			echo "$name $h"
		else
			echo "?unparsed $h:${line%%:*}"
		fi
	done
done | sort -u >"$tmp/decl"
grep '^?unparsed' "$tmp/decl" | while read -r _ where; do
	echo "FAIL: $where: an RK_EXPORT line this test cannot read a function name from" \
		"(keep 'RK_EXPORT type rk_name(' on one line)"
done
grep -q '^?unparsed' "$tmp/decl" && bad=$((bad + 1))
grep -v '^?unparsed' "$tmp/decl" >"$tmp/names"

so=$b/.libs/librankrt.so
if [ -f "$so" ] && command -v nm >/dev/null; then
	nm -D --defined-only "$so" |
		awk '$2 ~ /^[TDRBVW]$/ { n = $3; sub(/@.*/, "", n); if (n ~ /^rk_/) print n }' |
		sort -u | while read -r n; do
			grep -q "^$n " "$tmp/names" || echo "$n (exported by librankrt.so)"
		done >>"$tmp/names"
else
	echo "note: no $so or no nm: names from the headers only"
fi
n_names=$(wc -l <"$tmp/names")
[ "$n_names" -gt 0 ] || { echo "FAIL: no exported name found"; exit 1; }

# 2. each name has a page, installed, naming and declaring it
while read -r name where; do
	page=docs/man/$name.3
	if [ ! -f "$s/$page" ]; then
		fail "no man page for $name ($where): write $page, or a one-line" \
			"'.so man3/PAGE.3' alias to the page of its group, and list it in" \
			"dist_man_MANS (docs/man/Makefile.inc)"
		continue
	fi
	listed "$page" || fail "$page is not in dist_man_MANS (docs/man/Makefile.inc): not installed"
	doc=$page
	target=$(alias_of "$s/$page")
	if [ -n "$target" ]; then
		doc=docs/man/$target
		[ -f "$s/$doc" ] || { fail "$page: .so target $doc does not exist"; continue; }
		[ -z "$(alias_of "$s/$doc")" ] || fail "$page: .so target $doc is an alias itself"
	fi
	sect "$s/$doc" NAME | grep -q "\\(^\\|[^a-z0-9_]\\)$name\\([^a-z0-9_]\\|$\\)" ||
		fail "$doc does not name $name under NAME"
	sect "$s/$doc" SYNOPSIS | grep -q "[^a-z0-9_]$name(" ||
		fail "$doc does not declare $name( under SYNOPSIS"
done <"$tmp/names"

# 3. each installed program has a section-1 page
for p in $rankrt_programs; do
	p=${p##*/}
	p=${p%"$EXEEXT"}
	page=docs/man/$p.1
	if [ ! -f "$s/$page" ]; then
		fail "no man page for the program $p: write $page and list it in dist_man_MANS"
	else
		listed "$page" || fail "$page is not in dist_man_MANS: not installed"
	fi
done

# 4. every page present is installed, the installed ones exist, none is stale,
#    each has its sections, and each names a document (README.md, docs/x.md)
#    by its installed path, @docdir@/..., filled in at build time for the
#    pages of rankrt_man_docdir
for f in "$s"/docs/man/*.[1-9]; do
	[ -f "$f" ] || continue
	page=docs/man/${f##*/}
	listed "$page" || fail "$page is not in dist_man_MANS (docs/man/Makefile.inc): not installed"
done
for page in $rankrt_man_pages; do
	f=$s/$page
	[ -f "$f" ] || { fail "$page is in dist_man_MANS but does not exist"; continue; }
	base=${page##*/}
	case $base in
	*.3)
		grep -q "^${base%.3} " "$tmp/names" ||
			fail "$page documents no exported name (stale, or a typo?)"
		[ -n "$(alias_of "$f")" ] && continue
		need="NAME|LIBRARY|SYNOPSIS|DESCRIPTION|RETURN VALUE|ERRORS|CONTEXT|SEE ALSO"
		;;
	*.1) need="NAME|SYNOPSIS|DESCRIPTION|OPTIONS|EXIT STATUS|SEE ALSO" ;;
	*) need="NAME|DESCRIPTION|SEE ALSO" ;;
	esac
	grep -q '^\.TH ' "$f" || fail "$page has no .TH line"
	# the footer names this release (major.minor), as docs/STABILITY.md numbers it
	[ -z "$relver" ] || grep -q "^\.TH .*\"rankrt $relver\"" "$f" ||
		fail "$page: its .TH line does not say \"rankrt $relver\""
	# a document named must be found where it is installed
	grep -o '[A-Za-z0-9_./@-]*\.md\b' "$f" | grep -v '^@docdir@/' | sort -u \
		>"$tmp/docs"
	while IFS= read -r d; do
		fail "$page names $d: write @docdir@/$d (the installed copy's folder)"
	done <"$tmp/docs"
	if [ -n "${rankrt_man_docdir+set}" ]; then
		case " $rankrt_man_docdir " in *" $page "*) subst=1 ;; *) subst=0 ;; esac
		if grep -q '@docdir@' "$f"; then
			[ $subst = 1 ] || fail "$page says @docdir@ but is not in rankrt_man_docdir" \
				"(docs/man/Makefile.inc), which installs it with the folder filled in"
		else
			[ $subst = 0 ] || fail "$page is in rankrt_man_docdir but says no @docdir@"
		fi
	fi
	printf '%s\n' "$need" | tr '|' '\n' | while IFS= read -r sec; do
		grep -q "^\\.SH \"\\{0,1\\}$sec\"\\{0,1\\}\$" "$f" || echo "$page: no $sec section"
	done >"$tmp/sections"
	if [ -s "$tmp/sections" ]; then
		while IFS= read -r l; do fail "$l"; done <"$tmp/sections"
	fi
done

n_pages=$(echo $rankrt_man_pages | wc -w)
if [ "$bad" -gt 0 ]; then
	echo "$bad problem(s) ($n_names exported names, $n_pages pages)"
	exit 1
fi
echo "ok: $n_names exported names, each with a page; $n_pages pages installed"
