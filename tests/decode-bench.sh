#!/bin/sh
# rk-serve --bench (the decode receipt without HTTP) is exact: two ranks under
# rk-launch (processes over loopback), the CPU backend, tiny cells of 1 and 4
# closed-loop streams x plain and drafted x greedy and sampled. Within a mode
# plain == drafted and 1 == 4 streams hash the same (rk-serve itself exits 3
# otherwise), every request equals the TP1 reference (--bench-check-ref, exit 4
# otherwise), and TP1 and the pure blocking and spinning wait policies hash the
# same as TP2 adaptive, also when --bench-policies switches them in one process.
# Also: the idle line, and the option checks (--notify
# without cuda, --backend=cuda or --http where this build lacks them).
# Skips (77) without the binaries. Run from the build directory
# (tests/Makefile.inc sets builddir).
b=${builddir:-.}
launch=$b/examples/launch/rk-launch
serve=$b/examples/serve/rk-serve
if [ ! -x "$launch" ] || [ ! -x "$serve" ]; then
	echo "SKIP: no $launch or $serve"
	exit 77
fi
command -v timeout >/dev/null || { echo "SKIP: no timeout(1)"; exit 77; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

fail()
{
	echo "FAIL: $*"
	for f in "$tmp"/*; do
		[ -f "$f" ] && { echo "--- $(basename "$f")"; cat "$f"; }
	done
	exit 1
}

args="--bench --bench-streams 1,4 --bench-requests 6 --bench-max-tokens 24 --bench-draft-k 4
	--bench-check-ref"

# run NAME [ENV=V...] -- CMD...: rk-serve's stdout without rk-launch's "[r0] " in NAME.out
run()
{
	name=$1
	shift
	# shellcheck disable=SC2086
	timeout -s KILL 30 env "$@" >"$tmp/$name.raw" 2>"$tmp/$name.err"
	rc=$?
	sed 's/^\[r0\] //' "$tmp/$name.raw" >"$tmp/$name.out"
	[ $rc = 0 ] || fail "$name: exit $rc"
	grep -q '^reference: every request equals toy_generate_ref at TP1$' "$tmp/$name.out" ||
		fail "$name: no reference line"
}

# hashes NAME: "streams mode draft hash" per cell
hashes()
{
	awk '$1 == "cell" { print $2, $3, $4, $9 }' "$tmp/$1.out"
}

# shellcheck disable=SC2086
run tp2 RK_WAIT=adaptive "$launch" --hosts localhost,localhost -- "$serve" $args --bench-idle 1
cat "$tmp/tp2.out"
[ "$(hashes tp2 | wc -l)" = 8 ] || fail "tp2: expected 8 cells"
# cell_hash NAME STREAMS MODE DRAFT
cell_hash()
{
	hashes "$1" | awk -v s="$2" -v m="$3" -v d="$4" '$1 == s && $2 == m && $3 == d { print $4 }'
}
for mode in greedy sampled; do
	n=$(hashes tp2 | awk -v m=$mode '$2 == m { print $4 }' | sort -u | wc -l)
	[ "$n" = 1 ] || fail "tp2: the $mode cells hash differently"
	for s in 1 4; do
		p=$(cell_hash tp2 $s $mode plain)
		d=$(cell_hash tp2 $s $mode drafted)
		[ -n "$p" ] && [ "$p" = "$d" ] || fail "tp2: $mode, $s streams: plain $p, drafted $d"
	done
	[ "$(cell_hash tp2 1 $mode plain)" = "$(cell_hash tp2 4 $mode plain)" ] ||
		fail "tp2: $mode: 1 and 4 streams hash differently"
done
grep -Eq '^idle 1 s: cpu_s r0=[0-9.]+ r1=[0-9.]+$' "$tmp/tp2.out" || fail "tp2: no idle line"
grep -q '^cell .* [0-9.]\+ \+[0-9.]\+$' "$tmp/tp2.out" || fail "tp2: no CPU columns"

# the same tokens at TP1 and under the pure policies
# shellcheck disable=SC2086
run tp1 RK_WAIT=adaptive "$serve" $args
# shellcheck disable=SC2086
run block RK_WAIT=block "$launch" --hosts localhost,localhost -- "$serve" $args
# shellcheck disable=SC2086
run spin RK_WAIT=spin "$launch" --hosts localhost,localhost -- "$serve" $args \
	--bench-streams 4 --bench-modes greedy
hashes tp2 >"$tmp/h.tp2"
for name in tp1 block; do
	hashes $name | cmp -s - "$tmp/h.tp2" || fail "$name hashes differ from tp2"
done
hashes spin | while read -r s m d h; do
	grep -q "^$s $m $d $h\$" "$tmp/h.tp2" || { echo "spin: $s $m $d $h"; exit 1; }
done || fail "spin hashes differ from tp2"

# --bench-policies: every cell under each policy in one process pair (rankrt's three and
# the two baselines), a prun line each, the same hashes as tp2, and the follower really
# switched: started with RK_WAIT=block, which never spins, it spun under the spin, default
# and yield1s policies
# shellcheck disable=SC2086
run pol RK_WAIT=block "$launch" --hosts localhost,localhost -- "$serve" $args \
	--bench-streams 1 --bench-modes greedy \
	--bench-policies=spin,default,block,poll50,yield1s --bench-idle 1
for pol in default block spin poll50 yield1s; do
	[ "$(awk -v p=$pol '$1 == "prun" && $2 == p' "$tmp/pol.out" | wc -l)" = 2 ] ||
		fail "pol: expected 2 prun lines of $pol"
	awk -v p=$pol '$1 == "pcell" && $2 == p { print $3, $4, $5, $10 }' "$tmp/pol.out" |
		while read -r s m d h; do
			grep -q "^$s $m $d $h\$" "$tmp/h.tp2" || { echo "$pol: $s $m $d $h"; exit 1; }
		done || fail "pol: $pol hashes differ from tp2"
done
awk '$1 == "loop" && $2 == "r1:" && $3 == "spin_s" { s = $4 } END { exit !(s > 0) }' \
	"$tmp/pol.out" || fail "pol: the follower never spun: its policy did not switch"
grep -Eq '^idle 1 s: cpu_s r0=[0-9.]+ r1=[0-9.]+$' "$tmp/pol.out" || fail "pol: no idle line"

# --trace-rounds: the leader's ROUND send precedes every follower's launch of it
# shellcheck disable=SC2086
run trace RK_WAIT=adaptive "$launch" --hosts localhost,localhost -- "$serve" $args \
	--bench-streams 1 --bench-modes greedy --bench-draft plain --trace-rounds="$tmp/tr"
[ -s "$tmp/tr.r0" ] && [ -s "$tmp/tr.r1" ] || fail "trace: no FILE.r0 and FILE.r1"
awk 'FNR == 1 { f++ }
	f == 1 && $2 == "sent" { s[$1] = $3; ns++ }
	f == 2 && $2 == "launch" { if (!($1 in s) || $3 < s[$1]) bad++; nl++ }
	END { exit !(ns > 0 && nl == ns && !bad) }' "$tmp/tr.r0" "$tmp/tr.r1" ||
	fail "trace: sends and follower launches do not pair up in time order"

# --device-time: rounds complete through the GPU notifier on an emulated device, on
# both ranks, under every policy (which switch its mode); the tokens are the same
# shellcheck disable=SC2086
run dev RK_WAIT=adaptive "$launch" --hosts localhost,localhost -- "$serve" $args \
	--bench-modes greedy --device-time=1ms --bench-policies=default,block,spin
for pol in default block spin; do
	awk -v p=$pol '$1 == "pcell" && $2 == p { print $3, $4, $5, $10 }' "$tmp/dev.out" |
		while read -r s m d h; do
			grep -q "^$s $m $d $h\$" "$tmp/h.tp2" || { echo "$pol: $s $m $d $h"; exit 1; }
		done || fail "dev: $pol hashes differ from tp2"
done
[ "$(awk '$1 == "pcell"' "$tmp/dev.out" | wc -l)" = 12 ] || fail "dev: expected 12 pcell lines"
grep -q '^device r0: emulated, base 1000.0 us' "$tmp/dev.out" || fail "dev: no device line"
grep -q '^notify r0: emu ' "$tmp/dev.out" || fail "dev: no emulated notifier line"

# option checks: refused by name, exit 2
opt_refused()
{
	want=$1
	shift
	"$serve" "$@" >/dev/null 2>"$tmp/opt.err"
	rc=$?
	[ $rc = 2 ] || fail "rk-serve $*: exit $rc, expected 2"
	grep -q -- "$want" "$tmp/opt.err" ||
		fail "rk-serve $*: no '$want' in: $(cat "$tmp/opt.err")"
}
opt_refused "notify applies to --backend=cuda, or to cpu with --device-time" --bench --notify=poll
opt_refused "cuda-graphs and --device apply to --backend=cuda only" --bench --cuda-graphs=off
opt_refused "device-time='8b-h100'" --bench --device-time=8b-h100
opt_refused "device-time='1,2'" --bench --device-time=1,2
opt_refused "device-wake-us needs --device-time" --bench --device-wake-us=5
opt_refused "device-wake-us" --bench --device-time=1ms --device-wake-us=x
opt_refused "device-time applies to --backend=cpu only" --bench --backend=cuda --device-time=1ms
opt_refused "exclude each other" --bench --demo
opt_refused "trace-rounds: expected a file name" --bench --trace-rounds=
opt_refused "bench-policies='default,fast'" --bench --bench-policies=default,fast
opt_refused "bench-policies='spin,spin'" --bench --bench-policies=spin,spin
opt_refused "bench-policies='poll50,poll'" --bench --bench-policies=poll50,poll
opt_refused "bench-policies needs --bench" --bench-policies=spin --demo
# lists refuse an empty element (strtok would have skipped it)
opt_refused "bench-streams='1,,2'" --bench --bench-streams=1,,2
opt_refused "bench-streams='1,'" --bench --bench-streams=1,
opt_refused "bench-policies='spin,,block'" --bench --bench-policies=spin,,block
opt_refused "bench-modes=',greedy'" --bench --bench-modes=,greedy
load=$b/examples/load/rk-load
if [ -x "$load" ]; then
	"$load" --streams=1,,2 >/dev/null 2>"$tmp/opt.err"
	rc=$?
	[ $rc = 2 ] && grep -q "streams='1,,2'" "$tmp/opt.err" ||
		fail "rk-load --streams=1,,2: exit $rc: $(cat "$tmp/opt.err")"
fi
# an unknown RK_* variable: refused by name, with the whole list of known ones
RK_NO_SUCH_KNOB=1 "$serve" --bench >/dev/null 2>"$tmp/opt.err"
rc=$?
[ $rc = 2 ] || fail "RK_NO_SUCH_KNOB=1 rk-serve: exit $rc, expected 2"
grep -q '^rk-serve: unknown variable RK_NO_SUCH_KNOB (known: RK_[A-Z_ ]*)$' "$tmp/opt.err" ||
	fail "RK_NO_SUCH_KNOB=1 rk-serve: the message is not whole: $(cat "$tmp/opt.err")"
if "$serve" --help | grep -q 'without the CUDA backend'; then
	opt_refused "backend=cuda: Operation not supported" --bench --backend=cuda
fi
if "$serve" --help | grep -q 'without its HTTP server'; then
	opt_refused "built without its HTTP server" --http 127.0.0.1:0
	opt_refused "built without its HTTP server"
fi
rm -f "$tmp"/*
echo "PASS: bench hashes agree across cells, TP1/TP2, wait policies and emulated device time;" \
	"options checked"
