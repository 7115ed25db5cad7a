/* SPDX-License-Identifier: MIT */
/*
 * The rank loop: one io_uring driven by one thread, no global state. This
 * file is its life and its iteration (the mechanism); its sources, timers and
 * cross-thread side are source.c, timer.c and post.c (loop_int.h), its ring's
 * set up ring.c, and how it waits is decided in wait.c.
 *
 * One iteration, in this order (rk_loop_run):
 *   1. read the clock once (after an empty spin: every fourth time, iter_begin());
 *      everything below takes that 'now'
 *   2. reap completions (at most RK_CQE_BATCH) and call each one's rk__op
 *   3. drain the inbox of cross-thread posts (FIFO per posting thread)
 *   4. poll every source that has a poll() (verbs CQs, GPU completion words, ...)
 *   5. run due timers
 *   6. before-wait: run queued flushers, so the frames that steps 2-5 queued
 *      leave in one send per link
 *   7. submit SQEs and wait as the policy decides (wait.c: rk__wait_decide()):
 *        spin  - one pause instruction, then the next iteration
 *        park  - publish "sleeping", fence, arm sources and re-check, then wait
 *                for a CQE, the next timer, or (a predictive sleep) until
 *                shortly before the event a source expects, or (RK_POLL_US, a
 *                benchmark's baseline) for one timed poll
 *      after a predictive sleep, the next iteration reports its wake to the
 *      policy and tells the sources how it went (rk_source_ops.verdict)
 *
 * Every handler reports RK_BUSY or RK_IDLE; a busy event restarts the spin
 * window. A wait interrupted by a signal (EINTR) is an empty wait.
 *
 * rk__loop_run_io() (a world's teardown) runs steps 1, 2, 4 and 6 only: no
 * post and no timer is delivered outside the application's own rk_loop_run().
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "loop_int.h"
#include "ring_int.h"

#define RK_CQE_BATCH 128

#define SPIN_CLOCK_EVERY	4	/* empty spin iterations a clock read serves: iter_begin() */
#define PARK_TIMER_MIN_NS	1000000ull	/* shorter timer waits keep their own timeout */

static void tmo_done(struct rk__op *op, int res, unsigned int flags);

/* The default clock_fn. */
static uint64_t mono_ns(void *arg)
{
	(void)arg;
	return rk__now_ns();
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* ---- small internal interface ---------------------------------------------------- */

struct io_uring_sqe *rk__loop_sqe(struct rk_loop *loop)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&loop->ring);

	if (!sqe) {
		io_uring_submit(&loop->ring);
		sqe = io_uring_get_sqe(&loop->ring);
	}
	return sqe;
}

void rk__loop_queue_flush(struct rk_loop *loop, struct rk__flusher *f)
{
	if (f->queued)
		return;
	f->queued = true;
	f->next = loop->flush_head;
	loop->flush_head = f;
}

struct rk__bufring *rk__loop_bufring(struct rk_loop *loop)
{
	return loop->bufring.br ? &loop->bufring : NULL;
}

void rk__loop_ref(struct rk_loop *loop)
{
	loop->refs++;
}

void rk__loop_unref(struct rk_loop *loop)
{
	loop->refs--;
}

/* Every handler's report is one event, whichever path ran it (stats.events). */
void rk__loop_note(struct rk_loop *loop, enum rk_activity a)
{
	loop->stats.events++;
	loop->iter_events++;
	if (a == RK_BUSY)
		loop->iter_busy++;
}

int rk__loop_rank(const struct rk_loop *loop)
{
	return loop->cfg.rank;
}

uint64_t rk__loop_clock(const struct rk_loop *loop)
{
	return loop->clock_fn(loop->clock_arg);
}

bool rk__loop_after_park(const struct rk_loop *loop)
{
	return loop->after_park;
}

void rk__loop_spin_charge(struct rk_loop *loop, unsigned int n)
{
	loop->spin_run += n;
}

uint64_t rk__loop_parking_ns(const struct rk_loop *loop)
{
	return loop->park_ns;
}

uint64_t rk__loop_yields(const struct rk_loop *loop)
{
	return loop->yields;
}

