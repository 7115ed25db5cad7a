# SPDX-License-Identifier: MIT
"""rankrt from Python: a loop, a world of ranks, the round scheduler.

    with rankrt.Loop(rank=0, world_size=2, leader="127.0.0.1:29500") as loop, \\
         rankrt.World(loop, on_message=lambda peer, tag, data: ...) as world:
        world.wait_ready()
        world.send(1, tag=7, data=b"hello")
        loop.run(timeout=1.0)

The GIL. Every call into librankrt is a ctypes CDLL call, which releases the
GIL for its duration: a blocking one (Loop.run(), World.wait_ready(), the
scheduler's loop runs) leaves every other Python thread free. The library
calls back into Python only from inside those runs, on the thread that runs
the loop, and every callback takes the GIL back while it runs: on_message,
on_peer_error, on_ready, a timer's, and a Scheduler backend's launch, token,
retire and frame, and a request's on_tokens. Keep them short (the loop waits
for them), and never run the loop from one (RankrtError EBUSY).

An exception raised in a callback stops the loop; the run that called it
raises it once the loop has returned.

Threads. A loop belongs to one thread at a time and is not thread-safe; the
only call valid from another thread is Loop.wake().
"""

import ctypes
import errno
import struct
from ctypes import byref, c_uint64, c_void_p

from . import _lib
from ._lib import lib

_USER_HDR = struct.Struct("<II")    # a USER payload's tag and reserved word (wire/WIRE.md)

__all__ = ["RankrtError", "Loop", "World", "Scheduler", "Round", "version", "strerror",
           "free_port"]


class RankrtError(OSError):
    """A negative return of librankrt: .code (negative), .name ("ECONNRESET",
    "RK_EPEERDEAD") and the message rk_strerror() gives."""

    def __init__(self, code, what=""):
        code = -abs(code)
        self.code = code
        self.name = lib.rk_errname(code).decode()
        msg = lib.rk_strerror(code).decode()
        self.text = f"{what}: {msg}" if what else msg
        super().__init__(-code if -code < _lib.RK_E_BASE else None, self.text)

    def __str__(self):
        return self.text

    def __reduce__(self):
        return (RankrtError, (self.code,))


def strerror(code):
    return lib.rk_strerror(code).decode()


def version():
    """The library's version string ("2.0.0")."""
    return lib.rk_version(None, None).decode()


def free_port(host="127.0.0.1"):
    """A TCP port free on @host now, for a leader address (rk_config_set() takes
    no port 0). Another process may take it before the leader binds it: a
    World that then fails with EADDRINUSE can be made again with another."""
    import socket
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _check(ret, what):
    if ret < 0:
        raise RankrtError(ret, what)
    return ret


def _stats(getter, handle, names, signed=()):
    buf = (c_uint64 * len(names))()
    n = getter(handle, buf, ctypes.sizeof(buf)) // 8
    out = {}
    for i, name in enumerate(names[:n]):
        v = buf[i]
        if name in signed and v >= 1 << 63:
            v -= 1 << 64
        out[name] = v
    return out


