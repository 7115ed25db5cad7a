/* SPDX-License-Identifier: MIT */
/*
 * The shm transport: a link's frames on its two rings in the link segment,
 * swapped in over the link's tcp carrier at the side's switch frame
 * (shm_upgrade.c runs the upgrade). A link ring carries chunks of the link's
 * byte stream, split anywhere, exactly what TCP would carry, and rk__link_rx()
 * parses and checks every frame as it does for TCP. The carrier keeps sending
 * the bytes committed before the switch, and its socket stays open as the
 * side channel that tells of the peer's end (the drain op delivers what the
 * rings hold first); a pidfd tells of it sooner.
 *
 * The loop source polls the rings while the loop spins and arms a wait before
 * it blocks: the bell is published, fenced and the rings looked at again, and
 * only then is IORING_OP_FUTEX_WAIT armed on the bell (liburing 2.3 has no
 * helper: the SQE is filled by hand) or a read of the eventfd.
 *
 * Lifetime: the source holds the link (rk__link_op_start) from
 * rk__shm_begin() until, after shutdown, no operation of ours is in flight;
 * from the swap this transport's destroy() frees the state, then the
 * carrier's the link.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "shm_int.h"

/* Link reader: publish how far we read, so the writer may reuse it. Lazy: once
 * a quarter ring in a poll's batch, and before every fence that tells a writer
 * of room (space_settle(), shm_flush()), which each poll that read ends
 * in; so the writer's view lags at most one poll, and a writer asleep for room
 * is woken only after the head it will read. Release: pairs with ring_room()'s
 * acquire: the bytes are copied out before the writer reuses them. */
static void head_publish(struct rk__shm_link *s)
{
	if (s->rx.seen == s->rx.pos)
		return;
	s->rx.seen = s->rx.pos;
	atomic_store_explicit(s->rx.head, s->rx.pos, memory_order_release);
}

/* ---- operations on the loop's ring -------------------------------------------- */

static struct io_uring_sqe *op_sqe(struct rk__shm_link *s, struct rk__op *op, bool *armed)
{
	struct io_uring_sqe *sqe = rk__loop_sqe(s->l->loop);

	if (!sqe)
		return NULL;
	rk__sqe_set_op(sqe, op);
	*armed = true;
	rk__link_op_start(s->l);
	return sqe;
}

int rk__shm_arm_poll(struct rk__shm_link *s, struct rk__op *op, bool *armed, int fd)
{
	struct io_uring_sqe *sqe;

	if (*armed)
		return 0;
	sqe = rk__loop_sqe(s->l->loop);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	rk__sqe_set_op(sqe, op);
	*armed = true;
	rk__link_op_start(s->l);
	return 0;
}

void rk__shm_op_cancel(struct rk__shm_link *s, struct rk__op *op, bool armed, bool *sent)
{
	struct io_uring_sqe *sqe;

	if (!armed || *sent)
		return;
	sqe = rk__loop_sqe(s->l->loop);
	if (!sqe)
		return;		/* tried again from the source's poll */
	io_uring_prep_cancel(sqe, op, 0);
	io_uring_sqe_set_data64(sqe, RK_UDATA_INTERNAL);
	*sent = true;
}

static void cancel_all(struct rk__shm_link *s)
{
	rk__shm_op_cancel(s, &s->sock_op, s->sock_armed, &s->sock_cancel);
	rk__shm_op_cancel(s, &s->pid_op, s->pid_armed, &s->pid_cancel);
	rk__shm_op_cancel(s, &s->futex_op, s->futex_armed, &s->futex_cancel);
	rk__shm_op_cancel(s, &s->efd_op, s->efd_armed, &s->efd_cancel);
}

/* ---- the data path ------------------------------------------------------------ */

void rk__shm_fail(struct rk__shm_link *s, int err, const char *what)
{
	struct rk_link *l = s->l;

	if (l->state == RK_LINK_CLOSED)
		return;
	if (l->state != RK_LINK_FAILED)
		rk__link_warn(l, "link to rank %d (shm): %s: %s", l->peer, what, rk_strerror(err));
	rk__link_fail(l, err, err == -RK_ESHMRING);
}

/*
 * Deliver what the rings hold: link chunks in order from the one whose length
 * word @len was read at our head, each after the broadcast frames its mark
 * says were written before it, then the broadcast frames up to @btail (a tail
 * read before @len). Return frames and chunks delivered (busy events), or 0
 * when the link failed. Out of line: a poll that finds nothing does not pay
 * for the loop's registers.
 */
