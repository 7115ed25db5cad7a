#!/bin/bash
# The fuzz receipt: each harness (fuzz_wire, fuzz_stranger, fuzz_peer) for
# CPU_SECONDS of CPU time (default 3600) with ASan and UBSan, all three at once,
# then the coverage of the library files each drives: every input of its final
# corpus run once through a build with clang's source-based coverage. Prints per
# harness: CPU seconds, executions, crashes (inputs left in ARTIFACTS), corpus
# size, and llvm-cov's line and region coverage per file. A benchmark, not a
# test: it fails only when a harness crashed or could not be built.
#
#   builddir=. ../tests/fuzz-hours.sh                 (from a build directory)
#   CPU_SECONDS=3600 CORPUS=dir ARTIFACTS=dir PAUSE_FILE=path HARNESSES="wire stranger peer"
# CORPUS (default ./fuzz-corpus) keeps each harness's corpus between runs;
# while PAUSE_FILE exists the fuzzers are stopped (SIGSTOP), e.g. during a
# measurement on the same machine. Needs configure to have found a clang with
# libFuzzer, and llvm-profdata and llvm-cov.
set -u
b=${builddir:-.}
src=${srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
budget=${CPU_SECONDS:-3600}
corpus=${CORPUS:-$b/fuzz-corpus}
art=${ARTIFACTS:-$b/fuzz-artifacts}
harnesses=${HARNESSES:-wire stranger peer}
pause=${PAUSE_FILE:-}
profdata=${LLVM_PROFDATA:-llvm-profdata}
cov=${LLVM_COV:-llvm-cov}

for h in $harnesses; do
	make -C "$b" -s "tests/fuzz_$h" "tests/fuzzcov_$h" || { echo "FAIL: cannot build fuzz_$h"; exit 1; }
done
mkdir -p "$art"
declare -A pid
for h in $harnesses; do
	mkdir -p "$corpus/$h"
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		"$b/tests/fuzz_$h" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$art/$h-" \
		"$corpus/$h" "$src/tests/fuzz/$h" >"$art/$h.log" 2>&1 &
	pid[$h]=$!
done
cpu_s() { awk '{ print int(($14 + $15) / 100) }' "/proc/$1/stat" 2>/dev/null; }
declare -A used
while :; do
	alive=0
	for h in $harnesses; do
		p=${pid[$h]}
		kill -0 "$p" 2>/dev/null || continue
		alive=1
		c=$(cpu_s "$p")
		[ -n "$c" ] && used[$h]=$c
		if [ -n "$pause" ] && [ -e "$pause" ]; then
			kill -STOP "$p"
			continue
		fi
		kill -CONT "$p"
		[ "${used[$h]:-0}" -ge "$budget" ] && kill -INT "$p"
	done
	[ $alive = 0 ] && break
	sleep 5
done

rc=0
for h in $harnesses; do
	wait "${pid[$h]}"
	r=$?
	log=$art/$h.log
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	# crash-, leak-, timeout-, oom-: a finding; slow-unit- is not (a pause makes one)
	crashes=$(ls "$art/$h-"crash-* "$art/$h-"leak-* "$art/$h-"timeout-* "$art/$h-"oom-* \
		2>/dev/null | wc -l)
	echo "fuzz_$h: cpu_s=${used[$h]:-0} execs=${execs:-?} crashes=$crashes corpus=$(ls "$corpus/$h" | wc -l) exit=$r"
	# libFuzzer exits 72 on SIGINT, after its final stats
	[ "$crashes" = 0 ] && { [ $r = 0 ] || [ $r = 72 ] || [ $r = 130 ]; } || { rc=1; tail -n 40 "$log"; }
	rm -f "$art/$h.profraw"
	LLVM_PROFILE_FILE="$art/$h.profraw" "$b/tests/fuzzcov_$h" -runs=0 "$corpus/$h" \
		>"$art/$h.cov.log" 2>&1
	"$profdata" merge -sparse "$art/$h.profraw" -o "$art/$h.profdata" &&
	"$cov" report "$b/tests/fuzzcov_$h" -instr-profile="$art/$h.profdata" \
		-ignore-filename-regex='tests/' 2>/dev/null |
		awk -v h="$h" 'NR > 2 && $1 !~ /^-/ && NF >= 10 && ($1 ~ /^TOTAL/ || $3 < $2) {
			printf "cov_%s: %-28s regions %6s  lines %6s\n", h, $1, $4, $10 }'
done
exit $rc
