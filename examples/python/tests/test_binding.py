# SPDX-License-Identifier: MIT
"""The binding's tests: pytest collects them; without pytest, run this file
(python3 test_binding.py) and each test_* runs as plain asserts."""

import errno
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rankrt  # noqa: E402
from rankrt import _lib  # noqa: E402

SRCDIR = os.environ.get("srcdir") or os.path.join(os.path.dirname(__file__), "..", "..", "..")


def knobs(**kw):
    # loopback, no shm unless asked, quiet logs, short timeouts so a failure fails fast
    base = dict(log="error", connect_timeout_ms=10000)
    base.update(kw)
    return base


def world_pair(on_msg0=None, on_msg1=None, on_err0=None, **kw):
    """A leader (this thread) and a follower world; the follower's side is
    built and run on its own thread by the caller through the returned maker."""
    port = rankrt.free_port()
    loop0 = rankrt.Loop(env=False, **knobs(rank=0, world_size=2, leader=f"127.0.0.1:{port}",
                                           **kw))
    w0 = rankrt.World(loop0, on_message=on_msg0, on_peer_error=on_err0)
    assert w0.port == port
    return loop0, w0, port


def test_version_and_errors():
    assert re.match(r"^\d+\.\d+\.\d+", rankrt.version())
    e = rankrt.RankrtError(-errno.ECONNRESET)
    assert e.code == -errno.ECONNRESET and e.name == "ECONNRESET"
    assert e.errno == errno.ECONNRESET
    e = rankrt.RankrtError(-(_lib.RK_E_BASE + 18))
    assert e.name == "RK_EPEERDEAD" and e.errno is None
    assert "RK_EPEERDEAD" in str(e)


def test_bad_knob_raises_with_name():
    try:
        rankrt.Loop(env=False, spin_us="abc")
    except rankrt.RankrtError as e:
        assert e.name == "RK_ECONFIG", e.name
        assert "RK_SPIN_US" in str(e), str(e)
    else:
        raise AssertionError("a malformed knob was accepted")
    try:
        rankrt.Loop(env=False, no_such_knob="1")
    except rankrt.RankrtError as e:
        assert e.name == "ENOENT", e.name
    else:
        raise AssertionError("an unknown knob was accepted")


def test_loop_run_timeout_and_stats():
    with rankrt.Loop(env=False, wait="block") as loop:
        assert loop.run(timeout=0.01) is True
        st = loop.stats()
        assert st["iterations"] > 0 and st["blocks"] > 0
        assert list(st) == _lib.LOOP_STATS


def header_fields(header, name):
    src = open(os.path.join(SRCDIR, header)).read()
    m = re.search(r"struct %s \{(.*?)\n\};" % name, src, re.S)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    out = []
    for decl in body.split(";"):
        decl = decl.strip()
        if decl:
            typ, rest = decl.split(None, 1)
            out += [(typ, n.strip()) for n in rest.split(",")]
    return out


def test_stats_names_match_headers():
    if not os.path.exists(os.path.join(SRCDIR, "runtime/rk_runtime.h")):
        return  # an installed binding without the source tree: nothing to compare
    for hdr, name, ours in [("runtime/rk_runtime.h", "rk_loop_stats", _lib.LOOP_STATS),
                            ("runtime/rk_runtime.h", "rk_link_stats", _lib.LINK_STATS),
                            ("runtime/rk_runtime.h", "rk_world_stats", _lib.WORLD_STATS),
                            ("runtime/rk_sched.h", "rk_sched_stats", _lib.SCHED_STATS)]:
        fields = header_fields(hdr, name)
        assert [n for _, n in fields] == ours, f"{name}: the binding's counters drifted"
        signed = {n for t, n in fields if t != "uint64_t"}
        assert signed == (_lib.LINK_SIGNED if name == "rk_link_stats" else set()), name


def run_follower(port, results, on_message=None, **kw):
    try:
        with rankrt.Loop(env=False, **knobs(rank=1, world_size=2,
                                            leader=f"127.0.0.1:{port}", **kw)) as loop:
            def on_msg(peer, tag, data):
                results.append((peer, tag, data))
                if on_message:
                    on_message(w, peer, tag, data)
            with rankrt.World(loop, on_message=on_msg,
                              on_peer_error=lambda r, e: loop.stop()) as w:
                w.wait_ready()
                results.append(("transport", w.transport(0)))
                loop.run(timeout=20)
    except BaseException as e:  # the main thread asserts on it
        results.append(e)


