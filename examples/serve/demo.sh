#!/bin/sh
# The demo: a tensor-parallel decode of the toy model on two ranks (two
# processes talking over TCP loopback, CPU backend), started by rk-launch.
# The leader generates from built-in prompts (greedy and sampled, plain and
# drafted) through the decode-round scheduler and prints each request's
# tokens, text and hash, checked against the model's one-rank reference, then
# a receipt (tokens/s, rounds, drafted/accepted, CPU seconds per rank).
#
# From a clean checkout on Debian/Ubuntu it installs what the build needs
# (tests/deps.sh), builds in the source tree on the first run, then runs.
# With builddir=DIR it runs the binaries of an existing build in DIR
# instead (a VPATH build) and builds nothing. Extra arguments go to rk-serve
# (e.g. --hidden 4096, --draft-k 4; see rk-serve --help).
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"

if [ -n "$builddir" ]; then
	bdir=$builddir
else
	bdir=.
	tests/deps.sh
	if [ ! -x examples/serve/rk-serve ] || [ ! -x examples/launch/rk-launch ]; then
		echo "demo.sh: building rankrt (first run only) ..."
		if [ ! -f Makefile ]; then
			autoreconf -fi
			./configure
		fi
		make -j"$(nproc)"
		if [ ! -x examples/serve/rk-serve ]; then
			# configured before libmicrohttpd and jansson were installed: look again
			./config.status --recheck && ./config.status
			make -j"$(nproc)"
		fi
	fi
fi
if [ ! -x "$bdir/examples/serve/rk-serve" ]; then
	echo "demo.sh: $bdir/examples/serve/rk-serve was not built: it needs libmicrohttpd-dev and" \
	     "libjansson-dev (tests/deps.sh installs them), then ./configure" >&2
	exit 1
fi
exec "$bdir/examples/launch/rk-launch" --hosts localhost,localhost -- "$bdir/examples/serve/rk-serve" --demo "$@"
