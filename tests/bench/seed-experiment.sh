#!/bin/sh
# The seed experiment on any host (docs/BENCH.md, "seed-experiment.sh"): rk-serve --bench on the
# CPU backend with emulated device time (--device-time: each round takes that long and completes
# as a GPU round does, through the notifier's word or its wake), drafting with a set acceptance
# rate (--draft-accept), and five waits side by side in one process pair per job
# (--bench-policies): block (a blocking wait), poll50 (50 us timed polls for the first 50 ms of
# each wait, then block), spin, default (rankrt's) and yield1s (spin with sched_yield() for 1 s
# after each frame, then block: vLLM's rule). Every run of a cell runs each policy in turn, the
# order rotating. Not in TESTS; run from the build directory:
#   tests/bench/seed-experiment.sh            (builddir=. by default)
#   QUICK=1 tests/bench/seed-experiment.sh    (TP2; 1 and 4 streams; greedy, drafted; 1 and 5 ms)
#
# Per cell (TP, device ms, streams, mode, draft) and policy: tokens/s and each rank's CPU seconds
# (medians over RUNS), the follower's round-start lag (the leader's ROUND sent to a follower's
# launch, from --trace-rounds on the common CLOCK_MONOTONIC of one host: p50/p99 over every round
# of every run and follower), the drafts accepted; the hashes (rk-serve exits 3 when the cells of
# a mode differ; this script also compares them across TP and device time); then each rank's CPU
# over IDLE seconds idle under the default policy. The goal, per cell of rounds of 1 ms and more:
# default's tokens/s >= 1.00x the better of poll50 and block and >= 0.99x spin's, at <= 0.25x
# poll50's CPU and <= 0.10x spin's (both ranks together), and idle <= 0.01 CPU-s per rank per
# 60 s. yield1s is shown, not judged; rounds under 1 ms are shown with default's CPU and tokens
# against spin's. The last line: "seed goal: N of M cells met". Exit 0 whether or not they were
# met; 1 when a job failed or hashes differ.
#
# Knobs (lists by spaces or commas): QUICK, TPS ("2 4"), DEVICE_MS ("0.2 1 5 20"), STREAMS
# (1,4,8), MODES (greedy,sampled), DRAFTS (plain,drafted), RUNS (3), REQUESTS (8), TOKENS (48),
# IDLE (60; 0 = none), POLICIES (block,poll50,spin,default,yield1s), SERVE_ARGS (more rk-serve
# options, e.g. --draft-accept=0.8), OUT (where the outputs, table and plot go:
# ./seed-experiment.out), TIMEOUT (s per job, 1200).
# BACKEND=cuda: the CUDA backend's own rounds instead of emulated ones: SIZES ("name:rk-serve
# options;...", default two toy sizes) replaces DEVICE_MS, and a size's cells are judged when its
# rounds (spin's leader, launch to done, p50) take 1 ms or more.
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
if [ ! -x "$serve" ] || [ ! -x "$launch" ]; then
	echo "no $serve or $launch: build first (run from the build directory)"
	exit 77
fi
if [ "${QUICK:-0}" = 1 ]; then
	: "${TPS:=2}" "${DEVICE_MS:=1 5}" "${STREAMS:=1,4}" "${MODES:=greedy}" "${DRAFTS:=drafted}"
fi
# lists by spaces or commas (env VAR=1,5 passes through word splitting)
TPS=$(echo "${TPS:-2 4}" | tr , ' ')
DEVICE_MS=$(echo "${DEVICE_MS:-0.2 1 5 20}" | tr , ' ')
STREAMS=${STREAMS:-1,4,8}
MODES=${MODES:-greedy,sampled}
DRAFTS=${DRAFTS:-plain,drafted}
RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-8}
TOKENS=${TOKENS:-48}
IDLE=${IDLE:-60}
POLICIES=${POLICIES:-block,poll50,spin,default,yield1s}
OUT=${OUT:-seed-experiment.out}
BACKEND=${BACKEND:-cpu}
if [ "$BACKEND" = cuda ]; then
	# the GPU's own rounds: sizes instead of emulated device times; a size is judged when its
	# rounds (spin's leader, launch to done, p50) take 1 ms or more
	SIZES=${SIZES:-v16k-h16k:--vocab 16384 --hidden 16384;v32k-h32k:--vocab 32768 --hidden 32768}
	DEVICE_MS=$(echo "$SIZES" | tr ';' '\n' | sed 's/:.*//' | tr '\n' ' ')