void rk__loop_source_event(struct rk_loop *loop, struct rk_source *src)
{
	if (src == loop->pred_src)
		loop->pred_found = true;
}

uint64_t rk__loop_iteration(const struct rk_loop *loop)
{
	return loop->stats.iterations;
}

struct rk__wait *rk__loop_wait(struct rk_loop *loop)
{
	return &loop->wait;
}

uint64_t rk__loop_refresh(struct rk_loop *loop)
{
	loop->now = loop->clock_fn(loop->clock_arg);
	return loop->now;
}

/* ---- create / destroy ------------------------------------------------------------ */

#ifdef RK_WAIT_ABLATION
/* A build for the wait policy's A/B only (--enable-wait-ablation, tests/bench/wait-ab.sh):
 * RK_TEST_WAIT_OFF names the estimators and rules to turn off. */
static void ablate(struct rk_loop *loop)
{
	const char *e = getenv("RK_TEST_WAIT_OFF");

	if (rk__wait_off_parse(e, &loop->wait.off))
		rk__warn(loop->cfg.rank, "RK_TEST_WAIT_OFF='%s': unknown names ignored", e);
	if (loop->wait.off)
		rk__info(loop->cfg.rank, "RK_TEST_WAIT_OFF='%s': wait estimators off (0x%x)", e,
			 loop->wait.off);
}
#endif

int rk_loop_create(const struct rk_config *cfg, struct rk_loop **out)
{
	struct rk_loop *loop;
	char err[256];
	sigset_t set;
	int ret;

	/* a config filled in by hand meets the rules RK_* variables meet */
	if (cfg && rk__config_check(cfg, err, sizeof(err))) {
		rk__err(cfg->rank, "rk_loop_create: %s", err);
		return -RK_ECONFIG;
	}
	loop = calloc(1, sizeof(*loop));
	if (!loop)
		return -ENOMEM;
	if (cfg)
		loop->cfg = *cfg;
	else
		rk_config_init(&loop->cfg);
	if (rk__config_tuning(&loop->cfg)->ring.sqpoll_auto)
		rk__ring_sqpoll_auto(&loop->cfg);
	rk__wait_init(&loop->wait, &loop->cfg.wait, &rk__config_tuning(&loop->cfg)->wait,
		      &loop->stats);
#ifdef RK_WAIT_ABLATION
	ablate(loop);
#endif
	loop->clock_fn = mono_ns;
	loop->sig_fd = -1;
	loop->tmo_op.fn = tmo_done;
	atomic_init(&loop->inbox, NULL);
	atomic_init(&loop->sleeping, 0);
	atomic_init(&loop->wake_pending, 0);

	loop->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (loop->wake_fd < 0) {
		ret = -errno;
		goto err_free;
	}
	ret = rk__ring_setup(&loop->ring, &loop->cfg, &loop->bind);
	if (ret < 0)
		goto err_close_wake;
	ret = rk__bufring_setup(&loop->ring, &loop->bufring,
				rk__config_tuning(&loop->cfg)->rx_buf_size,
				rk__config_tuning(&loop->cfg)->rx_buf_count);
	if (ret < 0 && ret != -EINVAL && ret != -EOPNOTSUPP && ret != -ENOMEM)
		rk__info(loop->cfg.rank, "io_uring: no provided-buffer ring (%s)", rk_strerror(ret));
	if (loop->cfg.catch_signals) {
		sigemptyset(&set);
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		ret = -pthread_sigmask(SIG_BLOCK, &set, &loop->sig_oldmask);
		if (ret < 0)
			goto err_bufring;
		loop->sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
		if (loop->sig_fd < 0) {
			ret = -errno;
			goto err_sigmask;
		}
		rk__sig_arm(loop);
	}
	rk__wake_arm(loop);
	loop->now = loop->clock_fn(NULL);
	loop->mark = loop->now;
	loop->phase = PH_RUN;
	*out = loop;
	return 0;

err_sigmask:
	pthread_sigmask(SIG_SETMASK, &loop->sig_oldmask, NULL);
err_bufring:
	rk__bufring_teardown(&loop->ring, &loop->bufring);
	io_uring_queue_exit(&loop->ring);
err_close_wake:
	close(loop->wake_fd);
err_free:
	rk__secure_zero(loop->cfg.secret, sizeof(loop->cfg.secret));
	free(loop);
	return ret;
}