static int __attribute__((noinline)) rx_deliver(struct rk__shm_link *s, uint64_t btail,
						uint32_t len)
{
	struct rk_link *l = s->l;
	uint64_t span, mark;
	uint32_t zero;
	int n = 0, ret;

	while (len && n < SHM_POLL_BUDGET && link_reading(l)) {
		mark = rec_rest(&s->rx, &zero);
		span = rec_span(len);
		/*
		 * The next record's length word, asked for now: the writer zeroed
		 * it with this record, so it is a miss, and it is read when this
		 * record is delivered; the miss overlaps the delivery instead of
		 * following it (in a round trip: before the answer goes).
		 */
		__builtin_prefetch(rec_word(&s->rx, s->rx.pos + span));
		if (len > SHM_CHUNK_MAX || zero || span > s->rx.size - REC_ALIGN)
			goto bad;
		if (s->bcast ? mark < s->last_mark || (mark & 7) : mark != 0)
			goto bad;
		ring_read(&s->rx, s->rx.pos + REC_HDR, s->stage, len);
		s->rx.pos += span;
		if (s->rx.pos - s->rx.seen >= s->rx.size / 4)
			head_publish(s);	/* a long batch: let the writer go on */
		/* a writer waiting for room is woken with the next fence: space_owed */
		s->space_owed = true;
		if (s->bcast && mark > s->brx.pos) {
			ret = rk__shm_bcast_until(s, mark, INT32_MAX);
			if (ret < 0)
				return 0;
			n += ret;
		}
		s->last_mark = mark;
		n++;
		if (rk__link_rx(l, s->stage, len))
			return 0;	/* the link failed */
		len = link_reading(l) ? rec_len(&s->rx) : 0;
	}
	if (s->bcast && s->brx.pos < btail && link_reading(l)) {
		ret = rk__shm_bcast_until(s, btail, SHM_POLL_BUDGET);
		if (ret < 0)
			return 0;
		n += ret;
	}
	return n;
bad:
	rk__shm_fail(s, -RK_ESHMRING, "link ring record");
	return 0;
}

/*
 * One look at the rings. While nothing comes this reads two lines that stay
 * in our cache (the broadcast tail, when we read that ring, and the length
 * word at our head) and writes none; a frame's arrival is the miss on the
 * second, which brings the record itself.
 */
static int rx_poll(struct rk__shm_link *s)
{
	int64_t bav = 0;
	uint32_t len;

	if (!s->rx_ring || !link_reading(s->l))
		return 0;
	/*
	 * The broadcast tail before the link's record: a chunk written before
	 * any broadcast frame up to it was published before it too (release,
	 * release; acquire, acquire), so the length word read next covers it,
	 * and no frame of the broadcast ring overtakes a chunk sent before it.
	 */
	if (s->bcast) {
		bav = ring_avail(&s->brx);
		if (bav < 0) {
			rk__shm_fail(s, -RK_ESHMRING, "broadcast ring");
			return 0;
		}
	}
	/*
	 * The record's second line, asked for with the first: when a frame
	 * came, the two misses overlap instead of following each other (the
	 * length word is read, then the bytes after it). A hint only: what is
	 * read is what the length word published.
	 */
	__builtin_prefetch(s->rx.data + ((s->rx.pos + 64) & (s->rx.size - 1)));
	len = rec_len(&s->rx);
	if (s->leader) {
		uint32_t ll = rec_len(&s->lrx);

		if (ll) {
			int n = rk__shm_lane_deliver(s, ll);

			if (!n || !len || !link_reading(s->l))
				return n;
			return n + rx_deliver(s, 0, len);
		}
	}
	if (!len && !bav)
		return 0;
	return rx_deliver(s, s->brx.pos + (uint64_t)bav, len);
}

/*
 * Room we made in the ring we read, not yet told: a writer that sleeps for it
 * (BELL_SPACE) is woken after a fence. The flush that publishes our next bytes
 * tells it with its own fence (a sleeper's bell holds BELL_FUTEX or BELL_EFD
 * beside BELL_SPACE, so waking BELL_SLEEP wakes it), which keeps one fence a
 * frame on the round trip. Otherwise it is told here: at the end of the poll
 * when no reply is queued for the ring, else (a queued flush that wrote
 * nothing) at the next poll, or in src_arm() before we sleep.
 */
static void space_settle(struct rk__shm_link *s)
{
	if (!s->space_owed)
		return;
	s->space_owed = false;
	head_publish(s);
	peer_wake(s, BELL_SPACE);
}

