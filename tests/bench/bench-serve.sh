#!/bin/sh
# Decode benchmarks of rk-serve as two ranks under rk-launch on one machine
# (TP2 over loopback). Not in TESTS; run from the build directory:
#   builddir=. ../tests/bench/bench-serve.sh          (or from the source tree: tests/bench/bench-serve.sh)
#
# BENCH_MODE=http (the default): rk-serve's HTTP server driven by rk-load at
# 1/4/8 concurrent streams x greedy/sampled x plain/drafted, each cell the
# median of several runs, then idle; prints rk-load's receipt table (the one
# in docs/BENCH.md). Needs rk-load and an rk-serve with HTTP (77 otherwise).
# Knobs: BENCH_RUNS (5), BENCH_REQUESTS (64), BENCH_TOKENS (64), BENCH_IDLE
# (60 s), BENCH_ARGS (extra rk-serve options, e.g. "--hidden 4096"),
# BENCH_LOAD_ARGS (extra rk-load options, e.g. "--prompt-set repeat").
#
# BENCH_MODE=policies: the wait-policy receipt, no HTTP: rk-serve --bench
# (closed-loop streams submitted straight to the scheduler) under three
# policies of the same binary: default (RK_WAIT=adaptive; CUDA --notify=auto),
# pure blocking (RK_WAIT=block; --notify=wake: host-function notifications)
# and pure spinning (RK_WAIT=spin; --notify=poll), for small and large work
# per round. BENCH_INPROC=1 (the default): one rk-serve job per size and
# BENCH_JOB_RUNS runs (1) runs every cell under the three policies in turn
# (--bench-policies; the order rotates by cell, run and job), so the three
# runs of a cell are seconds apart in one process; BENCH_INPROC=0: a job per
# policy, size and run, their order rotating run by run.
# Prints every table, then a summary: per cell the medians over the runs, the
# ratios default/spin of tokens/s and of CPU seconds (both ranks together),
# default/block of tokens/s, and the verdict against the goal (>= 0.99x spin's
# tokens/s at <= 0.5x its CPU, faster than blocking); beside them the medians
# of the per-run ratios (a run's default against the same run's spin); then
# each rank's CPU seconds over BENCH_IDLE idle seconds under the default
# policy (goal < 0.05, measured once, in the first job). Exit 0 when every run
# completed and the tokens of a mode hashed the same in every cell, run and
# policy.
# Knobs: BENCH_BACKEND (cpu or cuda; default cpu), BENCH_TP (ranks, 2), BENCH_RUNS (3),
# BENCH_INPROC (1), BENCH_JOB_RUNS (1),
# BENCH_REQUESTS (32), BENCH_TOKENS (64), BENCH_STREAMS (1,4,8), BENCH_MODES
# (greedy), BENCH_DRAFT_K (4), BENCH_IDLE (60 s; 0 = none), BENCH_SIZES
# ("name:rk-serve options;..."; default cuda: small "--vocab 256 --hidden
# 1024", large "--vocab 4096 --hidden 32768"; cpu: small "--hidden 1024",
# large "--hidden 16384"), BENCH_ARGS (more rk-serve options), BENCH_TIMEOUT
# (seconds per rk-serve job, 150), BENCH_DEADLINE (seconds: no job starts
# later than this after the start, and none runs past it by more than
# BENCH_GRACE, 30 s; the summary uses the runs done).
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
load=$b/examples/load/rk-load
mode=${BENCH_MODE:-http}

