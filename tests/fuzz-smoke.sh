#!/bin/sh
# The wire, link and world fuzzers, bounded: each harness runs FUZZ_SECONDS (default
# 60) from the seed corpus in tests/fuzz/ (new inputs go to a scratch copy, the
# source tree stays read-only), with ASan and UBSan; any crash, leak or broken
# invariant fails the test and leaves the input that caused it in the log.
# Prints libFuzzer's final stats (executions, coverage edges, corpus size).
# Skips (77) where configure found no clang with libFuzzer.
# Run from the build directory (tests/Makefile.inc sets builddir).
b=${builddir:-.}
src=${srcdir:-$(dirname "$0")/..}
secs=${FUZZ_SECONDS:-60}
for h in wire stranger peer; do
	[ -x "$b/tests/fuzz_$h" ] || { echo "SKIP: no tests/fuzz_$h (needs clang with libFuzzer)"; exit 77; }
done
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
rc=0
for h in wire stranger peer; do
	mkdir -p "$tmp/$h"
	# the fuzzers reject leaks and keep to one process; UBSan findings abort
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		"$b/tests/fuzz_$h" -max_total_time="$secs" -max_len=4096 -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$tmp/$h-" \
		"$tmp/$h" "$src/tests/fuzz/$h" >"$tmp/$h.log" 2>&1
	r=$?
	grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)|^#[0-9]+.*DONE' \
		"$tmp/$h.log" | sed "s/^/fuzz_$h: /"
	if [ $r != 0 ]; then
		echo "FAIL: fuzz_$h exited $r"
		tail -n 60 "$tmp/$h.log"
		for a in "$tmp/$h"-*; do
			[ -f "$a" ] && { echo "--- $a"; od -An -tx1 "$a" | head -n 20; }
		done
		rc=1
	fi
done
exit $rc
