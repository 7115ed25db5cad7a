/* SPDX-License-Identifier: MIT */
/*
 * The leader's broadcast ring (one segment per world, sealed so that only the
 * leader can write it: followers map it read-only) carries whole frames,
 * written once for every same-host follower that reads it; each follower
 * publishes how far it has read in its own link segment, and the slowest
 * bounds reuse. A link chunk's mark is the broadcast ring's tail when it was
 * written: a follower delivers the broadcast frames before that mark first,
 * so broadcasts and link frames reach it in the order they were sent. A
 * follower whose link had frames waiting when a broadcast was written gets a
 * copy on its link instead (a skip bit in the record says so), which keeps
 * that order too; when the ring has no room, every follower gets a copy, and
 * a follower that does not read fails by the link's send bound (RK_ESLOWPEER).
 * The frames are a whole-frame stream of the follower's link
 * (rk__link_rx_frame()), numbered from the SHM_SWITCH's bcast_seq.
 */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "shm_int.h"

/* ---- leader ----------------------------------------------------------------------- */

void rk__shm_bcast_create(struct rk__shm *c)
{
	int ret;

	if (c->btried)
		return;
	c->btried = true;
	if (!(rk__shm_features() & RK__SHM_F_FUTURE_WRITE)) {
		rk__info(c->rank, "shm: no F_SEAL_FUTURE_WRITE on this kernel: broadcasts go "
			 "link by link");
		return;
	}
	c->blen = SHM_HDR_SIZE + SHM_BCAST_SIZE;
	ret = rk__shm_seg_create("rankrt-bcast", c->blen, SHM_MAGIC_BCAST, SHM_BCAST_SIZE, true,
				 &c->bfd, &c->bbase);
	if (ret) {
		rk__info(c->rank, "shm: no broadcast ring (%s): broadcasts go link by link",
			 rk_strerror(ret));
		return;
	}
	ring_init(&c->btx, c->bbase + SHM_HDR_SIZE, SHM_BCAST_SIZE, c->bbase, BS_TAIL, BS_TAIL);
	if (c->resident) {
		/* the scheduler's bound: rk_sched_create() sizes its own region so */
		ret = rk__epoch_create_fd(rk__epoch_desc_bound(c->max_frame), &c->epfd, &c->ep);
		if (ret) {
			rk__info(c->rank, "shm: no shared epoch region (%s): each follower "
				 "publishes its own rounds", rk_strerror(ret));
			c->ep = NULL;
			c->epfd = -1;
		}
	}
}

