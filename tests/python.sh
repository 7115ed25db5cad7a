#!/bin/sh
# The Python binding's tests (examples/python/tests/test_binding.py): pytest when
# Debian's python3-pytest is there, else the file runs its tests as plain asserts.
# The binding loads the build tree's library (RANKRT_LIB). Skips (77) without
# python3; PYTHON names another interpreter. Run from the build directory
# (tests/Makefile.inc sets builddir).
b=${builddir:-.}
src=${srcdir:-$(dirname "$0")/..}
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || { echo "SKIP: no $PYTHON"; exit 77; }
lib=$b/.libs/librankrt.so.2
[ -e "$lib" ] || { echo "no $lib"; exit 99; }
RANKRT_LIB=$(cd "$(dirname "$lib")" && pwd)/librankrt.so.2
srcdir=$(cd "$src" && pwd)
export RANKRT_LIB srcdir
t=$srcdir/examples/python/tests/test_binding.py
if "$PYTHON" -c 'import pytest' 2>/dev/null; then
	exec timeout -s KILL 300 "$PYTHON" -m pytest -q -p no:cacheprovider "$t"
fi
exec timeout -s KILL 300 "$PYTHON" "$t"
