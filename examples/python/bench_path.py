#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a Broadcast message's time goes: one writer, one reader (processes),
MSGS messages of 256 B every GAP ms, stamps (CLOCK_MONOTONIC, both in Python)
before the writer's broadcast, after it returns, at the reader's on_message
and at dequeue()'s return. Prints p50/p90 us of each leg:

  writer    the stamp to rk_world_broadcast()'s return (the frame is in the ring)
  to cb     that return to the reader's on_message (the reader's loop found the
            frame and called back into Python)
  to ret    on_message to dequeue()'s return
  to loop   (World.recv(), the default) the writer's return to the end of the reader's
            loop iteration that took the frame (rk_loop_now() after the run)
  loop to ret   that to dequeue()'s return (the run's way out into Python)
  total     the writer's stamp to dequeue()'s return

and the reader's loop counters from its first message on (predictive sleeps,
early wakes, ms spun for a prediction and in the busy window, ms oversleeping,
the margin, CPU ms, rehearsals), the writer's link counters (frames through the
broadcast ring, sleeping readers rung).

    RANKRT_LIB=$PWD/.libs/librankrt.so.2 python3 bench_path.py [GAP_MS] [MSGS]

BENCH_REHEARSE=0: the reader without its rehearsal (Broadcast(rehearse=False)).
BENCH_PULL=0: the reader's dequeue() runs the loop and takes the message in
on_message, as before World.recv() (the "to cb" and "to ret" legs); with
World.recv() (the default) no on_message runs: "to loop" and "loop to ret".
"""

import multiprocessing as mp
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

STAMP = struct.Struct("<QQ")


def writer(gap_ms, msgs, hq, res):
    from rankrt.broadcast import Broadcast
    with Broadcast(1, 0, "127.0.0.1:0", log="error") as b:
        hq.put(b.export_handle())
        b.wait_until_ready()
        time.sleep(0.5)
        stamps = []
        t0 = time.monotonic()
        for k in range(msgs):
            left = t0 + k * gap_ms / 1000 - time.monotonic()
            if left > 0:
                time.sleep(left)
            a = time.monotonic_ns()
            m = STAMP.pack(a, k) + bytes(240)
            with b._lock:              # enqueue(), with a stamp between its two calls
                b.world.broadcast(b.tag, m)
                c = time.monotonic_ns()
                b.loop.poll()
            stamps.append((a, c))
        b.enqueue(b"q" * 16)
        ls = b.world.link_stats(1)
        res.put(("w", (stamps, {k: ls[k] for k in ("shm_bcast_frames", "shm_wakes")})))
        time.sleep(0.3)


def reader(hq, res):
    from rankrt.broadcast import Broadcast
    rehearse = os.environ.get("BENCH_REHEARSE", "1") != "0"
    with Broadcast.create_from_handle(hq.get(), 1, log="error", rehearse=rehearse) as b:
        cb = []
        inner = b._on_message

        def on_message(peer, tag, data):
            if not b._rehearsing and not b._pull:
                cb.append(time.monotonic_ns())
            inner(peer, tag, data)
        b.world.on_message = on_message
        b._pull = os.environ.get("BENCH_PULL", "1") != "0"
        b.wait_until_ready()
        ret, done = [], []
        s0 = c0 = None
        while True:
            m = b.dequeue()
            t = time.monotonic_ns()
            if len(m) == 16:
                break
            if s0 is None:      # from the first message on: the steady state
                s0, c0 = b.loop.stats(), sum(os.times()[:2])
            ret.append(t)
            done.append(b.loop.now())   # the end of the iteration that took the frame
        st = b.loop.stats()
        counters = {k: st[k] - s0[k] for k in ("predict_waits", "predict_early", "predict_late",
                                               "blocks", "window_cuts")}
        counters.update({k: round((st[k] - s0[k]) / 1e6, 1) for k in
                         ("ns_spin", "ns_spin_predict", "ns_spin_window", "ns_blocked",
                          "ns_oversleep")})
        counters["predict_margin_us"] = round(st["predict_margin_ns"] / 1e3, 1)
        counters["cpu_ms"] = round(1e3 * (sum(os.times()[:2]) - c0), 1)
        counters["rehearsals"] = b.rehearsals
        res.put(("r", (cb[:len(ret)], ret, done, counters)))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] / 1e3


def main():
    gap_ms = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    msgs = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    ctx = mp.get_context("fork")
    hq, res = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(gap_ms, msgs, hq, res)),
             ctx.Process(target=reader, args=(hq, res))]
    for p in procs:
        p.start()
    got = dict(res.get() for _ in procs)
    for p in procs:
        p.join(30)
    (ws, wcounters), (cb, ret, done, counters) = got["w"], got["r"]
    legs = {"writer": [c - a for a, c in ws]}
    if cb:
        legs["to cb"] = [x - c for (a, c), x in zip(ws, cb)]
        legs["to ret"] = [r - x for x, r in zip(cb, ret)]
    else:
        legs["to loop"] = [d - c for (a, c), d in zip(ws, done)]
        legs["loop to ret"] = [r - d for d, r in zip(done, ret)]
    legs["total"] = [r - a for (a, c), r in zip(ws, ret)]
    print(f"gap {gap_ms:g} ms, {msgs} messages, p50/p90 us: " +
          "  ".join(f"{k} {pct(v, 50):.1f}/{pct(v, 90):.1f}" for k, v in legs.items()))
    print("reader: " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    print("writer: " + ", ".join(f"{k} {v}" for k, v in wcounters.items()))


if __name__ == "__main__":
    main()
