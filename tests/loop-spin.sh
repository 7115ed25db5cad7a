#!/bin/sh
# check_loop and check_wait with every loop that is not testing the policy
# itself pinned to RK_WAIT=spin (tests/Makefile.inc sets builddir; run from the
# build dir).
RK_TEST_WAIT=spin
export RK_TEST_WAIT
"${builddir:-.}/tests/check_loop" "$@" || exit
exec "${builddir:-.}/tests/check_wait" "$@"
