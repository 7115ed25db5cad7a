/* SPDX-License-Identifier: MIT */
/*
 * The rank loop: one io_uring driven by one thread, no global state.
 *
 * One iteration, in this order (rk_loop_run):
 *   1. read the clock once (after an empty spin: every fourth time, iter_begin());
 *      everything below takes that 'now'
 *   2. reap completions (at most RK_CQE_BATCH) and call each one's rk__op
 *   3. drain the inbox of cross-thread posts (FIFO per posting thread)
 *   4. poll every source (verbs CQs, GPU completion words, ...)
 *   5. run due timers
 *   6. before-wait: run queued flushers, so the frames that steps 2-5 queued
 *      leave in one send per link
 *   7. submit SQEs and wait per the policy:
 *        predict - a source expects its next event at T (rk_source_ops.expect):
 *                 sleep as 'block' does, but only until T less the margin, then
 *                 spin for the rest (the spin window does not apply)
 *        spin   - recently busy: one pause instruction, then the next iteration
 *        block  - publish "sleeping", fence, arm sources and re-check, then wait
 *                 for a CQE or the next timer
 *
 * Every handler reports RK_BUSY or RK_IDLE; a busy event restarts the spin
 * window. A wait interrupted by a signal (EINTR) is an empty wait.
 *
 * rk__loop_run_io() (a world's teardown) runs steps 1, 2, 4 and 6 only: no
 * post and no timer is delivered outside the application's own rk_loop_run().
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "runtime_int.h"

#define RK_CQE_BATCH 128
#define PREDICT_OVER_CAP	100000ull	/* ns: bound of each learned part of the margin */
#define PREDICT_LATE_RATE	256		/* learn: about one predictive wake in this late */
#define PREDICT_LATE_SHARE	64		/* ...the boost for that at most 1/this of the sleep */

enum phase { PH_RUN, PH_SPIN, PH_BLOCK };
/* what a spin waits for (rk_loop_stats' ns_spin_predict and ns_spin_window) */
enum spin_why { SPIN_OTHER, SPIN_PREDICT, SPIN_WINDOW };

struct rk_loop {
	struct io_uring ring;
	struct rk_config cfg;
	uint64_t now;
	uint64_t (*clock_fn)(void *arg);
	void *clock_arg;

	/* cross-thread side: the inbox (a Treiber stack) and the sleep flag */
	_Atomic(struct rk_post *) inbox;
	atomic_int sleeping;
	atomic_int wake_pending;
	int wake_fd;
	uint64_t wake_val;
	struct rk__op wake_op;
	bool wake_armed;

	/* SIGINT/SIGTERM through a signalfd */
	int sig_fd;
	struct signalfd_siginfo sig_info;
	struct rk__op sig_op;
	bool sig_armed;
	sigset_t sig_oldmask;
	int stop_signal;

	struct rk_timer *timers;	/* sorted by due */
	struct rk_source *sources;	/* with a poll(): polled every iteration */
	struct rk_source *quiet;	/* without one: only asked to expect(), arm(), told */
	struct rk__flusher *flush_head;
	struct rk__bufring bufring;
	unsigned int refs;

	bool stop;
	bool in_run;
	uint64_t last_busy;		/* time of the last busy event */
	unsigned int iter_busy;		/* busy events in this iteration */
	unsigned int iter_events;
	unsigned int spin_run;		/* empty spin iterations since the last yield */
	unsigned int spin_stale;	/* of them, begun without reading the clock */
	enum phase phase;		/* what the time since 'mark' is spent on */
	enum spin_why spin_why;		/* ...when spinning: why */
	uint64_t mark;

	/* predictive waits: see loop_wait() */
	uint64_t pred_deadline;		/* wake asked by this predictive sleep, 0 = none */
	struct rk_source *pred_next;	/* the source whose expectation came first */
	struct rk_source *pred_src;	/* ...that this predictive sleep was for */
	bool pred_found;		/* its event came (a poll, rk__loop_source_event()) */
	uint64_t oversleep_hi;		/* a high quantile (~99th pct) of timed wakes' lateness */
	uint64_t late_boost;		/* margin added when late, decays when early */
	uint64_t pred_sleep_ns;		/* the length of this predictive sleep */
	uint64_t skip_expect;		/* the last prediction the learned margin kept us from */
	bool after_park;		/* this iteration follows a wait that slept */
	bool parked;			/* a wait slept since the last iteration began */
	uint64_t park_ns;		/* the wait being armed: its timeout, UINT64_MAX = none */

	/* a blocking wait's timer deadline as a ring timeout: see park_timer() */
	struct rk__op tmo_op;
	struct __kernel_timespec tmo_ts;
	uint64_t tmo_at;		/* its deadline (monotonic ns) */
	bool tmo_armed;
	uint64_t tmo_arms;		/* ring timeouts armed (rk__loop_ring_timeouts()) */

	/* the learned spin window: see spin_window() */
	uint64_t gap_hi;		/* ~99th percentile of the gaps between busy events */
	uint32_t gap_n;			/* gaps sampled */
	uint64_t cut_busy;		/* the last_busy whose window was cut (counted once) */
	/* whose events the last busy work all was (rk__loop_busy_by()): spin_window() */
	struct rk_source *busy_src;	/* NULL = other work, or several sources' */
	struct rk_source *iter_src;	/* this iteration's source with busy events */
	unsigned int iter_src_n;	/* ...its busy events in this iteration */
	bool iter_mixed;		/* ...and another source's too */

	/* RK_DEFER_TASKRUN: the ring is created disabled and bound to the first
	 * thread that runs the loop (loop_bind()) */
	bool bind;			/* a SINGLE_ISSUER ring: runs need the owner */
	bool bound;			/* ...enabled by 'owner' */
	pthread_t owner;
	struct rk_loop_stats stats;
};

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

