#!/bin/bash
# softroce.sh - run a bash script inside throw-away qemu guest(s) whose Debian 12
# kernel (6.1) carries Soft-RoCE (rdma_rxe), so that real RoCEv2 verbs traffic
# can be tested on a host with no RDMA device and no CONFIG_INFINIBAND.
#
# usage: softroce.sh [options] --script FILE
#   --script FILE     bash script run in the guest (cwd /root); its exit status
#                     is ours
#   --nodes 1|2       1 (default): one guest, rxeA on vA <-veth-> vB with rxeB;
#                     2: two guests, rxe0 on eth0, wired by qemu "-netdev
#                     stream" over a host unix socket (no IP on the host)
#   --add PATH        copy PATH (file or directory) into the guest at the same
#                     path; ELF files bring their ldd dependencies, resolved
#                     with the caller's LD_LIBRARY_PATH
#   --env NAME=VALUE  export NAME in the guest
#   --timeout SEC     wall-clock bound for the whole boot (default 300)
#   --mem MB          guest RAM (default: 512, plus twice the files added)
#   -v                kernel messages up to loglevel 7
#
# The guest script sees:
#   --nodes 1: SOFTROCE_A_{DEV,IP,GID}=rxeA 10.91.1.1 <gid index>, and B alike
#              on vB/10.91.1.2; policy routing makes verbs traffic between them
#              cross the veth instead of the lo shortcut (rxe in 6.1 is not
#              netns-aware, so both ends stay in the initial namespace)
#   --nodes 2: SOFTROCE_NODE (0|1), SOFTROCE_{DEV,IP,GID}=rxe0 10.91.2.<1|2>
#              <gid index>, SOFTROCE_PEER_IP; both guests run the same script
# GIDs are indexes (perftest -x, ibv_rc_pingpong -g).
#
# Exit status: the script's (with two guests: the first non-zero, node 0
# first); 77 when this host cannot run the guests (not root, a tool missing,
# no kernel package to be had); 124 on timeout; 99 when the harness failed.
# Never installs packages; the CI (.ci/run) does. The kernel package, the
# uncompressed kernel and the base initramfs are cached in
# ${RK_SOFTROCE_CACHE:-/var/tmp/rankrt-softroce} (about 450 MB).
# RK_SOFTROCE_ACCEL=tcg|kvm overrides the accelerator choice.
set -eu

CACHE=${RK_SOFTROCE_CACHE:-/var/tmp/rankrt-softroce}
NODES=1
TIMEOUT=300
MEM=
VERBOSE=0
SCRIPT=
ADDS=()
ENVS=()

say()
{
	echo "softroce: $*" >&2
}

skip()
{
	say "SKIP: $*"
	exit 77
}

die()
{
	say "ERROR: $*"
	exit 99
}

while [ $# -gt 0 ]; do
	case "$1" in
	--script) SCRIPT=$2; shift 2 ;;
	--nodes) NODES=$2; shift 2 ;;
	--add) ADDS+=("$2"); shift 2 ;;
	--env) ENVS+=("$2"); shift 2 ;;
	--timeout) TIMEOUT=$2; shift 2 ;;
	--mem) MEM=$2; shift 2 ;;
	-v) VERBOSE=1; shift ;;
	-h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
case "$NODES" in 1|2) ;; *) die "--nodes must be 1 or 2" ;; esac
[ -f "$SCRIPT" ] || die "--script: '$SCRIPT' is not a file"
for p in "${ADDS[@]+"${ADDS[@]}"}"; do
	[ -e "$p" ] || die "--add: '$p' does not exist"
done

# ---------------------------------------------------------------- host checks
[ "$(id -u)" = 0 ] || skip "needs root (dpkg -x, depmod, rdma in the guest)"
for t in qemu-system-x86_64 busybox bash ip rdma ibv_devinfo ib_send_lat cpio depmod xz \
	 apt-get apt-cache dpkg ldd flock; do
	command -v "$t" >/dev/null 2>&1 ||
		skip "no $t (packages: qemu-system-x86 busybox-static iproute2 ibverbs-utils" \
		     "perftest rdma-core ibverbs-providers cpio kmod xz-utils)"
