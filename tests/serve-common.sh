# shellcheck shell=sh
# Sourced by the rk-serve HTTP tests (tests/serve-*.sh): sets $launch, $serve
# and $load; exits 77 (skip) without rk-serve's HTTP server, rk-load or
# timeout(1); makes $tmp, a scratch folder; and on exit SIGKILLs every process
# whose pid the test left in $lpid, $spid, $cpid, $bpid, $hpid, $jpid or the
# list $pids (each emptied once the test has waited for it, or once the process
# is gone), then deletes $tmp (rk-launch's ranks die with it:
# PR_SET_PDEATHSIG).
# fail MSG... says why, shows the end of each file in $tmp and exits 1;
# wait_url FILE PID PREFIX sets $url (and $port) from the "listening on" line
# that PREFIX begins in FILE, or fails when PID exits first or after 30 s;
# wait_gone PID SECONDS returns 0 once PID has exited, 1 after SECONDS (a
# hang guard, not a figure).
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
load=$b/examples/load/rk-load
[ -x "$launch" ] || { echo "no $launch"; exit 99; }
if [ ! -x "$serve" ] || [ ! -x "$load" ]; then
	echo "SKIP: rk-serve/rk-load not built (libmicrohttpd, jansson, libcurl)"
	exit 77
fi
"$serve" --help | grep -q -- '--http=' || { echo "SKIP: rk-serve without HTTP"; exit 77; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
lpid= spid= cpid= bpid= hpid= jpid= pids=
cleanup()
{
	for p in $cpid $bpid $hpid $jpid $spid $lpid $pids; do
		kill -KILL "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
	done
	exit 1
}

wait_url()
{
	url=
	i=0
	while [ -z "$url" ]; do
		[ $i -ge 300 ] && fail "not serving after 30 s"
		kill -0 "$2" 2>/dev/null || fail "exited before serving"
		sleep 0.1
		i=$((i + 1))
		url=$(sed -n "s/^$3 .* listening on \(http:[^ ]*\)\$/\1/p" "$1")
	done
	port=${url##*:}
}

wait_gone()
{
	i=0
	while kill -0 "$1" 2>/dev/null; do
		[ $i -ge $(($2 * 10)) ] && return 1
		sleep 0.1
		i=$((i + 1))
	done
	return 0
}
