/* SPDX-License-Identifier: MIT */
/*
 * A loop's cross-thread side: posts (a Treiber stack, taken whole by the loop
 * thread), rk_loop_wake(), the eventfd that wakes a sleeping loop, and
 * SIGINT/SIGTERM through a signalfd. The loop thread arms the reads; any
 * thread posts and wakes.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "loop_int.h"

static void wake_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk_loop *loop = rk__container_of(op, struct rk_loop, wake_op);

	(void)flags;
	loop->wake_armed = false;
	/* The eventfd is drained: the next sleeping phase needs a new write. Pairs
	 * with the exchange in loop_kick(). */
	atomic_store_explicit(&loop->wake_pending, 0, memory_order_release);
	if (res != -ECANCELED)
		rk__wake_arm(loop);
	rk__loop_note(loop, RK_IDLE);
}

void rk__wake_arm(struct rk_loop *loop)
{
	struct io_uring_sqe *sqe;

	if (loop->wake_armed || loop->wake_fd < 0)
		return;
	sqe = rk__loop_sqe(loop);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, loop->wake_fd, &loop->wake_val, sizeof(loop->wake_val), 0);
	loop->wake_op.fn = wake_done;
	rk__sqe_set_op(sqe, &loop->wake_op);
	loop->wake_armed = true;
}

static void sig_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk_loop *loop = rk__container_of(op, struct rk_loop, sig_op);

	(void)flags;
	loop->sig_armed = false;
	if (res == (int)sizeof(loop->sig_info)) {
		loop->stop_signal = (int)loop->sig_info.ssi_signo;
		loop->stop = true;
		rk__info(loop->cfg.rank, "caught signal %d, stopping", loop->stop_signal);
	}
	if (res != -ECANCELED)
		rk__sig_arm(loop);	/* a second signal during shutdown stops again */
	rk__loop_note(loop, RK_BUSY);
}

void rk__sig_arm(struct rk_loop *loop)
{
	struct io_uring_sqe *sqe;

	if (loop->sig_armed || loop->sig_fd < 0)
		return;
	sqe = rk__loop_sqe(loop);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, loop->sig_fd, &loop->sig_info, sizeof(loop->sig_info), 0);
	loop->sig_op.fn = sig_done;
	rk__sqe_set_op(sqe, &loop->sig_op);
	loop->sig_armed = true;
}

/* Wake the loop if, and only if, it has published that it sleeps. */
static void loop_kick(struct rk_loop *loop)
{
	uint64_t one = 1;
	ssize_t n;

	/* Pairs with the fence in loop_park() (loop.c): either the loop sees
	 * what the caller published before this call, or we see 'sleeping' and
	 * write. */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&loop->sleeping, memory_order_relaxed))
		return;
	if (atomic_exchange_explicit(&loop->wake_pending, 1, memory_order_acq_rel))
		return;		/* a write is already on its way */
	do {
		n = write(loop->wake_fd, &one, sizeof(one));
	} while (n < 0 && errno == EINTR);
}

void rk_loop_wake(struct rk_loop *loop)
{
	loop_kick(loop);
}

void rk_post_init(struct rk_post *p, rk_post_cb cb, void *data)
{
	memset(p, 0, sizeof(*p));
	p->cb = cb;
	p->data = data;
}

void rk_loop_post(struct rk_loop *loop, struct rk_post *p)
{
	struct rk_post *head = atomic_load_explicit(&loop->inbox, memory_order_relaxed);

	do {
		p->next = head;
	} while (!atomic_compare_exchange_weak_explicit(&loop->inbox, &head, p,
							memory_order_release,
							memory_order_relaxed));
	loop_kick(loop);
}

/* Take every queued post at once (so there is no ABA), restore FIFO order, run them. */
unsigned int rk__inbox_drain(struct rk_loop *loop)
{
	struct rk_post *p, *rev = NULL, *next;
	unsigned int n = 0;

	if (!atomic_load_explicit(&loop->inbox, memory_order_relaxed))
		return 0;
	p = atomic_exchange_explicit(&loop->inbox, NULL, memory_order_acquire);
	while (p) {
		next = p->next;
		p->next = rev;
		rev = p;
		p = next;
	}
	while (rev) {
		next = rev->next;
		rev->next = NULL;
		rk__loop_note(loop, rev->cb(rev));	/* may free or re-post rev */
		rev = next;
		n++;
	}
	loop->stats.posts += n;
	return n;
}
