/* SPDX-License-Identifier: MIT */
/*
 * Tests only: what a broken or hostile peer writes into a link's rings, the
 * loop source's arm step on its own, and kernel features to pretend missing.
 * The library itself never calls these.
 */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "runtime_int.h"
#include "shm_int.h"

void rk__shm_test_mask(unsigned int f)
{
	atomic_store(&rk__shm_masked, f);
}

int rk__shm_test_poke(struct rk_link *l, enum rk__shm_poke what, const void *p, size_t n)
{
	struct rk__shm_link *s = rk__shm_of(l);
	struct rk__shm *c;
	uint8_t h[REC_HDR];

	if (!s || s->st != SS_ACTIVE || s->closing)
		return -ENOTCONN;
	c = s->ctx;
	switch (what) {
	case RK__SHM_POKE_OVERSIZE:
		/* as long as a chunk may not be, its bytes whatever the ring holds */
		atomic_store_explicit(rec_word(&s->tx, s->tx.pos), htole32(SHM_CHUNK_MAX + 8),
				      memory_order_release);
		break;
	case RK__SHM_POKE_RESERVED:
		rk__le32_store(h, 1);
		ring_write(&s->tx, s->tx.pos + 4, h, 4);
		atomic_store_explicit(rec_word(&s->tx, s->tx.pos), htole32(8),
				      memory_order_release);
		break;
	case RK__SHM_POKE_MARK:
		rec_put(&s->tx, s->tx.pos, "12345678", 8, s->marks ? c->btx.pos + 1 : 8);
		break;
	case RK__SHM_POKE_CHUNK:
		if (!n || n > SHM_CHUNK_MAX)
			return -EINVAL;
		rec_put(&s->tx, s->tx.pos, p, (uint32_t)n, s->marks ? c->btx.pos : 0);
		s->tx.pos += rec_span(n);
		break;
	case RK__SHM_POKE_BHEAD:
		if (s->leader || !s->bcast)
			return -EINVAL;
		atomic_store_explicit(s->bhead, s->brx.pos + SHM_BCAST_SIZE * 2,
				      memory_order_release);
		return 0;
	case RK__SHM_POKE_LANE: {
		uint8_t *w = s->base + LS_LN_WRITER;
		struct ring r;

		if (s->leader || atomic_load(lane_owner(w)) || n > lane_rec_max(s->ring_size))
			return -EINVAL;
		lane_ring(&r, s->base, s->ring_size);
		r.pos = rk__le64_load(w + 8);
		if (!n) {
			atomic_store_explicit(rec_word(&r, r.pos),
					      htole32(lane_rec_max(s->ring_size) + 8),
					      memory_order_release);
			break;
		}
		rec_put(&r, r.pos, p, (uint32_t)n, 0);
		rk__le64_store(w + 8, r.pos + rec_span(n));
		break;
	}
	case RK__SHM_POKE_BCAST:
		if (!s->leader || !c->bbase || n < RK_WIRE_HDR_LEN || n > SHM_BCAST_MAX)
			return -EINVAL;
		rec_hdr(h, (uint32_t)n, 0);
		ring_write(&c->btx, c->btx.pos, h, REC_HDR);
		ring_write(&c->btx, c->btx.pos + REC_HDR, p, n);
		c->btx.pos += REC_HDR + pad8(n);
		c->bseq++;
		atomic_store_explicit(c->btx.tail, c->btx.pos, memory_order_release);
		break;
	}
	peer_wake(s, BELL_SLEEP);
	return 0;
}

int rk__shm_test_arm(struct rk_link *l)
{
	struct rk__shm_link *s = rk__shm_of(l);

	if (!s || s->st != SS_ACTIVE || s->closing)
		return -ENOTCONN;
	return s->src.ops->arm(&s->src);
}
