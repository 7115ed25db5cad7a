/* SPDX-License-Identifier: MIT */
/*
 * The TCP transport: io_uring-native accept and connect; a link's bytes move
 * on one of two paths (ARCHITECTURE.md, "The TCP busy path"):
 *
 * - direct: while the loop runs or spins, the link's loop source reads the
 *   socket with recv(MSG_DONTWAIT) from its poll(), and a flush writes it with
 *   send(MSG_DONTWAIT): what a raw non-blocking socket costs; the first frame
 *   of a link in an iteration with nothing before it is written by its commit
 *   (tcp_send_direct()). Only before the
 *   loop blocks does the source's arm() submit one io_uring recv into the
 *   link's buffer; a flush the socket cannot take whole hands the rest to an
 *   io_uring send, which waits for room in the kernel.
 * - ring: with RK_WAIT=block, and on a link that another transport takes
 *   over (l->moving: the same-host upgrade), a multishot receive into the
 *   loop's provided-buffer ring (plain recv into the link's buffer where the
 *   kernel lacks buffer rings) stays in flight. On a link being taken over
 *   every flush is an io_uring send; under RK_WAIT=block a flush writes
 *   directly first, as above, and only what the socket does not take goes to
 *   an io_uring send.
 *
 * Under a transport swapped in over it (rk__link_set_transport()), a tcp link
 * is that transport's carrier: it sends the bytes committed before the swap,
 * and its socket stays open as the side channel that tells of the peer's end
 * (EOF or an error fails the link, after the new transport delivered what it
 * holds); once the peer's stream moved too, a byte on it fails the link.
 *
 * Per direction, at most one of them holds the socket at any time, so no byte
 * is reordered: no direct read while a ring receive is in flight (a spinning
 * loop cancels it and reads directly only after its last completion), and no
 * direct write while a ring send is in flight (one send per link at a time, as
 * ever). A flush carries every frame queued since the last one. TCP_NODELAY on
 * every socket: frames are already batched by the link, so Nagle would only
 * add latency.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime_int.h"
#include "link_int.h"
#include "sock_int.h"
#include "tcp_int.h"

#define TCP_RX_BUF	65536		/* the link's receive buffer (allocated on first use) */
#define TCP_RX_BUDGET	16		/* direct reads of one poll: bounds an iteration */
#define TCP_SPIN_CHARGE	7		/* an empty direct read, in empty spin iterations */

struct tcp_link {
	struct rk_link link;		/* first: rk_link * <-> tcp_link * */
	int fd;
	struct rk__op recv_op;
	struct rk__op send_op;
	struct rk__op connect_op;
	struct rk_source src;		/* direct reads; holds the link while attached */
	bool src_on;
	struct tcp_warm *warm;		/* the loop's TCP rehearsal, while src_on */
	struct tcp_link *warm_next;	/* ...its list of links */
	bool recv_armed;		/* a ring receive is in flight: no direct read */
	bool recv_multi;		/* ...the multishot one, into the buffer ring */
	bool recv_cancel;		/* ...and its cancel was asked for */
	bool rx_over;			/* EOF or a receive error: nothing more to read */
	bool send_armed;		/* a ring send is in flight: no direct write */
	uint64_t commit_iter;		/* the loop iteration of the last commit's send */
	bool connecting;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	uint8_t *buf;			/* direct reads, and ring receives outside the buffer ring */
};

static inline struct tcp_link *tl_of(struct rk_link *l)
{
	return (struct tcp_link *)l;
}

static void tcp_recv_arm(struct tcp_link *t, bool multi);

/*
 * The ring receive, for good: RK_WAIT=block (the loop never spins, and a
 * multishot receive submitted with the wait costs least), or a link that
 * another transport takes over (its socket is watched through this receive,
 * as the side channel). Sends go direct under RK_WAIT=block too (tcp_flush()).
 * Also a stranger (accepted, its handshake not done): a leader keeps up to
 * RK_MAX_PENDING of them, and a direct read of each at every spin of its loop
 * would make strangers cost the real ranks' frames a syscall apiece.
 */
