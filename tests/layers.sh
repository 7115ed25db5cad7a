#!/bin/sh
# The library's layers hold: no module calls a cross-file internal (an rk__*
# symbol) of a module above it, read from the objects of the convenience
# library with nm. The order is written once, in the table below: each of the
# library's source files, its layer and its module. A call to a lower layer is
# fine; within one layer only inside one module (the shm*.c files, the gpu/
# files, the base helpers call each other); anything else fails, naming the
# caller, the callee and both layers. A source file not in the table fails
# too: a new file must be placed. Skips (77) without nm. Run from the build
# directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
LC_ALL=C
export LC_ALL
command -v nm >/dev/null || { echo "SKIP: no nm"; exit 77; }

# The layers, lowest first:
#   wire       the frame codec: pure, no I/O
#   base       logging, config parsing, auth, the scheme table (transport.c:
#              the address parser reads it, and it calls no other module)
#   loop       the loop and its wait policy; the epoch regions
#   link       links: framing, handshake, batching, bounds, the hand-over
#   sock       sockets: resolve, the leader's listener, peer addresses
#   transport  tcp, shm (same-host), rdma/ (verbs), gpu/ (CUDA sources, the
#              loading of CUDA and NCCL): none calls another, only the layers
#              below
#   world      the star of links
#   sched      the world's users, each taking its own frames through a claim
#              on the world: the round scheduler, the NCCL bootstrap
# Columns: file, layer, module.
table='
wire/wire.c		wire		wire
wire/crc32c.c		wire		wire
wire/error.c		wire		wire
wire/version.c		wire		wire
runtime/log.c		base		base
runtime/config.c	base		base
runtime/config_launch.c	base		base
runtime/config_pmix.c	base		base
runtime/config_secret.c	base		base
runtime/addr.c		base		base
runtime/auth.c		base		base
runtime/transport.c	base		base
runtime/loop.c		loop		loop
runtime/source.c	loop		loop
runtime/timer.c		loop		loop
runtime/post.c		loop		loop
runtime/ring.c		loop		loop
runtime/wait.c		loop		loop
runtime/gaps.c		loop		loop
runtime/epoch.c		loop		epoch
runtime/link.c		link		link
runtime/sock.c		sock		sock
runtime/tcp.c		transport	tcp
runtime/shm.c		transport	shm
runtime/shm_ring.c	transport	shm
runtime/shm_bcast.c	transport	shm
runtime/shm_lane.c	transport	shm
runtime/shm_upgrade.c	transport	shm
runtime/shm_test.c	transport	shm
rdma/rdma.c		transport	rdma
rdma/verbs.c		transport	rdma
rdma/verbs_load.c	transport	rdma
gpu/gpu.c		transport	gpu
gpu/load.c		transport	gpu
gpu/notifier.c		transport	gpu
gpu/notifier_cuda.c	transport	gpu
gpu/emu.c		transport	gpu
gpu/epoch.c		transport	gpu
runtime/world.c		world		world
runtime/world_strangers.c	world		world
runtime/sched.c		sched		sched
runtime/sched_leader.c	sched		sched
runtime/sched_follower.c	sched		sched
runtime/sched_epoch.c	sched		sched
runtime/sched_draft.c	sched		sched
runtime/sched_watch.c	sched		sched
gpu/nccl.c		sched		nccl
'
order='wire base loop link sock transport world sched'

# Known exceptions, each a call this check would refuse: "caller callee".
allowed='
'

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# The objects: one per source file, the PIC one (.libs/) where both exist.
for d in wire runtime rdma gpu; do
	for o in "$b/$d/.libs/"librankrt_core_la-*.o "$b/$d/"librankrt_core_la-*.o; do
		[ -f "$o" ] || continue
		f=${o##*/librankrt_core_la-}
		echo "$d/${f%.o}.c $o"
	done
done | sort -u -k1,1 >"$tmp/objs"
if [ ! -s "$tmp/objs" ]; then
	echo "FAIL: no objects of librankrt_core.la under $b: build first"
	exit 1
fi

echo "$table" | awk 'NF == 3' >"$tmp/table"
echo "$order" | tr ' ' '\n' | awk 'NF { print $1, NR }' >"$tmp/rank"
echo "$allowed" | awk 'NF == 2' >"$tmp/allowed"

bad=0
while read -r f o; do
	if ! awk -v f="$f" '$1 == f { found = 1 } END { exit !found }' "$tmp/table"; then
		echo "FAIL: $f is not in tests/layers.sh's table: give it a layer and a module"
		bad=1
	fi
	nm -P "$o" >"$tmp/nm" || { echo "FAIL: nm $o"; bad=1; continue; }
	awk -v f="$f" '$2 ~ /^[TDBRCGSV]$/ && $1 ~ /^rk__/ { print $1, f }' "$tmp/nm" >>"$tmp/defs"
	awk -v f="$f" '$2 == "U" && $1 ~ /^rk__/ { print f, $1 }' "$tmp/nm" >>"$tmp/uses"
done <"$tmp/objs"
[ $bad = 0 ] || exit 1
touch "$tmp/defs" "$tmp/uses"

# caller callee definer, then each file's layer, rank and module
awk 'FNR == NR { def[$1] = $2; next } ($2 in def) && def[$2] != $1 { print $1, $2, def[$2] }' \
	"$tmp/defs" "$tmp/uses" | sort -u >"$tmp/calls"
awk -v tf="$tmp/table" -v rf="$tmp/rank" -v af="$tmp/allowed" '
	BEGIN {
		while ((getline l < tf) > 0) { split(l, w); layer[w[1]] = w[2]; mod[w[1]] = w[3] }
		while ((getline l < rf) > 0) { split(l, w); rank[w[1]] = w[2] }
		while ((getline l < af) > 0) { split(l, w); ok[w[1] " " w[2]] = 1 }
	}
	{
		a = $1; s = $2; d = $3
		la = layer[a]; ld = layer[d]
		if (rank[ld] < rank[la] || (ld == la && mod[d] == mod[a]))
			next
		if ((a " " s) in ok) {
			used[a " " s] = 1
			next
		}
		if (ld == la)
			printf "FAIL: %s (%s, layer %s) calls %s, defined in %s (%s): another " \
			       "module of its layer\n", a, mod[a], la, s, d, mod[d]
		else
			printf "FAIL: %s (layer %s) calls %s, defined in %s (layer %s, above " \
			       "it)\n", a, la, s, d, ld
		bad = 1
	}
	END {
		for (k in ok)
			if (!(k in used))
				printf "note: the known exception \"%s\" is gone: delete it\n", k
		exit bad
	}' "$tmp/calls" || exit 1
echo "PASS: $(wc -l <"$tmp/objs") objects, $(wc -l <"$tmp/calls") cross-file rk__ calls, in" \
	"the order $order"
