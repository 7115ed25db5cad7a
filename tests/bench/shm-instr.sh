#!/bin/sh
# Instructions per frame of a same-host (shm) round trip, counted by callgrind:
# deterministic where wall-clock figures are not (a shared, loaded VM). Runs
# rk-pingpong's two ranks under callgrind (--wait=spin, COUNT round trips),
# each rank counted from its first wait mode on, and prints per rank:
#   frame path   rk__link_rx (parse, check, dispatch, the application's answer,
#                its encoding and, on the direct lane, its record in the ring)
#                and link_flush_cb (the copy into the ring of frames that went
#                through the batch), per frame
#   iteration    the loop's other instructions per iteration, about what one
#                empty spin costs
# Instructions say nothing of cache-line transfers or fences: see bench-shm.sh.
#
#   builddir=_build sh tests/bench/shm-instr.sh       (COUNT: 2000)
b=${builddir:-.}
count=${COUNT:-2000}
pp=$b/examples/pingpong/.libs/rk-pingpong
[ -x "$pp" ] || pp=$b/examples/pingpong/rk-pingpong
command -v valgrind >/dev/null || { echo "SKIP: no valgrind"; exit 77; }
command -v callgrind_annotate >/dev/null || { echo "SKIP: no callgrind_annotate"; exit 77; }
[ -x "$pp" ] || { echo "SKIP: no $pp"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
port=$((20000 + $$ % 20000))
# counted from a rank's first wait mode on (rk_loop_set_wait): not its handshake
vg="valgrind --tool=callgrind --zero-before=rk_loop_set_wait"
export LD_LIBRARY_PATH=$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# two processes, not --local: valgrind cannot follow rank 1's exec of /proc/self/exe
RK_SHM=on RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$port RK_RANK=1 $vg \
	--callgrind-out-file="$tmp/r1" "$pp" --runs 1 \
	--count "$count" --warmup 200 --wait=spin >"$tmp/r1.log" 2>&1 &
RK_SHM=on RK_WORLD_SIZE=2 RK_LEADER=127.0.0.1:$port RK_RANK=0 $vg \
	--callgrind-out-file="$tmp/r0" "$pp" --runs 1 \
	--count "$count" --warmup 200 --wait=spin >"$tmp/r0.log" 2>&1
wait
grep -q 'ranks over shm,' "$tmp/r0.log" || { echo "FAIL: not over shm:"; cat "$tmp/r0.log"; exit 1; }
echo "shm-instr: rk-pingpong --wait=spin under callgrind, $count round trips," \
	"$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in r0 r1; do
	callgrind_annotate --inclusive=yes --tree=calling "$tmp/$r" 2>/dev/null |
	awk -v rank="$r" '
	function num(s) { gsub(",", "", s); return s + 0 }
	function fname(s) { sub(/ \[.*$/, "", s); sub(/ \(.*$/, "", s); sub(/^.*:/, "", s); return s }
	/^ *[0-9,]+ .*[*]  / { split($0, a, "[*]  "); inc[fname(a[2])] = num($1); next }
	/^ *[0-9,]+ .*>   / {
		split($0, a, ">   "); f = fname(a[2])
		if (match(a[2], /\([0-9,]+x\)/)) calls[f] += num(substr(a[2], RSTART + 1, RLENGTH - 3))
	}
	END {
		fr = calls["rk__link_rx"]
		fl = calls["link_flush_cb"] ? inc["link_flush_cb"] / calls["link_flush_cb"] : 0
		printf "%s: frames %d, rk__link_rx %.0f + link_flush_cb %.0f = frame path %.0f" \
			" instructions a frame; iteration %.0f\n", rank, fr, inc["rk__link_rx"] / fr, fl,
			inc["rk__link_rx"] / fr + fl,
			(inc["iterate"] - inc["rk__link_rx"] - inc["link_flush_cb"]) / calls["iterate"]
	}'
done
grep -h '^spin' "$tmp/r0.log" | awk '{ print "(RTT under valgrind, meaningless: " $2 " us)" }'
exit 0