void rk__bufring_recycle(struct rk__bufring *r, unsigned int bid)
{
	io_uring_buf_ring_add(r->br, r->mem + (size_t)bid * r->size, r->size, bid, r->mask, 0);
	io_uring_buf_ring_advance(r->br, 1);
}

void rk__loop_ref(struct rk_loop *loop)
{
	loop->refs++;
}

void rk__loop_unref(struct rk_loop *loop)
{
	loop->refs--;
}

void rk__loop_note(struct rk_loop *loop, enum rk_activity a)
{
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

void rk__loop_source_event(struct rk_loop *loop, struct rk_source *src)
{
	if (src == loop->pred_src)
		loop->pred_found = true;
}

uint64_t rk__loop_iteration(const struct rk_loop *loop)
{
	return loop->stats.iterations;
}

uint64_t rk__loop_refresh(struct rk_loop *loop)
{
	loop->now = loop->clock_fn(loop->clock_arg);
	return loop->now;
}

/* ---- the wake eventfd and the signalfd ------------------------------------------ */

static void wake_arm(struct rk_loop *loop);

static void wake_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk_loop *loop = rk__container_of(op, struct rk_loop, wake_op);

	(void)flags;
	loop->wake_armed = false;
	/* The eventfd is drained: the next sleeping phase needs a new write. Pairs
	 * with the exchange in loop_kick(). */
	atomic_store_explicit(&loop->wake_pending, 0, memory_order_release);
	if (res != -ECANCELED)
		wake_arm(loop);
	rk__loop_note(loop, RK_IDLE);
}

static void wake_arm(struct rk_loop *loop)
{
	struct io_uring_sqe *sqe;

	if (loop->wake_armed || loop->wake_fd < 0)
		return;
	sqe = rk__loop_sqe(loop);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, loop->wake_fd, &loop->wake_val, sizeof(loop->wake_val), 0);
	rk__sqe_set_op(sqe, &loop->wake_op);
	loop->wake_armed = true;
}

static void sig_arm(struct rk_loop *loop);

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
		sig_arm(loop);	/* a second signal during shutdown stops again */
	rk__loop_note(loop, RK_BUSY);
}

static void sig_arm(struct rk_loop *loop)
{
	struct io_uring_sqe *sqe;

	if (loop->sig_armed || loop->sig_fd < 0)
		return;
	sqe = rk__loop_sqe(loop);
	if (!sqe)
		return;
	io_uring_prep_read(sqe, loop->sig_fd, &loop->sig_info, sizeof(loop->sig_info), 0);
	rk__sqe_set_op(sqe, &loop->sig_op);
	loop->sig_armed = true;
}

/* Wake the loop if, and only if, it has published that it sleeps. */
static void loop_kick(struct rk_loop *loop)
{
	uint64_t one = 1;
	ssize_t n;

	/* Pairs with the fence in loop_wait(): either the loop sees what the
	 * caller published before this call, or we see 'sleeping' and write. */
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
static unsigned int drain_inbox(struct rk_loop *loop)
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
	loop->stats.events += n;
	return n;
}

/* ---- timers: a sorted list (a rank has a handful of timers) ---------------------- */

void rk_timer_init(struct rk_timer *t, rk_timer_cb cb, void *data)
{
	memset(t, 0, sizeof(*t));
	t->cb = cb;
	t->data = data;
}

static void timer_unlink(struct rk_timer *t)
{
	struct rk_loop *loop = t->loop;

	if (t->prev)
		t->prev->next = t->next;
	else
		loop->timers = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->next = t->prev = NULL;
	t->active = false;
	rk__loop_unref(loop);
}

static void timer_insert(struct rk_loop *loop, struct rk_timer *t)
{
	struct rk_timer *it = loop->timers, *prev = NULL;

	while (it && it->due <= t->due) {
		prev = it;
		it = it->next;
	}
	t->prev = prev;
	t->next = it;
	if (prev)
		prev->next = t;
	else
		loop->timers = t;
	if (it)
		it->prev = t;
	t->active = true;
	t->loop = loop;
	rk__loop_ref(loop);
}

int rk_timer_start(struct rk_loop *loop, struct rk_timer *t, uint64_t delay_ns,
		   uint64_t period_ns)
{
	if (t->active)
		timer_unlink(t);
	t->due = loop->now + delay_ns;
	t->period = period_ns;
	timer_insert(loop, t);
	return 0;
}

void rk_timer_stop(struct rk_timer *t)
{
	if (t->active)
		timer_unlink(t);
}

static void run_timers(struct rk_loop *loop)
{
	struct rk_timer *t;
	unsigned int budget = 64;	/* bound the work of one iteration */

	while ((t = loop->timers) && t->due <= loop->now && budget--) {
		timer_unlink(t);
		if (t->period) {
			t->due += t->period;
			if (t->due <= loop->now)	/* we fell behind: skip, don't burst */
				t->due = loop->now + t->period;
			timer_insert(loop, t);
		}
		loop->stats.events++;
		rk__loop_note(loop, t->cb(t, loop->now));
	}
}

/* ---- sources and fd watches ------------------------------------------------------ */

void rk_source_init(struct rk_source *src, const struct rk_source_ops *ops, void *data)
{
	memset(src, 0, sizeof(*src));
	src->ops = ops;
	src->data = data;
}

int rk_loop_add_source(struct rk_loop *loop, struct rk_source *src)
{
	struct rk_source **head = src->ops->poll ? &loop->sources : &loop->quiet;

	if (src->loop)
		return -EALREADY;
	src->loop = loop;
	src->next = *head;
	*head = src;
	rk__loop_ref(loop);
	return 0;
}

bool rk_loop_predicts(const struct rk_loop *loop)
{
	return loop->cfg.wait.predict && loop->cfg.wait.mode == RK_WAIT_ADAPTIVE;
}