int rk_loop_destroy(struct rk_loop *loop)
{
	if (!loop)
		return 0;
	if (loop->in_run || loop->refs || loop->sources || loop->quiet || loop->timers)
		return -EBUSY;
	/* Exiting the ring cancels our own reads on wake_fd and sig_fd. */
	rk__bufring_teardown(&loop->ring, &loop->bufring);
	io_uring_queue_exit(&loop->ring);
	close(loop->wake_fd);
	if (loop->sig_fd >= 0) {
		close(loop->sig_fd);
		pthread_sigmask(SIG_SETMASK, &loop->sig_oldmask, NULL);
	}
	rk__secure_zero(loop->cfg.secret, sizeof(loop->cfg.secret));
	free(loop);
	return 0;
}

/* ---- running --------------------------------------------------------------------- */

static void account(struct rk_loop *loop, uint64_t t)
{
	uint64_t d = t - loop->mark;

	switch (loop->phase) {
	case PH_RUN:
		loop->stats.ns_run += d;
		break;
	case PH_SPIN:
		loop->stats.ns_spin += d;
		if (loop->spin_why == RK__SPIN_PREDICT)
			loop->stats.ns_spin_predict += d;
		else if (loop->spin_why == RK__SPIN_WINDOW)
			loop->stats.ns_spin_window += d;
		break;
	case PH_BLOCK:
		loop->stats.ns_blocked += d;
		break;
	}
	loop->mark = t;
}

/*
 * A completion is one event unless its handler reported events of its own (a
 * receive's frames, a watch's callback): those count instead, so a frame is one
 * event whether the ring or a spin's direct read brought it.
 */
static unsigned int reap(struct rk_loop *loop)
{
	struct io_uring_cqe *cqes[RK_CQE_BATCH];
	unsigned int n, i, before;

	n = io_uring_peek_batch_cqe(&loop->ring, cqes, RK_CQE_BATCH);
	for (i = 0; i < n; i++) {
		struct io_uring_cqe *cqe = cqes[i];
		uint64_t ud = cqe->user_data;
		int res = cqe->res;
		unsigned int flags = cqe->flags;

		/* Consume before dispatch: a handler may submit and reap recursively. */
		io_uring_cqe_seen(&loop->ring, cqe);
		before = loop->iter_events;
		if (ud != RK_UDATA_INTERNAL && ud != 0) {
			struct rk__op *op = (struct rk__op *)(uintptr_t)ud;

			op->fn(op, res, flags);
		}
		if (loop->iter_events == before)
			loop->stats.events++;
	}
	return n;
}

/* Work the kernel holds for us under COOP_TASKRUN: completions it will post
 * only when this task enters the kernel. */
static inline bool ring_needs_enter(struct rk_loop *loop)
{
	unsigned int f = IO_URING_READ_ONCE(*loop->ring.sq.kflags);

	return f & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW);
}

static void run_flushers(struct rk_loop *loop)
{
	struct rk__flusher *f;

	while ((f = loop->flush_head)) {
		loop->flush_head = f->next;
		f->next = NULL;
		f->queued = false;
		f->fn(f);
	}
}

void rk__loop_flush_now(struct rk_loop *loop)
{
	if (!loop->flush_head)
		return;
	run_flushers(loop);
	io_uring_submit(&loop->ring);
}

static void ns_to_ts(uint64_t ns, struct __kernel_timespec *ts)
{
	ts->tv_sec = (long long)(ns / 1000000000ull);
	ts->tv_nsec = (long long)(ns % 1000000000ull);
}

static void tmo_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk_loop *loop = rk__container_of(op, struct rk_loop, tmo_op);

	(void)res;
	(void)flags;
	loop->tmo_armed = false;	/* the timers due now run in this iteration */
}