static bool tcp_ring_only(const struct tcp_link *t)
{
	return t->link.moving || (t->link.accepted && !t->link.was_up) ||
	       rk_loop_config(t->link.loop)->wait.mode == RK_WAIT_BLOCK;
}

static uint8_t *tcp_buf(struct tcp_link *t)
{
	if (!t->buf)
		t->buf = malloc(TCP_RX_BUF);
	return t->buf;
}

/* EOF or a receive error @res (<= 0) on the socket: no more reads. */
static void tcp_rx_end(struct tcp_link *t, int res)
{
	struct rk_link *l = &t->link;
	int err = res == 0 ? -ECONNRESET : res;

	t->rx_over = true;
	/* a peer that leaves writes BYE on the transport that took the link over
	 * (a same-host ring) before it closes */
	if (l->tops->drain)
		l->tops->drain(l);
	if (l->state != RK_LINK_CLOSED && l->state != RK_LINK_FAILED)
		rk__link_warn(l, "link to rank %d (%s): %s", l->peer, l->peer_addr,
			      res == 0 ? "peer closed the connection" : rk_strerror(res));
	rk__link_fail(l, err, false);
}

static void tcp_recv_done(struct rk__op *op, int res, unsigned int flags)
{
	struct tcp_link *t = rk__container_of(op, struct tcp_link, recv_op);
	struct rk_link *l = &t->link;
	struct rk__bufring *br = rk__loop_bufring(l->loop);
	bool more = flags & IORING_CQE_F_MORE;

	l->in_dispatch++;	/* keep the link while this CQE is handled */
	if (res > 0)
		l->stats.tcp_rx_ring++;
	if (res > 0 && l->rx_moved) {
		/* the peer sends on another transport now: this socket only tells of its end */
		if (flags & IORING_CQE_F_BUFFER)
			rk__bufring_recycle(br, flags >> IORING_CQE_BUFFER_SHIFT);
		if (l->state != RK_LINK_CLOSED && l->state != RK_LINK_FAILED)
			rk__link_warn(l, "link to rank %d (%s %s): %d bytes on the side channel",
				      l->peer, rk_link_transport(l), l->peer_addr, res);
		rk__link_fail(l, -EPROTO, false);
	} else if (res > 0) {
		if (flags & IORING_CQE_F_BUFFER) {
			unsigned int bid = flags >> IORING_CQE_BUFFER_SHIFT;

			rk__link_rx(l, br->mem + (size_t)bid * br->size, (size_t)res);
			rk__bufring_recycle(br, bid);
		} else {
			rk__link_rx(l, t->buf, (size_t)res);
		}
	} else if (res == 0 || (res < 0 && res != -ENOBUFS && res != -ECANCELED)) {
		tcp_rx_end(t, res);
	}
	if (more) {
		/* The multishot receive stays in flight: the link cannot be freed. */
		l->in_dispatch--;
		return;
	}
	/* Its last completion: every byte it took has been handed to the link
	 * above, so a direct read may follow from here on. */
	t->recv_armed = false;
	t->recv_multi = false;
	t->recv_cancel = false;
	if (l->state != RK_LINK_CLOSED && (res > 0 || res == -ENOBUFS) && tcp_ring_only(t))
		tcp_recv_arm(t, true);
	l->in_dispatch--;
	rk__link_op_done(l);
}

/* A ring receive: @multi, the multishot one into the buffer ring (where the
 * kernel has one); else one recv into the link's buffer. */
