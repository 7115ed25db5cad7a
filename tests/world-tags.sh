#!/bin/sh
# The world suites whose peers are all ranks (check_world, check_world_link)
# with frame tags on every link (RK_TEST_TAGS=on: RK_FRAME_AUTH=on), on TCP and
# with same-host links allowed, so every frame type, size and send path is
# sealed and opened (tests/Makefile.inc sets builddir; run from the build dir).
RK_TEST_TAGS=on
export RK_TEST_TAGS
for shm in off auto; do
	for t in check_world check_world_link; do
		RK_TEST_SHM=$shm "${builddir:-.}/tests/$t" "$@" || exit
	done
done
