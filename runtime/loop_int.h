/* SPDX-License-Identifier: MIT */
/*
 * Inside a rank loop: struct rk_loop, for the loop's own files only: loop.c
 * (its life and its iteration: reap, wait, run), source.c (event sources),
 * timer.c (timers) and post.c (posts and wakes from other threads, signals).
 * The rest of the library sees a loop through runtime_int.h's rk__loop_*().
 * Never installed.
 */
#ifndef RK_LOOP_INT_H
#define RK_LOOP_INT_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/signalfd.h>

#include "runtime_int.h"
#include "wait_int.h"

/* What the time since rk_loop.mark is spent on (rk_loop_stats' ns_*). */
enum rk__phase { PH_RUN, PH_SPIN, PH_BLOCK };

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
	bool in_timers;			/* the timer step runs: timers started now are fresh */
	unsigned int nr_fresh;		/* ...timers started so (rk__timers_run() clears them) */
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
	uint64_t yields;		/* sched_yield() calls of the spin (RK_SPIN_YIELD) */
	unsigned int spin_stale;	/* of them, begun without reading the clock */
	enum rk__phase phase;		/* what the time since 'mark' is spent on */
	enum rk__spin_why spin_why;	/* ...when spinning: why */
	uint64_t mark;

	/* the wait decisions (wait.c), and the predictive sleep under way */
	struct rk__wait wait;
	uint64_t pred_deadline;		/* wake asked by this predictive sleep, 0 = none */
	struct rk_source *pred_next;	/* the source whose expectation came first */
	struct rk_source *pred_src;	/* ...that this predictive sleep was for */
	bool pred_found;		/* its event came (a poll, rk__loop_source_event()) */
	uint64_t pred_sleep_ns;		/* the length of this predictive sleep */
	bool after_park;		/* this iteration follows a wait that slept */
	bool parked;			/* a wait slept since the last iteration began */
	uint64_t park_ns;		/* the wait being armed: its timeout, UINT64_MAX = none */

	/* a blocking wait's timer deadline as a ring timeout: see park_timer() */
	struct rk__op tmo_op;
	struct __kernel_timespec tmo_ts;
	uint64_t tmo_at;		/* its deadline (monotonic ns) */
	bool tmo_armed;
	uint64_t tmo_arms;		/* ring timeouts armed (rk__loop_ring_timeouts()) */

	/* whose events the last busy work all was (rk__loop_busy_by()): the window's */
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

/* ---- source.c ---- */
/* Poll every polled source; what they handle counts as busy events of the iteration. */
void rk__sources_poll(struct rk_loop *loop);
/* The earliest time a source expects its next event at, 0 = none; pred_next says whose. */
uint64_t rk__sources_expect(struct rk_loop *loop);
/* Tell every source with a verdict() but @skip that the loop spins for an event now. */
void rk__sources_spin(struct rk_loop *loop, struct rk_source *skip);
/* Before blocking: arm each source (or poll one without arm()). Return > 0 when
 * something is pending and the loop must not block. */
int rk__sources_arm(struct rk_loop *loop);

/* ---- timer.c ---- */
/* Run the timers due at loop->now (at most a bounded number). */
void rk__timers_run(struct rk_loop *loop);
/* ns from loop->now to the next timer, 0 = due, UINT64_MAX = none (every spin). */
static inline uint64_t rk__timers_next_in(const struct rk_loop *loop)
{
	if (!loop->timers)
		return UINT64_MAX;
	return loop->timers->due > loop->now ? loop->timers->due - loop->now : 0;
}

/* ---- post.c ---- */
/* Keep a read armed on the wake eventfd, and on the signalfd when there is one. */
void rk__wake_arm(struct rk_loop *loop);
void rk__sig_arm(struct rk_loop *loop);
/* Run every post queued so far, in order per posting thread. Return how many. */
unsigned int rk__inbox_drain(struct rk_loop *loop);
/* Whether a post is queued (a relaxed look: every spin). */
static inline bool rk__inbox_busy(struct rk_loop *loop)
{
	return atomic_load_explicit(&loop->inbox, memory_order_relaxed);
}

#endif /* RK_LOOP_INT_H */