# ---- the wait-policy receipt ---------------------------------------------------------
if [ "$mode" = policies ]; then
	if [ ! -x "$serve" ] || [ ! -x "$launch" ]; then
		echo "no $serve or $launch: build first"
		exit 77
	fi
	backend=${BENCH_BACKEND:-cpu}
	hosts=localhost
	i=1
	while [ "$i" -lt "${BENCH_TP:-2}" ]; do
		hosts=$hosts,localhost
		i=$((i + 1))
	done
	runs=${BENCH_RUNS:-3}
	idle=${BENCH_IDLE:-60}
	tmo=${BENCH_TIMEOUT:-150}
	deadline=${BENCH_DEADLINE:-0}
	if [ "$backend" = cuda ]; then
		sizes=${BENCH_SIZES:-"small:--vocab 256 --hidden 1024;large:--vocab 4096 --hidden 32768"}
		# (large: the toy's largest H; V 4096 makes a round's logits about 2.5x the
		# fixed cost of a round at 8 drafted streams on an H200)
	else
		sizes=${BENCH_SIZES:-"small:--hidden 1024;large:--hidden 16384"}
	fi
	common="--backend=$backend --bench --bench-runs 1 --bench-requests ${BENCH_REQUESTS:-32}
		--bench-max-tokens ${BENCH_TOKENS:-64} --bench-streams ${BENCH_STREAMS:-1,4,8}
		--bench-modes ${BENCH_MODES:-greedy} --bench-draft plain,drafted
		--bench-draft-k ${BENCH_DRAFT_K:-4} ${BENCH_ARGS:-}"
	t_start=$(date +%s)
	tmp=$(mktemp -d) || exit 1
	trap 'rm -rf "$tmp"' EXIT
	# results: size policy run streams mode draft tok/s cpu_total hash
	: >"$tmp/res"
	: >"$tmp/idle"
	bad=0

	echo "# $(uname -sr), $(nproc) CPUs," \
		"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
	[ "$backend" = cuda ] && nvidia-smi --query-gpu=index,name --format=csv,noheader 2>&1 |
		sed 's/^/# GPU /'
	echo "# policies: default = RK_WAIT=adaptive$([ "$backend" = cuda ] && echo ' --notify=auto')," \
		"block = RK_WAIT=block$([ "$backend" = cuda ] && echo ' --notify=wake')," \
		"spin = RK_WAIT=spin$([ "$backend" = cuda ] && echo ' --notify=poll')"
	echo "# rk-serve" $common
	echo "# RK_* in effect besides RK_WAIT: $(env | grep '^RK_' | grep -v '^RK_WAIT=' | tr '\n' ' ')"
	echo "# NCCL_* in effect: $(env | grep '^NCCL_' | tr '\n' ' ')"

	# job SIZE_NAME SIZE_ARGS POLICY RUN EXTRA...: one rk-launch job, its table kept
	job()
	{
		sname=$1
		sargs=$2
		pol=$3
		run=$4
		shift 4
		case $pol in
		default) wmode=adaptive notify=auto ;;
		block) wmode=block notify=wake ;;
		spin) wmode=spin notify=poll ;;
		*) wmode=adaptive notify=auto ;;	# in-process: the list of policies
		esac
		nopt=
		[ "$backend" = cuda ] && nopt="--notify=$notify"
		out=$tmp/$sname.$pol.$run
		t0=$(date +%s)
		lim=$tmo
		# past the deadline a job gets BENCH_GRACE s at most, so the summary still comes
		if [ "$deadline" -gt 0 ]; then
			rem=$((deadline + ${BENCH_GRACE:-30} - (t0 - t_start)))
			[ "$rem" -lt "$lim" ] && lim=$rem
		fi
		popt=
		case $pol in *,*) popt="--bench-policies=$pol --bench-runs=$jruns" ;; esac
		# shellcheck disable=SC2086
		RK_WAIT=$wmode timeout -k 5 "$lim" "$launch" --hosts "$hosts" -- "$serve" \
			$common $nopt $popt $sargs "$@" </dev/null >"$out" 2>"$out.err"
		rc=$?
		echo
		echo "== $sname ($sargs), policy $pol (RK_WAIT=$wmode${nopt:+ $nopt}), run $run:" \
			"exit $rc, $(($(date +%s) - t0)) s"
		sed 's/^\[r0\] //' "$out" | grep -v '^\[r[0-9]*\] '
		grep '^\[r[1-9][0-9]*\] notify' "$out"
		if [ $rc != 0 ]; then
			bad=1
			tail -n 20 "$out.err"
			return
		fi
		sed 's/^\[r0\] //' "$out" | awk -v s="$sname" -v p="$pol" -v r="$run" \
			-v jr="$jruns" '
			$1 == "cell" {
				cpu = 0
				for (i = 10; i <= NF; i++) cpu += $i
				print s, p, r, $2, $3, $4, $6, cpu, $9
			}
			$1 == "prun" {	# prun POLICY streams mode draft tok/s cpu_r0.. hash
				cpu = 0
				for (i = 7; i < NF; i++) cpu += $i
				k = $2 " " $3 " " $4 " " $5
				print s, $2, (r - 1) * jr + (++n[k]), $3, $4, $5, $6, cpu, $NF
			}' >>"$tmp/res"
		sed -n 's/^\[r0\] idle \([0-9]*\) s: cpu_s /\1 /p' "$out" >>"$tmp/idle"
	}

	inproc=${BENCH_INPROC:-1}
	jruns=1
	[ "$inproc" = 1 ] && jruns=${BENCH_JOB_RUNS:-1}
	run=1
	while [ $(((run - 1) * jruns)) -lt "$runs" ]; do
		case $((run % 3)) in
		1) order="default block spin" ;;
		2) order="block spin default" ;;
		*) order="spin default block" ;;
		esac
		# in-process: one job, the three policies in this order (rk-serve rotates on)
		[ "$inproc" = 1 ] && order=$(echo "$order" | tr ' ' ',')
		rest=$sizes
		while [ -n "$rest" ]; do
			item=${rest%%;*}
			[ "$item" = "$rest" ] && rest= || rest=${rest#*;}
			sname=${item%%:*}
			sargs=${item#*:}
			for pol in $order; do
				if [ "$deadline" -gt 0 ] &&
					[ $(($(date +%s) - t_start)) -ge "$deadline" ]; then
					echo
					echo "== deadline (${deadline} s) reached: no more jobs (run $run)"
					break 3
				fi
				if [ $run = 1 ] && [ "$pol" != block ] && [ "$pol" != spin ] &&
					[ "$idle" -gt 0 ] &&
					[ ! -s "$tmp/idle" ]; then
					job "$sname" "$sargs" "$pol" "$run" --bench-idle "$idle"
				else
					job "$sname" "$sargs" "$pol" "$run"
				fi
			done
		done
		run=$((run + 1))
	done

	echo
	echo "== summary: TP${BENCH_TP:-2}, backend $backend, medians over the runs of each policy" \
		"(cpu = every rank's CPU seconds together during the cell)"
	awk '
	function med(list,    n, a, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) {
				t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
			}
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{
		key = $1 " " $4 " " $5 " " $6
		if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
		tps[key, $2] = tps[key, $2] " " $7
		cpu[key, $2] = cpu[key, $2] " " $8
		nr[key, $2]++
		pt[key, $3, $2] = $7; pc[key, $3, $2] = $8
		if (!((key, $3) in rseen)) { rseen[key, $3] = 1; rl[key] = rl[key] " " $3 }
		h = $1 " " $5
		if (!(h in hash)) hash[h] = $9
		else if (hash[h] != $9) { disagree = 1; print "HASH MISMATCH: " $0 " vs " hash[h] }
	}
	END {
		printf "%-6s %7s  %-7s  %-7s  %10s %10s %10s  %8s %8s %8s  %8s %8s %9s  %8s %8s  %s\n",
			"size", "streams", "mode", "draft", "tok/s:def", "spin", "block",
			"cpu:def", "spin", "block", "def/spin", "cpu d/s", "def/block",
			"pair t", "pair c", "verdict"
		for (k = 1; k <= nk; k++) {
			key = keys[k]
			if (!((key, "default") in tps) || !((key, "spin") in tps) ||
			    !((key, "block") in tps)) {
				printf "%s: not every policy ran\n", key
				continue
			}
			td = med(tps[key, "default"]); ts = med(tps[key, "spin"])
			tb = med(tps[key, "block"])
			cd = med(cpu[key, "default"]); cs = med(cpu[key, "spin"])
			cb = med(cpu[key, "block"])
			rt = ts > 0 ? td / ts : 0
			rc = cs > 0 ? cd / cs : 0
			rb = tb > 0 ? td / tb : 0
			# the medians of the per-run ratios: default against spin of the same run
			lt = ""; lc = ""
			n = split(rl[key], rr, " ")
			for (j = 1; j <= n; j++)
				if (((key, rr[j], "default") in pt) && ((key, rr[j], "spin") in pt) &&
				    pt[key, rr[j], "spin"] > 0 && pc[key, rr[j], "spin"] > 0) {
					lt = lt " " pt[key, rr[j], "default"] / pt[key, rr[j], "spin"]
					lc = lc " " pc[key, rr[j], "default"] / pc[key, rr[j], "spin"]
				}
			prt = lt == "" ? 0 : med(lt); prc = lc == "" ? 0 : med(lc)
			v = ""
			if (rt < 0.99) v = v " tok<0.99*spin"
			if (rc > 0.5) v = v " cpu>0.5*spin"
			if (rb <= 1) v = v " not>block"
			if (v == "") { v = "ok"; nok++ } else { sub(/^ /, "", v); nbad++ }
			split(key, f, " ")
			printf "%-6s %7s  %-7s  %-7s  %10.1f %10.1f %10.1f", f[1], f[2], f[3], f[4],
				td, ts, tb
			printf "  %8.3f %8.3f %8.3f  %8.3f %8.3f %9.3f  %8.3f %8.3f  %s (runs %d/%d/%d)\n",
				cd, cs, cb, rt, rc, rb, prt, prc, v,
				nr[key, "default"], nr[key, "spin"], nr[key, "block"]
		}
		printf "goal (>= 0.99x spin tok/s, <= 0.5x spin cpu, > block tok/s):" \
			" %d of %d cells met it\n", nok, nok + nbad
		if (disagree) print "HASHES DISAGREE"
		else print "hashes: every cell, run and policy of a mode and size agree"
		exit disagree
	}' "$tmp/res" || bad=1
	if [ -s "$tmp/idle" ]; then
		read -r secs ranks <"$tmp/idle"
		verdict=$(echo "$ranks" | tr ' ' '\n' | awk -F= -v s="$secs" '
			{ if ($2 + 0 >= 0.05 * s / 60) over = over " " $1 }
			END { print over == "" ? "under" : "NOT under (" substr(over, 2) ")" }')
		echo "idle $secs s, default policy: cpu_s $ranks; each rank $verdict" \
			"0.05 s per 60 s"
	elif [ "$idle" -gt 0 ]; then
		echo "idle: not measured"
		bad=1
	fi
	echo "total $(($(date +%s) - t_start)) s"
	exit $bad
fi
[ "$mode" = http ] || { echo "BENCH_MODE='$mode': expected http or policies"; exit 2; }

# ---- through HTTP and rk-load --------------------------------------------------------
if [ ! -x "$serve" ] || [ ! -x "$load" ] || [ ! -x "$launch" ]; then
	echo "no $serve, $load or $launch: build first (they need libmicrohttpd, jansson, libcurl)"
	exit 77
fi
if "$serve" --help | grep -q 'without its HTTP server'; then
	echo "$serve has no HTTP server (libmicrohttpd, jansson): BENCH_MODE=policies works without"
	exit 77
fi
runs=${BENCH_RUNS:-5}
requests=${BENCH_REQUESTS:-64}
tokens=${BENCH_TOKENS:-64}
idle=${BENCH_IDLE:-60}

tmp=$(mktemp -d) || exit 1
lpid=
cleanup()
{
	[ -n "$lpid" ] && kill -KILL "$lpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$launch" -v --hosts localhost,localhost -- "$serve" --http 127.0.0.1:0 $BENCH_ARGS \
	</dev/null >"$tmp/out" 2>"$tmp/err" &
lpid=$!
url=
i=0
while [ -z "$url" ]; do
	if [ $i -ge 300 ] || ! kill -0 "$lpid" 2>/dev/null; then
		echo "rk-serve did not start:"
		cat "$tmp/out" "$tmp/err"
		exit 1
	fi
	sleep 0.1
	i=$((i + 1))
	url=$(sed -n 's/^\[r0\] rk-serve: .* listening on \(http:[^ ]*\)$/\1/p' "$tmp/out")
done
p0=$(sed -n 's/^rk-launch: rank 0: pid \([0-9]*\) .*/\1/p' "$tmp/err")

echo "# $(uname -sr), $(nproc) CPUs,"\
	"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "# rk-serve $BENCH_ARGS; RK_* in effect: $(env | grep '^RK_' | tr '\n' ' ')"
# shellcheck disable=SC2086
"$load" --url "$url" --streams 1,4,8 --modes greedy,sampled --draft plain,drafted \
	--requests "$requests" --max-tokens "$tokens" --prompt-set fixed --runs "$runs" \
	--idle "$idle" $BENCH_LOAD_ARGS
rc=$?

kill -TERM "$p0"
wait "$lpid"
lrc=$?
lpid=
[ $lrc = 0 ] || { echo "rk-launch exited $lrc"; cat "$tmp/err"; }
[ $rc = 0 ] && [ $lrc = 0 ]