static void tcp_recv_arm(struct tcp_link *t, bool multi)
{
	struct rk_link *l = &t->link;
	struct rk__bufring *br;
	struct io_uring_sqe *sqe;

	if (t->recv_armed || t->rx_over || l->state == RK_LINK_CLOSED)
		return;		/* asked at every spin of a link taken over: answer before a call */
	br = rk__loop_bufring(l->loop);
	if ((!multi || !br) && !tcp_buf(t)) {
		rk__link_fail(l, -ENOMEM, false);
		return;
	}
	sqe = rk__loop_sqe(l->loop);
	if (!sqe) {
		rk__link_fail(l, -EBUSY, false);
		return;
	}
	if (multi && br) {
		io_uring_prep_recv_multishot(sqe, t->fd, NULL, 0, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = (uint16_t)br->bgid;
		t->recv_multi = true;
	} else {
		io_uring_prep_recv(sqe, t->fd, t->buf, TCP_RX_BUF, 0);
	}
	rk__sqe_set_op(sqe, &t->recv_op);
	t->recv_armed = true;
	t->recv_cancel = false;
	rk__link_op_start(l);
}

/* Read what the socket holds, without blocking, and hand it to the link. */
static void tcp_read_direct(struct tcp_link *t)
{
	struct rk_link *l = &t->link;
	unsigned int i;
	ssize_t n;

	if (!tcp_buf(t)) {
		tcp_recv_arm(t, true);	/* the buffer ring needs no buffer of ours */
		return;
	}
	for (i = 0; i < TCP_RX_BUDGET; i++) {
		n = recv(t->fd, t->buf, TCP_RX_BUF, MSG_DONTWAIT);
		if (n > 0) {
			l->stats.tcp_rx_direct++;
			rk__loop_source_event(l->loop, &t->src);
			rk__link_rx(l, t->buf, (size_t)n);
			/* short: the socket is drained; or a handler changed the path */
			if (n < TCP_RX_BUF || l->state == RK_LINK_CLOSED || t->recv_armed ||
			    tcp_ring_only(t))
				return;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* a syscall costs several ring peeks: yield as often in time */
			if (!i)
				rk__loop_spin_charge(l->loop, TCP_SPIN_CHARGE);
			return;
		}
		tcp_rx_end(t, n == 0 ? 0 : -errno);
		return;
	}
}

static void warm_join(struct tcp_link *t);
static void warm_leave(struct tcp_link *t);

/* After shutdown, once no handler runs on the link: detach, let it go. Only
 * from the source's own poll (this may free the link). */
static bool tcp_src_release(struct tcp_link *t)
{
	struct rk_link *l = &t->link;

	if (!t->src_on || l->in_dispatch)
		return false;
	warm_leave(t);
	rk_loop_remove_source(l->loop, &t->src);
	t->src_on = false;
	rk__link_op_done(l);	/* may free t */
	return true;
}

/*
 * Every iteration (and every spin): read directly when no ring receive is in
 * flight. A ring receive still in flight in an iteration that did not follow
 * a sleep (the loop spins: it woke for something else, or the wait policy
 * changed) is cancelled; its last completion hands the socket back to poll.
 * Frames note themselves busy or idle as they are dispatched (link.c), so the
 * reads are not counted here.
 */
static int tcp_src_poll(struct rk_source *src, uint64_t now)
{
	struct tcp_link *t = src->data;
	struct rk_link *l = &t->link;
	struct io_uring_sqe *sqe;

	(void)now;
	if (l->state == RK_LINK_CLOSED)
		return tcp_src_release(t) ? 1 : 0;	/* an event: a teardown's iteration ends */
	if (t->connecting || t->rx_over)
		return 0;
	if (tcp_ring_only(t)) {
		tcp_recv_arm(t, true);	/* no-op while one is in flight */
		return 0;
	}
	if (!t->recv_armed) {
		tcp_read_direct(t);
		return 0;
	}
	if (!t->recv_cancel && !rk__loop_after_park(l->loop)) {
		sqe = rk__loop_sqe(l->loop);
		if (sqe) {
			io_uring_prep_cancel(sqe, &t->recv_op, 0);
			io_uring_sqe_set_data64(sqe, RK_UDATA_INTERNAL);
			t->recv_cancel = true;
		}
	}
	return 0;
}

/* Before the loop blocks: a ring receive makes the next bytes wake it. One
 * submitted with the wait completes at once if bytes came since the poll. */
static int tcp_src_arm(struct rk_source *src)
{
	struct tcp_link *t = src->data;
	struct rk_link *l = &t->link;

	if (l->state == RK_LINK_CLOSED)
		return 1;	/* do not block: the next poll lets the link go */
	if (t->connecting || t->rx_over)
		return 0;
	tcp_recv_arm(t, tcp_ring_only(t));
	return 0;
}

static const struct rk_source_ops tcp_source_ops = {
	.name = "tcp",
	.poll = tcp_src_poll,
	.arm = tcp_src_arm,
};

/* The link is connected: its source reads from now on (and holds it). */
static void tcp_rx_start(struct tcp_link *t)
{
	struct rk_link *l = &t->link;

	rk_source_init(&t->src, &tcp_source_ops, t);
	if (rk_loop_add_source(l->loop, &t->src) == 0) {
		t->src_on = true;
		warm_join(t);
		rk__link_op_start(l);	/* the source's: see tcp_src_release() */
	}
	if (tcp_ring_only(t))
		tcp_recv_arm(t, true);
}

static void tcp_send_done(struct rk__op *op, int res, unsigned int flags)
{
	struct tcp_link *t = rk__container_of(op, struct tcp_link, send_op);
	struct rk_link *l = &t->link;

	(void)flags;
	t->send_armed = false;
	if (res < 0) {
		if (res != -ECANCELED && l->state != RK_LINK_CLOSED)
			rk__link_warn(l, "link to rank %d (%s): send: %s", l->peer, l->peer_addr,
				      rk_strerror(res));
		rk__link_fail(l, res, false);
	} else {
		rk__link_tx_done(l, (size_t)res);
	}
	rk__link_op_done(l);
}

/* An io_uring send of @n bytes at @p (rk__link_tx_next()'s). False: no SQE. */
static bool tcp_send_ring(struct tcp_link *t, const uint8_t *p, size_t n)
{
	struct rk_link *l = &t->link;
	struct io_uring_sqe *sqe = rk__loop_sqe(l->loop);

	if (!sqe)
		return false;
	io_uring_prep_send(sqe, t->fd, p, n, MSG_NOSIGNAL);
	rk__sqe_set_op(sqe, &t->send_op);
	t->send_armed = true;
	l->stats.tcp_tx_ring++;
	rk__link_op_start(l);
	return true;
}

static void tcp_flush(struct rk_link *l)
{
	struct tcp_link *t = tl_of(l);
	const uint8_t *p;
	ssize_t r;
	size_t n;

	if (t->send_armed || t->connecting)
		return;
	n = rk__link_tx_next(l, &p);	/* under a swap, only the bytes before it */
	if (!n)
		return;
	/*
	 * A link that another transport takes over sends on the ring: that
	 * transport's switch is ordered after this send's completion. Every other
	 * flush, RK_WAIT=block's too, writes the socket directly first: a frame
	 * the socket takes whole then costs one send() and no SQE, CQE or task
	 * work, and the loop's next enter is the wait alone (ARCHITECTURE.md,
	 * "The TCP busy path").
	 */
	if (l->moving) {
		if (!tcp_send_ring(t, p, n))
			rk__loop_queue_flush(l->loop, &l->flusher);	/* try again next iteration */
		return;
	}
	do {
		r = send(t->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	} while (r < 0 && errno == EINTR);
	if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
		r = -errno;
		if (l->state != RK_LINK_CLOSED)
			rk__link_warn(l, "link to rank %d (%s): send: %s", l->peer, l->peer_addr,
				      rk_strerror((int)r));
		rk__link_fail(l, (int)r, false);
		return;
	}
	if (r > 0)
		l->stats.tcp_tx_direct++;
	if (r == (ssize_t)n) {
		rk__link_tx_done(l, n);
		return;
	}
	/*
	 * The socket took part or nothing: the rest goes as a ring send, which
	 * waits in the kernel for room, while the loop goes on reading (a peer
	 * that sends as much as we do drains its socket only if we drain ours).
	 * Armed before the sent part is counted, so the flush that
	 * rk__link_tx_done() queues finds it in flight and waits for it.
	 */
	if (r < 0)
		r = 0;
	if (!tcp_send_ring(t, p + r, n - (size_t)r)) {
		if (r)
			rk__link_tx_done(l, (size_t)r);	/* queues the flush again */
		else
			rk__loop_queue_flush(l->loop, &l->flusher);
		return;
	}
	if (r)
		rk__link_tx_done(l, (size_t)r);
}

/*
 * A frame from the commit that encoded it (link_direct()): written now rather
 * than by the flush at the end of the iteration, so a reply leaves as soon as
 * its handler made it. Only the first frame of a link in an iteration: the
 * frames a handler commits after it go in one flush, one send() for all of
 * them, as before. What the socket does not take (a part, or nothing) and a
 * send error are the flush's, as they are for any batch.
 */
static size_t tcp_send_direct(struct rk_link *l, const uint8_t *frame, size_t n)
{
	struct tcp_link *t = tl_of(l);
	uint64_t it = rk__loop_iteration(l->loop);
	ssize_t r;

	if (t->send_armed || t->connecting || t->commit_iter == it || l->moving)
		return 0;
	t->commit_iter = it;
	do {
		r = send(t->fd, frame, n, MSG_DONTWAIT | MSG_NOSIGNAL);
	} while (r < 0 && errno == EINTR);
	if (r <= 0)
		return 0;
	l->stats.tcp_tx_commit++;
	return (size_t)r;
}

static void tcp_shutdown(struct rk_link *l)
{
	struct tcp_link *t = tl_of(l);

	/* Ends the receive and any send in flight with an error or EOF; each
	 * completion then calls rk__link_op_done(). */
	if (t->fd >= 0)
		shutdown(t->fd, SHUT_RDWR);
	if (t->connecting) {
		struct io_uring_sqe *sqe = rk__loop_sqe(l->loop);

		if (sqe) {
			io_uring_prep_cancel(sqe, &t->connect_op, 0);
			io_uring_sqe_set_data64(sqe, RK_UDATA_INTERNAL);
		}
	}
}

static void tcp_destroy(struct rk_link *l)
{
	struct tcp_link *t = tl_of(l);

	if (t->fd >= 0)
		close(t->fd);
	free(t->buf);
	free(t);
}

static const struct rk__transport_ops tcp_ops = {
	.name = "tcp",
	.flush = tcp_flush,
	.shutdown = tcp_shutdown,
	.destroy = tcp_destroy,
	.send_direct = tcp_send_direct,
};

static void set_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* The link reads its socket directly (not on shared memory or on the ring
 * only): a frame it waits for crosses the kernel's TCP path. */
static bool tcp_reads_direct(const struct tcp_link *t)
{
	return t->link.state == RK_LINK_UP && !t->connecting && !t->rx_over && !tcp_ring_only(t);
}

/* Two connected, non-blocking loopback sockets, NODELAY. */
static int warm_pair(int fds[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	int ls, ret = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0)
		return -errno;
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&a, &alen)) {
		ret = -errno;
		goto out;
	}
	fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&a, sizeof(a))) {
		ret = -errno;
		goto out;
	}
	/* a loopback connect is complete on return: the accept does not block */
	fds[1] = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fds[1] < 0 || fcntl(fds[0], F_SETFL, O_NONBLOCK)) {
		ret = -errno;
		goto out;
	}
	set_nodelay(fds[0]);
	set_nodelay(fds[1]);