class Loop:
    """A rank's event loop (rk_loop_create()), configured from the RK_*
    environment (when env is true) and then from the keyword knobs, each by
    its rk_config_set() name: Loop(rank=1, world_size=2, spin_us=5000)."""

    def __init__(self, env=True, **knobs):
        self._h = None
        self._pending = None
        self._timer = _lib.Timer()
        self._timer_cb = _lib.TIMER_CB(self._on_timer)
        self._rehearsal = None
        cfg = c_void_p()
        _check(lib.rk_config_create(byref(cfg)), "rk_config_create")
        try:
            err = ctypes.create_string_buffer(4096)
            if env:
                _check_cfg(lib.rk_config_from_env(cfg, err, len(err)), err)
                _check_cfg(lib.rk_config_from_launcher_env(cfg, err, len(err)), err)
            for name, value in knobs.items():
                if isinstance(value, bool):
                    value = "1" if value else "0"
                _check_cfg(lib.rk_config_set(cfg, name.encode(), str(value).encode(), err,
                                             len(err)), err, name)
            h = c_void_p()
            _check(lib.rk_loop_create(cfg, byref(h)), "rk_loop_create")
            self._h = h
        finally:
            lib.rk_config_destroy(cfg)
        lib.rk_timer_init(byref(self._timer), ctypes.cast(self._timer_cb, c_void_p), None)

    # callbacks call this when they raise: the run re-raises after the loop stops
    def _fail(self, exc):
        if self._pending is None:
            self._pending = exc
        lib.rk_loop_stop(self._h)

    def _raise_pending(self):
        exc, self._pending = self._pending, None
        if exc is not None:
            raise exc

    def _on_timer(self, t, now):
        lib.rk_loop_stop(self._h)
        return _lib.RK_IDLE

    def run(self, timeout=None, once=False):
        """Run the loop (the GIL released) until stop(), a signal, a callback's
        exception, or @timeout seconds; once=True: one iteration, which may wait
        as the policy says. Returns False when a caught signal stopped it."""
        if timeout is not None:
            lib.rk_timer_start(self._h, byref(self._timer), max(0, int(timeout * 1e9)), 0)
        try:
            ret = lib.rk_loop_run(self._h, _lib.RK_RUN_ONCE if once else _lib.RK_RUN_DEFAULT)
        finally:
            if timeout is not None:
                lib.rk_timer_stop(byref(self._timer))
        self._raise_pending()
        if ret == -_lib.RK_ESTOPPED:
            return False
        _check(ret, "rk_loop_run")
        return True

    def poll(self):
        """One iteration that never waits: handle what is ready."""
        ret = lib.rk_loop_run(self._h, _lib.RK_RUN_NOWAIT)
        self._raise_pending()
        if ret != -_lib.RK_ESTOPPED:
            _check(ret, "rk_loop_run")

    def stop(self):
        """Make run() return after this iteration (from a callback, or before a run)."""
        lib.rk_loop_stop(self._h)

    def wake(self):
        """Wake the loop from another thread (async-signal-safe in C)."""
        lib.rk_loop_wake(self._h)

    def now(self):
        """The loop's cached monotonic time, ns."""
        return lib.rk_loop_now(self._h)

    def stats(self):
        """The loop's counters (struct rk_loop_stats) as a dict."""
        return _stats(lib.rk_loop_stats, self._h, _lib.LOOP_STATS)

    def rehearse(self, fn):
        """Call fn() (on the loop's thread, the GIL held) each time a
        predictive sleep woke early, as meant, and the loop now spins for the
        event it predicted: a few microseconds before a frame it expects. A
        CPU that slept lets the Python path of that frame go cold (the callback
        into Python, the interpreter, the objects it touches); fn() walks that
        path on a stand-in so the frame finds it warm, as the loop's own TCP
        rehearsal does for the kernel's path (rk_source_ops.verdict(),
        RK_VERDICT_SPIN / _EARLY). One per loop; None removes it. Loop thread,
        outside its runs. An exception in fn() stops the run, which raises it.
        """
        if self._rehearsal is not None:
            _check(lib.rk_loop_remove_source(self._h, byref(self._rehearsal[0])),
                   "rk_loop_remove_source")
            self._rehearsal = None
        if fn is None:
            return

        def verdict(src, v):
            if v == _lib.RK_VERDICT_SPIN or v == _lib.RK_VERDICT_EARLY:
                try:
                    fn()
                except BaseException as e:
                    self._fail(e)
        src = _lib.Source()
        ops = _lib.SourceOps(name=b"python-rehearsal", verdict=_lib.SRC_VERDICT_CB(verdict))
        lib.rk_source_init(byref(src), byref(ops), None)
        _check(lib.rk_loop_add_source(self._h, byref(src)), "rk_loop_add_source")
        self._rehearsal = (src, ops)     # the library holds pointers to both

    def close(self):
        if self._h:
            self.rehearse(None)
            _check(lib.rk_loop_destroy(self._h), "rk_loop_destroy")
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _check_cfg(ret, err, name=None):
    if ret < 0:
        text = err.value.decode(errors="replace") or (name or "")
        raise RankrtError(ret, text)