/* Records written: publish our head (the room we made, told with the fence that
 * follows, so space_settle() has nothing left to do) and wake a sleeping peer. */
static void tx_told(struct rk__shm_link *s)
{
	head_publish(s);
	s->space_owed = false;
	peer_wake(s, BELL_SLEEP);
}

/* Copy what the link has to send into its ring, as far as there is room; the
 * bytes committed before the swap go on the carrier first. The mark of a
 * leader's chunk is the broadcast ring's tail now: every broadcast frame
 * written so far was sent before these bytes were handed over. */
static void shm_flush(struct rk_link *l)
{
	struct rk__shm_link *s = l->tpriv;
	const uint8_t *p;
	size_t n, done = 0, c;
	uint64_t mark;
	int64_t room;

	if (!rk__shm_tx_ring(s)) {
		s->carrier->flush(l);	/* it orders our first record after its last send */
		return;
	}
	if (s->closing)
		return;
	n = rk__link_tx_next(l, &p);
	if (!n) {
		space_settle(s);
		return;
	}
	/* all of it, in records of at most SHM_CHUNK_MAX, each padded */
	room = ring_room(&s->tx, n + (n / SHM_CHUNK_MAX + 1) * (REC_HDR + REC_ALIGN));
	if (room < 0) {
		rk__shm_fail(s, -RK_ESHMRING, "link ring head");
		return;
	}
	mark = s->marks ? s->ctx->btx.pos : 0;
	while (done < n && room > (int64_t)REC_HDR) {
		c = n - done;
		if (c > (size_t)room - REC_HDR)
			c = (size_t)room - REC_HDR;
		if (c > SHM_CHUNK_MAX)
			c = SHM_CHUNK_MAX;
		rec_put(&s->tx, s->tx.pos, p + done, (uint32_t)c, mark);
		s->tx.pos += rec_span(c);
		room -= (int64_t)rec_span(c);
		done += c;
	}
	s->tx_blocked = done < n;
	if (s->tx_blocked)
		l->stats.shm_ring_full++;	/* the source's poll tries again */
	if (!done) {
		space_settle(s);
		return;
	}
	tx_told(s);
	rk__link_tx_done(l, done);
}

/*
 * The direct lane (link_commit()): one frame, one record, published as a flush
 * would publish it (the same record, mark, head, fence and bell), without the
 * batch. Refused (0), and left to the flush, while bytes before the swap are
 * still the carrier's, on a closing link or one whose ring looked full, for a
 * frame over one record, and without room; a bad head is left to the flush
 * too, which fails the link for it.
 */
static size_t shm_send_direct(struct rk_link *l, const uint8_t *frame, size_t n)
{
	struct rk__shm_link *s = l->tpriv;
	uint64_t span = rec_span(n);
	int64_t room;

	if (s->closing || s->tx_blocked || l->tx_sent < l->tx_carrier_end || n > SHM_CHUNK_MAX)
		return 0;
	room = ring_room(&s->tx, span);
	if (room < (int64_t)span)
		return 0;
	rec_put(&s->tx, s->tx.pos, frame, (uint32_t)n, s->marks ? s->ctx->btx.pos : 0);
	s->tx.pos += span;
	tx_told(s);
	l->stats.shm_tx_direct++;
	return n;
}

/* Deliver what the rings hold now (the side channel ended, or the peer's
 * process: a BYE may be there). */
static void drain(struct rk__shm_link *s)
{
	if (!s->closing) {
		while (rx_poll(s) > 0)
			;
		space_settle(s);
	}
}

static void shm_drain(struct rk_link *l)
{
	drain(l->tpriv);
}

/* ---- the loop source: poll while spinning, arm before blocking ------------------- */

/* After shutdown: once no operation of ours is in flight, detach and let the
 * link go. Only from the source's poll (this may free the link). */
static bool try_release(struct rk__shm_link *s)
{
	struct rk_link *l = s->l;

	if (s->released || l->in_dispatch)
		return false;
	if (s->sock_armed || s->pid_armed || s->futex_armed || s->efd_armed) {
		cancel_all(s);
		return false;
	}
	rk_loop_remove_source(l->loop, &s->src);
	s->released = true;
	rk__link_op_done(l);	/* may free l and s */
	return true;
}

