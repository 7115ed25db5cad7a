#!/bin/bash
# Decode A/B of two builds: rk-serve --bench on the CPU backend at TP2 (rk-launch,
# two ranks on this host), build A and build B alternating pair by pair (the
# order flips each pair), small and large rounds, 1/4/8 streams, greedy, plain.
# Prints per cell the medians of tokens/s and of each rank's CPU seconds over
# the pairs, B's ratio to A, and how many distinct token hashes each size gave
# (1 per size: both builds decoded the same tokens). Not in TESTS.
#
#   tests/bench/decode-ab.sh BUILD_A BUILD_B [PAIRS] [RAW_OUT]
#
# BUILD_*: built trees (examples/launch/rk-launch, examples/serve/rk-serve,
# .libs). Environment: SHM (off: links on TCP loopback, the default; on: same-
# host shared memory), REQUESTS (64 per cell), TOKENS (64), DEPLIB (a folder
# put first on LD_LIBRARY_PATH, e.g. unpacked .debs' usr/lib/x86_64-linux-gnu),
# ENV_A / ENV_B (VAR=value words added to A's / B's environment: one build
# against itself with a knob off and on, e.g. ENV_B=RK_FRAME_AUTH=on).
# RAW_OUT keeps every cell line: build size streams tok/s cpu_r0 cpu_r1 hash pair.
set -u
a=${1:?BUILD_A} b=${2:?BUILD_B} pairs=${3:-6} raw=${4:-$(mktemp)}
: >"$raw"
for p in $(seq 1 "$pairs"); do
	if [ $((p % 2)) = 1 ]; then order="A B"; else order="B A"; fi
	for w in $order; do
		d=$a e=${ENV_A:-}
		[ "$w" = B ] && d=$b e=${ENV_B:-}
		for sz in "small:--hidden 1024" "large:--hidden 16384"; do
			# shellcheck disable=SC2086 # $e: words of VAR=value
			env $e LD_LIBRARY_PATH=${DEPLIB:+$DEPLIB:}$d/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
			RK_SHM=${SHM:-off} timeout -k 5 120 "$d/examples/launch/rk-launch" \
				--hosts localhost,localhost -- "$d/examples/serve/rk-serve" --backend=cpu \
				--bench --bench-runs 1 --bench-requests "${REQUESTS:-64}" \
				--bench-max-tokens "${TOKENS:-64}" --bench-streams 1,4,8 \
				--bench-modes greedy --bench-draft plain ${sz#*:} 2>&1 |
				awk -v w="$w" -v n="${sz%%:*}" -v p="$p" \
					'$2 == "cell" { print w, n, $3, $7, $11, $12, $10, p }' >>"$raw"
		done
	done
done
echo "decode-ab: A=$a${ENV_A:+ ($ENV_A)} B=$b${ENV_B:+ ($ENV_B)}, $pairs pairs, RK_SHM=${SHM:-off}, $(nproc) CPUs"
awk '
function med(s, a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++)
		for (j = i + 1; j <= n; j++)
			if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	k = $2 " st=" $3; key[k] = 1
	t[$1, k] = t[$1, k] " " $4; c0[$1, k] = c0[$1, k] " " $5; c1[$1, k] = c1[$1, k] " " $6
	if (!(($2 SUBSEP $7) in seen)) { seen[$2, $7] = 1; hashes[$2]++ }
}
END {
	for (k in key) {
		ta = med(t["A", k]); tb = med(t["B", k])
		a0 = med(c0["A", k]); b0 = med(c0["B", k]); a1 = med(c1["A", k]); b1 = med(c1["B", k])
		printf "%-12s A %9.1f B %9.1f tok/s x%.3f; cpu r0 x%.2f r1 x%.2f\n", k, ta, tb,
			ta ? tb / ta : 0, a0 ? b0 / a0 : 0, a1 ? b1 / a1 : 0
	}
	for (s in hashes)
		printf "hashes %s: %d distinct\n", s, hashes[s]
}' "$raw" | sort