int rk_loop_remove_source(struct rk_loop *loop, struct rk_source *src)
{
	struct rk_source **pp;

	if (src->loop != loop)
		return -ENOENT;
	for (pp = src->ops->poll ? &loop->sources : &loop->quiet; *pp != src; pp = &(*pp)->next)
		;
	*pp = src->next;
	if (loop->pred_src == src)
		loop->pred_src = NULL;
	if (loop->pred_next == src)
		loop->pred_next = NULL;
	if (loop->busy_src == src)
		loop->busy_src = NULL;
	if (loop->iter_src == src)
		loop->iter_src = NULL;
	src->next = NULL;
	src->loop = NULL;
	rk__loop_unref(loop);
	return 0;
}

struct rk_source *rk__loop_source_find(struct rk_loop *loop, const struct rk_source_ops *ops)
{
	struct rk_source *s;

	for (s = ops->poll ? loop->sources : loop->quiet; s; s = s->next)
		if (s->ops == ops)
			return s;
	return NULL;
}

void rk__loop_busy_by(struct rk_loop *loop, struct rk_source *src)
{
	if (loop->iter_src && loop->iter_src != src)
		loop->iter_mixed = true;
	loop->iter_src = src;
	loop->iter_src_n++;
}

void rk__loop_count_prewarm(struct rk_loop *loop)
{
	loop->stats.prewarms++;
}

/* Poll every source; what they handle counts as busy events of this iteration. */
static void poll_sources(struct rk_loop *loop)
{
	struct rk_source *s, *next;
	int ret;

	for (s = loop->sources; s; s = next) {
		next = s->next;
		ret = s->ops->poll(s, loop->now);
		if (ret > 0) {
			if (s == loop->pred_src)
				loop->pred_found = true;
			loop->stats.events += (uint64_t)ret;
			loop->iter_events += (unsigned int)ret;
			loop->iter_busy += (unsigned int)ret;
		} else if (ret < 0) {
			rk__warn(loop->cfg.rank, "source %s: %s", s->ops->name, rk_strerror(ret));
		}
	}
}

/* The earliest time a source expects its next event at, 0 = none predicted. */
static uint64_t sources_expect(struct rk_loop *loop)
{
	struct rk_source *s, *lists[2] = { loop->sources, loop->quiet };
	uint64_t t, first = 0;
	unsigned int i;

	loop->pred_next = NULL;
	for (i = 0; i < 2; i++) {
		for (s = lists[i]; s; s = s->next) {
			if (!s->ops->expect)
				continue;
			t = s->ops->expect(s, loop->now);
			if (t && (!first || t < first)) {
				first = t;
				loop->pred_next = s;
			}
		}
	}
	return first;
}

/* Tell every source with a verdict() but @skip that the loop spins for an event now. */
static void sources_spin(struct rk_loop *loop, struct rk_source *skip)
{
	struct rk_source *s, *next, *lists[2] = { loop->sources, loop->quiet };
	unsigned int i;

	for (i = 0; i < 2; i++) {
		for (s = lists[i]; s; s = next) {
			next = s->next;
			if (s != skip && s->ops->verdict)
				s->ops->verdict(s, RK_VERDICT_SPIN);
		}
	}
}

/* ---- learned arrivals (struct rk__gaps, runtime_int.h) ---------------------------- */

/* Warm, not held, and its gaps long and regular: what it predicts can be slept on.
 * Irregular gaps (a deviation above a quarter of the mean) leave the waits to the
 * window and block rules. */
static bool gaps_trusted(const struct rk__gaps *g)
{
	return g->n >= RK__GAPS_WARM && !g->hold && g->mean >= RK__GAPS_MIN_NS &&
	       g->dev * 4 <= g->mean;
}

/*
 * The deviation to predict with. While the learner has fewer than
 * RK__GAPS_SETTLE gaps, at least mean/128: the spread of two or three gaps
 * can be near 0 by chance, and a wake that late for the next one costs a
 * block's latency (the tail); a little more spinning costs less.
 */
static uint64_t gaps_dev(const struct rk__gaps *g)
{
	if (g->n < RK__GAPS_SETTLE && g->dev < g->mean / 128)
		return g->mean / 128;
	return g->dev;
}

/*
 * When the next burst is overdue: mean + 4 deviations after this one's start,
 * plus a slack of mean/16 (20 us to 1 ms). Past it the learner predicts
 * nothing. Short, because every microsecond of it is spun for: a link whose
 * traffic stops costs this much spinning at idle entry, and a burst that comes
 * later still is rare enough (4 deviations) for a block's wake latency.
 * Unless bursts came later than 4 deviations lately: a peer whose own timer
 * wakes late now and then sends late by that much, and the deviation, an
 * average, does not see a rare one. Then the bound is that lateness (late_hi)
 * + the slack, at most RK__GAPS_SLACK_MAX_NS past the mean (when 4 deviations
 * and the slack are not more already): it costs spinning only where a burst
 * does come that late, and at idle entry, where it keeps the spin under 2 ms.
 */
static uint64_t gaps_until(const struct rk__gaps *g)
{
	uint64_t slack = g->mean / 16, over, wide;

	if (slack < RK__PRED_MIN_SLACK)
		slack = RK__PRED_MIN_SLACK;
	if (slack > RK__GAPS_SLACK_MAX_NS)
		slack = RK__GAPS_SLACK_MAX_NS;
	over = 4 * gaps_dev(g) + slack;
	wide = g->late_hi + slack;
	if (wide > over)
		over = wide < RK__GAPS_SLACK_MAX_NS ? wide :
		       over > RK__GAPS_SLACK_MAX_NS ? over : RK__GAPS_SLACK_MAX_NS;
	return g->first + g->mean + over;
}