out:
	close(ls);
	return ret;
}

/*
 * Loopback delivers a segment within the send() that wrote it (the softirq
 * runs as the send leaves its bottom-half section), so the read finds it; if
 * it did not, the bytes wait for the next read, which takes up to 4 of them.
 * The sending side's socket also takes the ACK. Why not a zero-length send or
 * a read of the link's own empty socket: neither runs the TCP output and
 * input path that the coming frame and its answer need (docs/BENCH.md).
 */
int rk__tcp_rehearse(int fds[2])
{
	uint8_t buf[4 * 64] = { 0 };
	ssize_t n;
	int ret;

	if (fds[0] < 0) {
		fds[0] = fds[1] = -1;
		ret = warm_pair(fds);
		if (ret)
			goto fail;
	}
	n = send(fds[0], buf, 64, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0 && errno != EAGAIN) {
		ret = -errno;
		goto fail;
	}
	n = recv(fds[1], buf, sizeof(buf), MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN)) {
		ret = n ? -errno : -ECONNRESET;
		goto fail;
	}
	return 0;
fail:
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	fds[0] = fds[1] = -1;
	return ret;
}

/*
 * The TCP rehearsal: one per loop with TCP links, a source without poll()
 * that hears how predictive sleeps end. After one that ended early, as meant
 * (RK_VERDICT_SPIN, or _EARLY), while a link of the loop reads its socket
 * directly, run the kernel's TCP path once on a loopback pair of its own, so
 * that the frame the loop now spins for, and its answer, find it in the
 * caches: a core that slept pays for that path on its next frame however
 * early it woke, and spinning on an empty socket does not bring it back
 * (docs/BENCH.md, "Cold after a sleep"). A link on shared memory or on the
 * ring only gains nothing. A pair that fails is closed and not made again
 * while the loop has TCP links (one log line). Two descriptors, made at the
 * first rehearsal.
 */
