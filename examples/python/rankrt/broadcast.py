# SPDX-License-Identifier: MIT
"""Broadcast: vLLM's MessageQueue shape (one writer, N readers) over rankrt.

The writer is rank 0 of a world of n_readers + 1 ranks, reader i is rank i.
Messages are bytes (no pickle inside: serialise as you like). On one host
the links move to shared memory and a message is written once into the
world's broadcast ring for every reader; across hosts the same object runs on
TCP or verbs (the leader address says which).

A reader takes each message with World.recv() (rk_world_recv_user(): the run
returns it, no call back into Python) and waits as every rankrt loop waits:
inside dequeue() it spins for the busy window after the last message
(RK_SPIN_US, cut by what the link learned about the gaps), sleeps until
shortly before a message the link predicts, and otherwise blocks in the
kernel; it never spins for a fixed second. When such a sleep wakes early, as
meant, the reader first walks a message's Python path on a stand-in
(Loop.rehearse()), so the message finds it warm.

Between dequeue() calls (a reader busy with its step, a writer between
steps) nobody runs the loop, yet the links must answer heartbeats within
RK_PEER_TIMEOUT_MS: a daemon thread runs one non-waiting iteration of the
loop every `pump_s` seconds when no call of this object holds it. A lock
serialises the loop between that thread and the caller's calls (a loop is
not thread-safe; it is bound to no thread unless RK_DEFER_TASKRUN=1, which
must stay off here).
"""

import collections
import ctypes
import struct
import threading
import time

from . import Loop, RankrtError, World, _lib, free_port


class Broadcast:
    def __init__(self, n_readers, rank, leader, tag=1, pump_s=0.2, rehearse=True, **knobs):
        """rank 0 writes, 1..n_readers read; @leader "host:port" (port 0 on the
        writer: any free one, then export_handle() gives the readers' address);
        rehearse=False: no rehearsal after a reader's early wakes."""
        self.n_readers = n_readers
        self.rank = rank
        self.tag = tag
        self._q = collections.deque()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        host, port = leader.rsplit(":", 1)
        if rank == 0 and port == "0":
            leader = f"{host}:{free_port(host)}"
        self.loop = Loop(rank=rank, world_size=n_readers + 1, leader=leader, **knobs)
        try:
            self.world = World(self.loop, on_message=self._on_message,
                               on_peer_error=self._on_peer_error)
        except BaseException:
            self.loop.close()
            raise
        self._host = leader.rsplit(":", 1)[0]
        self._err = None
        self._pump = threading.Thread(target=self._pumping, args=(pump_s,), daemon=True)
        self._ready = False
        self._rehearsing = False
        self._pull = True               # dequeue() through World.recv(), else run() and on_message
        self.rehearsals = 0
        if rank != 0 and rehearse:
            self._stand_in = self._make_stand_in()
            self.loop.rehearse(self._rehearse)

    @classmethod
    def create_from_handle(cls, handle, rank, **knobs):
        """A reader of the writer whose export_handle() gave @handle."""
        return cls(handle["n_readers"], rank, handle["leader"], **knobs)

    def export_handle(self):
        """Writer: what each reader needs (a dict: plain data, picklable)."""
        return {"n_readers": self.n_readers, "leader": f"{self._host}:{self.world.port}"}

    def wait_until_ready(self):
        """Every reader joined the writer (and each reader its writer)."""
        with self._lock:
            self.world.wait_ready()
        if not self._ready:
            self._ready = True
            self._pump.start()

    def _make_stand_in(self, size=256):
        hdr = _lib.WireHdr(type=_lib.RK_FRAME_USER, len=8 + size)
        payload = ctypes.create_string_buffer(struct.pack("<II", self.tag, 0) + bytes(size))
        return hdr, payload, ctypes.addressof(hdr), ctypes.addressof(payload)

    def _rehearse(self):
        # a message's way out of the run: the frame callback and the queue
        # (where a second message of one read goes), the return of a foreign
        # call and World.recv()'s result, all on the stand-in
        _, _, hdr, payload = self._stand_in
        self._rehearsing = True
        try:
            self.world._frame(None, 0, hdr, payload, None)
        finally:
            self._rehearsing = False
        self.loop.now()
        self.world._recv_got()
        self.rehearsals += 1

    def _on_message(self, peer, tag, data):
        if tag == self.tag:
            if self._rehearsing:
                self._q.append(data)
                self._q.pop()
                return
            self._q.append(data)
            self.loop.stop()

    def _on_peer_error(self, rank, err):
        if self._err is None:
            self._err = err
        self.loop.stop()

    def _pumping(self, period):
        while not self._closed.wait(period):
            if self._lock.acquire(blocking=False):
                try:
                    self.loop.poll()
                except RankrtError:
                    pass
                finally:
                    self._lock.release()

    def enqueue(self, data):
        """Writer: send @data (bytes-like) to every reader."""
        if self.rank != 0:
            raise RankrtError(-1, "enqueue on a reader")
        with self._lock:
            if self._err is not None:
                raise self._err
            # the frame is in the broadcast ring (or on an idle link's socket)
            # and every sleeping reader rung when this returns; the poll only
            # sends what was queued behind busy links and runs due timers
            self.world.broadcast(self.tag, data)
            self.loop.poll()

    def dequeue(self, timeout=None):
        """Reader: the next message (bytes); TimeoutError after @timeout s;
        RankrtError when the writer failed or left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self._q:
                if self._err is not None:
                    raise self._err
                if deadline is None:
                    left = None
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError("no message within %.3f s" % timeout)
                if not self._pull:
                    self.loop.run(timeout=left)
                    continue
                try:
                    got = self.world.recv(self.tag, left)
                except TimeoutError:
                    raise TimeoutError("no message within %.3f s" % timeout) from None
                if got is not None:
                    return got[1]
            return self._q.popleft()

    def close(self):
        self._closed.set()
        if self._pump.is_alive():
            self._pump.join()
        with self._lock:
            self.world.close()
            self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
