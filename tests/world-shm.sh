#!/bin/sh
# The world suites (check_world*) with same-host links allowed (RK_TEST_SHM=auto):
# every link of their worlds moves to shared memory after its handshake, so
# they all run over the shm transport too (tests/Makefile.inc sets builddir;
# run from the build dir).
RK_TEST_SHM=auto
export RK_TEST_SHM
for t in check_world check_world_link check_world_fail check_world_strangers; do
	"${builddir:-.}/tests/$t" "$@" || exit
done