struct tcp_warm {
	struct rk_source src;
	struct tcp_link *links;		/* the loop's TCP links that read (src_on) */
	int fd[2];			/* the loopback pair, -1 until the first rehearsal */
	bool off;			/* the pair failed: no more rehearsals */
};

static void warm_verdict(struct rk_source *src, enum rk_verdict v)
{
	struct tcp_warm *w = src->data;
	struct tcp_link *t;
	int ret;

	if ((v != RK_VERDICT_SPIN && v != RK_VERDICT_EARLY) || w->off)
		return;
	for (t = w->links; t && !tcp_reads_direct(t); t = t->warm_next)
		;
	if (!t)
		return;
	ret = rk__tcp_rehearse(w->fd);
	if (!ret) {
		rk__loop_count_prewarm(t->link.loop);
		return;
	}
	w->off = true;
	rk__info(rk__loop_rank(t->link.loop), "no TCP rehearsal after predictive sleeps: %s",
		 rk_strerror(ret));
}

static const struct rk_source_ops warm_ops = {
	.name = "tcp-rehearsal",
	.verdict = warm_verdict,
};

/* @t reads from now on: the loop's rehearsal covers it (made for the first). */
static void warm_join(struct tcp_link *t)
{
	struct rk_loop *loop = t->link.loop;
	struct rk_source *src = rk__loop_source_find(loop, &warm_ops);
	struct tcp_warm *w;

	if (src) {
		w = src->data;
	} else {
		w = calloc(1, sizeof(*w));
		if (!w)
			return;		/* no rehearsal: the link works as well */
		w->fd[0] = w->fd[1] = -1;
		rk_source_init(&w->src, &warm_ops, w);
		rk_loop_add_source(loop, &w->src);
	}
	t->warm = w;
	t->warm_next = w->links;
	w->links = t;
}

