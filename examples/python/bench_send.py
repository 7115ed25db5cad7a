#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The binding's call overhead: ns per send of 64 B to a peer on a two-rank
world (the follower, another process, spins and drains: a thread of this one
would take the GIL for every frame it receives), three ways, in one run on one world:
World.send() from Python, the raw ctypes call rk_world_send_user(), and the
same call in a C loop (a 15-line C file built here with cc at run time, the
world handed to it; skipped without cc). A non-waiting loop iteration every
256 sends is in all three.

    RANKRT_LIB=/tmp/b/.libs/librankrt.so.2 python3 bench_send.py [N]
"""

import ctypes
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rankrt  # noqa: E402
from rankrt._lib import lib  # noqa: E402


C_LOOP = r"""
#include <stdint.h>
int rk_world_send_user(void *w, int rank, uint32_t tag, const void *data, uint32_t len);
int rk_loop_run(void *loop, int mode);
int send_n(void *w, void *loop, int n, const void *data)
{
	for (int i = 0; i < n; i++) {
		int ret = rk_world_send_user(w, 1, 1, data, 64);
		if (ret < 0)
			return ret;
		if ((i & 255) == 255)
			rk_loop_run(loop, 2);
	}
	return 0;
}
"""


def c_sender(libpath):
    d = tempfile.mkdtemp()
    src, so = os.path.join(d, "send_n.c"), os.path.join(d, "send_n.so")
    with open(src, "w") as f:
        f.write(C_LOOP)
    try:
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, src, libpath], check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    fn = ctypes.CDLL(so).send_n
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]
    return fn


def follower(port, stop):
    # it spins: a follower that sleeps between frames has the sender ring its
    # bell (a syscall) on its next send, which is not the binding's cost
    with rankrt.Loop(env=False, rank=1, world_size=2, leader=f"127.0.0.1:{port}",
                     log="error", wait="spin") as loop, rankrt.World(loop) as w:
        w.wait_ready()
        while not stop.is_set():
            loop.run(timeout=0.1)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    port = rankrt.free_port()
    ctx = mp.get_context("fork")        # before this process has a loop
    stop = ctx.Event()
    t = ctx.Process(target=follower, args=(port, stop))
    t.start()
    loop0 = rankrt.Loop(env=False, rank=0, world_size=2, leader=f"127.0.0.1:{port}", log="error",
                        tx_limit=1 << 30)
    w0 = rankrt.World(loop0)
    w0.wait_ready()
    data = bytes(64)
    res = {}
    csend = c_sender(lib._name)
    for name, send in (("World.send", lambda: w0.send(1, 1, data)),
                       ("ctypes rk_world_send_user",
                        lambda: lib.rk_world_send_user(w0._h, 1, 1, data, 64)),
                       ("C rk_world_send_user", None)):
        if send is None:
            if csend is None:
                continue
            for rep in range(3):
                t0 = time.perf_counter_ns()
                if csend(w0._h, loop0._h, n, data) < 0:
                    raise SystemExit("send_n failed")
                res.setdefault(name, []).append((time.perf_counter_ns() - t0) / n)
                loop0.run(timeout=0.05)
            continue
        for rep in range(3):
            t0 = time.perf_counter_ns()
            for i in range(n):
                send()
                if i & 255 == 255:
                    loop0.poll()
            res.setdefault(name, []).append((time.perf_counter_ns() - t0) / n)
            loop0.run(timeout=0.05)
    stop.set()
    t.join()
    print(f"transport {w0.transport(1)}, {n} sends of 64 B, best of 3 (a poll per 256 included)")
    for name, v in res.items():
        print(f"{name:28s} {min(v):8.0f} ns/send")
    st = w0.link_stats(1)
    print("link: " + ", ".join(f"{k} {st[k]}" for k in ("tx_frames", "tx_queued_max",
                                                           "shm_ring_full", "shm_wakes",
                                                           "shm_tx_direct")))
    w0.close()
    loop0.close()


if __name__ == "__main__":
    main()