done
RXE_LIB=$(ls /usr/lib/*/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1) || true
[ -n "$RXE_LIB" ] && [ -f /etc/libibverbs.d/rxe.driver ] ||
	skip "no rxe provider for libibverbs (package ibverbs-providers)"

# ---------------------------------------------------------------- kernel
# Debian's linux-image-amd64 depends on linux-image-6.1.0-NN-amd64: fetch that
# package and unpack it (never install it as the host's kernel).
fetch_kernel()
{
	local kpkg kdir tmp off

	kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
	       awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
	if [ -n "$kpkg" ]; then
		KVER=${kpkg#linux-image-}
		kdir=$CACHE/kernel-$KVER
		[ -f "$kdir/done" ] && { KDIR=$kdir; return 0; }
		say "fetching $kpkg (apt-get download, once)"
		tmp=$(mktemp -d "$CACHE/fetch.XXXXXX")
		chmod 755 "$tmp"	# apt's _apt user writes the download
		if (cd "$tmp" && timeout 600 apt-get download -q "$kpkg" >download.log 2>&1); then
			dpkg -x "$tmp"/linux-image-*.deb "$tmp/x"
			rm -f "$tmp"/*.deb
			depmod -b "$tmp/x" "$KVER"	# the .deb ships no modules.dep
			cp "$tmp/x/boot/vmlinuz-$KVER" "$tmp/vmlinuz"
			# TCG spends ~8 s decompressing a bzImage; the uncompressed
			# ELF boots through its PVH entry instead.
			off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$tmp/vmlinuz" |
			      head -1 | cut -d: -f1) || true
			if [ -n "$off" ]; then
				tail -c +$((off + 1)) "$tmp/vmlinuz" |
					xz -dc --single-stream >"$tmp/vmlinux" 2>/dev/null || true
			fi
			[ "$(head -c4 "$tmp/vmlinux" 2>/dev/null | tr -d '\0')" = $'\x7fELF' ] ||
				cp "$tmp/vmlinuz" "$tmp/vmlinux"
			touch "$tmp/done"
			rm -rf "$kdir"
			mv "$tmp" "$kdir"
			KDIR=$kdir
			return 0
		fi
		say "apt-get download $kpkg failed: $(tail -1 "$tmp/download.log")"
		rm -rf "$tmp"
	fi
	# Offline, or stale package lists: any kernel fetched before will do.
	kdir=$(ls -d "$CACHE"/kernel-*/done 2>/dev/null | sort -V | tail -1) || true
	[ -n "$kdir" ] || skip "cannot obtain Debian's kernel package (apt-get update?)"
	KDIR=${kdir%/done}
	KVER=${KDIR##*/kernel-}
}

# ---------------------------------------------------------------- files
# Debian 12 is usr-merged, and so is the guest's root.
canon()
{
	case "$1" in
	/lib/*|/lib64/*|/bin/*|/sbin/*) echo "/usr$1" ;;
	*) echo "$1" ;;
	esac
}

# copy_file ROOT FILE: FILE to ROOT/FILE; an ELF file brings its ldd deps.
copy_file()
{
	local root=$1 f=$2 dep

	[ -e "$root$f" ] && return 0
	mkdir -p "$root$(dirname "$f")"
	cp -L "$f" "$root$f"
	[ "$(head -c4 "$f" | tr -d '\0')" = $'\x7fELF' ] || return 0
	ldd "$f" 2>/dev/null | grep -q 'not found' &&
		say "warning: $f: $(ldd "$f" | grep 'not found' | tr -s ' \t' ' ')"
	for dep in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | sort -u); do
		[ -f "$dep" ] || continue
		copy_file "$root" "$(canon "$dep")"
		# the guest has no ld.so.cache for, say, /usr/local/cuda/lib
		echo "$(dirname "$(canon "$dep")")" >>"$root/.libdirs"
	done
	return 0
}

copy_path()
{
	local root=$1 p f

	p=$(realpath -s "$2")	# keep symlinks' names (sonames)
	if [ -d "$p" ]; then
		while IFS= read -r -d '' f; do
			copy_file "$root" "$f"
		done < <(find "$p" \( -type f -o -type l \) -print0)
	else
		copy_file "$root" "$(canon "$p")"
	fi
}

# ---------------------------------------------------------------- base initramfs
# Top-level modules, their dependencies come from modules.dep. rxe allocates
# the "crc32" shash when a device is created: without crc32_generic, "rdma
# link add" fails with ENOENT (the guest has no module autoload).
MODS="virtio_pci virtio_net veth crc32_generic rdma_rxe ib_uverbs rdma_ucm"
GUEST_BINS="$(command -v bash) $(command -v ip) $(command -v rdma) $(command -v ibv_devinfo)
	    $(command -v ib_send_lat) $RXE_LIB /etc/libibverbs.d/rxe.driver"
# glibc dlopen()s libgcc_s for pthread_exit and cancellation.
GUEST_BINS="$GUEST_BINS $(ls /usr/lib/*/libgcc_s.so.1 2>/dev/null | head -1)"