/* @t reads no more; the loop's last TCP link takes the rehearsal with it. */
static void warm_leave(struct tcp_link *t)
{
	struct tcp_warm *w = t->warm;
	struct tcp_link **pp;

	if (!w)
		return;
	for (pp = &w->links; *pp != t; pp = &(*pp)->warm_next)
		;
	*pp = t->warm_next;
	t->warm = NULL;
	if (w->links)
		return;
	rk_loop_remove_source(t->link.loop, &w->src);
	if (w->fd[0] >= 0) {
		close(w->fd[0]);
		close(w->fd[1]);
	}
	free(w);
}

static int tcp_link_new(struct rk_loop *loop, int fd, const struct rk__link_owner_ops *oops,
			void *owner, enum rk__link_state state, struct tcp_link **out)
{
	struct tcp_link *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	rk__link_init(&t->link, loop, &tcp_ops, oops, owner, state);
	t->fd = fd;
	t->recv_op.fn = tcp_recv_done;
	t->send_op.fn = tcp_send_done;
	*out = t;
	return 0;
}

int rk__tcp_link_from_fd(struct rk_loop *loop, int fd, const struct rk__link_owner_ops *oops,
			 void *owner, enum rk__link_state state, struct rk_link **out)
{
	struct tcp_link *t;
	int ret;

	ret = tcp_link_new(loop, fd, oops, owner, state, &t);
	if (ret)
		return ret;
	t->addrlen = sizeof(t->addr);
	if (getpeername(fd, (struct sockaddr *)&t->addr, &t->addrlen) == 0)
		rk__sock_addr_str(&t->addr, t->link.peer_addr, sizeof(t->link.peer_addr));
	set_nodelay(fd);
	tcp_rx_start(t);
	*out = &t->link;
	return 0;
}