static uint64_t gaps_expect(struct rk_source *src, uint64_t now)
{
	struct rk__gaps *g = rk__container_of(src, struct rk__gaps, src);

	if (!src->loop->cfg.wait.learn || !gaps_trusted(g))
		return 0;
	if (now < g->last + RK__GAPS_BURST_NS)	/* the burst may go on: spin for it */
		return 0;
	if (now > gaps_until(g))
		return 0;	/* overdue: it says nothing more */
	return g->first + g->mean - 3 * gaps_dev(g);	/* > first: dev <= mean / 4 */
}

static void gaps_verdict(struct rk_source *src, enum rk_verdict v);

static const struct rk_source_ops gaps_ops = {
	.name = "learned-gaps",
	.expect = gaps_expect,
	.verdict = gaps_verdict,
};

static bool is_learner(const struct rk_source *src)
{
	return src && src->ops == &gaps_ops;
}

static void gaps_sample(struct rk__gaps *g, uint64_t d)
{
	uint64_t dev;

	if (!g->n || d < g->lo)
		g->lo = d;
	if (!g->n) {
		g->mean = d;
		g->dev = d / 8;
	} else if (g->n == 1) {
		/* the spread of the first two gaps, not the guess above: a few
		 * regular gaps then predict (RK__GAPS_WARM), and every gap that is
		 * not predicted costs a spin window */
		g->dev = d > g->mean ? d - g->mean : g->mean - d;
		g->mean = (g->mean + d) / 2;
	} else {
		dev = d > g->mean ? d - g->mean : g->mean - d;
		g->dev = (g->dev * 3 + dev) / 4;
		g->mean = (g->mean * 7 + d) / 8;
	}
	if (g->n < UINT32_MAX)
		g->n++;
}

/*
 * A burst @d ns after the one before: how far past the mean it came, as a peak
 * that decays by 1/RK__GAPS_LATE_DECAY a burst (a rare late one is still
 * covered a few hundred bursts later). Every burst counts, also one seen only
 * after a sleep (it came at most that late) that the mean leaves out; at most
 * half a gap: a burst later than that is more likely a pause of the traffic.
 */
static void gaps_late(struct rk__gaps *g, uint64_t d)
{
	uint64_t late = d > g->mean ? d - g->mean : 0;

	if (late > g->mean / 2)
		late = g->mean / 2;
	if (late >= g->late_hi)
		g->late_hi = late;
	else
		/* rounded up: a small peak decays to 0 too */
		g->late_hi -= (g->late_hi + RK__GAPS_LATE_DECAY - 1) / RK__GAPS_LATE_DECAY;
}

void rk__gaps_arrival(struct rk_loop *loop, struct rk__gaps *g)
{
	uint64_t now = loop->now, d;
	bool late = loop->after_park;

	if (!g->src.loop) {
		rk_source_init(&g->src, &gaps_ops, NULL);
		rk_loop_add_source(loop, &g->src);
		g->hold_next = RK__GAPS_HOLD;
	}
	rk__loop_busy_by(loop, &g->src);	/* whose work this iteration's is */
	if (g->first && now < g->last + RK__GAPS_BURST_NS) {
		g->last = now;		/* the same burst */
		return;
	}
	if (g->first && now > g->first) {
		d = now - g->first;
		if (loop->cfg.wait.learn && rk_loop_predicts(loop) && gaps_trusted(g) &&
		    now > gaps_until(g))
			loop->stats.learn_overdue++;	/* what the window had given up on */
		if (g->n)
			gaps_late(g, d);
		/*
		 * An arrival seen after a sleep may have waited up to a wake's
		 * latency. Both ends seen so: the delays cancel (a gap beyond
		 * the spin window is only ever seen like that); only the start:
		 * the gap looks shorter, which is safe; only the end: longer,
		 * so it may teach an earlier gap, never a later one (but while
		 * cold anything is better than nothing).
		 */
		if (!late || g->first_late || g->n < RK__GAPS_WARM || d < g->mean)
			gaps_sample(g, d);
		if (g->hold)
			g->hold--;
	}
	if (late)
		loop->stats.learn_woken++;
	g->first = g->last = now;
	g->first_late = late;
	rk__loop_source_event(loop, &g->src);	/* what a prediction waited for */
}

void rk__gaps_detach(struct rk__gaps *g)
{
	if (g->src.loop)
		rk_loop_remove_source(g->src.loop, &g->src);
}

/*
 * How a predictive sleep for the learner ended. Cut short by other busy work:
 * hold (see struct rk__gaps), twice as long as last time. Early, as meant: the
 * next cut holds for RK__GAPS_HOLD bursts again.
 */
static void gaps_verdict(struct rk_source *src, enum rk_verdict v)
{
	struct rk__gaps *g = rk__container_of(src, struct rk__gaps, src);

	if (v == RK_VERDICT_EARLY) {
		g->hold_next = RK__GAPS_HOLD;
	} else if (v == RK_VERDICT_CUT) {
		src->loop->stats.learn_holds++;
		g->hold = g->hold_next;
		if (g->hold_next < RK__GAPS_HOLD_MAX)
			g->hold_next *= 2;
	}
}

/*
 * The spin window after the last busy event: spin_ns, or, once the loop has
 * seen RK__GAP_WARM gaps between busy events, 4 times their ~99th percentile
 * (never below learn_spin_min_ns): a window far longer than any gap seen
 * spins for nothing at the start of an idle episode. And when the last busy
 * work was all one trusted learner's arrivals, the window ends where that
 * learner's next burst is overdue (gaps_until()): the learner has said when
 * its next one comes, and the predictive wait slept and spun for it; spinning
 * on past that is the idle-entry spin of a link whose traffic stopped. While
 * that learner is still cold (RK__GAPS_WARM), but each gap it sampled was
 * twice learn_spin_min_ns or more, the window is learn_spin_min_ns: at 10 ms
 * gaps each of those costs 1 ms of spinning, not the whole gap (the frame
 * that ends it pays a block's latency, a few times per link). A learner that
 * is warm but not trusted (irregular) gets that window only when every gap it
 * sampled was twice the window or more. Other work (a post, a timer, a GPU
 * completion) keeps the quantile's window.
 */
