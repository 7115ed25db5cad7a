#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What a Python writer's send costs right after an idle gap: one writer
process with one Broadcast reader (another process), and in rotation, each
after its own time.sleep(GAP), p50/p90 us (CLOCK_MONOTONIC, in Python) of:

  nothing     the two stamps alone
  spin write  bench_broadcast.py's spinning queue's enqueue (Python only: the
              slot written in an mmap, the parked flag looked at)
  call        one trivial foreign call into librankrt (rk_loop_now(), ctypes)
  declared    rk_world_broadcast() through ctypes with its argtypes, the frame
              built beforehand
  bare        the same call without argtypes (_lib.bare(), as World.broadcast())
  World.broadcast   the binding's call: the frame built, the bare call
  enqueue     Broadcast.enqueue() (the writer's whole step in bench_broadcast.py:
              its lock, World.broadcast(), then a non-waiting run of the loop)

A writer that slept a few ms runs its next steps on a cold CPU; this shows
what part of that the library's crossing and its C path add to the Python the
spinning queue's writer runs anyway. Run it alone on the machine.

    RANKRT_LIB=$PWD/.libs/librankrt.so.2 python3 bench_cold.py [MSGS] [GAP_MS...]
"""

import multiprocessing as mp
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_broadcast import SpinQueue   # noqa: E402


def reader(hq):
    from rankrt.broadcast import Broadcast
    with Broadcast.create_from_handle(hq.get(), 1, log="error") as b:
        b.wait_until_ready()
        while len(b.dequeue()) != 16:
            pass


def main():
    msgs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    gaps = [float(x) for x in sys.argv[2:]] or [0.2, 1, 5, 20]
    from rankrt import _lib
    from rankrt.broadcast import Broadcast
    ctx = mp.get_context("fork")
    hq = ctx.Queue()
    with Broadcast(1, 0, "127.0.0.1:0", log="error") as b:
        hq.put(b.export_handle())
        p = ctx.Process(target=reader, args=(hq,))
        p.start()
        b.wait_until_ready()
        lib, loop, world = _lib.lib, b.loop._h, b.world._h
        bare = _lib.bare("rk_world_broadcast")
        sq = SpinQueue(1, msgs * len(gaps) + 8)
        m = bytes(256)
        frame = struct.pack("<II", b.tag, 0) + m
        steps = {
            "nothing": lambda: None,
            "spin write": lambda: sq.enqueue(m),
            "call": lambda: lib.rk_loop_now(loop),
            "declared": lambda: lib.rk_world_broadcast(world, _lib.RK_FRAME_USER, 0,
                                                        frame, len(frame)),
            "bare": lambda: bare(world, _lib.RK_FRAME_USER, 0, frame, len(frame)),
            "World.broadcast": lambda: b.world.broadcast(b.tag, m),
            "enqueue": lambda: b.enqueue(m),
        }
        print(f"# {msgs} of each step per gap, in rotation, each after its own sleep; "
              f"{os.cpu_count()} CPUs")
        for gap in gaps:
            took = {k: [] for k in steps}
            for _ in range(msgs):
                for k, fn in steps.items():
                    time.sleep(gap / 1000)
                    a = time.monotonic_ns()
                    fn()
                    took[k].append(time.monotonic_ns() - a)
                b.loop.poll()
            print(f"gap {gap:g} ms, p50/p90 us: " + "  ".join(
                f"{k} {sorted(v)[len(v) // 2] / 1e3:.1f}/{sorted(v)[len(v) * 9 // 10] / 1e3:.1f}"
                for k, v in took.items()), flush=True)
        b.enqueue(b"q" * 16)
        time.sleep(0.2)
        p.join(10)


if __name__ == "__main__":
    main()
