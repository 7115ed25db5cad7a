#!/bin/sh
# The resident-rounds receipt (issue 18; docs/BENCH.md "Resident rounds").
# Not in TESTS; from the build directory:  builddir=. sh ../tests/bench/bench-resident.sh
#
# 1. tests/bench/bench-resident: the publication cost per round boundary
#    (PUB lines) and, on a GPU, ready-to-first-kernel, launch against
#    resident (GPULAT lines).
# 2. The decode receipt: rk-serve --bench with RK_RESIDENT=off (the launch
#    path) against RK_RESIDENT=on, the same binary, interleaved run by run
#    (the order rotates), per TP degree and size, streams 1,4,8, greedy,
#    plain and drafted (the CUDA backend has no resident rounds: on and off
#    differ there only in the scheduler's publications). Every cell line is
#    printed with its mode, then a summary per cell: the medians of tokens/s
#    and of each rank's CPU seconds, each mode's ratio to off, which path the
#    rounds took (the CPU backend's "resident rN:" lines), and whether every
#    token hash agreed (decode-exact every way).
# Knobs: BACKEND (cuda where rk-serve has it and a GPU answers, else cpu),
# MODES ("off on"; a mode ending in -block
# runs every rank under RK_WAIT=block, e.g. on-block, one ending in -fblock
# only the followers, the leader under the default; before either, -nolane
# sets RK_LANE=0 (e.g. on-nolane-fblock); -wspinN anywhere in a mode passes
# --cpu-worker-spin-us=N (e.g. on-wspin0); a mode starting with
# base- runs the rest of its name with the programs of the built tree
# BASE_BUILD: MODES="off base-off" BASE=base-off compares two builds, the
# same run), BASE (the mode the
# ratios divide by, off), DRAFTS ("plain,drafted"),
# TPS (cuda: "1"; cpu: "2 4"), RUNS (3), REQUESTS (32), TOKENS (64),
# STREAMS (1,4,8), SIZES ("name:rk-serve options;...", default cuda: small
# "--vocab 256 --hidden 1024", large "--vocab 4096 --hidden 32768"; cpu:
# small "--hidden 1024", large "--hidden 16384"), ITERS (bench-resident,
# 20000), TIMEOUT (seconds per rk-serve job, 150), DEADLINE (no job starts
# later than this many seconds after the start; 0 = none), ARGS (more
# rk-serve options). Exit: 0 when every job ran and the hashes agreed.
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
bench=$b/tests/bench/bench-resident
start=$(date +%s)
if [ ! -x "$serve" ] || [ ! -x "$launch" ]; then
	echo "no $serve or $launch: build first (make check TESTS=)"
	exit 77
fi
backend=${BACKEND:-}
if [ -z "$backend" ]; then
	backend=cpu
	if "$serve" --help 2>&1 | grep -q 'with the CUDA backend' && nvidia-smi -L >/dev/null 2>&1; then
		backend=cuda
	fi
fi
modes=${MODES:-off on}
if [ "$backend" = cuda ]; then
	tps=${TPS:-1}
	sizes=${SIZES:-"small:--vocab 256 --hidden 1024;large:--vocab 4096 --hidden 32768"}
else
	tps=${TPS:-2 4}
	sizes=${SIZES:-"small:--hidden 1024;large:--hidden 16384"}
