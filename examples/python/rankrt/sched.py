# SPDX-License-Identifier: MIT
"""The round scheduler (rk_sched.h) with a backend written in Python.

The backend is any object with:
    launch(round)            this rank's share of a Round; report it once with
                             sched.complete(round.id[, err]) (from launch itself,
                             from frame(), or later from the loop)
    token(i, j) -> int       leader: the model's token at output j of stream i
and optionally:
    retire(stream_id)        a stream ended on every rank
    frame(peer, tag, data)   a USER frame of the backend's tags (user_tag,
                             user_tag + user_tags - 1), e.g. a follower's partial sums
    user_tag, user_tags      those tags (ints; default none)
Each runs on the loop's thread with the GIL held, inside a run of the loop.
An exception from one stops the loop (the run re-raises it); a launch that
raises fails its round on every rank.
"""

import ctypes
import errno
import struct
from ctypes import byref, c_uint32, c_void_p

from . import _lib
from ._lib import lib


class Stream:
    """One stream of a round: its id, how many tokens every rank folded in
    already (position), this round's inputs and the drafts to verify."""
    __slots__ = ("id", "position", "inputs", "drafts", "top_k", "temperature", "top_p",
                 "seed")

    def __repr__(self):
        return (f"Stream(id={self.id}, position={self.position}, inputs={self.inputs}, "
                f"drafts={self.drafts})")


class Round:
    """A decoded ROUND: .id, .flags, .streams (list of Stream). The model's
    outputs are, stream by stream, one after the inputs and one after each
    draft: len(s.drafts) + 1 each."""
    __slots__ = ("id", "flags", "streams")


def _round(r, flags):
    rnd = Round()
    rnd.id = r.round_id
    rnd.flags = flags
    toks = struct.unpack("<%dI" % r.n_tok_total, ctypes.string_at(r.tokens, 4 * r.n_tok_total))
    ws = _lib.WireStream()
    off = 0
    rnd.streams = []
    for i in range(r.n_streams):
        lib.rk_wire_round_stream(byref(r), i, byref(ws))
        s = Stream()
        s.id = ws.stream_id
        s.position = ws.position
        s.inputs = list(toks[off:off + ws.n_tokens])
        off += ws.n_tokens
        s.drafts = list(toks[off:off + ws.n_draft])
        off += ws.n_draft
        s.top_k, s.temperature, s.top_p, s.seed = ws.top_k, ws.temperature, ws.top_p, ws.seed
        rnd.streams.append(s)
    return rnd


class Request:
    """A submitted request: .tokens (generated so far), .done, .error (a
    RankrtError or None), .id."""

    def __init__(self, prompt, on_tokens):
        self.prompt = list(prompt)
        self.tokens = []
        self.done = False
        self.error = None
        self.on_tokens = on_tokens
        self._prompt = (c_uint32 * len(self.prompt))(*self.prompt)
        self._c = _lib.Request()

    @property
    def id(self):
        return self._c.id


