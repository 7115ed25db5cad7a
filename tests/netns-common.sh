# shellcheck shell=sh
# Sourced by the rk-launch --netns tests: exits 77 (skip) unless root with ip,
# timeout(1) and a working 'ip netns'; makes $tmp, a scratch folder; and on
# exit kills the launcher whose pid the test put in $lpid and deletes the
# namespaces it left (rkl<pid>-*), then $tmp.
[ "$(id -u)" = 0 ] || { echo "SKIP: --netns needs root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: no ip (iproute2)"; exit 77; }
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }
probe=rkn-probe-$$
if ! ip netns add "$probe" 2>/dev/null; then
	echo "SKIP: 'ip netns add' is not permitted here"
	exit 77
fi
ip netns delete "$probe"

tmp=$(mktemp -d) || exit 99
lpid=
cleanup()
{
	if [ -n "$lpid" ]; then
		kill -KILL "$lpid" 2>/dev/null
		for ns in $(ip netns list | sed -n "s/^\(rkl$lpid-[^ ]*\).*/\1/p"); do
			ip netns delete "$ns"
		done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