def test_world_send_echo_and_peer_error():
    got = []
    errs = []

    def on0(peer, tag, data):
        got.append((peer, tag, data))
        loop0.stop()

    def on_err(rank, err):
        errs.append(err)
        loop0.stop()
    loop0, w0, port = world_pair(on_msg0=on0, on_err0=on_err, shm="off")
    res = []

    def echo(w, peer, tag, data):
        w.send(0, tag + 1, data[::-1])
        if tag == 9:
            w.loop.stop()
    t = threading.Thread(target=run_follower, args=(port, res, echo), kwargs={"shm": "off"})
    t.start()
    try:
        w0.wait_ready()
        w0.send(1, 7, b"hello")
        loop0.run(timeout=10)
        assert got == [(1, 8, b"olleh")], got
        payload = bytes(range(256)) * 300
        w0.send(1, 3, payload)
        loop0.run(timeout=10)
        assert got[-1] == (1, 4, payload[::-1])
        ls = w0.link_stats(1)
        assert ls["tx_frames"] >= 2 and ls["rx_frames"] >= 2 and "credits_min" in ls
        assert w0.stats()["joined"] == 1
        assert w0.transport(1) == "tcp"
        w0.send(1, 9, b"bye")      # the follower echoes, stops and leaves
        # the echo and the departure each stop the loop: they may come in one
        # iteration or in two, so run until the departure is in
        deadline = time.monotonic() + 10
        while not errs and time.monotonic() < deadline:
            loop0.run(timeout=deadline - time.monotonic())
        assert got[-1] == (1, 10, b"eyb"), got
        assert errs and isinstance(errs[0], rankrt.RankrtError), errs
    finally:
        t.join(30)
        w0.close()
        loop0.close()
    assert not [r for r in res if isinstance(r, BaseException)], res
    assert ("transport", "tcp") in res


def test_world_recv():
    acks = []

    def on0(peer, tag, data):
        acks.append(tag)
        loop0.stop()
    loop0, w0, port = world_pair(on_msg0=on0, shm="off")
    res = {"cb": []}
    big = bytes(range(256)) * 400          # past recv()'s first buffer

    def follower():
        try:
            with rankrt.Loop(env=False, **knobs(rank=1, world_size=2, shm="off",
                                                leader=f"127.0.0.1:{port}")) as loop, \
                    rankrt.World(loop, on_message=lambda p, t, d: res["cb"].append((t, len(d)))) \
                    as w:
                w.wait_ready()
                res["first"] = w.recv(5, timeout=10)
                try:
                    w.recv(5, timeout=0.05)
                    res["timeout"] = "none"
                except TimeoutError:
                    res["timeout"] = "raised"
                w.send(0, 6, b"")
                res["big"] = w.recv(5, timeout=10)     # None: on_message had it
                w.send(0, 7, b"")
                got = w.recv(5, timeout=10)            # the buffer grew for it
                res["big2"] = (got[0], got[1] == big)
                w.send(0, 8, b"")
                loop.run(timeout=0.2)
        except BaseException as e:
            res["exc"] = e
    t = threading.Thread(target=follower)
    t.start()
    try:
        w0.wait_ready()
        w0.send(1, 5, b"hello")
        for want, then in ((6, big), (7, big), (8, None)):
            deadline = time.monotonic() + 10
            while want not in acks and time.monotonic() < deadline:
                loop0.run(timeout=deadline - time.monotonic())
            assert want in acks, (want, acks, res)
            if then is not None:
                w0.send(1, 5, then)
    finally:
        t.join(30)
        w0.close()
        loop0.close()
    assert "exc" not in res, res["exc"]
    assert res["first"] == (0, b"hello"), res
    assert res["timeout"] == "raised"
    assert res["big"] is None and res["cb"] == [(5, len(big))], res
    assert res["big2"] == (0, True)


def test_send_to_absent_rank_raises():
    loop0, w0, _ = world_pair()
    try:
        w0.send(1, 1, b"x")     # no follower yet: -ENOTCONN
    except rankrt.RankrtError as e:
        assert e.name == "ENOTCONN", e.name
    else:
        raise AssertionError("a send to an absent rank succeeded")
    finally:
        w0.close()
        loop0.close()


def test_callback_exception_propagates():
    loop0, w0, port = world_pair(on_msg0=lambda p, t, d: 1 / 0, shm="off")
    res = []

    def echo(w, peer, tag, data):
        w.send(0, tag, data)
        w.loop.stop()
    t = threading.Thread(target=run_follower, args=(port, res, echo), kwargs={"shm": "off"})
    t.start()
    try:
        w0.wait_ready()
        w0.send(1, 1, b"x")
        try:
            loop0.run(timeout=10)
        except ZeroDivisionError:
            pass
        else:
            raise AssertionError("the callback's exception was lost")
    finally:
        t.join(30)
        w0.close()
        loop0.close()