# add_mod NAME: the module and, first, what it depends on
add_mod()
{
	local line rel d

	line=$(grep -E "(^|/)$(echo "$1" | sed 's/[-_]/[-_]/g')\.ko(\.xz)?:" "$DEPF" | head -1) ||
		true
	[ -n "$line" ] || return 0		# built in
	for d in ${line#*:}; do
		d=$(basename "$d"); d=${d%.xz}; d=${d%.ko}
		case " $SEEN " in *" $d "*) ;; *) add_mod "$d" ;; esac
	done
	case " $SEEN " in *" $1 "*) return 0 ;; esac
	SEEN="$SEEN $1"
	rel=${line%%:*}
	cp "$KDIR/x/lib/modules/$KVER/$rel" "$ROOT/lib/modules/$KVER/$1.ko"
	echo "$1" >>"$ROOT/lib/modules/$KVER/load-order"
}

build_base()
{
	local key m b

	key=$({ cat "$0"; echo "$KVER"; stat -L -c '%n %s %Y' $GUEST_BINS "$(command -v busybox)"; } |
	      sha1sum | cut -c1-12)
	BASE=$CACHE/base-$KVER-$key.cpio
	[ -f "$BASE" ] && return 0
	say "building the base initramfs"
	rm -f "$CACHE"/base-*.cpio	# stale: another kernel, script or host tools
	ROOT=$(mktemp -d "$CACHE/root.XXXXXX")
	mkdir -p "$ROOT"/usr/bin "$ROOT"/usr/sbin "$ROOT"/usr/lib "$ROOT"/usr/lib64 \
		 "$ROOT"/dev "$ROOT"/proc "$ROOT"/sys "$ROOT"/tmp "$ROOT"/run "$ROOT"/etc \
		 "$ROOT"/root "$ROOT"/guest "$ROOT"/bb
	for d in bin sbin lib lib64; do
		ln -s usr/$d "$ROOT/$d"
	done
	copy_file "$ROOT" "$(canon "$(readlink -f "$(command -v busybox)")")"
	[ -e "$ROOT/usr/bin/busybox" ] || ln -s "$(canon "$(readlink -f "$(command -v busybox)")")" \
					       "$ROOT/usr/bin/busybox"
	mkdir -p "$ROOT/lib/modules/$KVER"
	DEPF=$KDIR/x/lib/modules/$KVER/modules.dep
	SEEN=
	for m in $MODS; do
		add_mod "$m"
	done
	for b in $GUEST_BINS; do
		copy_path "$ROOT" "$b"
	done
	echo "root:x:0:0:root:/root:/bin/bash" >"$ROOT/etc/passwd"
	echo "root:x:0:" >"$ROOT/etc/group"
	printf '127.0.0.1 localhost\n' >"$ROOT/etc/hosts"
	write_init >"$ROOT/init"
	chmod +x "$ROOT/init"
	write_stage2 >"$ROOT/guest/stage2.sh"
	(cd "$ROOT" && find . -print0 | cpio --null -o -H newc --quiet) >"$BASE.tmp"
	mv "$BASE.tmp" "$BASE"
	rm -rf "$ROOT"
}

