#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""rankrt's Broadcast against a Python re-implementation of vLLM's documented
reader rule (NOT vLLM itself): a shared-memory slot per message, each reader
spins on it with os.sched_yield() for 1 s after each message, then parks on a
socket that the writer writes to when it sees the reader parked.

One writer and 1, 3, 7 readers on this host (processes), a message every
0.2, 1, 5, 20 ms, MSGS messages per cell: p50/p99 delivery latency (the
writer's CLOCK_MONOTONIC stamp to the reader's dequeue return, both in
Python) and the readers' CPU seconds (getrusage, mean and max over readers)
over each cell (its begin message, 50 ms, the messages, 50 ms, its end), the
mean over its stream alone (the first message's dequeue to the last's), then
over IDLE seconds with no message (both kinds idle at the same time). Run it
alone on the machine: it measures CPU and latency.

    RANKRT_LIB=/tmp/b/.libs/librankrt.so.2 python3 bench_broadcast.py [MSGS] [IDLE] [N...]

BENCH_REHEARSE=0: the rankrt readers without their rehearsal (Broadcast(rehearse=False));
BENCH_PULL=0: their dequeue() takes each message in on_message, not from World.recv().
BENCH_WRITER=spin: both writers spin (not sleep) to each message's time, so that neither
starts its send on a CPU cold from an idle gap (bench_cold.py): the readers alone differ.
"""

import mmap
import multiprocessing as mp
import os
import resource
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

INTERVALS_MS = [float(x) for x in os.environ.get("BENCH_IVS", "0.2 1 5 20").split()]
MSG_BYTES = 256
HDR = struct.Struct("<iiQ")     # kind (0 data, 1 begin, 2 end, 3 quit), phase, t_send_ns
SLOT = 512
SHM_OFF = 4096


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def message(kind, phase):
    m = HDR.pack(kind, phase, time.monotonic_ns())
    return m + bytes(MSG_BYTES - len(m))


def writer_schedule(send, msgs, idle, go, done):
    """Each cell: begin, msgs data messages on a fixed schedule, end. Then idle."""
    spin = os.environ.get("BENCH_WRITER", "sleep") == "spin"
    go.wait()
    for p, iv in enumerate(INTERVALS_MS):
        send(message(1, p))
        time.sleep(0.05)
        t0 = time.monotonic()
        for k in range(msgs):
            due = t0 + k * iv / 1000
            if spin:
                while time.monotonic() < due:
                    pass
            elif due - time.monotonic() > 0:
                time.sleep(max(0.0, due - time.monotonic()))
            send(message(0, p))
        time.sleep(0.05)
        send(message(2, p))
        time.sleep(0.05)
    done.set()
    idle.wait()                 # both kinds idle together
    send(message(1, 99))
    time.sleep(float(os.environ.get("BENCH_IDLE", "60")))
    send(message(2, 99))
    time.sleep(0.05)
    send(message(3, 0))


def reader_loop(recv, out):
    lat = {}
    cpus = {}
    start = {}
    first = {}
    last = {}
    while True:
        m = recv()
        now = time.monotonic_ns()
        kind, phase, t = HDR.unpack_from(m)
        if kind == 0:
            lat.setdefault(phase, []).append(now - t)
            c = cpu()
            first.setdefault(phase, c)
            last[phase] = c
        elif kind == 1:
            start[phase] = cpu()
        elif kind == 2:
            cpus[phase] = (cpu() - start[phase], last.get(phase, 0) - first.get(phase, 0))
        else:
            break
    out.put((lat, cpus))


# ---- rankrt ----
def rk_writer(n, hq, msgs, idle, go, done):
    from rankrt.broadcast import Broadcast
    with Broadcast(n, 0, "127.0.0.1:0", log="error") as b:
        h = b.export_handle()
        for _ in range(n):
            hq.put(h)
        b.wait_until_ready()
        writer_schedule(b.enqueue, msgs, idle, go, done)
        time.sleep(0.2)


def rk_reader(rank, hq, out):
    from rankrt.broadcast import Broadcast
    with Broadcast.create_from_handle(hq.get(), rank, log="error",
                                      rehearse=os.environ.get("BENCH_REHEARSE", "1") != "0") as b:
        b._pull = os.environ.get("BENCH_PULL", "1") != "0"
        b.wait_until_ready()
        reader_loop(b.dequeue, out)


# ---- the spinning reader: a re-implementation of vLLM's documented rule ----
class SpinQueue:
    def __init__(self, n, slots):
        self.n = n
        self.shm = mmap.mmap(-1, SHM_OFF + slots * SLOT)
        self.socks = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(n)]
        self.seq = 0

    def enqueue(self, data):
        off = SHM_OFF + self.seq * SLOT
        self.shm[off + 16:off + 16 + len(data)] = data
        struct.pack_into("<QQ", self.shm, off, 0, len(data))
        struct.pack_into("<Q", self.shm, off, self.seq + 1)   # publish after the data
        self.seq += 1
        for r in range(self.n):
            if self.shm[r * 64]:
                self.socks[r][0].send(b"w")

    def reader(self, r):
        shm, sock = self.shm, self.socks[r][1]
        seq = 0
        last = time.monotonic()

        def dequeue():
            nonlocal seq, last
            off = SHM_OFF + seq * SLOT
            while True:
                if struct.unpack_from("<Q", shm, off)[0] == seq + 1:
                    n = struct.unpack_from("<Q", shm, off + 8)[0]
                    seq += 1
                    last = time.monotonic()
                    return bytes(shm[off + 16:off + 16 + n])
                if time.monotonic() - last < 1.0:
                    os.sched_yield()
                    continue
                shm[r * 64] = 1                                # parked, then look again
                if struct.unpack_from("<Q", shm, off)[0] != seq + 1:
                    sock.settimeout(0.1)
                    try:
                        sock.recv(64)
                    except socket.timeout:
                        pass
                shm[r * 64] = 0
        return dequeue


def spin_writer(q, msgs, idle, go, done):
    writer_schedule(q.enqueue, msgs, idle, go, done)


def spin_reader(q, r, out):
    reader_loop(q.reader(r), out)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def run(n, msgs):
    ctx = mp.get_context("fork")
    hq, out_rk, out_sp = ctx.Queue(), ctx.Queue(), ctx.Queue()
    go_rk, go_sp, done_rk, done_sp, idle = (ctx.Event() for _ in range(5))
    sq = SpinQueue(n, 4 * msgs + 64)
    procs = [ctx.Process(target=rk_writer, args=(n, hq, msgs, idle, go_rk, done_rk))]
    procs += [ctx.Process(target=rk_reader, args=(r + 1, hq, out_rk)) for r in range(n)]
    procs += [ctx.Process(target=spin_writer, args=(sq, msgs, idle, go_sp, done_sp))]
    procs += [ctx.Process(target=spin_reader, args=(sq, r, out_sp)) for r in range(n)]
    for p in procs:
        p.start()
    time.sleep(2)          # the rankrt world comes up; the spinning readers park
    go_rk.set()
    done_rk.wait()
    time.sleep(1.5)        # the spinning readers park again
    go_sp.set()
    done_sp.wait()
    time.sleep(1.5)
    idle.set()
    res = {"rankrt": [out_rk.get() for _ in range(n)], "spin": [out_sp.get() for _ in range(n)]}
    for p in procs:
        p.join(30)
    return res


def main():
    msgs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    idle = float(sys.argv[2]) if len(sys.argv) > 2 else 60
    ns = [int(x) for x in sys.argv[3:]] or [1, 3, 7]
    os.environ["BENCH_IDLE"] = str(idle)
    print(f"# {msgs} messages of {MSG_BYTES} B per cell, idle {idle:g} s, {os.cpu_count()} CPUs"
          f"{' (7 readers + writers oversubscribe them)' if os.cpu_count() < 8 else ''}")
    print("# spin = a Python re-implementation of vLLM's documented reader rule, not vLLM")
    if os.environ.get("BENCH_WRITER", "sleep") == "spin":
        print("# BENCH_WRITER=spin: both writers spin to each message's time")
    print(f"{'N':>2} {'every':>6} {'impl':>6} {'p50 us':>8} {'p99 us':>8} "
          f"{'cpu s mean':>10} {'cpu s max':>9} {'stream cpu s':>12}")
    for n in ns:
        res = run(n, msgs)
        for p, iv in list(enumerate(INTERVALS_MS)) + [(99, None)]:
            for impl in ("rankrt", "spin"):
                lat = [x for lt, _ in res[impl] for x in lt.get(p, [])]
                cpus = [c.get(p, (float("nan"),) * 2)[0] for _, c in res[impl]]
                scpu = [c.get(p, (float("nan"),) * 2)[1] for _, c in res[impl]]
                every = f"{iv:g}ms" if iv is not None else "idle"
                p50 = f"{pct(lat, 50) / 1e3:8.1f}" if lat else f"{'-':>8}"
                p99 = f"{pct(lat, 99) / 1e3:8.1f}" if lat else f"{'-':>8}"
                print(f"{n:>2} {every:>6} {impl:>6} {p50} {p99} "
                      f"{sum(cpus) / len(cpus):10.3f} {max(cpus):9.3f}"
                      f"{sum(scpu) / len(scpu) if lat else float('nan'):13.3f}", flush=True)


if __name__ == "__main__":
    main()