static int src_poll(struct rk_source *src, uint64_t now)
{
	struct rk__shm_link *s = src->data;

	(void)now;
	if (s->closing)
		return try_release(s) ? 1 : 0;	/* an event: a teardown's iteration ends */
	if (!s->rx_ring && !s->tx_blocked)
		return 0;
	/* awake: a writer need not wake us (the bell is ours to set) */
	if (atomic_load_explicit(s->bell, memory_order_relaxed))
		atomic_store_explicit(s->bell, 0, memory_order_relaxed);
	space_settle(s);	/* left from the last iteration: its flush did not write */
	/*
	 * What the frames were is noted by the link as they are dispatched, as
	 * for TCP: a heartbeat is an idle event and must not restart the spin
	 * window, so the records themselves are not counted as busy here.
	 */
	rx_poll(s);
	/* a reply queued for the ring tells the room with its flush, this iteration */
	if (s->space_owed && !(s->l->flusher.queued && rk__shm_tx_ring(s)))
		space_settle(s);
	if (s->tx_blocked && !s->closing) {
		int64_t room = ring_room(&s->tx, UINT64_MAX);	/* fresh: it looked full */

		if (room < 0 || room > (int64_t)REC_HDR) {
			s->tx_blocked = false;	/* the flush writes, or fails the link */
			rk__loop_queue_flush(s->l->loop, &s->l->flusher);
		}
	}
	return 0;
}

static void prep_futex_wait(struct io_uring_sqe *sqe, _Atomic uint32_t *word, uint32_t val)
{
	/* liburing >= 2.5's io_uring_prep_futex_wait(), by hand */
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = SHM_OP_FUTEX_WAIT;
	sqe->fd = SHM_FUTEX2_SIZE_U32;
	sqe->addr = (uint64_t)(uintptr_t)word;
	sqe->off = val;			/* addr2: the value the word must still hold */
	sqe->addr3 = FUTEX_BITSET_MATCH_ANY;
}

static int wait_arm(struct rk__shm_link *s, uint32_t val)
{
	struct io_uring_sqe *sqe;

	if (s->use_futex) {
		if (s->futex_armed)
			return 0;	/* still asleep in the kernel: a wake ends it */
		sqe = rk__loop_sqe(s->l->loop);
		if (!sqe)
			return -EBUSY;
		prep_futex_wait(sqe, s->bell, val);
		rk__sqe_set_op(sqe, &s->futex_op);
		s->futex_armed = true;
		rk__link_op_start(s->l);
		return 0;
	}
	if (s->efd_armed)
		return 0;
	sqe = op_sqe(s, &s->efd_op, &s->efd_armed);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, s->efd, &s->efd_val, sizeof(s->efd_val), 0);
	rk__sqe_set_op(sqe, &s->efd_op);
	return 0;
}

static bool pending(struct rk__shm_link *s)
{
	int64_t room;

	if (s->rx_ring && rec_len(&s->rx))
		return true;	/* a record, or a bad one the poll will fail */
	if (s->rx_ring && s->leader && rec_len(&s->lrx))
		return true;	/* a lane frame */
	if (s->rx_ring && s->bcast && ring_avail(&s->brx) != 0)
		return true;
	if (!s->tx_blocked)
		return false;
	room = ring_room(&s->tx, UINT64_MAX);
	return room < 0 || room > (int64_t)REC_HDR;
}

static int src_arm(struct rk_source *src)
{
	struct rk__shm_link *s = src->data;
	uint32_t val;

	if (s->closing)
		return 1;	/* do not block: the next poll lets the link go */
	if (!s->rx_ring && !s->tx_blocked)
		return 0;
	space_settle(s);
	val = (s->use_futex ? BELL_FUTEX : BELL_EFD) | (s->tx_blocked ? BELL_SPACE : 0);
	atomic_store_explicit(s->bell, val, memory_order_relaxed);
	s->l->stats.shm_sleeps++;	/* a writer may wake us from now on */
	/* Pairs with peer_wake(): either the writer sees our bell and wakes us, or
	 * we see what it published and do not sleep. */
	atomic_thread_fence(memory_order_seq_cst);
	if (pending(s) || wait_arm(s, val)) {
		atomic_store_explicit(s->bell, 0, memory_order_relaxed);
		return 1;
	}
	return 0;
}

static const struct rk_source_ops shm_source_ops = {
	.name = "shm",
	.poll = src_poll,
	.arm = src_arm,
};

