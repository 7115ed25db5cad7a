#!/bin/sh
# The loop's suites (check_loop*, check_wait*) with every loop that is not
# testing the policy itself pinned to RK_WAIT=spin (tests/Makefile.inc sets
# builddir; run from the build dir).
RK_TEST_WAIT=spin
export RK_TEST_WAIT
for t in check_loop check_loop_wake check_loop_stats check_wait check_wait_predict \
	check_wait_learn; do
	"${builddir:-.}/tests/$t" "$@" || exit
done