fi
mkdir -p "$OUT" || exit 1
for f in res lag idle hash; do : >"$OUT/$f"; done

echo "seed experiment: TP $TPS; device ms $DEVICE_MS; streams $STREAMS; $MODES; $DRAFTS;" \
	"$RUNS runs of $REQUESTS requests x $TOKENS tokens; policies $POLICIES; idle $IDLE s;" \
	"$(nproc) CPUs; $(uname -r)"
failed=0
last_tp=$(echo $TPS | awk '{ print $NF }')
last_ms=$(echo $DEVICE_MS | awk '{ print $NF }')
for tp in $TPS; do
	hosts=localhost
	i=1
	while [ "$i" -lt "$tp" ]; do
		hosts=$hosts,localhost
		i=$((i + 1))
	done
	for ms in $DEVICE_MS; do
		if [ "$BACKEND" = cuda ]; then
			dev="--backend=cuda $(echo "$SIZES" | tr ';' '\n' | sed -n "s/^$ms://p")"
		else
			dev=--device-time=$(awk -v m="$ms" 'BEGIN { printf "%d", m * 1000 }')
		fi
		name=tp$tp-${ms}ms
		idle=
		# idle once per TP (QUICK: once), after its last device time
		if [ "$IDLE" != 0 ] && [ "$ms" = "$last_ms" ] &&
			{ [ "${QUICK:-0}" != 1 ] || [ "$tp" = "$last_tp" ]; }; then
			idle=--bench-idle=$IDLE
		fi
		echo "== $name"
		# shellcheck disable=SC2086
		timeout -s KILL "${TIMEOUT:-1200}" "$launch" --hosts "$hosts" -- "$serve" --bench \
			--bench-policies="$POLICIES" $dev --bench-streams="$STREAMS" \
			--bench-modes="$MODES" --bench-draft="$DRAFTS" --bench-runs="$RUNS" \
			--bench-requests="$REQUESTS" --bench-max-tokens="$TOKENS" \
			--trace-rounds="$OUT/$name.trace" $idle ${SERVE_ARGS:-} \
			>"$OUT/$name.raw" 2>"$OUT/$name.err"
		rc=$?
		sed -n 's/^\[r0\] //p' "$OUT/$name.raw" >"$OUT/$name.out"
		grep -E '^(pcell|hash|idle|drafter|rk-serve bench)' "$OUT/$name.out"
		if [ $rc != 0 ]; then
			echo "$name: exit $rc"
			tail -n 20 "$OUT/$name.err"
			failed=1
			continue
		fi
		# the cells' medians: tp ms policy streams mode draft tok/s accept cpu_sum cpu_r0..
		awk -v tp="$tp" -v ms="$ms" '$1 == "pcell" {
			cpu = ""; sum = 0
			for (i = 11; i <= NF; i++) { cpu = cpu " " $i; sum += $i }
			print tp, ms, $2, $3, $4, $5, $7, $9, sum cpu
		}' "$OUT/$name.out" >>"$OUT/res"
		awk -v tp="$tp" -v ms="$ms" '$1 == "hash" { print tp, ms, $2, $3 }' \
			"$OUT/$name.out" >>"$OUT/hash"
		sed -n "s/^idle \([0-9]*\) s: cpu_s /$tp \1 /p" "$OUT/$name.out" >>"$OUT/idle"
		# the follower's round-start lag of every round inside a run's window
		r=0
		files=
		while [ "$r" -lt "$tp" ]; do
			files="$files $OUT/$name.trace.r$r"
			r=$((r + 1))
		done
		# shellcheck disable=SC2086
		awk -v tp="$tp" -v ms="$ms" '
			FNR == 1 { rank = FILENAME; sub(/.*\.r/, "", rank) }
			FILENAME ~ /\.out$/ && $1 == "pwin" {
				w[++nw] = $2 " " $3 " " $4 " " $5; t0[nw] = $6; t1[nw] = $7; next
			}
			FILENAME ~ /\.out$/ { next }
			rank == 0 && $2 == "sent" { sent[$1] = $3; next }
			rank == 0 && $2 == "launch" { l0[$1] = $3; next }
			rank == 0 && $2 == "done" { d0[$1] = $3; next }
			rank > 0 && $2 == "launch" { nl++; lr[nl] = $1; lt[nl] = $3 }
			END {
				# the leader'"'"'s rounds, launch to done: "rt" lines
				for (r in d0) {
					if (!(r in l0) || !(r in sent))
						continue
					for (k = 1; k <= nw; k++)
						if (sent[r] >= t0[k] && sent[r] <= t1[k]) {
							printf "rt %s %s %s %.2f\n", tp, ms, w[k], (d0[r] - l0[r]) / 1000
							break
						}
				}
				for (i = 1; i <= nl; i++) {
					if (!(lr[i] in sent))
						continue
					s = sent[lr[i]]
					for (k = 1; k <= nw; k++)
						if (s >= t0[k] && s <= t1[k]) {
							printf "%s %s %s %.2f\n", tp, ms, w[k], (lt[i] - s) / 1000
							break
						}
				}
			}' $files "$OUT/$name.out" >>"$OUT/lag"
	done
