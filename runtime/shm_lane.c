/* SPDX-License-Identifier: MIT */
/*
 * A follower's lane (rk_link_lane_open()): a third ring in the link segment,
 * follower -> leader, written by one thread of the follower's that is not its
 * loop (a worker with a round's partial results) and read by the leader's
 * loop beside the link's rings. Its records hold whole USER frames of the
 * lane's own sequence (a whole-frame stream of the leader's link,
 * rk__link_rx_frame()); the lane publishes and rings the leader's bell as a
 * flush would, so the follower's loop is not on that frame's path and may
 * sleep. It never waits for room: a commit without room fails (-EAGAIN) and
 * the caller sends another way. The lane maps the segment itself, so it
 * outlives the link safely; either end's link end marks the segment shut.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime_int.h"
#include "shm_int.h"

/* ---- the leader's end --------------------------------------------------------------- */

/*
 * As the transport's rx_deliver() delivers chunks (shm.c), each record checked
 * as one frame of the lane's stream (s->lstream). The head is published at the
 * end of the batch: the lane's writer never waits for room, so it needs no
 * wake for it.
 */
int rk__shm_lane_deliver(struct rk__shm_link *s, uint32_t len)
{
	struct rk_link *l = s->l;
	uint32_t max = lane_rec_max(s->ring_size);
	uint32_t zero;
	uint64_t mark;
	int n = 0;

	if (!s->lstage) {
		s->lstage = malloc(max);
		if (!s->lstage) {
			rk__shm_fail(s, -ENOMEM, "lane staging buffer");
			return 0;
		}
	}
	while (len && n < SHM_POLL_BUDGET && link_reading(l)) {
		mark = rec_rest(&s->lrx, &zero);
		if (len > max || zero || mark) {
			rk__shm_fail(s, -RK_ESHMRING, "lane record");
			return 0;
		}
		ring_read(&s->lrx, s->lrx.pos + REC_HDR, s->lstage, len);
		s->lrx.pos += rec_span(len);
		n++;
		l->stats.shm_lane_rx++;
		if (rk__link_rx_frame(l, &s->lstream, s->lstage, len))
			return 0;	/* the link failed */
		len = link_reading(l) ? rec_len(&s->lrx) : 0;
	}
	/* Release: the records are copied out before the writer reuses them. */
	atomic_store_explicit(s->lrx.head, s->lrx.pos, memory_order_release);
	return n;
}

/* ---- the follower's end: the public API ---------------------------------------------- */

struct rk_lane {
	uint8_t *base;			/* our own mapping of the link segment */
	size_t len;
	struct ring tx;
	_Atomic uint32_t *peer_bell;	/* the leader's */
	_Atomic uint32_t *shut;
	uint8_t *writer;		/* LS_LN_WRITER */
	int peer_efd;			/* ours: a dup of the link's */
	uint32_t rank;
	uint64_t seq;
	uint32_t max;			/* payload bytes */
	uint8_t *buf;			/* header + max */
	uint32_t rlen;			/* the open reservation's length */
	bool reserved;
	struct rk_lane_stats stats;
};

static void lane_free(struct rk_lane *ln)
{
	if (ln->base)
		munmap(ln->base, ln->len);
	if (ln->peer_efd >= 0)
		close(ln->peer_efd);
	free(ln->buf);
	free(ln);
}