#define RK__GAP_WARM	64
static uint64_t spin_window(const struct rk_loop *loop)
{
	const struct rk_wait_policy *w = &loop->cfg.wait;
	const struct rk__gaps *g;
	uint64_t win, until;

	if (!w->learn || !w->predict)
		return w->spin_ns;
	win = w->spin_ns;
	if (loop->gap_n >= RK__GAP_WARM) {
		win = loop->gap_hi * 4;
		if (win < w->learn_spin_min_ns)
			win = w->learn_spin_min_ns;
		if (win > w->spin_ns)
			win = w->spin_ns;
	}
	if (is_learner(loop->busy_src)) {
		g = rk__container_of(loop->busy_src, struct rk__gaps, src);
		if (gaps_trusted(g)) {
			until = gaps_until(g);
			until = until > loop->last_busy ? until - loop->last_busy : 0;
			if (until < win)
				win = until;
		} else if (g->n && !g->hold && w->learn_spin_min_ns < win &&
			   (g->lo / 2 >= win ||
			    (g->n < RK__GAPS_WARM && g->lo / 2 >= w->learn_spin_min_ns))) {
			/* no gap of its ever came within twice the window, or it
			 * is still cold and none came within twice the short one:
			 * the next is unlikely to (a block's latency if so) */
			win = w->learn_spin_min_ns;
		}
	}
	return win;
}

/*
 * A busy event @d ns after the one before: track a high quantile of these
 * gaps stochastically, in proportion to it (a gap above it raises it by a
 * quarter, one below lowers it by 1/1024: about one gap in 250 lies above).
 */
static void gap_learn(struct rk_loop *loop, uint64_t d)
{
	if (!loop->gap_n)
		loop->gap_hi = d;
	else if (d > loop->gap_hi)
		loop->gap_hi += loop->gap_hi / 4 + 1000;
	else
		loop->gap_hi -= loop->gap_hi / 1024;
	if (loop->gap_n < UINT32_MAX)
		loop->gap_n++;
}

/* Before blocking: arm each source (or poll it, for sources woken by their
 * producer). Return > 0 when something is pending and the loop must not block. */
static int arm_sources(struct rk_loop *loop)
{
	struct rk_source *s, *next;
	int pending = 0, ret;

	for (s = loop->quiet; s; s = next) {
		next = s->next;
		ret = s->ops->arm ? s->ops->arm(s) : 0;
		if (ret > 0)
			pending += ret;
	}
	for (s = loop->sources; s; s = next) {
		next = s->next;
		if (s->ops->arm) {
			ret = s->ops->arm(s);
		} else {
			/* This poll handles what it finds: busy work like step 4's,
			 * so it is counted and restarts the spin window. */
			ret = s->ops->poll(s, loop->now);
			if (ret > 0) {
				loop->stats.events += (uint64_t)ret;
				loop->stats.busy_events += (uint64_t)ret;
				loop->last_busy = loop->now;
				loop->busy_src = NULL;
			}
		}
		if (ret > 0)
			pending += ret;
	}
	return pending;
}

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

/* ---- create / destroy ------------------------------------------------------------ */

static int bufring_setup(struct rk_loop *loop)
{
	struct rk__bufring *r = &loop->bufring;
	struct io_uring_buf_reg reg;
	void *br;
	unsigned int i;
	int ret;

	r->size = loop->cfg.rx_buf_size;
	r->count = loop->cfg.rx_buf_count;
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
	ret = io_uring_register_buf_ring(&loop->ring, &reg, 0);
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

static void bufring_teardown(struct rk_loop *loop)
{
	struct rk__bufring *r = &loop->bufring;

	if (!r->br)
		return;
	io_uring_unregister_buf_ring(&loop->ring, r->bgid);
	free(r->br);
	free(r->mem);
	r->br = NULL;
}

/*
 * The ring's setup parameters for @w: task work deferred to the one issuer's
 * waits (@defer), else with or without COOP_TASKRUN (@coop). A deferring ring
 * starts disabled, so that the thread that runs the loop, not the one that
 * creates it, becomes its issuer (loop_bind()).
 */
static void ring_params(const struct rk_wait_policy *w, bool defer, bool coop,
			struct io_uring_params *p)
{
	memset(p, 0, sizeof(*p));
	if (defer)
		p->flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
			    IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_R_DISABLED;
	else if (coop)
		p->flags |= IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
	if (w->sqpoll) {
		uint64_t idle_ms = w->spin_ns / 1000000;

		p->flags |= IORING_SETUP_SQPOLL;
		p->sq_thread_idle = (unsigned int)(idle_ms ? idle_ms : 1);
		if (w->sqpoll_cpu >= 0) {
			p->flags |= IORING_SETUP_SQ_AFF;
			p->sq_thread_cpu = (unsigned int)w->sqpoll_cpu;
		}
	}
}

static int ring_setup(struct rk_loop *loop)
{
	struct rk_wait_policy *w = &loop->cfg.wait;
	struct io_uring_params p;
	int ret;

	if (w->defer_taskrun) {
		ring_params(w, true, false, &p);
		ret = io_uring_queue_init_params(loop->cfg.ring_entries, &loop->ring, &p);
		if (ret != -EINVAL) {
			loop->bind = ret == 0;
			return ret;
		}
		/* Kernels before 6.1 lack DEFER_TASKRUN, and SQPOLL refuses it: the
		 * ring the other knobs ask for, and rk_loop_config() says so. */
		rk__info(loop->cfg.rank, "io_uring: DEFER_TASKRUN refused%s, continuing without",
			 w->sqpoll ? " with SQPOLL" : "");
		w->defer_taskrun = false;
	}
	ring_params(w, false, w->coop_taskrun, &p);
	ret = io_uring_queue_init_params(loop->cfg.ring_entries, &loop->ring, &p);
	if (ret == -EINVAL && w->coop_taskrun) {
		/*
		 * Kernels before 5.19 lack COOP_TASKRUN/TASKRUN_FLAG, and newer ones
		 * refuse them with SQPOLL: spinning is then slower (ARCHITECTURE.md),
		 * but everything works. The rest is asked for again as it was, the
		 * SQ thread's CPU included.
		 */
		rk__info(loop->cfg.rank, "io_uring: COOP_TASKRUN refused%s, continuing without",
			 w->sqpoll ? " with SQPOLL" : "");
		ring_params(w, false, false, &p);
		ret = io_uring_queue_init_params(loop->cfg.ring_entries, &loop->ring, &p);
	}
	return ret;
}

/*
 * RK_SQPOLL=auto: a polling kernel thread is only worth its core when there
 * are cores to spare (ARCHITECTURE.md): on with RK_SQPOLL_AUTO_CPUS or more
 * CPUs in this thread's affinity mask, off below (2 vCPUs: it starves the ranks).
 */
static void sqpoll_decide(struct rk_loop *loop)
{
	cpu_set_t set;
	int n = 0;

	if (!sched_getaffinity(0, sizeof(set), &set))
		n = CPU_COUNT(&set);
	loop->cfg.wait.sqpoll = n >= RK_SQPOLL_AUTO_CPUS;
	rk__info(loop->cfg.rank, "RK_SQPOLL=auto: %d CPUs in the affinity mask: SQPOLL %s", n,
		 loop->cfg.wait.sqpoll ? "on" : "off");
}

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
	if (loop->cfg.wait.sqpoll_auto)
		sqpoll_decide(loop);
	loop->clock_fn = mono_ns;
	loop->sig_fd = -1;
	loop->wake_op.fn = wake_done;
	loop->tmo_op.fn = tmo_done;
	loop->sig_op.fn = sig_done;
	atomic_init(&loop->inbox, NULL);
	atomic_init(&loop->sleeping, 0);
	atomic_init(&loop->wake_pending, 0);

	loop->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (loop->wake_fd < 0) {
		ret = -errno;
		goto err_free;
	}
	ret = ring_setup(loop);
	if (ret < 0)
		goto err_close_wake;
	ret = bufring_setup(loop);
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
		sig_arm(loop);
	}
	wake_arm(loop);
	loop->now = loop->clock_fn(NULL);
	loop->mark = loop->now;
	loop->phase = PH_RUN;
	*out = loop;
	return 0;