done

# quantiles: "key(6 fields) value" lines, sorted by key then value -> "key p50 p99 n"
quantiles()
{
	sort -k1,1n -k2,2g -k3,3 -k4,4n -k5,5 -k6,6 -k7,7g | awk '
	function flush() {
		if (n) print key, v[int((n - 1) * 0.5) + 1], v[int((n - 1) * 0.99) + 1], n
		n = 0
	}
	{ k = $1 " " $2 " " $3 " " $4 " " $5 " " $6; if (k != key) { flush(); key = k } v[++n] = $7 }
	END { flush() }'
}
# per cell and policy (tp ms policy streams mode draft): the leader's launch-to-done round time
# ("rt" lines) and the follower's round-start lag
sed -n 's/^rt //p' "$OUT/lag" | quantiles >"$OUT/rtq"
grep -v '^rt ' "$OUT/lag" | quantiles >"$OUT/lagq"

# the table, the goals and the summary line
awk -v idle_s="$IDLE" '
	FILENAME ~ /lagq$/ {
		lag[$1 " " $2 " " $3 " " $4 " " $5 " " $6] = sprintf("%8.1f %8.1f", $7, $8); next
	}
	FILENAME ~ /rtq$/ { rt[$1 " " $2 " " $3 " " $4 " " $5 " " $6] = sprintf("%8.3f", $7 / 1000)
			    rtv[$1 " " $2 " " $3 " " $4 " " $5 " " $6] = $7 / 1000; next }
	FILENAME ~ /idle$/ { for (i = 3; i <= NF; i++) { split($i, a, "="); idle[$1 " " a[1]] = a[2] }
			     idle_tp[$1] = 1; next }
	{
		c = $1 " " $2 " " $4 " " $5 " " $6
		if (!(c in seen)) { seen[c] = 1; order[++nc] = c }
		k = $1 " " $2 " " $3 " " $4 " " $5 " " $6
		tps[c " " $3] = $7; cpu[c " " $3] = $9; acc[c " " $3] = $8
		pol[$3] = 1; line[c " " $3] = $0
	}
	END {
		printf "%-4s %6s %7s %-7s %-7s  %-8s %10s %8s %9s %8s %8s %8s   %s\n", "tp", "dev_ms",
		       "streams", "mode", "draft", "policy", "tok/s", "accept", "cpu_s", "lag_p50",
		       "lag_p99", "round_ms", "cpu_s per rank"
		np = split("block poll50 spin default yield1s", P, " ")
		for (i = 1; i <= nc; i++) {
			split(order[i], f, " ")
			for (j = 1; j <= np; j++) {
				k = order[i] " " P[j]
				if (!(k in tps)) continue
				nf = split(line[k], l, " ")
				per = ""
				for (x = 10; x <= nf; x++) per = per " " l[x]
				lk = f[1] " " f[2] " " P[j] " " f[3] " " f[4] " " f[5]
				printf "%-4s %6s %7s %-7s %-7s  %-8s %10.1f %8s %9.4f %s %s  %s\n", f[1], f[2],
				       f[3], f[4], f[5], P[j], tps[k], acc[k], cpu[k],
				       (lk in lag) ? lag[lk] : "       -        -",
				       (lk in rt) ? rt[lk] : "       -", per
			}
		}
		printf "\nper cell, default against the others (tokens/s ratio, CPU ratio):\n"
		met = 0; m = 0
		for (i = 1; i <= nc; i++) {
			split(order[i], f, " ")
			d = order[i] " default"
			if (!(d in tps)) continue
			bp = 0
			if ((order[i] " poll50") in tps) bp = tps[order[i] " poll50"]
			if ((order[i] " block") in tps && tps[order[i] " block"] > bp) bp = tps[order[i] " block"]
			sp = order[i] " spin"; pp = order[i] " poll50"
			rt_b = bp ? tps[d] / bp : 0
			rt_s = (sp in tps) ? tps[d] / tps[sp] : 0
			# a policy missing from the run: its ratio is -1, and the goal not met
			rc_p = (pp in cpu) && cpu[pp] > 0 ? cpu[d] / cpu[pp] : -1
			rc_s = (sp in cpu) && cpu[sp] > 0 ? cpu[d] / cpu[sp] : -1
			if (!(sp in tps)) rt_s = -1
			idle_ok = 1
			if (idle_s > 0 && (f[1] in idle_tp))
				for (r = 0; r < f[1]; r++)
					if (idle[f[1] " r" r] * 60 / idle_s > 0.01) idle_ok = 0
			# the device time: emulated (ms), or the GPU'"'"'s rounds under spin (a size name)
			dms = f[2] + 0
			sk = f[1] " " f[2] " spin " f[3] " " f[4] " " f[5]
			if (f[2] !~ /^[0-9.]+$/)
				dms = (sk in rtv) ? rtv[sk] : 0
			if (dms >= 1) {
				m++
				why = ""
				if (rt_b < 1.00) why = why " tok<best"
				if (rt_s < 0.99) why = why " tok<0.99spin"
				if (rc_p < 0 || rc_p > 0.25) why = why " cpu>0.25poll50"
				if (rc_s < 0 || rc_s > 0.10) why = why " cpu>0.10spin"
				busy_ok = why == ""
				if (!idle_ok) why = why " idle"
				met += why == ""
				met_busy += busy_ok
				v = why == "" ? "met" : "NOT met:" why
			} else {
				v = "shown (rounds under 1 ms)"
			}
			printf "%-4s %6s ms %3s %-7s %-7s  vs best(poll50,block) %.3f  vs spin %.3f  " \
			       "cpu vs poll50 %.3f  vs spin %.3f  %s\n", f[1], f[2], f[3], f[4], f[5],
			       rt_b, rt_s, rc_p, rc_s, v
		}
		printf "\nidle %s s, cpu_s per rank (default):", idle_s
		for (k in idle) printf " tp%s=%s", k, idle[k]
		printf "\ncells that met every goal but idle: %d of %d\n", met_busy, m
		printf "seed goal: %d of %d cells met\n", met, m
	}' "$OUT/lagq" "$OUT/rtq" "$OUT/idle" "$OUT/res" | tee "$OUT/table"

