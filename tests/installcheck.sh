#!/bin/sh
# make installcheck (distcheck runs it on its own prefix): rankrt as a user finds it after
# make install, with LD_LIBRARY_PATH unset. The installed programs carry a RUNPATH to
# libdir (unless configure --disable-rpath) and answer --version; rk-launch runs rk-serve's
# two-rank demo from bindir; a program built with pkg-config's flags against the installed
# header calls rk_version(); the documents the README, NEWS and the manual link are
# installed under docdir, every relative link between them resolves, and the installed
# manual names them there. Lists the installed documents. Makefile.am passes the
# configured folders, CC, PKG_CONFIG, PACKAGE_VERSION and rpath_ldflags (empty: no RUNPATH).
unset LD_LIBRARY_PATH
for v in bindir libdir includedir docdir mandir PACKAGE_VERSION; do
	eval "[ -n \"\${$v}\" ]" || { echo "$v unset: run through make installcheck"; exit 99; }
done
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
bad=0
fail()
{
	echo "FAIL: $*"
	bad=$((bad + 1))
}
ok()
{
	echo "ok: $*"
}

# 1. the programs: where they link librankrt, a RUNPATH to libdir; each says its version
for p in rk-launch rk-pingpong rk-serve rk-load; do
	prog=$bindir/$p$EXEEXT
	if [ ! -x "$prog" ]; then
		case $p in
		rk-load) continue ;;	# built only with libcurl and jansson
		*) fail "$prog is not installed"; continue ;;
		esac
	fi
	if command -v readelf >/dev/null && readelf -d "$prog" | grep -q 'librankrt\.so'; then
		rp=$(readelf -d "$prog" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\].*/\2/p')
		case ":$rp:" in
		*":$libdir:"*) ok "$p: RUNPATH $rp" ;;
		*)
			if [ -z "$rpath_ldflags" ]; then
				echo "note: $p has no RUNPATH to $libdir (configure --disable-rpath)"
			else
				fail "$p: RUNPATH '$rp' lacks $libdir"
			fi
			;;
		esac
	fi
	out=$(timeout -s KILL 20 "$prog" --version 2>"$tmp/err")
	rc=$?
	if [ $rc -eq 0 ] && [ "$out" = "$p (rankrt) $PACKAGE_VERSION" ]; then
		ok "$p --version: $out"
	else
		fail "$p --version exited $rc, printed '$out': $(head -3 "$tmp/err")"
	fi
done

# 2. the two-rank demo (TCP loopback, CPU backend) through the installed rk-launch and rk-serve
timeout -s KILL 120 "$bindir/rk-launch$EXEEXT" --hosts localhost,localhost -- \
	"$bindir/rk-serve$EXEEXT" --demo </dev/null >"$tmp/demo.out" 2>"$tmp/demo.err"
rc=$?
if [ $rc -eq 0 ] && grep -q '^\[r0\] receipt: ' "$tmp/demo.out" &&
	grep -q '^\[r0\] \([0-9]*\) of \1 requests equal the TP1 reference' "$tmp/demo.out"; then
	ok "rk-launch -- rk-serve --demo: $(sed -n 's/^\[r0\] \(.* of .* requests equal.*\)/\1/p' \
		"$tmp/demo.out")"
else
	fail "rk-launch -- rk-serve --demo exited $rc:"
	tail -n 20 "$tmp/demo.out" "$tmp/demo.err"
fi

# 3. a program against the installed header and library, with pkg-config's flags alone
cat >"$tmp/v.c" <<'EOF'
#include <stdio.h>
#include <rankrt/rankrt.h>

int main(void)
{
	int major, minor;
	const char *v = rk_version(&major, &minor);

	printf("%s\n", v);
	return major == RK_VERSION_MAJOR && minor >= RK_VERSION_MINOR ? 0 : 1;
}
EOF
PKG_CONFIG_PATH=$libdir/pkgconfig
export PKG_CONFIG_PATH
if ! flags=$($PKG_CONFIG --cflags --libs rankrt 2>"$tmp/err"); then
	fail "$PKG_CONFIG --cflags --libs rankrt: $(cat "$tmp/err")"
elif [ "$($PKG_CONFIG --modversion rankrt)" != "$PACKAGE_VERSION" ]; then
	fail "rankrt.pc says version $($PKG_CONFIG --modversion rankrt), not $PACKAGE_VERSION"
elif ! $CC "$tmp/v.c" $flags -Wl,-rpath,"$libdir" -o "$tmp/v" 2>"$tmp/err"; then
	fail "cc v.c $flags: $(cat "$tmp/err")"
else
	out=$("$tmp/v")
	rc=$?
	if [ $rc -eq 0 ] && [ "$out" = "$PACKAGE_VERSION" ]; then
		ok "cc \$(pkg-config --cflags --libs rankrt): rk_version() is $out"
	else
		fail "the pkg-config program exited $rc, printed '$out'"
	fi
fi

# 4. the documents: installed, their relative links resolving under docdir, and named there
#    by the installed manual
for d in README.md NEWS ARCHITECTURE.md docs/STABILITY.md docs/SERVE.md docs/GPU.md \
	docs/BENCH.md docs/PEERS.md wire/WIRE.md; do
	[ -f "$docdir/$d" ] || fail "$docdir/$d is not installed"
done
(cd "$docdir" && find . -type f | sed 's|^\./||' | sort) >"$tmp/docs"
for d in $(grep '\.md$' "$tmp/docs"); do
	grep -o '\]([^)]*)' "$docdir/$d" | sed 's/^](//; s/)$//; s/#.*//; s/[[:space:]].*//' |
		grep -v '^$' | grep -v '^[a-z][a-z]*:' | grep '\.\(md\|png\|svg\)$' | sort -u |
		while IFS= read -r l; do
			[ -f "$docdir/$(dirname "$d")/$l" ] || echo "$d links $l"
		done
done >"$tmp/broken"
while IFS= read -r l; do
	fail "$l, which is not installed under $docdir"
done <"$tmp/broken"
find "$mandir" -type f -name '*.[1-9]' >"$tmp/pages"
while IFS= read -r page; do
	grep -q '@docdir@' "$page" && fail "$page says @docdir@ (not filled in at build time)"
	grep -o "$docdir/[A-Za-z0-9_./-]*[A-Za-z0-9_]" "$page" | sort -u | while IFS= read -r f; do
		[ -e "$f" ] || echo "$page names $f, which is not installed"
	done
done <"$tmp/pages" >"$tmp/missing"
while IFS= read -r l; do
	fail "$l"
done <"$tmp/missing"
grep -q "$docdir/docs/STABILITY.md" "$mandir/man7/rankrt.7" ||
	fail "$mandir/man7/rankrt.7 does not name $docdir/docs/STABILITY.md"
echo "installed documents, under $docdir:"
sed 's/^/    /' "$tmp/docs"

if [ $bad -gt 0 ]; then
	echo "$bad problem(s) in the installation under $bindir, $libdir, $docdir"
	exit 1
fi
echo "ok: the installation works from $bindir with LD_LIBRARY_PATH unset"
