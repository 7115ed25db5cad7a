#!/bin/sh
# Install the Debian/Ubuntu packages that building and testing rankrt need,
# if any is missing. Idempotent; uses sudo when not root.
set -e
pkgs="build-essential autoconf automake libtool pkg-config liburing-dev check libsubunit-dev
libibverbs-dev librdmacm-dev libssl-dev iproute2 procps util-linux openmpi-bin
libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev curl prometheus
python3 python3-torch python3-pytest libpmix-dev python3-yaml"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
# Node.js and npm by command, not by package: NodeSource's nodejs bundles npm and
# Conflicts with Debian's npm package, so ask for Debian's only where one is missing.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing:$missing"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