# the hashes of a mode: one across TP and device time
if [ -s "$OUT/hash" ]; then
	n=$(awk '{ print $3, $4 }' "$OUT/hash" | sort -u | wc -l)
	modes=$(awk '{ print $3 }' "$OUT/hash" | sort -u | wc -l)
	if [ "$n" = "$modes" ] && ! grep -q DISAGREE "$OUT/hash"; then
		echo "hashes: one per mode across every TP, device time, policy and cell ($n)"
	else
		echo "hashes DIFFER:"
		cat "$OUT/hash"
		failed=1
	fi
fi

# the plot: tokens/s against CPU, each relative to spin's in the same cell, a series per policy
if command -v gnuplot >/dev/null && [ -s "$OUT/res" ]; then
	awk '{ k = $1 " " $2 " " $4 " " $5 " " $6; t[k " " $3] = $7; c[k " " $3] = $9; keys[k] = 1 }
	END {
		for (k in keys) {
			if (!((k " spin") in t) || c[k " spin"] <= 0) continue
			n = split("block poll50 spin default yield1s", P, " ")
			for (j = 1; j <= n; j++)
				if ((k " " P[j]) in t)
					print P[j], c[k " " P[j]] / c[k " spin"], t[k " " P[j]] / t[k " spin"]
		}
	}' "$OUT/res" >"$OUT/plot.dat"
	gnuplot <<EOF
set terminal pngcairo size 1000,700 font "Sans,13"
set output "$OUT/seed-experiment.png"
set title "The seed experiment: each point a cell (TP, device ms, streams, mode, draft)"
set xlabel "CPU seconds of both ranks, relative to spin (log scale)"
set ylabel "tokens/s relative to spin"
set logscale x
set grid
set key outside right
plot for [p in "block poll50 spin default yield1s"] "$OUT/plot.dat" \\
	using (stringcolumn(1) eq p ? \$2 : NaN):3 with points pointsize 1.6 title p
EOF
	echo "plot: $OUT/seed-experiment.png"
fi
exit $failed