class Scheduler:
    """rk_sched_create() on @world with the Python @backend.
    max_batch, draft_k, vocab: struct rk_sched_config's fields (0: defaults)."""

    def __init__(self, world, backend, max_batch=0, draft_k=0, vocab=0):
        from . import RankrtError, _check
        self._err = RankrtError
        self.world = world
        self.loop = world.loop
        self.backend = backend
        self._reqs = {}
        cfg = _lib.SchedConfig()
        cfg.max_batch, cfg.draft_k, cfg.vocab = max_batch, draft_k, vocab
        tags = getattr(backend, "user_tags", 0)
        ops = _lib.BackendOps()
        ops.launch = _lib.LAUNCH_CB(self._launch)
        ops.token = _lib.TOKEN_CB(self._token)
        ops.retire = _lib.RETIRE_CB(self._retire)
        if tags:
            ops.frame = _lib.BFRAME_CB(self._frame)
            ops.user_tag = backend.user_tag
            ops.user_tags = tags
        self._ops = ops
        self._req_cb = _lib.REQUEST_CB(self._on_request)
        h = c_void_p()
        _check(lib.rk_sched_create(world._h, byref(cfg), byref(ops), None, byref(h)),
               "rk_sched_create")
        self._h = h
        world._sched = self

    # ---- the backend's trampolines (loop thread, GIL taken by ctypes) ----
    def _launch(self, ctx, s, rnd, flags):
        try:
            self.backend.launch(_round(rnd.contents, flags))
            return 0
        except BaseException as e:
            self.loop._fail(e)
            return -errno.EIO

    def _token(self, ctx, i, j, out):
        try:
            out[0] = self.backend.token(i, j)
            return 0
        except BaseException as e:
            self.loop._fail(e)
            return -errno.EIO

    def _retire(self, ctx, stream_id):
        fn = getattr(self.backend, "retire", None)
        if fn:
            try:
                fn(stream_id)
            except BaseException as e:
                self.loop._fail(e)

    def _frame(self, ctx, peer, msg):
        m = msg.contents
        try:
            self.backend.frame(peer, m.tag, ctypes.string_at(m.data, m.len))
            return _lib.RK_BUSY
        except BaseException as e:
            self.loop._fail(e)
            return -errno.EPROTO

    def _on_request(self, creq, toks, n, done, err):
        req = self._reqs.get(creq)
        if req is None:
            return
        new = toks[:n] if n else []
        req.tokens.extend(new)
        if done:
            req.done = True
            if err:
                req.error = self._err(err, f"request {req.id}")
            del self._reqs[creq]
        if req.on_tokens:
            try:
                req.on_tokens(req, new, done)
            except BaseException as e:
                self.loop._fail(e)

    # ---- the application's calls (loop thread) ----
    def complete(self, round_id, err=0):
        """The backend reports its share of @round_id done (0 or -errno)."""
        lib.rk_sched_complete(self._h, round_id, err)

    def submit(self, prompt, max_tokens, draft_k=-1, stop_token=-1, on_tokens=None):
        """Leader: queue a greedy request; returns a Request that fills as the
        loop runs. on_tokens(req, new_tokens, done) runs on the loop thread."""
        from . import RankrtError
        req = Request(prompt, on_tokens)
        c = req._c
        lib.rk_request_init(byref(c))
        c.prompt = req._prompt
        c.prompt_len = len(req.prompt)
        c.max_tokens = max_tokens
        c.stop_token = stop_token
        c.draft_k = draft_k
        c.cb = self._req_cb
        ret = lib.rk_sched_submit(self._h, byref(c))
        if ret < 0:
            field = c.err_field.decode() if c.err_field else "submit"
            raise RankrtError(ret, field)
        self._reqs[ctypes.addressof(c)] = req
        return req

    def run_until_done(self, reqs, timeout=None):
        """Leader: run the loop until every request in @reqs is done."""
        pending = [r for r in reqs if not r.done]

        def check(req, new, done, prev=None):
            if all(r.done for r in pending):
                self.loop.stop()
        for r in pending:
            prev = r.on_tokens

            def cb(req, new, done, prev=prev):
                if prev:
                    prev(req, new, done)
                check(req, new, done)
            r.on_tokens = cb
        if pending:
            self.loop.run(timeout=timeout)
        return all(r.done for r in reqs)

    def busy(self):
        return bool(lib.rk_sched_busy(self._h))

    def idle(self):
        return bool(lib.rk_sched_idle(self._h))

    def stats(self):
        from . import _stats
        return _stats(lib.rk_sched_stats, self._h, _lib.SCHED_STATS)

    def stop(self):
        lib.rk_sched_stop(self._h)

    def close(self):
        """Stop, let the backend report the rounds it holds, destroy."""
        if not self._h:
            return
        lib.rk_sched_stop(self._h)
        for _ in range(1000):
            if not lib.rk_sched_busy(self._h):
                break
            self.loop.run(timeout=0.001)
        lib.rk_sched_destroy(self._h)
        self._h = None
        self.world._sched = None
