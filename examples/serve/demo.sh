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
# instead (a VPATH build) and builds nothing.
#
# usage: demo.sh [--port P] [--leader-port P] [--] [rk-serve options]
# --port P serves the OpenAI-compatible API on 127.0.0.1:P instead of the
# built-in prompts, until Ctrl-C (rk-load or curl talk to it: docs/SERVE.md);
# --leader-port P is the port rank 0 listens on for the other rank (default:
# a free one, rk-launch --port). The first argument that is none of these
# (or everything after --) goes to rk-serve with the rest (e.g. --hidden
# 4096, --draft-k 4; see rk-serve --help).
set -e
usage()
{
	sed -n 's/^# usage: /usage: /p' "$0"
	echo "  --port P         serve HTTP on 127.0.0.1:P (until Ctrl-C) instead of --demo"
	echo "  --leader-port P  rank 0's port for the other rank (default: a free one)"
	echo "  the rest goes to rk-serve (rk-serve --help)"
}
# port NAME VALUE: VALUE if it is a port number, else stop with the usage
port()
{
	case $2 in
	'' | *[!0-9]*) ;;
	*) [ "$2" -ge 1 ] && [ "$2" -le 65535 ] && { echo "$2"; return 0; } ;;
	esac
	echo "demo.sh: $1 '$2': want a port, 1 to 65535" >&2
	usage >&2
	exit 2
}
http_port= leader_port=
while [ $# -gt 0 ]; do
	case $1 in
	--port) [ $# -ge 2 ] || set -- "$1" ''; http_port=$(port --port "$2"); shift 2 ;;
	--port=*) http_port=$(port --port "${1#*=}"); shift ;;
	--leader-port) [ $# -ge 2 ] || set -- "$1" ''; leader_port=$(port --leader-port "$2"); shift 2 ;;
	--leader-port=*) leader_port=$(port --leader-port "${1#*=}"); shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
top=$(cd "$(dirname "$0")/../.." && pwd)
[ -z "$builddir" ] || builddir=$(cd "$builddir" && pwd)	# relative to where we were
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
mode=--demo
if [ -n "$http_port" ]; then
	mode=--http=127.0.0.1:$http_port
	echo "demo.sh: serving on http://127.0.0.1:$http_port until Ctrl-C; from another terminal:" \
	     "$bdir/examples/load/rk-load --url http://127.0.0.1:$http_port" >&2
fi
exec "$bdir/examples/launch/rk-launch" --hosts localhost,localhost ${leader_port:+--port "$leader_port"} \
	-- "$bdir/examples/serve/rk-serve" "$mode" "$@"
