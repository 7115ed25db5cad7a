## examples/rk-launch: the launcher (one rank per host, ssh or fork/exec, --netns).
## It uses no rankrt API: a plain program, so the tests exec it directly.
bin_PROGRAMS += examples/rk-launch
examples_rk_launch_SOURCES = examples/rk-launch.c
examples_rk_launch_CFLAGS = $(AM_CFLAGS)

## Its tests: scripts run from the build directory; each exits 77 to skip.
TESTS += tests/launch-basic.sh tests/launch-kill.sh tests/launch-netns.sh tests/launch-mpi.sh
EXTRA_DIST += tests/mpi-probe.sh tests/netns-common.sh tests/launch-basic.sh \
	tests/launch-kill.sh tests/launch-netns.sh tests/launch-mpi.sh
