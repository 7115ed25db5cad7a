#!/bin/sh
# check_world with same-host links allowed (RK_TEST_SHM=auto): every link of
# the suite's worlds moves to shared memory after its handshake, so the whole
# world suite runs over the shm transport too (tests/Makefile.inc sets
# builddir; run from the build dir).
RK_TEST_SHM=auto
export RK_TEST_SHM
exec "${builddir:-.}/tests/check_world" "$@"
