/* SPDX-License-Identifier: MIT */
/*
 * The loop's io_uring (ring_int.h): its flags from the wait policy and the
 * kernel's answer, the provided-buffer ring for TCP receive, the one-issuer
 * ring's enabling; and fd watches, one poll SQE each.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime_int.h"
#include "ring_int.h"

/* ---- the ring ------------------------------------------------------------------- */

/*
 * The ring's setup parameters for @cfg: task work deferred to the one issuer's
 * waits (@defer), else with or without COOP_TASKRUN (@coop). A deferring ring
 * starts disabled, so that the thread that runs the loop, not the one that
 * creates it, becomes its issuer (rk__ring_enable(), from loop.c's loop_bind()).
 */
static void ring_params(const struct rk_config *cfg, bool defer, bool coop,
			struct io_uring_params *p)
{
	const struct rk__ring_tuning *w = &rk__config_ctuning(cfg)->ring;

	memset(p, 0, sizeof(*p));
	if (defer)
		p->flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
			    IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_R_DISABLED;
	else if (coop)
		p->flags |= IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
	if (w->sqpoll) {
		uint64_t idle_ms = cfg->wait.spin_ns / 1000000;

		p->flags |= IORING_SETUP_SQPOLL;
		p->sq_thread_idle = (unsigned int)(idle_ms ? idle_ms : 1);
		if (w->sqpoll_cpu >= 0) {
			p->flags |= IORING_SETUP_SQ_AFF;
			p->sq_thread_cpu = (unsigned int)w->sqpoll_cpu;
		}
	}
}

int rk__ring_setup(struct io_uring *ring, struct rk_config *cfg, bool *bind)
{
	struct rk__ring_tuning *w = &rk__config_tuning(cfg)->ring;
	unsigned int entries = rk__config_tuning(cfg)->ring_entries;
	int rank = cfg->rank;
	struct io_uring_params p;
	int ret;

	*bind = false;
	if (w->defer_taskrun) {
		ring_params(cfg, true, false, &p);
		ret = io_uring_queue_init_params(entries, ring, &p);
		if (ret != -EINVAL) {
			*bind = ret == 0;
			return ret;
		}
		/* Kernels before 6.1 lack DEFER_TASKRUN, and SQPOLL refuses it: the
		 * ring the other knobs ask for, and rk_loop_config() says so. */
		rk__info(rank, "io_uring: DEFER_TASKRUN refused%s, continuing without",
			 w->sqpoll ? " with SQPOLL" : "");
		w->defer_taskrun = false;
	}
	ring_params(cfg, false, w->coop_taskrun, &p);
	ret = io_uring_queue_init_params(entries, ring, &p);
	if (ret == -EINVAL && w->coop_taskrun) {
		/*
		 * Kernels before 5.19 lack COOP_TASKRUN/TASKRUN_FLAG, and newer ones
		 * refuse them with SQPOLL: spinning is then slower (ARCHITECTURE.md),
		 * but everything works. The rest is asked for again as it was, the
		 * SQ thread's CPU included.
		 */
		rk__info(rank, "io_uring: COOP_TASKRUN refused%s, continuing without",
			 w->sqpoll ? " with SQPOLL" : "");
		ring_params(cfg, false, false, &p);
		ret = io_uring_queue_init_params(entries, ring, &p);
	}
	return ret;
}

/*
 * RK_SQPOLL=auto: a polling kernel thread is only worth its core when there
 * are cores to spare (ARCHITECTURE.md): on with RK_SQPOLL_AUTO_CPUS or more
 * CPUs in this thread's affinity mask, off below (2 vCPUs: it starves the ranks).
 */
void rk__ring_sqpoll_auto(struct rk_config *cfg)
{
	struct rk__ring_tuning *w = &rk__config_tuning(cfg)->ring;
	cpu_set_t set;
	int n = 0;

	if (!sched_getaffinity(0, sizeof(set), &set))
		n = CPU_COUNT(&set);
	w->sqpoll = n >= RK_SQPOLL_AUTO_CPUS;
	rk__info(cfg->rank, "RK_SQPOLL=auto: %d CPUs in the affinity mask: SQPOLL %s", n,
		 w->sqpoll ? "on" : "off");
}

/* liburing 2.3 has no io_uring_enable_rings() in its library */
int rk__ring_enable(struct io_uring *ring)
{
	if (syscall(__NR_io_uring_register, ring->ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0))
		return -errno;
	return 0;
}