int rk__shm_broadcast(void *ctx, unsigned int type, unsigned int flags, const void *payload,
		      uint32_t len, uint8_t *done)
{
	struct rk__shm *c = ctx;
	struct rk__shm_link *s;
	uint64_t frame, rec, lag, maxlag = 0, skip = 0, h;
	uint8_t hdr[REC_HDR];
	bool waiting = false;
	int i, takers = 0, ret;

	if (!c || !c->bbase)
		return 0;
	frame = RK_WIRE_HDR_LEN + (uint64_t)len;
	rec = REC_HDR + pad8(frame);
	if (len > c->max_frame || frame > SHM_BCAST_MAX)
		return 0;	/* link by link: each link applies its own bounds */
	for (i = 0; i < RK_WIRE_SHM_SLOTS; i++) {
		s = c->readers[i];
		if (!s)
			continue;
		if (!rk_link_up(s->l)) {
			c->readers[i] = NULL;	/* failing: it reads no more */
			s->slot = -1;
			continue;
		}
		waiting = waiting || rk__shm_tx_pending(s->l);
	}
	/* frames queued before this one leave first, so that it can be the one write */
	if (waiting)
		rk__loop_flush_now(c->loop);
	for (i = 0; i < RK_WIRE_SHM_SLOTS; i++) {
		s = c->readers[i];
		if (!s)
			continue;
		h = atomic_load_explicit(s->bhead, memory_order_acquire);
		if (c->btx.pos - h > c->btx.size || (h & 7)) {
			c->readers[i] = NULL;
			s->slot = -1;
			rk__shm_fail(s, -RK_ESHMRING, "broadcast position");
			continue;
		}
		lag = c->btx.pos - h;
		if (lag > maxlag)
			maxlag = lag;
		if (rk__shm_tx_pending(s->l) || !rk__shm_tx_ring(s) || !rk_link_up(s->l))
			skip |= 1ull << i;	/* its copy goes on its link, after its frames */
		else
			takers++;
	}
	/* the slowest reader bounds reuse: no room, every follower gets a copy on
	 * its link, where the send bound drops one that does not read */
	if (!takers || maxlag + rec > c->btx.size)
		return 0;
	if (rk__grow((void **)&c->scratch, &c->scratch_cap, frame, 1, 4096))
		return -ENOMEM;
	if (len)
		memcpy(c->scratch + RK_WIRE_HDR_LEN, payload, len);
	ret = rk_wire_encode_hdr(c->scratch, type, flags, 0, c->bseq, c->scratch + RK_WIRE_HDR_LEN,
				 len);
	if (ret < 0)
		return ret;
	rec_hdr(hdr, (uint32_t)frame, skip);
	ring_write(&c->btx, c->btx.pos, hdr, REC_HDR);
	ring_write(&c->btx, c->btx.pos + REC_HDR, c->scratch, frame);
	c->btx.pos += rec;
	c->bseq++;
	/* Release: the record before the tail; readers acquire the tail. */
	atomic_store_explicit(c->btx.tail, c->btx.pos, memory_order_release);
	/* Pairs with src_arm()'s fence, for every reader at once. */
	atomic_thread_fence(memory_order_seq_cst);
	for (i = 0; i < RK_WIRE_SHM_SLOTS; i++) {
		s = c->readers[i];
		if (!s || (skip & (1ull << i)))
			continue;
		done[s->l->peer] = 1;
		s->l->stats.tx_frames++;
		s->l->stats.tx_bytes += frame;
		s->l->stats.shm_bcast_frames++;
		s->l->last_tx = rk_loop_now(c->loop);
		bell_ring(s, BELL_SLEEP);
	}
	return 0;
}

/* ---- follower --------------------------------------------------------------------- */

/* @limit: a chunk's mark, or a tail read before. */
int rk__shm_bcast_until(struct rk__shm_link *s, uint64_t limit, int budget)
{
	struct rk_link *l = s->l;
	uint8_t h[REC_HDR];
	uint64_t rec, skip;
	uint32_t len;
	int64_t av;
	int n = 0;

	while (s->brx.pos < limit && n < budget && link_reading(l)) {
		av = ring_avail(&s->brx);
		if (av < (int64_t)REC_HDR)
			goto bad;	/* a mark past what was written, or a bad tail */
		ring_read(&s->brx, s->brx.pos, h, REC_HDR);
		len = rk__le32_load(h);
		skip = rk__le64_load(h + 8);
		rec = REC_HDR + pad8(len);
		if (len < RK_WIRE_HDR_LEN || len > SHM_BCAST_MAX || rk__le32_load(h + 4) ||
		    rec > (uint64_t)av || s->brx.pos + rec > limit)
			goto bad;
		skip &= 1ull << s->slot;
		if (!skip) {
			if (rk__grow((void **)&s->bstage, &s->bstage_cap, len, 1, 4096)) {
				rk__shm_fail(s, -ENOMEM, "broadcast frame");
				return -ENOMEM;
			}
			ring_read(&s->brx, s->brx.pos + REC_HDR, s->bstage, len);
		}
		s->brx.pos += rec;
		/* Release: our copy is made before the leader may reuse the bytes. */
		atomic_store_explicit(s->bhead, s->brx.pos, memory_order_release);
		if (skip) {
			s->bstream.seq++;	/* ours came on the link: the sequence counts it */
			continue;
		}
		l->stats.shm_bcast_frames++;
		n++;
		if (rk__link_rx_frame(l, &s->bstream, s->bstage, len))
			return -EPROTO;		/* the link failed */
	}
	return n;
bad:
	rk__shm_fail(s, -RK_ESHMRING, "broadcast ring");
	return -RK_ESHMRING;
}