/*
 * A blocking wait until the next timer, @timeout_ns away, needs no timeout of
 * its own while an io_uring timeout is armed at or before that timer. A wait's
 * own timeout arms and cancels a kernel hrtimer every time (0.4-0.7 us of a
 * blocking round trip, docs/BENCH.md), while the timers a blocking rank has
 * (heartbeats, peer timeouts) are far off and move later as frames flow. So
 * the first such wait arms a ring timeout at the timer's deadline, and later
 * waits sleep on it while it comes at or before the next timer; an earlier
 * timer gets a timed wait of its own, and a timeout left by a timer that moved
 * later ends one wait early (that iteration finds nothing due and waits again).
 * True: the ring's timeout serves this wait. The monotonic clock only: an
 * injected one has nothing to do with the kernel's.
 */
static bool park_timer(struct rk_loop *loop, uint64_t timeout_ns, enum rk__park how)
{
	uint64_t due = loop->now + timeout_ns;	/* the next timer's own due */
	struct io_uring_sqe *sqe;

	if (how != RK__PARK_BLOCK || timeout_ns < PARK_TIMER_MIN_NS || loop->clock_fn != mono_ns)
		return false;
	if (loop->tmo_armed)
		return loop->tmo_at <= due;
	sqe = io_uring_get_sqe(&loop->ring);
	if (!sqe)
		return false;
	ns_to_ts(due, &loop->tmo_ts);
	io_uring_prep_timeout(sqe, &loop->tmo_ts, 0, IORING_TIMEOUT_ABS);
	rk__sqe_set_op(sqe, &loop->tmo_op);
	loop->tmo_armed = true;
	loop->tmo_at = due;
	loop->tmo_arms++;
	return true;
}

/*
 * Park the thread until a CQE, a wake or @timeout_ns. The spin-to-sleep switch
 * publishes 'sleeping' before the last look at the inbox and the sources,
 * with a full fence between (pairs with loop_kick(), post.c), so a post
 * either is seen here or finds 'sleeping' set and writes the eventfd whose
 * read is armed.
 * RK__PARK_PREDICT: @timeout_ns ends shortly before a source's predicted event;
 * the source's arm() may rely on that (rk_source_ops.expect).
 * RK__PARK_IO (rk__loop_run_io()): posts and a pending stop are not its business,
 * so neither keeps it from sleeping; a post still wakes it (a spurious wake).
 */