/* ---- connect ---------------------------------------------------------------------- */

static void tcp_connect_done(struct rk__op *op, int res, unsigned int flags)
{
	struct tcp_link *t = rk__container_of(op, struct tcp_link, connect_op);
	struct rk_link *l = &t->link;

	(void)flags;
	t->connecting = false;
	if (res < 0 || l->state == RK_LINK_CLOSED) {
		rk__link_fail(l, res < 0 ? res : -ECANCELED, false);
	} else {
		set_nodelay(t->fd);
		tcp_rx_start(t);
		rk__link_connected(l);
	}
	rk__link_op_done(l);
}

int rk__tcp_connect(struct rk_loop *loop, const struct rk__addr *a,
		    const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	struct io_uring_sqe *sqe;
	struct tcp_link *t;
	int fd, ret;

	t = NULL;
	fd = -1;
	{
		struct sockaddr_storage ss;
		socklen_t len;

		ret = rk__sock_resolve(a, false, &ss, &len);
		if (ret)
			return ret;
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		ret = tcp_link_new(loop, fd, oops, owner, RK_LINK_CONNECTING, &t);
		if (ret) {
			close(fd);
			return ret;
		}
		t->addr = ss;
		t->addrlen = len;
		rk__sock_addr_str(&ss, t->link.peer_addr, sizeof(t->link.peer_addr));
	}
	sqe = rk__loop_sqe(loop);
	if (!sqe) {
		t->link.state = RK_LINK_CLOSED;
		rk__link_op_start(&t->link);
		rk__link_op_done(&t->link);	/* frees it */
		return -EBUSY;
	}
	t->connect_op.fn = tcp_connect_done;
	t->connecting = true;
	io_uring_prep_connect(sqe, fd, (struct sockaddr *)&t->addr, t->addrlen);
	rk__sqe_set_op(sqe, &t->connect_op);
	rk__link_op_start(&t->link);
	*out = &t->link;
	return 0;
}

/* ---- the tcp:// class ------------------------------------------------------------- */

static int tcp_class_connect(struct rk_loop *loop, const struct rk__addr *a, void *ctx,
			     const struct rk__link_owner_ops *oops, void *owner,
			     struct rk_link **out)
{
	(void)ctx;
	return rk__tcp_connect(loop, a, oops, owner, out);
}

static int tcp_class_from_fd(struct rk_loop *loop, int fd, void *ctx,
			     const struct rk__link_owner_ops *oops, void *owner,
			     struct rk_link **out)
{
	(void)ctx;
	return rk__tcp_link_from_fd(loop, fd, oops, owner, RK_LINK_ACCEPTED, out);
}

/* TCP alone; same-host links come from the class that takes tcp links over
 * (shm_upgrade.c), through the registry. */
static const struct rk__transport_class tcp_class = {
	.scheme = "tcp",
	.connect = tcp_class_connect,
	.from_fd = tcp_class_from_fd,
};

/* Also the symbol a static link names (rankrt.pc's Libs.private) to keep this
 * class: a program that calls nothing else of tcp.c would otherwise lose it. */
void rk__tcp_transport_register(void);
void __attribute__((constructor)) rk__tcp_transport_register(void)
{
	rk__transport_register(&tcp_class);
}
