#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A tensor-parallel decode server in PyTorch on rankrt's round scheduler.

Every rank holds the whole embedding and a column shard of W1 / the matching
row shard of W2 of a small model (weights from a seed). Each ROUND, each rank
folds the new input tokens into its per-stream state, runs its shard for every
output, and the partial logits are summed on the leader: followers send
theirs as rankrt USER frames (int32, tagged), the leader adds them to its own
and picks the token. No torch.distributed: the partial sums ride rankrt's
links (shared memory on one host).

The arithmetic is integer (int64 tensors), so a sum of partials is the same
whatever the split: TP1 and TP2..4 give the same tokens bit for bit, and so
do drafted and plain rounds, concurrent and solo requests. The model is
computed on the CPU (integer matmul has no CUDA kernel in torch).

    rk-launch --hosts localhost,localhost -- python3 tp_serve.py
    python3 tp_serve.py          # without RK_RANK: TP1, a world of one rank

The leader prints the receipt: tokens/s, each check, the tokens' hash; every
rank prints its CPU seconds.
"""

import argparse
import array
import hashlib
import os
import resource
import struct
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rankrt  # noqa: E402

VOCAB, DIM, HIDDEN, MOD = 128, 32, 128, 1021
TAG = 0x7470          # "tp": the partial logits of a round
ROUND = struct.Struct("<Q")


class Model:
    """Integer weights from a seed; rank r of t holds W1[:, r::t] and W2[r::t, :]."""

    def __init__(self, rank, size, seed=1234):
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.randint(0, 16, (VOCAB, DIM), generator=g, dtype=torch.int64)
        w1 = torch.randint(-4, 5, (DIM, HIDDEN), generator=g, dtype=torch.int64)
        w2 = torch.randint(-4, 5, (HIDDEN, VOCAB), generator=g, dtype=torch.int64)
        # strided columns: any size splits (at TP3 the shards are 43, 43 and 42 wide)
        cols = torch.arange(rank, HIDDEN, size)
        self.w1 = w1[:, cols].contiguous()
        self.w2 = w2[cols, :].contiguous()

    def fold(self, s, tok, pos):
        return (s * 5 + self.emb[tok] + pos) % MOD

    def partial(self, states):
        h = torch.relu(states @ self.w1) >> 6
        return h @ self.w2               # (outputs, VOCAB) int64: this rank's share


class Backend:
    """The Scheduler's backend on every rank."""
    user_tag = TAG
    user_tags = 1

    def __init__(self, world, model):
        self.world = world
        self.model = model
        self.sched = None
        self.state = {}                  # stream id -> (state, tokens folded)
        self.logits = None
        self.waiting = 0
        self.early = {}
        self.round = None
        self.offsets = []
        self.tokens = None

    def launch(self, rnd):
        outs = []
        self.offsets = []
        for st in rnd.streams:
            s, n = self.state.get(st.id, (torch.zeros(DIM, dtype=torch.int64), 0))
            if n != st.position:
                raise RuntimeError(f"stream {st.id}: {n} tokens folded, round says {st.position}")
            for k, t in enumerate(st.inputs):
                s = self.model.fold(s, t, n + k)
            n += len(st.inputs)
            self.state[st.id] = (s, n)
            self.offsets.append(len(outs))
            outs.append(s)
            for k, t in enumerate(st.drafts):
                s = self.model.fold(s, t, n + k)
                outs.append(s)
        part = self.model.partial(torch.stack(outs))
        if self.world.rank != 0:
            data = array.array("i", part.flatten().tolist()).tobytes()
            self.world.send(0, TAG, ROUND.pack(rnd.id) + data)
            self.sched.complete(rnd.id)
            return
        self.round = rnd.id
        self.logits = part
        self.waiting = self.world.size - 1
        for peer, data in self.early.pop(rnd.id, []):
            self.add(peer, data)
        self.maybe_done()

    def frame(self, peer, tag, data):
        (rid,) = ROUND.unpack_from(data)
        if rid != self.round:
            self.early.setdefault(rid, []).append((peer, data))
            return
        self.add(peer, data)
        self.maybe_done()

    def add(self, peer, data):
        part = torch.frombuffer(bytearray(data[ROUND.size:]), dtype=torch.int32)
        self.logits = self.logits + part.to(torch.int64).view(self.logits.shape)
        self.waiting -= 1

    def maybe_done(self):
        if self.waiting == 0 and self.round is not None:
            self.tokens = torch.argmax(self.logits, dim=1).tolist()   # first max on ties
            rid, self.round = self.round, None
            self.sched.complete(rid)

    def token(self, i, j):
        return self.tokens[self.offsets[i] + j]

    def retire(self, stream_id):
        self.state.pop(stream_id, None)