class CountBackend:
    """TP1: the token after t is (t * 7 + position + 1) % 97."""

    def __init__(self):
        self.sched = None
        self.outs = []

    def launch(self, rnd):
        self.outs = []
        for s in rnd.streams:
            pos = s.position + len(s.inputs)
            seq = [s.inputs[-1]] + s.drafts
            for k, t in enumerate(seq):
                self.outs.append((t * 7 + pos + k + 1) % 97)
        self.idx = {}
        j = 0
        for i, s in enumerate(rnd.streams):
            self.idx[i] = j
            j += len(s.drafts) + 1
        self.sched.complete(rnd.id)

    def token(self, i, j):
        return self.outs[self.idx[i] + j]


def expected(prompt, n):
    toks = list(prompt)
    for _ in range(n):
        toks.append((toks[-1] * 7 + len(toks) + 1) % 97)
    return toks[len(prompt):]


def test_scheduler_tp1_plain_and_drafted():
    with rankrt.Loop(env=False, **knobs(rank=0, world_size=1,
                                                     leader=f"127.0.0.1:{rankrt.free_port()}")) as loop, \
            rankrt.World(loop) as w:
        w.wait_ready()
        be = CountBackend()
        s = rankrt.Scheduler(w, be, max_batch=4, draft_k=2, vocab=97)
        be.sched = s
        reqs = [s.submit([5, 6, 7], 20, draft_k=0), s.submit([1, 2], 15),
                s.submit([3], 10, draft_k=3)]
        assert s.run_until_done(reqs, timeout=20)
        for r in reqs:
            assert r.error is None, r.error
            assert r.tokens == expected(r.prompt, len(r.tokens)), (r.prompt, r.tokens)
        assert [len(r.tokens) for r in reqs] == [20, 15, 10]
        st = s.stats()
        assert st["tokens"] == 45 and st["rounds"] > 0
        try:
            s.submit([], 3)
        except rankrt.RankrtError as e:
            assert e.name == "EINVAL" and "prompt" in str(e), str(e)
        else:
            raise AssertionError("an empty prompt was accepted")
        s.close()


def test_broadcast_one_writer_two_readers():
    from rankrt.broadcast import Broadcast
    w = Broadcast(2, 0, "127.0.0.1:0", log="error", connect_timeout_ms=10000)
    h = w.export_handle()
    res = {}

    def reader(r):
        try:
            with Broadcast.create_from_handle(h, r, log="error") as b:
                b.wait_until_ready()
                got = [b.dequeue(timeout=10) for _ in range(4)]
                try:
                    b.dequeue(timeout=0.05)
                    got.append("no timeout")
                except TimeoutError:
                    pass
                got.append(b.dequeue(timeout=10))
                try:
                    b.dequeue(timeout=10)
                except rankrt.RankrtError as e:
                    got.append(e.name)
                res[r] = got
        except BaseException as e:
            res[r] = e
    ts = [threading.Thread(target=reader, args=(r,)) for r in (1, 2)]
    for t in ts:
        t.start()
    try:
        w.wait_until_ready()
        # any bytes-like, an empty one too (enqueue lays out the USER payload itself)
        msgs = [b"a", bytes(100000), bytearray(b"c" * 7), memoryview(b"")]
        for m in msgs:
            w.enqueue(m)
        time.sleep(0.2)
        w.enqueue(b"last")
        time.sleep(0.2)
    finally:
        w.close()
        for t in ts:
            t.join(30)
    for r in (1, 2):
        assert res[r] == [bytes(m) for m in msgs] + [b"last", "RK_EPEERBYE"], (r, res[r])

def test_broadcast_rehearses_each_early_wake():
    # a steady writer: the readers' links learn the gap and sleep until shortly
    # before each message; every such sleep that woke early (the loop's
    # predict_early) is followed by one rehearsal, and none with rehearse=False
    from rankrt.broadcast import Broadcast
    w = Broadcast(2, 0, "127.0.0.1:0", log="error", connect_timeout_ms=10000)
    h = w.export_handle()
    n = 80
    res = {}

    def reader(r):
        try:
            with Broadcast.create_from_handle(h, r, log="error", rehearse=(r == 1)) as b:
                b.wait_until_ready()
                got = [b.dequeue(timeout=10) for _ in range(n)]
                res[r] = (got, b.rehearsals, b.loop.stats()["predict_early"])
        except BaseException as e:
            res[r] = e
    ts = [threading.Thread(target=reader, args=(r,)) for r in (1, 2)]
    for t in ts:
        t.start()
    try:
        w.wait_until_ready()
        for i in range(n):
            w.enqueue(b"m%d" % i)
            time.sleep(0.003)
    finally:
        for t in ts:
            t.join(30)
        w.close()
    want = [b"m%d" % i for i in range(n)]
    got1, rehearsals1, early1 = res[1]
    got2, rehearsals2, early2 = res[2]
    assert got1 == want and got2 == want
    assert rehearsals1 == early1, (rehearsals1, early1)
    assert rehearsals2 == 0, (rehearsals2, early2)


if __name__ == "__main__":
    n = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            print("ok", name)
            n += 1
    print(f"{n} passed")