fi
runs=${RUNS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rc=0

echo "== bench-resident: backend $backend, TP $tps, $runs runs, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -x "$bench" ]; then
	"$bench" all "${ITERS:-20000}" || rc=1
fi

# job TP SIZE-NAME SIZE-ARGS MODE RUN
job()
{
	hosts=localhost
	i=1
	while [ "$i" -lt "$1" ]; do
		hosts=$hosts,localhost
		i=$((i + 1))
	done
	jlaunch=$launch
	jserve=$serve
	rmode=${4#base-}
	if [ "$rmode" != "$4" ]; then
		[ -n "${BASE_BUILD:-}" ] || { echo "FAIL: mode $4 needs BASE_BUILD"; rc=1; return; }
		jlaunch=$BASE_BUILD/examples/launch/rk-launch
		jserve=$BASE_BUILD/examples/serve/rk-serve
	fi
	# -wspinN anywhere: the CPU worker's epoch spin, --cpu-worker-spin-us=N
	wspin=$(echo "$rmode" | sed -n 's/.*-wspin\([0-9]*\).*/\1/p')
	[ -n "$wspin" ] && rmode=$(echo "$rmode" | sed "s/-wspin$wspin//")
	m4=$rmode
	rmode=${m4%-fblock}
	wenv=
	fwrap=
	if [ "$rmode" != "$m4" ]; then
		# the followers block, the leader keeps the default (rk-launch sets RK_RANK)
		fwrap=$out/fblock.sh
		echo '[ "$RK_RANK" = 0 ] || export RK_WAIT=block; exec "$@"' >"$fwrap"
	else
		rmode=${m4%-block}
		[ "$rmode" != "$m4" ] && wenv=RK_WAIT=block
	fi
	if [ "${rmode%-nolane}" != "$rmode" ]; then
		rmode=${rmode%-nolane}
		wenv="$wenv RK_LANE=0"	# the followers' partials go by their loops
	fi
	# shellcheck disable=SC2086
	env $wenv RK_RESIDENT=$rmode timeout -k 5 "${TIMEOUT:-150}" "$jlaunch" --hosts "$hosts" -- \
		${fwrap:+sh "$fwrap"} "$jserve" --bench --backend="$backend" $3 --bench-streams "${STREAMS:-1,4,8}" \
		--bench-modes greedy --bench-draft "${DRAFTS:-plain,drafted}" \
		--bench-requests "${REQUESTS:-32}" --bench-max-tokens "${TOKENS:-64}" \
		${wspin:+--cpu-worker-spin-us=$wspin} \
		${ARGS:-} </dev/null >"$out/job.out" 2>&1
	jrc=$?
	sed -n "s/^\[r0\] cell /CELL tp=$1 size=$2 mode=$4 run=$5 /p" "$out/job.out" | tee -a "$out/cells"
	pat='^\[r[0-9]*\] \(resident r[0-9]*:.*\)'
	sed -n "s/$pat/PATH tp=$1 size=$2 mode=$4 run=$5 \1/p" \
		"$out/job.out" | tee -a "$out/paths"
	if [ $jrc != 0 ]; then
		echo "FAIL tp=$1 size=$2 mode=$4 run=$5: exit $jrc"
		tail -n 8 "$out/job.out"
		rc=1
	fi
}

for tp in $tps; do
	echo "$sizes" | tr ';' '\n' | while IFS= read -r sz; do
		[ -n "$sz" ] || continue
		name=${sz%%:*}
		args=${sz#*:}
		r=1
		while [ "$r" -le "$runs" ]; do
			if [ "${DEADLINE:-0}" -gt 0 ] && [ $(($(date +%s) - start)) -gt "$DEADLINE" ]; then
				echo "deadline: no more jobs"
				break
			fi
			# the order rotates run by run
			set -- $modes
			i=1
			while [ "$i" -lt "$r" ]; do
				m=$1
				shift
				set -- "$@" "$m"
				i=$((i + 1))
			done
			for m in "$@"; do
				job "$tp" "$name" "$args" "$m" $r
			done
			r=$((r + 1))
		done
	done
done
[ -f "$out/cells" ] || { echo "no cells"; exit 1; }

# CELL tp= size= mode= run= STREAMS MODE DRAFT TOKENS TOK/S ROUNDS ACCEPT HASH CPU_R0 [CPU_R1..]
base=${BASE:-off}
echo "== summary (medians over runs; ratio = mode / $base)"
awk -v base="$base" '
function med(s,   n, a, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n ? (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) : 0
}
{
	split($2, x, "="); tp = x[2]; split($3, x, "="); sz = x[2]; split($4, x, "="); m = x[2]
	k = tp " " sz " " $6 " " $8
	keys[k] = 1
	ms[m] = 1
	tps[k, m] = tps[k, m] " " $10
	for (c = 14; c <= NF; c++) { cpu[k, m, c - 14] = cpu[k, m, c - 14] " " $c; nr[k] = c - 13 }
	if (!(k in hash)) hash[k] = $13; else if (hash[k] != $13) bad[k] = 1
}
END {
	for (k in keys) {
		split(k, f, " ")
		off = med(tps[k, base])
		for (m in ms) {
			if (m == base || tps[k, m] == "")
				continue
			on = med(tps[k, m])
			line = sprintf("SUMMARY tp=%s %-5s streams=%s %-7s %-9s: tok/s %s %.1f %s %.1f (x%.3f); cpu_s", f[1], f[2], f[3], f[4], m, base, off, m, on, off ? on / off : 0)
			for (r = 0; r < nr[k]; r++) {
				co = med(cpu[k, base, r]); cn = med(cpu[k, m, r])
				line = line sprintf(" r%d %s %.4f %s %.4f (x%.2f)", r, base, co, m, cn, co ? cn / co : 0)
			}
			print line (bad[k] ? "; HASHES DIFFER" : "; hashes agree")
		}
	}
}' "$out/cells" | sort | tee "$out/summary"
grep -q 'HASHES DIFFER' "$out/summary" && rc=1
echo "== paths (RK_RESIDENT=on, run 1)"
grep -E 'mode=on[a-z-]* run=1 ' "$out/paths" 2>/dev/null
echo "bench-resident.sh: rc=$rc, $(($(date +%s) - start)) s"
exit $rc