# the type and len fields of a struct rk_wire_hdr, read in place (_lib.WireHdr's layout)
_HDR_TYPE_LEN = struct.Struct("<%dxB%dxI" % (_lib.WireHdr.type.offset, _lib.WireHdr.len.offset -
                                               _lib.WireHdr.type.offset - 1))
_HDR16 = ctypes.c_char * _HDR_TYPE_LEN.size


class World:
    """The star of links of a job (rk_world_create()) on @loop, whose config
    names the rank, the size and the leader.

    on_message(peer, tag, data): a USER frame's bytes from rank @peer.
    on_peer_error(rank, err): a rank failed or left (err: a RankrtError).
    on_ready(): every link this rank needs is up.
    All three run on the loop's thread, inside its runs, with the GIL held.
    """

    def __init__(self, loop, on_message=None, on_peer_error=None, on_ready=None):
        self.loop = loop
        self.on_message = on_message
        self.on_peer_error = on_peer_error
        self.on_ready = on_ready
        self._sched = None
        self._ops = _lib.WorldOps(_lib.READY_CB(self._ready), _lib.FRAME_CB(self._frame),
                                  _lib.PEER_ERROR_CB(self._peer_error))
        h = c_void_p()
        _check(lib.rk_world_create(loop._h, byref(self._ops), None, byref(h)),
               "rk_world_create")
        self._h = h
        self._rcap = 1 << 16            # recv()'s buffer; it grows to a larger frame
        self._rbuf = ctypes.create_string_buffer(self._rcap)
        self._rpeer, self._rlen = ctypes.c_int(), ctypes.c_uint32()
        self._rpeer_p, self._rlen_p = byref(self._rpeer), byref(self._rlen)
        self._held = None               # what recv() took while a callback failed
        self._bcast = _lib.bare("rk_world_broadcast")
        self.rank = lib.rk_world_rank(h)
        self.size = lib.rk_world_size(h)

    def _ready(self, w, arg):
        if self.on_ready:
            try:
                self.on_ready()
            except BaseException as e:
                self.loop._fail(e)

    def _frame(self, w, peer, hdr, payload, arg):
        # no foreign call per frame (a reader's callback often runs on a cold
        # CPU, where each costs tens of us): the header's type and length and
        # the payload are read in place; the checks are rk_wire_decode_user()'s
        typ, n = _HDR_TYPE_LEN.unpack_from(_HDR16.from_address(hdr))
        if typ != _lib.RK_FRAME_USER or not self.on_message or n < _USER_HDR.size:
            return _lib.RK_IDLE
        p = (ctypes.c_char * n).from_address(payload).raw
        tag, reserved = _USER_HDR.unpack_from(p)
        if reserved:
            return _lib.RK_IDLE
        try:
            self.on_message(peer, tag, p[_USER_HDR.size:])
        except BaseException as e:
            self.loop._fail(e)
        return _lib.RK_BUSY

    def _peer_error(self, w, rank, err, arg):
        if self.on_peer_error:
            try:
                self.on_peer_error(rank, RankrtError(err, f"rank {rank}"))
            except BaseException as e:
                self.loop._fail(e)

    def wait_ready(self):
        """Run the loop until every link this rank needs is up (GIL released)."""
        ret = lib.rk_world_wait_ready(self._h)
        self.loop._raise_pending()
        _check(ret, "rk_world_wait_ready")

    def send(self, rank, tag, data):
        """Send @data (bytes-like, copied) to @rank as a USER frame tagged @tag.
        It leaves from this call on an idle link (else before the loop next
        waits: run or poll the loop)."""
        if type(data) is not bytes:
            data = bytes(data)
        _check(lib.rk_world_send_user(self._h, rank, tag, data, len(data)), "send")

    def recv(self, tag, timeout=None):
        """Run the loop (the GIL released) until a USER frame tagged @tag comes
        and return (peer, data), the frame never going through on_message: one
        call into the library, none back into Python (rk_world_recv_user()).
        None when the run ended without one (a callback stopped the loop, e.g.
        on_peer_error), or when the frame was larger than the receive buffer:
        then on_message had it, and the buffer grows for the next call.
        TimeoutError after @timeout s. A callback's exception during the run is
        raised; a message the run brought with it comes from the next call.
        Loop thread, not from a callback."""
        if self._held is not None:
            got, self._held = self._held, None
            return got
        ret = lib.rk_world_recv_user(self._h, tag, self._rbuf, self._rcap, self._rpeer_p,
                                     self._rlen_p, -1 if timeout is None else int(timeout * 1e9))
        return self._recv_result(ret)

    def _recv_got(self):
        return self._rpeer.value, self._rbuf[:self._rlen.value]

    def _recv_result(self, ret):
        if ret == 1:
            got = self._recv_got()
            if self.loop._pending is not None:
                self._held = got
                self.loop._raise_pending()
            return got
        self.loop._raise_pending()
        if ret == -errno.EMSGSIZE:
            self._rcap = max(self._rlen.value, 2 * self._rcap)
            self._rbuf = ctypes.create_string_buffer(self._rcap)
            return None
        if ret == -_lib.RK_ETIMEOUT:
            raise TimeoutError("no message")
        if ret != -_lib.RK_ESTOPPED:
            _check(ret, "rk_world_recv_user")
        return None

    def broadcast(self, tag, data):
        """Leader: send @data to every follower (on same-host links through the
        world's broadcast ring: written once for every reader)."""
        # The USER payload (wire/WIRE.md) laid out here, not by a call of
        # rk_wire_encode_user(), and the call made without argtypes
        # (_lib.bare()): a writer idle for a few ms runs this on a cold CPU,
        # where each step of a ctypes call costs several times its hot price
        # (bench_cold.py). Any bytes-like @data.
        payload = _USER_HDR.pack(tag, 0) + data
        ret = self._bcast(self._h, _lib.RK_FRAME_USER, 0, payload, len(payload))
        if ret:
            _check(ret, "broadcast")

    @property
    def port(self):
        """Leader: the TCP port it listens on."""
        return _check(lib.rk_world_port(self._h), "rk_world_port")

    def failed(self):
        """The first peer error as a RankrtError, or None."""
        ret = lib.rk_world_failed(self._h)
        return RankrtError(ret) if ret else None

    def transport(self, rank):
        """"tcp", "shm" or "roce": what carries the link to @rank now."""
        link = lib.rk_world_link(self._h, rank)
        if not link:
            raise RankrtError(-errno.ENOENT, f"no link to rank {rank}")
        return lib.rk_link_transport(link).decode()

    def stats(self):
        return _stats(lib.rk_world_stats, self._h, _lib.WORLD_STATS)

    def link_stats(self, rank):
        link = lib.rk_world_link(self._h, rank)
        if not link:
            raise RankrtError(-errno.ENOENT, f"no link to rank {rank}")
        return _stats(lib.rk_link_stats, link, _lib.LINK_STATS, _lib.LINK_SIGNED)

    def close(self):
        """BYE to every peer, a bounded linger, then free (after any Scheduler)."""
        if self._sched is not None:
            self._sched.close()
        if self._h:
            _check(lib.rk_world_destroy(self._h), "rk_world_destroy")
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


from .sched import Round, Scheduler  # noqa: E402  (needs the names above)