int rk_link_lane_open(struct rk_link *l, struct rk_lane **out)
{
	struct rk__shm_link *s = rk__shm_of(l);
	struct rk_lane *ln;
	uint32_t zero = 0, rec;
	uint64_t head;
	int ret;

	*out = NULL;
	if (!s || s->leader || !s->ctx->lane || (s->st != SS_MAPPED && s->st != SS_ACTIVE))
		return -EOPNOTSUPP;
	if (s->closing || !rk_link_up(l))
		return -ENOTCONN;
	ln = calloc(1, sizeof(*ln));
	if (!ln)
		return -ENOMEM;
	ln->peer_efd = -1;
	ln->len = s->len;
	ln->base = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0);
	if (ln->base == MAP_FAILED) {
		ret = -errno;
		ln->base = NULL;
		goto fail;
	}
	ln->peer_efd = fcntl(s->peer_efd, F_DUPFD_CLOEXEC, 0);
	if (ln->peer_efd < 0) {
		ret = -errno;
		goto fail;
	}
	rec = lane_rec_max(s->ring_size);
	ln->max = rec - RK_WIRE_HDR_LEN < s->ctx->max_frame ? rec - RK_WIRE_HDR_LEN
							     : s->ctx->max_frame;
	ln->buf = malloc(RK_WIRE_HDR_LEN + (size_t)ln->max);
	if (!ln->buf) {
		ret = -ENOMEM;
		goto fail;
	}
	ln->writer = ln->base + LS_LN_WRITER;
	ln->shut = u32_at(ln->base, LS_LN_SHUT);
	ln->peer_bell = u32_at(ln->base, LS_L_BELL);
	ln->rank = (uint32_t)l->rank;
	lane_ring(&ln->tx, ln->base, s->ring_size);
	/* Acquire: pairs with rk_lane_close()'s release of the writer's state. */
	if (!atomic_compare_exchange_strong_explicit(lane_owner(ln->writer), &zero, 1,
						     memory_order_acquire,
						     memory_order_relaxed)) {
		ret = -EBUSY;
		goto fail;
	}
	ln->tx.pos = rk__le64_load(ln->writer + 8);
	ln->seq = rk__le64_load(ln->writer + 16);
	head = atomic_load_explicit(ln->tx.head, memory_order_acquire);
	if (ln->tx.pos - head > ln->tx.size || (head & (REC_ALIGN - 1)) ||
	    (ln->tx.pos & (REC_ALIGN - 1))) {
		atomic_store_explicit(lane_owner(ln->writer), 0, memory_order_release);
		ret = -RK_ESHMRING;
		goto fail;
	}
	ln->tx.seen = head;
	*out = ln;
	return 0;
fail:
	lane_free(ln);
	return ret;
}

uint8_t *rk_lane_reserve(struct rk_lane *ln, uint32_t len, int *err)
{
	if (ln->reserved) {
		*err = -EBUSY;
		return NULL;
	}
	if (len > ln->max) {
		*err = -RK_ETOOBIG;
		return NULL;
	}
	ln->reserved = true;
	ln->rlen = len;
	return ln->buf + RK_WIRE_HDR_LEN;
}

int rk_lane_commit(struct rk_lane *ln, unsigned int type, unsigned int flags, uint32_t len)
{
	uint64_t span;
	int64_t room;
	size_t n;
	int ret;

	if (!ln->reserved)
		return -EINVAL;
	ln->reserved = false;
	if (type != RK_FRAME_USER || len > ln->rlen)
		return -EINVAL;
	if (atomic_load_explicit(ln->shut, memory_order_acquire))
		return -EPIPE;
	ret = rk_wire_encode_hdr(ln->buf, type, flags, ln->rank, ln->seq,
				 ln->buf + RK_WIRE_HDR_LEN, len);
	if (ret < 0)
		return ret;
	n = RK_WIRE_HDR_LEN + (size_t)len;
	span = rec_span(n);
	room = ring_room(&ln->tx, span);
	if (room < 0)
		return (int)room;
	if (room < (int64_t)span) {
		ln->stats.full++;
		return -EAGAIN;
	}
	rec_put(&ln->tx, ln->tx.pos, ln->buf, (uint32_t)n, 0);
	ln->tx.pos += span;
	ln->seq++;
	ln->stats.frames++;
	ln->stats.bytes += n;
	/* Pairs with the fence in the leader's src_arm(), as peer_wake() does. */
	atomic_thread_fence(memory_order_seq_cst);
	if (bell_wake(ln->peer_bell, ln->peer_efd, BELL_SLEEP))
		ln->stats.wakes++;
	return 0;
}

uint32_t rk_lane_max(const struct rk_lane *ln)
{
	return ln->max;
}

size_t rk_lane_stats(const struct rk_lane *ln, struct rk_lane_stats *out, size_t size)
{
	return rk__stats_copy(out, size, &ln->stats, sizeof(ln->stats));
}

void rk_lane_close(struct rk_lane *ln)
{
	if (!ln)
		return;
	rk__le64_store(ln->writer + 8, ln->tx.pos);
	rk__le64_store(ln->writer + 16, ln->seq);
	/* Release: the next lane reads the state we leave. */
	atomic_store_explicit(lane_owner(ln->writer), 0, memory_order_release);
	lane_free(ln);
}