err_sigmask:
	pthread_sigmask(SIG_SETMASK, &loop->sig_oldmask, NULL);
err_bufring:
	bufring_teardown(loop);
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
	bufring_teardown(loop);
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
		if (loop->spin_why == SPIN_PREDICT)
			loop->stats.ns_spin_predict += d;
		else if (loop->spin_why == SPIN_WINDOW)
			loop->stats.ns_spin_window += d;
		break;
	case PH_BLOCK:
		loop->stats.ns_blocked += d;
		break;
	}
	loop->mark = t;
}

static unsigned int reap(struct rk_loop *loop)
{
	struct io_uring_cqe *cqes[RK_CQE_BATCH];
	unsigned int n, i;

	n = io_uring_peek_batch_cqe(&loop->ring, cqes, RK_CQE_BATCH);
	for (i = 0; i < n; i++) {
		struct io_uring_cqe *cqe = cqes[i];
		uint64_t ud = cqe->user_data;
		int res = cqe->res;
		unsigned int flags = cqe->flags;

		/* Consume before dispatch: a handler may submit and reap recursively. */
		io_uring_cqe_seen(&loop->ring, cqe);
		if (ud == RK_UDATA_INTERNAL || ud == 0)
			continue;
		((struct rk__op *)(uintptr_t)ud)->fn((struct rk__op *)(uintptr_t)ud, res, flags);
	}
	loop->stats.events += n;
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

static uint64_t next_timer_in(struct rk_loop *loop)
{
	if (!loop->timers)
		return UINT64_MAX;
	return loop->timers->due > loop->now ? loop->timers->due - loop->now : 0;
}

static void ns_to_ts(uint64_t ns, struct __kernel_timespec *ts)
{
	ts->tv_sec = (long long)(ns / 1000000000ull);
	ts->tv_nsec = (long long)(ns % 1000000000ull);
}

enum park { PARK_BLOCK, PARK_PREDICT, PARK_IO };

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
static bool park_timer(struct rk_loop *loop, uint64_t timeout_ns, enum park how)
{
	uint64_t due = loop->now + timeout_ns;	/* the next timer's own due */
	struct io_uring_sqe *sqe;

	if (how != PARK_BLOCK || timeout_ns < PARK_TIMER_MIN_NS || loop->clock_fn != mono_ns)
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
 * with a full fence between (pairs with loop_kick()), so a post either is seen
 * here or finds 'sleeping' set and writes the eventfd whose read is armed.
 * PARK_PREDICT: @timeout_ns ends shortly before a source's predicted event;
 * the source's arm() may rely on that (rk_source_ops.expect).
 * PARK_IO (rk__loop_run_io()): posts and a pending stop are not its business,
 * so neither keeps it from sleeping; a post still wakes it (a spurious wake).
 */
static void loop_park(struct rk_loop *loop, uint64_t timeout_ns, enum park how)
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
	if ((how != PARK_IO && atomic_load_explicit(&loop->inbox, memory_order_relaxed)) ||
	    io_uring_cq_ready(&loop->ring) || arm_sources(loop) > 0 || loop->flush_head ||
	    (how != PARK_IO && loop->stop)) {
		atomic_store_explicit(&loop->sleeping, 0, memory_order_relaxed);
		io_uring_submit(&loop->ring);
		return;
	}
	wake_arm(loop);
	if (how == PARK_PREDICT) {
		loop->stats.predict_waits++;
		loop->pred_deadline = loop->now + timeout_ns;
		loop->pred_sleep_ns = timeout_ns;
		loop->pred_src = loop->pred_next;
		loop->pred_found = false;
		if (is_learner(loop->pred_src))
			loop->stats.learn_waits++;
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
static void loop_spin(struct rk_loop *loop, enum spin_why why)
{
	const struct rk_wait_policy *w = &loop->cfg.wait;

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
		sched_yield();
	} else {
		cpu_relax();
	}
}

/*
 * The margin of a predictive sleep: the configured base, how late timed wakes
 * have come (a VM's timer wake is tens of us late, ARCHITECTURE.md), and a
 * boost that grows when a prediction turned out late and decays when early
 * (predict_late()).
 */
static uint64_t predict_margin(const struct rk_loop *loop)
{
	return loop->cfg.wait.predict_margin_ns + loop->oversleep_hi + loop->late_boost;
}

static uint64_t late_step(const struct rk_loop *loop)
{
	uint64_t base = loop->cfg.wait.predict_margin_ns;

	return base / 4 > 2000 ? base / 4 : 2000;
}

/*
 * A predictive sleep's source came late: widen the margin by a step. With
 * learn, each early wake takes back 1/PREDICT_LATE_RATE of a step
 * (predict_early()), so the boost settles where about one wake in
 * PREDICT_LATE_RATE is late, whatever made them late: a timer wake later than
 * the oversleep quantile covers (a rare one: the quantile forgets half of it
 * in 90 wakes), or events earlier than predicted. A late wake is a frame
 * that waited for a wake, on a path gone cold; one in a hundred is a tail at
 * the 99th percentile. Bounded by 1/PREDICT_LATE_SHARE of the sleep that was
 * late: every nanosecond of it is spun for before every event, and where late
 * wakes do not stop (a thread descheduled for milliseconds) it buys nothing.
 * Without learn each early wake takes back 1/32 of it: the boost stays a few
 * microseconds (one wake in a hundred late: 1.6 us).
 */
static void predict_late(struct rk_loop *loop, bool overslept)
{
	uint64_t cap = PREDICT_OVER_CAP;

	loop->stats.predict_late++;
	if (overslept)
		loop->stats.predict_overslept++;
	if (loop->cfg.wait.learn && loop->pred_sleep_ns / PREDICT_LATE_SHARE < cap)
		cap = loop->pred_sleep_ns / PREDICT_LATE_SHARE;
	if (loop->late_boost >= cap)
		return;		/* a boost learned for longer sleeps is not cut */
	loop->late_boost += late_step(loop);
	if (loop->late_boost > cap)
		loop->late_boost = cap;
}

/*
 * A predictive sleep woke before its event, as meant: the boost fades, and
 * with learn is cut to 1/PREDICT_LATE_SHARE of this sleep: one grown for long
 * sleeps is not paid at every short one.
 */
static void predict_early(struct rk_loop *loop)
{
	uint64_t down = loop->late_boost / 32, cap;

	if (loop->cfg.wait.learn) {
		down = late_step(loop) / PREDICT_LATE_RATE;
		if (down > loop->late_boost)
			down = loop->late_boost;
		cap = loop->pred_sleep_ns / PREDICT_LATE_SHARE;
		if (loop->late_boost - down > cap)
			down = loop->late_boost - cap;
	}
	loop->late_boost -= down;
}

/*
 * After a predictive sleep: was it cut short, early (spin now) or late? The
 * verdict for the source the sleep was for, 0 = none; *@warm: tell the other
 * sources that the loop spins for an event now (RK_VERDICT_SPIN: the TCP
 * rehearsal, RK_PREWARM). @found: the event of the source the sleep was for
 * came (only that one counts: another source's event, e.g. a lazy GPU mark,
 * says nothing of it).
 */
static enum rk_verdict predict_account(struct rk_loop *loop, uint64_t deadline, bool found,
				       bool *warm)
{
	uint64_t over;

	*warm = false;
	if (loop->now + 1000 < deadline) {
		/* woken early: by the awaited event (a frame on the ring) it was
		 * late; by another one, it says nothing */
		if (found) {
			predict_late(loop, false);
			return RK_VERDICT_LATE;
		}
		loop->stats.predict_cut++;
		return loop->iter_busy ? RK_VERDICT_CUT : 0;
	}
	over = loop->now > deadline ? loop->now - deadline : 0;
	loop->stats.ns_oversleep += over;
	/*
	 * Rise fast, fall slowly: an oversleep costs latency, a wide margin only
	 * CPU. Capped: a thread descheduled for milliseconds says nothing about the
	 * timer, and a margin wider than the waits would stop every predictive
	 * sleep, and with them the samples that could narrow it again.
	 */
	if (over > PREDICT_OVER_CAP)
		over = PREDICT_OVER_CAP;
	/* the tail, not the mean: a wake later than the margin costs a block's latency */
	if (over > loop->oversleep_hi)
		loop->oversleep_hi += (over - loop->oversleep_hi) / 2;
	else
		loop->oversleep_hi -= loop->oversleep_hi / 128;
	if (found) {
		predict_late(loop, true);
		return RK_VERDICT_LATE;
	}
	loop->stats.predict_early++;
	predict_early(loop);
	*warm = loop->cfg.wait.prewarm;
	return RK_VERDICT_EARLY;
}

/* A predictive sleep ended: the policy learns from its wake, the sources hear how it went. */
static void wake_report(struct rk_loop *loop)
{
	struct rk_source *src = loop->pred_src;
	enum rk_verdict v;
	bool warm;

	v = predict_account(loop, loop->pred_deadline, loop->pred_found, &warm);
	loop->pred_deadline = 0;
	loop->pred_src = NULL;
	if (v && src && src->ops->verdict)
		src->ops->verdict(src, v);
	if (warm)
		sources_spin(loop, src);
}

/*
 * A source predicts its next event at @expect: sleep until @expect less the
 * margin when that is at least predict_min away (RK__GAPS_SLEEP_MIN_NS for a
 * learner), else spin; a timer due before the wake is slept and spun for
 * instead. This decides the wait: the window and block rules do not apply.
 * Adaptive mode only: 'block' and 'spin' keep their one phase.
 */
static void predict_wait(struct rk_loop *loop, uint64_t expect, uint64_t tmo)
{
	const struct rk_wait_policy *w = &loop->cfg.wait;
	uint64_t margin = predict_margin(loop);
	uint64_t wake = expect > margin ? expect - margin : 0;
	uint64_t min = w->predict_min_ns;

	/* A learned arrival this close is most likely the answer to what this
	 * loop just sent: a sleep would save little and wake late for it. */
	if (is_learner(loop->pred_next) && min < RK__GAPS_SLEEP_MIN_NS)
		min = RK__GAPS_SLEEP_MIN_NS;
	if (wake <= loop->now + min) {
		/*
		 * Due (or too close to sleep): spin; the source stops predicting
		 * once it is overdue, so this is bounded. When only the learned
		 * part of the margin stands in the way, let it fade a step, once
		 * per prediction, as an early wake would: else a margin grown in
		 * one bad stretch stops every later sleep, and with them the
		 * samples that could narrow it again.
		 */
		if (expect > loop->now + w->predict_margin_ns + min &&
		    expect != loop->skip_expect) {
			loop->skip_expect = expect;
			loop->late_boost -= loop->late_boost / 32;
			loop->oversleep_hi -= loop->oversleep_hi / 16;
		}
		loop_spin(loop, SPIN_PREDICT);
		return;
	}
	if (wake - loop->now > (tmo > margin ? tmo - margin : 0)) {
		/*
		 * A timer is due first, or so soon after the wake that its own
		 * wake comes first. Nothing is predicted before the wake, so the
		 * spin window does not apply (it would spin up to 20 ms for a
		 * timer a heartbeat away): sleep until the timer less the margin,
		 * as for a predicted event, and spin to it, so it runs on time
		 * and on a thread that is awake (not one the timer's lateness
		 * just woke). A sleep for the timer, no source's: its lateness
		 * teaches the margin, and no source is judged early or late by it.
		 */
		if (tmo <= margin + w->predict_min_ns) {
			loop_spin(loop, SPIN_PREDICT);
			return;
		}
		loop->pred_next = NULL;
		loop_park(loop, tmo - margin, PARK_PREDICT);
		return;
	}
	/* the spin after this sleep's wake is the margin doing its work, not a
	 * sleep the margin kept the loop from: no fade for this prediction */
	loop->skip_expect = expect;
	loop_park(loop, wake - loop->now, PARK_PREDICT);
}

static void loop_wait(struct rk_loop *loop)
{
	const struct rk_wait_policy *w = &loop->cfg.wait;
	uint64_t since = loop->now - loop->last_busy;
	uint64_t tmo = next_timer_in(loop);
	uint64_t expect;

	if (tmo == 0 || loop->flush_head) {
		io_uring_submit(&loop->ring);
		return;
	}
	if (w->mode == RK_WAIT_SPIN) {
		loop_spin(loop, SPIN_OTHER);
		return;
	}
	if (w->mode == RK_WAIT_ADAPTIVE && w->predict && (loop->sources || loop->quiet)) {
		expect = sources_expect(loop);
		if (expect) {
			predict_wait(loop, expect, tmo);
			return;
		}
	}
	if (w->mode == RK_WAIT_ADAPTIVE && since < w->spin_ns) {
		if (since < spin_window(loop)) {
			loop_spin(loop, SPIN_WINDOW);
			return;
		}
		if (loop->cut_busy != loop->last_busy) {
			loop->cut_busy = loop->last_busy;
			loop->stats.window_cuts++;
		}
	}
	loop_park(loop, tmo, PARK_BLOCK);
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
		if (loop->last_busy && t > loop->last_busy)
			gap_learn(loop, t - loop->last_busy);
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
	drain_inbox(loop);
	if (loop->sources)
		poll_sources(loop);
	if (loop->pred_deadline)
		wake_report(loop);
	if (loop->timers && loop->timers->due <= loop->now)
		run_timers(loop);
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
	/* liburing 2.3 has no io_uring_enable_rings() in its library */
	ret = (int)syscall(__NR_io_uring_register, loop->ring.ring_fd,
			   IORING_REGISTER_ENABLE_RINGS, NULL, 0);
	if (ret < 0)
		return -errno;
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
	       (w->mode == RK_WAIT_ADAPTIVE && loop->now - loop->last_busy < spin_window(loop));
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
		poll_sources(loop);
	/* a predictive sleep's accounting belongs to the policy, which is not running */
	loop->pred_deadline = 0;
	loop->pred_src = NULL;
	run_flushers(loop);
	iter_account(loop);
	if (loop->iter_events || loop->flush_head)
		io_uring_submit(&loop->ring);
	else if (io_spins(loop))
		loop_spin(loop, SPIN_OTHER);	/* a link drains at the speed it did before */
	else
		loop_park(loop, timeout_ns, PARK_IO);
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

void rk_loop_stats(const struct rk_loop *loop, struct rk_loop_stats *out)
{
	*out = loop->stats;
	out->predict_margin_ns = predict_margin(loop);
	out->spin_window_ns = spin_window(loop);
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
	loop->cfg.wait.spin_yield = w->spin_yield;
	loop->cfg.wait.predict = w->predict;
	loop->cfg.wait.predict_margin_ns = w->predict_margin_ns;
	loop->cfg.wait.predict_min_ns = w->predict_min_ns ? w->predict_min_ns : 1000;
	loop->cfg.wait.learn = w->learn;
	loop->cfg.wait.learn_spin_min_ns = w->learn_spin_min_ns;
	loop->cfg.wait.prewarm = w->prewarm;
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