static void loop_park(struct rk_loop *loop, uint64_t timeout_ns, enum rk__park how,
		      const struct rk__wait_plan *plan)
{
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;
	uint64_t before_wakeups;
	int ret;

	/* Read before 'sleeping' is published: a waker can set wake_pending only
	 * after that, so any wake of this park (even one that lands while the
	 * sources are armed below) shows as 0 -> 1 and is counted. */
	before_wakeups = atomic_load_explicit(&loop->wake_pending, memory_order_relaxed);
	atomic_store_explicit(&loop->sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	loop->park_ns = timeout_ns;	/* for the sources' arm() */
	if ((how != RK__PARK_IO && atomic_load_explicit(&loop->inbox, memory_order_relaxed)) ||
	    io_uring_cq_ready(&loop->ring) || rk__sources_arm(loop) > 0 || loop->flush_head ||
	    (how != RK__PARK_IO && loop->stop)) {
		atomic_store_explicit(&loop->sleeping, 0, memory_order_relaxed);
		io_uring_submit(&loop->ring);
		return;
	}
	rk__wake_arm(loop);
	if (how == RK__PARK_PREDICT) {
		rk__wait_slept(&loop->wait, plan);
		loop->pred_deadline = loop->now + timeout_ns;
		loop->pred_sleep_ns = timeout_ns;
		loop->pred_src = plan->src;
		loop->pred_found = false;
	} else {
		loop->stats.blocks++;
	}
	loop->phase = PH_BLOCK;
	if (timeout_ns != UINT64_MAX && !park_timer(loop, timeout_ns, how)) {
		ns_to_ts(timeout_ns, &ts);
		ret = io_uring_submit_and_wait_timeout(&loop->ring, &cqe, 1, &ts, NULL);
	} else {
		ret = io_uring_submit_and_wait(&loop->ring, 1);
	}
	atomic_store_explicit(&loop->sleeping, 0, memory_order_relaxed);
	loop->parked = true;
	if (ret == -EINTR)
		loop->stats.eintr++;	/* an empty wait: the next iteration decides again */
	else if (ret < 0 && ret != -ETIME && ret != -EAGAIN && ret != -EBUSY)
		rk__warn(loop->cfg.rank, "io_uring wait: %s", rk_strerror(ret));
	if (!before_wakeups && atomic_load_explicit(&loop->wake_pending, memory_order_relaxed))
		loop->stats.wakeups++;
}

/* One empty spin iteration: submit, let the kernel post deferred completions, pause. */
static void loop_spin(struct rk_loop *loop, enum rk__spin_why why)
{
	const struct rk__wait_tuning *w = &rk__config_tuning(&loop->cfg)->wait;

	loop->spin_why = why;
	if (io_uring_sq_ready(&loop->ring))
		io_uring_submit(&loop->ring);
	if (ring_needs_enter(loop))
		io_uring_get_events(&loop->ring);
	loop->phase = PH_SPIN;
	loop->stats.spin_iters++;
	/* With more runnable threads than cores (a CPU backend's workers,
	 * several ranks per host) a pure spin starves them: let them run. */
	if (w->spin_yield && ++loop->spin_run >= w->spin_yield) {
		loop->spin_run = 0;
		loop->yields++;
		sched_yield();
	} else {
		cpu_relax();
	}
}

/* A predictive sleep ended: the policy learns from its wake, the sources hear how it went. */
static void wake_report(struct rk_loop *loop)
{
	struct rk__wait_wake in = {
		.now = loop->now,
		.deadline = loop->pred_deadline,
		.sleep_ns = loop->pred_sleep_ns,
		.found = loop->pred_found,
		.busy = loop->iter_busy > 0,
	};
	struct rk_source *src = loop->pred_src;
	enum rk_verdict v;
	bool warm;

	v = rk__wait_woke(&loop->wait, &in, &warm);
	loop->pred_deadline = 0;
	loop->pred_src = NULL;
	if (v && src && src->ops->verdict)
		src->ops->verdict(src, v);
	if (warm)
		rk__sources_spin(loop, src);
}

/* Nothing is due: wait as the policy decides. */
static void loop_wait(struct rk_loop *loop)
{
	struct rk__wait_in in = {
		.now = loop->now,
		.tmo = rk__timers_next_in(loop),
		.last_busy = loop->last_busy,
		.busy = loop->busy_src,
	};
	struct rk__wait_plan plan;

	if (in.tmo == 0 || loop->flush_head) {
		io_uring_submit(&loop->ring);
		return;
	}
	if (rk__wait_predicts(&loop->wait) && (loop->sources || loop->quiet)) {
		in.expect = rk__sources_expect(loop);
		in.src = loop->pred_next;
	}
	rk__wait_decide(&loop->wait, &in, &plan);
	if (plan.park)
		loop_park(loop, plan.timeout, plan.how, &plan);
	else
		loop_spin(loop, plan.why);
}

/* Step 1 of an iteration: the clock, read once. */
static void iter_begin(struct rk_loop *loop)
{
	/*
	 * An iteration after an empty spin reads the monotonic clock only every
	 * SPIN_CLOCK_EVERY: the read costs about what the rest of an empty
	 * iteration does, and a frame waits half an iteration on average before a
	 * poll sees it. Timers and the spin window's end are then seen at most
	 * SPIN_CLOCK_EVERY - 1 empty iterations late (well under a microsecond)
	 * against a window in ms; an iteration with events reads it after its
	 * handlers (iter_account). An injected clock is read every iteration: the
	 * decisions tested on it stay exact.
	 */
	if (loop->phase != PH_SPIN || loop->clock_fn != mono_ns ||
	    ++loop->spin_stale >= SPIN_CLOCK_EVERY) {
		loop->spin_stale = 0;
		loop->now = loop->clock_fn(loop->clock_arg);
	}
	/* a flag, not the phase: rk_loop_run() starts every ONCE/NOWAIT call in PH_RUN */
	loop->after_park = loop->parked;
	loop->parked = false;
	account(loop, loop->now);
	loop->iter_busy = 0;
	loop->iter_events = 0;
	loop->iter_src = NULL;
	loop->iter_src_n = 0;
	loop->iter_mixed = false;
	loop->stats.iterations++;
}

/* Step 2: the completions the ring holds, or holds back under COOP_TASKRUN. */
static void iter_reap(struct rk_loop *loop)
{
	if (io_uring_cq_ready(&loop->ring) || (loop->phase != PH_SPIN && ring_needs_enter(loop))) {
		if (!io_uring_cq_ready(&loop->ring))
			io_uring_get_events(&loop->ring);
		reap(loop);
	}
}

/* After the handlers: charge their time to 'run', and restart the window from
 * the end of the work if any of it was busy. */
static void iter_account(struct rk_loop *loop)
{
	uint64_t t;

	if (!loop->iter_events) {
		loop->phase = PH_SPIN;
		return;
	}
	t = loop->clock_fn(loop->clock_arg);
	loop->phase = PH_RUN;
	account(loop, t);
	loop->now = t;
	loop->stats.busy_events += loop->iter_busy;
	if (loop->iter_busy) {
		rk__wait_busy(&loop->wait, loop->last_busy, t);
		loop->last_busy = t;
		loop->busy_src = !loop->iter_mixed && loop->iter_src_n >= loop->iter_busy ?
				 loop->iter_src : NULL;
	}
}

/* @may_wait: wait per the policy after the handlers; @once: only if none ran. */
static void iterate(struct rk_loop *loop, bool may_wait, bool once)
{
	iter_begin(loop);
	iter_reap(loop);
	if (rk__inbox_busy(loop))
		rk__inbox_drain(loop);
	if (loop->sources)
		rk__sources_poll(loop);
	if (loop->pred_deadline)
		wake_report(loop);
	if (loop->timers && loop->timers->due <= loop->now)
		rk__timers_run(loop);
	run_flushers(loop);
	iter_account(loop);
	if (loop->stop || !may_wait || (once && loop->iter_events)) {
		io_uring_submit(&loop->ring);
		return;
	}
	loop_wait(loop);
}

/*
 * A SINGLE_ISSUER ring takes submissions and waits from one thread only: the
 * first run enables it there. Another thread's run gets -EEXIST, which is what
 * the kernel would answer its enter. (Registering the ring fd as well, which
 * only that thread could then use, measured no better: docs/BENCH.md.)
 */
static int loop_bind(struct rk_loop *loop)
{
	int ret;

	if (!loop->bind)
		return 0;
	if (loop->bound)
		return pthread_equal(loop->owner, pthread_self()) ? 0 : -EEXIST;
	ret = rk__ring_enable(&loop->ring);
	if (ret < 0)
		return ret;
	loop->bound = true;
	loop->owner = pthread_self();
	return 0;
}

uint64_t rk__loop_ring_timeouts(const struct rk_loop *loop)
{
	return loop->tmo_arms;
}

bool rk__loop_foreign(const struct rk_loop *loop)
{
	return loop->bound && !pthread_equal(loop->owner, pthread_self());
}

static void run_begin(struct rk_loop *loop)
{
	loop->in_run = true;
	loop->mark = loop->clock_fn(loop->clock_arg);
	loop->phase = PH_RUN;
}

static void run_end(struct rk_loop *loop)
{
	account(loop, loop->clock_fn(loop->clock_arg));
	loop->in_run = false;
}

int rk_loop_run(struct rk_loop *loop, enum rk_run_mode mode)
{
	int ret;

	if (loop->in_run)
		return -EBUSY;
	ret = loop_bind(loop);
	if (ret < 0)
		return ret;
	/* As libuv's uv_run(): a stop asked for before the run ends it at once, and
	 * the run that a stop ends consumes it. */
	if (!loop->stop) {
		run_begin(loop);
		switch (mode) {
		case RK_RUN_ONCE:
			iterate(loop, true, true);
			break;
		case RK_RUN_NOWAIT:
			iterate(loop, false, false);
			break;
		default:
			while (!loop->stop)
				iterate(loop, true, false);
			break;
		}
		run_end(loop);
	}
	loop->stop = false;
	return loop->stop_signal ? -RK_ESTOPPED : 0;
}

/* rk__loop_run_io() waits as the policy would, minus the predictive sleeps. */
static bool io_spins(const struct rk_loop *loop)
{
	const struct rk_wait_policy *w = &loop->cfg.wait;

	return w->mode == RK_WAIT_SPIN ||
	       (w->mode == RK_WAIT_ADAPTIVE &&
		loop->now - loop->last_busy < rk__wait_window(&loop->wait, loop->last_busy,
							       loop->busy_src));
}

int rk__loop_run_io(struct rk_loop *loop, uint64_t timeout_ns)
{
	int ret;

	if (loop->in_run)
		return -EBUSY;
	ret = loop_bind(loop);
	if (ret < 0)
		return ret;
	run_begin(loop);
	iter_begin(loop);
	iter_reap(loop);
	if (loop->sources)
		rk__sources_poll(loop);
	/* a predictive sleep's accounting belongs to the policy, which is not running */
	loop->pred_deadline = 0;
	loop->pred_src = NULL;
	run_flushers(loop);
	iter_account(loop);
	if (loop->iter_events || loop->flush_head)
		io_uring_submit(&loop->ring);
	else if (io_spins(loop))
		loop_spin(loop, RK__SPIN_OTHER);	/* a link drains as fast as before */
	else
		loop_park(loop, timeout_ns, RK__PARK_IO, NULL);
	run_end(loop);
	return 0;
}

bool rk__loop_running(const struct rk_loop *loop)
{
	return loop->in_run;
}

void rk_loop_stop(struct rk_loop *loop)
{
	loop->stop = true;
}

uint64_t rk_loop_now(const struct rk_loop *loop)
{
	return loop->now;
}

size_t rk_loop_stats(const struct rk_loop *loop, struct rk_loop_stats *out, size_t size)
{
	struct rk_loop_stats st = loop->stats;

	st.predict_margin_ns = rk__wait_margin(&loop->wait);
	st.spin_window_ns = rk__wait_window(&loop->wait, loop->last_busy, loop->busy_src);
	return rk__stats_copy(out, size, &st, sizeof(st));
}

void rk_wait_policy_init(struct rk_wait_policy *w)
{
	struct rk_config c;

	rk_config_init(&c);	/* the one table of defaults */
	*w = c.wait;
}

void rk_loop_set_wait(struct rk_loop *loop, const struct rk_wait_policy *w)
{
	loop->cfg.wait.mode = w->mode;
	loop->cfg.wait.spin_ns = w->spin_ns;
}

/*
 * The wait decisions read loop->cfg at every wait (rk__wait_init() pointed
 * them there), so a copy into it is in effect from the next wait on. The
 * ring's knobs (struct rk__ring_tuning: RK_SQPOLL, ...) shaped the ring at creation
 * and stay.
 */
int rk_loop_set_wait_config(struct rk_loop *loop, const struct rk_config *cfg)
{
	if (rk__config_ctuning(cfg)->magic != RK__TUNING_MAGIC)
		return -EINVAL;
	rk_loop_set_wait(loop, &cfg->wait);
	rk__config_tuning(&loop->cfg)->wait = rk__config_ctuning(cfg)->wait;
	return 0;
}

const struct rk_config *rk_loop_config(const struct rk_loop *loop)
{
	return &loop->cfg;
}

void rk_loop_set_clock(struct rk_loop *loop, uint64_t (*fn)(void *arg), void *arg)
{
	loop->clock_fn = fn ? fn : mono_ns;
	loop->clock_arg = fn ? arg : NULL;
	loop->now = loop->clock_fn(loop->clock_arg);
	loop->mark = loop->now;
}

int rk_loop_signal_stopped(const struct rk_loop *loop)
{
	return loop->stop_signal;
}