static void futex_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__shm_link *s = rk__container_of(op, struct rk__shm_link, futex_op);
	struct rk_link *l = s->l;

	(void)flags;
	s->futex_armed = false;
	s->futex_cancel = false;
	if (res < 0 && res != -EAGAIN && res != -ECANCELED && res != -EINTR && s->use_futex) {
		/* this kernel does not wait on the word after all: eventfds from now on */
		s->use_futex = false;
		if (!s->ctx->warned_futex) {
			s->ctx->warned_futex = true;
			rk__info(l->rank, "shm: futex wait refused (%s): waiting on eventfds",
				 rk_strerror(res));
		}
	}
	rk__loop_note(l->loop, RK_IDLE);
	rk__link_op_done(l);
}

static void efd_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__shm_link *s = rk__container_of(op, struct rk__shm_link, efd_op);
	struct rk_link *l = s->l;

	(void)flags;
	(void)res;
	s->efd_armed = false;
	s->efd_cancel = false;
	rk__loop_note(l->loop, RK_IDLE);
	rk__link_op_done(l);
}

/* The peer's process exited: what it wrote before is delivered first (a BYE). */
static void pid_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__shm_link *s = rk__container_of(op, struct rk__shm_link, pid_op);
	struct rk_link *l = s->l;

	(void)flags;
	s->pid_armed = false;
	s->pid_cancel = false;
	l->in_dispatch++;
	if (res > 0 && !s->closing) {
		drain(s);
		if (l->state == RK_LINK_UP) {
			rk__link_warn(l, "link to rank %d (shm): its process exited", l->peer);
			rk__link_fail(l, -RK_EPEEREXIT, false);
		}
	}
	rk__loop_note(l->loop, RK_BUSY);
	l->in_dispatch--;
	rk__link_op_done(l);
}

/* ---- the transport's ops, and its beginning and end --------------------------------- */

static void shm_shutdown(struct rk_link *l)
{
	struct rk__shm_link *s = l->tpriv;

	s->carrier->shutdown(l);
	rk__shm_link_shutdown(s);
}

static void shm_destroy(struct rk_link *l)
{
	struct rk__shm_link *s = l->tpriv;
	const struct rk__transport_ops *carrier = s->carrier;

	rk__shm_link_free(s);
	carrier->destroy(l);	/* frees l */
}

const struct rk__transport_ops rk__shm_ops = {
	.name = "shm",
	.local = true,
	.flush = shm_flush,
	.shutdown = shm_shutdown,
	.destroy = shm_destroy,
	.send_direct = shm_send_direct,
	.drain = shm_drain,
};

int rk__shm_begin(struct rk__shm_link *s)
{
	struct rk_link *l = s->l;

	s->stage = malloc(SHM_CHUNK_MAX);
	if (!s->stage)
		return -ENOMEM;
	s->use_futex = (rk__shm_features() & RK__SHM_F_FUTEX) != 0;
	s->pid_op.fn = pid_done;
	s->futex_op.fn = futex_done;
	s->efd_op.fn = efd_done;
	rk_source_init(&s->src, &shm_source_ops, s);
	rk_loop_add_source(l->loop, &s->src);
	rk__link_op_start(l);	/* the source's: see try_release() */
	s->begun = true;
	l->moving = true;
	return 0;
}

void rk__shm_swap(struct rk__shm_link *s)
{
	s->carrier = s->l->tops;
	s->swapped = true;
	rk__link_set_transport(s->l, &rk__shm_ops, s);
}

void rk__shm_link_shutdown(struct rk__shm_link *s)
{
	if (s->closing)
		return;
	s->closing = true;
	if (s->leader && s->slot >= 0 && s->ctx->readers[s->slot] == s)
		s->ctx->readers[s->slot] = NULL;
	rk__shm_epoch_detach(s);	/* the link ends: its consumers take the launch path */
	lane_shut(s);
	cancel_all(s);
}

void rk__shm_link_free(struct rk__shm_link *s)
{
	struct rk_link *l = s->l;

	if (s->leader && s->slot >= 0 && s->ctx->readers[s->slot] == s)
		s->ctx->readers[s->slot] = NULL;
	rk__shm_epoch_detach(s);
	lane_shut(s);
	seg_unmap(&s->base, s->len);
	seg_unmap(&s->bbase, s->blen);
	fd_close(&s->memfd);
	fd_close(&s->efd);
	fd_close(&s->peer_efd);
	usock_close(s);
	fd_close(&s->pidfd);
	free(s->stage);
	free(s->bstage);
	free(s->lstage);
	free(s);
	l->cpriv = NULL;
	l->tpriv = NULL;
}