def prompts(n):
    g = torch.Generator().manual_seed(99)
    return [torch.randint(0, VOCAB, (int(3 + i % 5),), generator=g).tolist() for i in range(n)]


def run_batch(sched, ps, max_tokens, draft_k):
    reqs = [sched.submit(p, max_tokens, draft_k=draft_k) for p in ps]
    if not sched.run_until_done(reqs, timeout=120):
        raise SystemExit("tp_serve: requests did not finish in 120 s")
    for r in reqs:
        if r.error:
            raise r.error
    return [r.tokens for r in reqs]


def digest(outs):
    h = hashlib.sha256()
    for toks in outs:
        h.update(struct.pack("<%dI" % len(toks), *toks))
    return h.hexdigest()[:16]


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def leader(sched, world, args):
    ps = prompts(args.requests)
    t0 = time.monotonic()
    c0 = cpu()
    plain = run_batch(sched, ps, args.max_tokens, 0)
    dt = time.monotonic() - t0
    n = sum(len(t) for t in plain)
    print(f"tp_serve: TP{world.size}, {len(ps)} requests x {args.max_tokens} tokens, "
          f"concurrent plain: {n / dt:.0f} tokens/s ({dt:.2f} s, {cpu() - c0:.2f} CPU s "
          f"on the leader)", flush=True)
    drafted = run_batch(sched, ps, args.max_tokens, args.draft_k)
    st = sched.stats()
    solo = [run_batch(sched, [p], args.max_tokens, 0)[0] for p in ps]
    ok = True
    for name, other in (("drafted == plain", drafted), ("concurrent == solo", solo)):
        same = other == plain
        ok &= same
        print(f"tp_serve: {name}: {'yes' if same else 'NO'}")
    print(f"tp_serve: drafted {st['drafted']}, accepted {st['accepted']}")
    print(f"tp_serve: hash {digest(plain)} (TP{world.size})", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--draft-k", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ok = True
    knobs = {}
    if "RK_RANK" not in os.environ:
        knobs = dict(rank=0, world_size=1, leader=f"127.0.0.1:{rankrt.free_port()}")
    with rankrt.Loop(signals=True, **knobs) as loop:
        down = []

        def peer_error(rank, err):
            down.append(err)
            loop.stop()
        with rankrt.World(loop, on_peer_error=peer_error) as world:
            backend = Backend(world, Model(world.rank, world.size))
            sched = None
            if world.rank != 0:             # a follower's scheduler exists before a ROUND
                sched = backend.sched = rankrt.Scheduler(world, backend)
            world.wait_ready()
            c0 = cpu()
            if world.rank == 0:
                sched = backend.sched = rankrt.Scheduler(world, backend, max_batch=8,
                                                         draft_k=args.draft_k, vocab=VOCAB)
                ok = leader(sched, world, args)
            else:
                loop.run()                  # until the leader leaves
                ok = not down or down[0].name == "RK_EPEERBYE"
            print(f"tp_serve: rank {world.rank} CPU {cpu() - c0:.2f} s", flush=True)
            sched.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