/* ---- provided buffers for TCP receive ------------------------------------------------ */

int rk__bufring_setup(struct io_uring *ring, struct rk__bufring *r, unsigned int size,
		      unsigned int count)
{
	struct io_uring_buf_reg reg;
	void *br;
	unsigned int i;
	int ret;

	r->size = size;
	r->count = count;
	r->mask = io_uring_buf_ring_mask(r->count);
	r->bgid = 0;
	if (posix_memalign(&br, 4096, r->count * sizeof(struct io_uring_buf)))
		return -ENOMEM;
	r->mem = malloc((size_t)r->size * r->count);
	if (!r->mem) {
		free(br);
		return -ENOMEM;
	}
	memset(br, 0, r->count * sizeof(struct io_uring_buf));
	memset(&reg, 0, sizeof(reg));
	reg.ring_addr = (uint64_t)(uintptr_t)br;
	reg.ring_entries = r->count;
	reg.bgid = (uint16_t)r->bgid;
	ret = io_uring_register_buf_ring(ring, &reg, 0);
	if (ret < 0) {
		/* Kernel without provided-buffer rings: links use plain recv. */
		free(r->mem);
		free(br);
		r->mem = NULL;
		return ret;
	}
	r->br = br;
	io_uring_buf_ring_init(r->br);
	for (i = 0; i < r->count; i++)
		io_uring_buf_ring_add(r->br, r->mem + (size_t)i * r->size, r->size, i, r->mask, i);
	io_uring_buf_ring_advance(r->br, r->count);
	return 0;
}

void rk__bufring_teardown(struct io_uring *ring, struct rk__bufring *r)
{
	if (!r->br)
		return;
	io_uring_unregister_buf_ring(ring, r->bgid);
	free(r->br);
	free(r->mem);
	r->br = NULL;
}

void rk__bufring_recycle(struct rk__bufring *r, unsigned int bid)
{
	io_uring_buf_ring_add(r->br, r->mem + (size_t)bid * r->size, r->size, bid, r->mask, 0);
	io_uring_buf_ring_advance(r->br, 1);
}

/* ---- fd watches ------------------------------------------------------------------ */

struct fd_watch_op {
	struct rk__op op;
	struct rk_fd_watch *w;
};
_Static_assert(sizeof(struct fd_watch_op) <= sizeof(((struct rk_fd_watch *)0)->op),
	       "rk_fd_watch.op must hold the ring op");

static void fd_watch_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk_fd_watch *w = ((struct fd_watch_op *)op)->w;
	struct rk_loop *loop = w->loop;

	(void)flags;
	w->armed = false;
	if (w->cancelling || res == -ECANCELED) {
		w->cancelling = false;
		rk__loop_unref(loop);
		return;
	}
	rk__loop_unref(loop);
	rk__loop_note(loop, w->cb(w, res < 0 ? POLLERR : res));
}

void rk_fd_watch_init(struct rk_fd_watch *w, int fd, rk_fd_watch_cb cb, void *data)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->cb = cb;
	w->data = data;
}

int rk_fd_watch_start(struct rk_loop *loop, struct rk_fd_watch *w, unsigned int events)
{
	struct fd_watch_op *wop = (struct fd_watch_op *)w->op;
	struct io_uring_sqe *sqe;

	if (w->armed)
		return 0;
	sqe = rk__loop_sqe(loop);
	if (!sqe)
		return -EBUSY;
	wop->op.fn = fd_watch_done;
	wop->w = w;
	w->loop = loop;
	io_uring_prep_poll_add(sqe, w->fd, events);
	rk__sqe_set_op(sqe, &wop->op);
	w->armed = true;
	rk__loop_ref(loop);
	return 0;
}

void rk_fd_watch_stop(struct rk_fd_watch *w)
{
	struct io_uring_sqe *sqe;

	if (!w->armed || w->cancelling)
		return;
	sqe = rk__loop_sqe(w->loop);
	if (!sqe)
		return;
	io_uring_prep_poll_remove(sqe, (uint64_t)(uintptr_t)w->op);
	io_uring_sqe_set_data64(sqe, RK_UDATA_INTERNAL);
	w->cancelling = true;
}

bool rk_fd_watch_busy(const struct rk_fd_watch *w)
{
	return w->armed;
}