# /init, PID 1 (busybox sh): mounts, modules, then bash runs the rest. The
# applets live in /bb, after PATH's real binaries: Debian's busybox ip has no
# veth or rule support.
write_init()
{
	cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bb
export PATH=/usr/sbin:/usr/bin:/bb HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
kv=$(uname -r)
while read -r m; do
	insmod "/lib/modules/$kv/$m.ko" || echo "softroce-guest: insmod $m failed"
done <"/lib/modules/$kv/load-order"
bash /guest/stage2.sh
echo "@@SOFTROCE_RC=$?@@"
sync
poweroff -f
EOF
}

# stage2 (bash): the rxe devices and addresses, then the script.
write_stage2()
{
	cat <<'EOF'
set -u
ulimit -l unlimited			# memory registration pins pages
. /guest/env
ip link set lo up

# gid_index DEV IP: index of the RoCEv2 GID ::ffff:IP (GIDs appear late)
gid_index()
{
	local want f i

	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${2//./ })
	for i in $(seq 100); do
		for f in /sys/class/infiniband/$1/ports/1/gids/*; do
			[ "$(cat "$f" 2>/dev/null)" = "$want" ] && { basename "$f"; return 0; }
		done
		sleep 0.1
	done
	echo "softroce-guest: no GID for $2 on $1" >&2
	return 1
}

setup_single()
{
	local i

	ip link add vA type veth peer name vB || return 1
	ip addr add 10.91.1.1/32 dev vA && ip addr add 10.91.1.2/32 dev vB || return 1
	ip link set vA up && ip link set vB up || return 1
	for i in all default lo vA vB; do
		echo 1 >/proc/sys/net/ipv4/conf/$i/accept_local
		echo 0 >/proc/sys/net/ipv4/conf/$i/rp_filter
	done
	# Both addresses are local, so the kernel would route A<->B over lo,
	# where rxe drops RoCE frames for a device bound to vA or vB. Lookups
	# that name an output device (rxe, ib_core address resolution) go out
	# of that veth end instead; plain sockets still take lo.
	ip rule add pref 100 lookup local && ip rule del pref 0 || return 1
	ip rule add pref 10 oif vA lookup 100 && ip rule add pref 11 oif vB lookup 101 || return 1
	rdma link add rxeA type rxe netdev vA && rdma link add rxeB type rxe netdev vB || return 1
	export SOFTROCE_A_DEV=rxeA SOFTROCE_A_IP=10.91.1.1 SOFTROCE_B_DEV=rxeB SOFTROCE_B_IP=10.91.1.2
	SOFTROCE_A_GID=$(gid_index rxeA 10.91.1.1) && SOFTROCE_B_GID=$(gid_index rxeB 10.91.1.2) ||
		return 1
	export SOFTROCE_A_GID SOFTROCE_B_GID
}

setup_node()
{
	local i

	export SOFTROCE_DEV=rxe0 SOFTROCE_IP=10.91.2.$((SOFTROCE_NODE + 1))
	export SOFTROCE_PEER_IP=10.91.2.$((2 - SOFTROCE_NODE))
	for i in $(seq 50); do
		[ -e /sys/class/net/eth0 ] && break
		sleep 0.1
	done
	ip addr add $SOFTROCE_IP/24 dev eth0 && ip link set eth0 up || return 1
	rdma link add rxe0 type rxe netdev eth0 || return 1
	SOFTROCE_GID=$(gid_index rxe0 $SOFTROCE_IP) || return 1
	export SOFTROCE_GID
}

if [ -n "${SOFTROCE_NODE:-}" ]; then
	setup_node
else
	setup_single
fi || { echo "softroce-guest: rxe setup failed"; exit 99; }
echo "softroce-guest: ready at $(cut -d' ' -f1 /proc/uptime) s of uptime"
cd /root
bash /guest/cmd.sh
EOF
}

# ---------------------------------------------------------------- per-run initramfs
# The kernel unpacks concatenated cpio archives: the cached base, then this run's.
build_initrd()	# NODE OUT
{
	local r=$WORK/root$1 p e

	mkdir -p "$r/guest"
	cp "$SCRIPT" "$r/guest/cmd.sh"
	{
		[ -n "$1" ] && echo "export SOFTROCE_NODE=$1"
		for e in "${ENVS[@]+"${ENVS[@]}"}"; do
			printf 'export %q\n' "$e"
		done
	} >"$r/guest/env"
	for p in "${ADDS[@]+"${ADDS[@]}"}"; do
		copy_path "$r" "$p"
	done
	if [ -f "$r/.libdirs" ]; then
		e=$(sort -u "$r/.libdirs" | paste -sd:)
		echo "export LD_LIBRARY_PATH=\${LD_LIBRARY_PATH:+\$LD_LIBRARY_PATH:}$e" >>"$r/guest/env"
		rm "$r/.libdirs"
	fi
	(cd "$r" && find . -print0 | cpio --null -o -H newc --quiet) >"$WORK/run$1.cpio"
	cat "$BASE" "$WORK/run$1.cpio" >"$2"
	rm -rf "$r"
}

# ---------------------------------------------------------------- boot
QEMU_PIDS=()
TAIL_PIDS=()
WORK=

cleanup()
{
	local p

	for p in "${QEMU_PIDS[@]+"${QEMU_PIDS[@]}"}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	sleep 0.2
	for p in "${QEMU_PIDS[@]+"${QEMU_PIDS[@]}"}" "${TAIL_PIDS[@]+"${TAIL_PIDS[@]}"}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	[ -n "$WORK" ] && rm -rf "$WORK"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

pick_accel()
{
	case "${RK_SOFTROCE_ACCEL:-auto}" in
	kvm|tcg) echo "$RK_SOFTROCE_ACCEL" ;;
	*)	# PVM's /dev/kvm (kvm_pvm) cannot boot a stock kernel.
		if [ -r /dev/kvm ] && [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ] &&
		   grep -qwE 'vmx|svm' /proc/cpuinfo; then
			echo kvm
		else
			echo tcg
		fi ;;
	esac
}

# boot NODE INITRD: start one guest in the background
boot()
{
	local node=$1 args cmdline mem=$MEM

	if [ -z "$mem" ]; then	# the initramfs unpacks into guest RAM
		mem=$(( (NODES == 2 ? 384 : 512) + 2 * $(stat -c %s "$2") / 1048576 ))
	fi
	# no_timer_check: under TCG on a loaded host the emulated CPU runs too slowly
	# for the kernel's IO-APIC timer check, which then panics ("IO-APIC + timer
	# doesn't work!") before the guest's script starts
	cmdline="console=ttyS0 loglevel=$([ $VERBOSE = 1 ] && echo 7 || echo 3) panic=-1 oops=panic"
	cmdline="$cmdline no_timer_check"
	args=(-nodefaults -no-user-config -machine q35 -m "$mem" -smp $((NODES == 2 ? 1 : 2))
	      -kernel "$KDIR/vmlinux" -initrd "$2" -append "$cmdline"
	      -display none -serial stdio -monitor none -no-reboot)
	if [ "$ACCEL" = kvm ]; then
		args+=(-accel kvm -cpu host)
	else	# a smaller translation cache keeps qemu near 300 MB
		args+=(-accel tcg,tb-size=64 -cpu max)
	fi
	if [ -n "$node" ]; then
		# qemu 7.2's stream netdev has no reconnect: node 0 listens first.
		args+=(-netdev "stream,id=w,server=$([ "$node" = 0 ] && echo on || echo off),addr.type=unix,addr.path=$WORK/wire"
		       -device "virtio-net-pci,netdev=w,romfile=,mac=52:54:00:91:02:0$((node + 1))")
	fi
	: >"$WORK/console$node"
	qemu-system-x86_64 "${args[@]}" </dev/null >"$WORK/console$node" 2>&1 &
	QEMU_PIDS+=($!)
	if [ -n "$node" ]; then
		tail -n +1 -f --pid=$! "$WORK/console$node" | sed -u "s/\r\$//; s/^/[node$node] /" &
	else
		tail -n +1 -f --pid=$! "$WORK/console$node" | sed -u 's/\r$//' &
	fi
	TAIL_PIDS+=($!)
}

stop_guests()
{
	local p

	for p in "${QEMU_PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	sleep 1
	for p in "${QEMU_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
}

# run_guests: boot, wait for power-off or the deadline; HUNG=1 when a guest
# never reached its script (a TCG boot that stalls or panics early: boot once
# more)
run_guests()
{
	local n t0 deadline ready alive p i

	HUNG=0
	rm -f "$WORK/wire"
	t0=$(date +%s.%N)
	deadline=$(( $(date +%s) + TIMEOUT ))
	ready=$(( $(date +%s) + ${RK_SOFTROCE_BOOT_S:-90} ))
	for n in "${nodes[@]}"; do
		boot "$n" "$WORK/initrd$n"
		if [ "$n" = 0 ]; then
			for i in $(seq 100); do
				[ -S "$WORK/wire" ] && break
				sleep 0.05
			done
		fi
	done
	while :; do
		alive=0
		for p in "${QEMU_PIDS[@]}"; do
			kill -0 "$p" 2>/dev/null && alive=1
		done
		[ $alive = 0 ] && break
		if [ "$(date +%s)" -ge "$deadline" ]; then
			say "TIMEOUT after ${TIMEOUT} s: stopping the guest(s)"
			stop_guests
		elif [ "$ready" != 0 ] && [ "$(date +%s)" -ge "$ready" ]; then
			ready=0
			for n in "${nodes[@]}"; do
				grep -q 'softroce-guest:' "$WORK/console$n" || HUNG=1
			done
			if [ $HUNG = 1 ]; then
				say "a guest did not come up in ${RK_SOFTROCE_BOOT_S:-90} s: stopping it"
				stop_guests
			fi
		fi
		sleep 0.2
	done
	for p in "${QEMU_PIDS[@]}" "${TAIL_PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	QEMU_PIDS=()
	TAIL_PIDS=()
	for n in "${nodes[@]}"; do
		grep -q 'softroce-guest:' "$WORK/console$n" || HUNG=1
	done
	say "accel=$ACCEL kernel=$KVER nodes=$NODES:" \
	    "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" \
	    "from qemu start to power-off"
	TIMED_OUT=0
	[ "$(date +%s)" -ge "$deadline" ] && TIMED_OUT=1
	return 0
}

main()
{
	local n rc r try

	mkdir -p "$CACHE"
	exec 9>"$CACHE/lock"
	flock -w 900 9 || die "$CACHE/lock is held by another run"
	fetch_kernel
	build_base
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/softroce.XXXXXX")
	ACCEL=$(pick_accel)
	if [ "$NODES" = 1 ]; then nodes=(""); else nodes=(0 1); fi
	# still under the lock: a run of another checkout (another script, so
	# another key) removes this base when it builds its own
	for n in "${nodes[@]}"; do
		build_initrd "$n" "$WORK/initrd$n"
	done
	exec 9>&-
	for try in 1 2; do
		run_guests
		[ $HUNG = 1 ] && [ $try = 1 ] && say "booting again" && continue
		break
	done
	rc=
	for n in "${nodes[@]}"; do
		r=$(tr -d '\r' <"$WORK/console$n" | sed -n 's/^@@SOFTROCE_RC=\([0-9]*\)@@$/\1/p' | tail -1)
		if [ -z "$r" ]; then
			if [ $TIMED_OUT = 1 ] || [ $HUNG = 1 ]; then
				r=124
			else
				say "guest${n:+ $n} stopped without a result"
				r=99
			fi
		fi
		if [ -z "$rc" ] || [ "$rc" = 0 ]; then
			rc=$r
		fi
	done
	exit "$rc"
}

main
