/* SPDX-License-Identifier: MIT */
/*
 * What the wait policy's suites (check_wait, check_wait_predict,
 * check_wait_learn) share, besides loop_test.h: a loop whose policy is driven
 * one iteration at a time on the injected clock, each iteration's phase, and a
 * source that predicts its event on that clock. Never installed.
 */
#ifndef RK_WAIT_TEST_H
#define RK_WAIT_TEST_H

#include "loop_test.h"
#include "wait_int.h"

/* ---- the wait policy, with an injected clock ---------------------------------------- */

/* A post that counts (p->data is an int) and is no work: an idle event. */
static inline enum rk_activity idle_post_cb(struct rk_post *p)
{
	(*(int *)p->data)++;
	return RK_IDLE;
}

/* A loop whose policy a test drives one RK_RUN_ONCE at a time on the fake clock. */
struct policy {
	struct fake_clock fc;
	struct rk_loop *loop;
	struct rk_timer bound;	/* bounds every wait to ~200 us of real time; never due */
	int bound_fired;
	struct rk_post busy, idle;
	int busy_ran, idle_ran;
	struct rk_loop_stats before, after;
};

#define P_SPIN		(1 * MS)
#define P_BOUND		(200 * US)

/* @p's loop in @mode with a 1 ms spin window, the clock at 1000 s; policy_teardown() frees it. */
static inline void policy_setup(struct policy *p, enum rk_wait_mode mode)
{
	struct rk_config c;

	memset(p, 0, sizeof(*p));
	rk_config_init(&c);
	c.wait.mode = mode;
	c.wait.spin_ns = P_SPIN;
	p->loop = new_loop(&c);
	p->fc.t = 1000 * SEC;	/* long after any busy event */
	rk_loop_set_clock(p->loop, fake_now, &p->fc);
	ck_assert_uint_eq(rk_loop_now(p->loop), 1000 * SEC);
	rk_timer_init(&p->bound, never_cb, &p->bound_fired);
	p->busy = (struct rk_post){ .cb = busy_post_cb, .data = &p->busy_ran };
	p->idle = (struct rk_post){ .cb = idle_post_cb, .data = &p->idle_ran };
}

/* Set the fake clock to @t, maybe post @post, run RK_RUN_ONCE; return the stats delta. */
static inline struct rk_loop_stats policy_run(struct policy *p, uint64_t t, struct rk_post *post)
{
	struct rk_loop_stats d;

	ck_assert_uint_ge(t, p->fc.t);
	p->fc.t = t;
	/* Due P_BOUND (fake) after this iteration's 'now': caps a real wait at that. */
	ck_assert_int_eq(rk_timer_start(p->loop, &p->bound, t + P_BOUND - rk_loop_now(p->loop), 0),
			 0);
	if (post)
		rk_loop_post(p->loop, post);
	rk_loop_stats(p->loop, &p->before, sizeof(p->before));
	ck_assert_int_eq(rk_loop_run(p->loop, RK_RUN_ONCE), 0);
	rk_loop_stats(p->loop, &p->after, sizeof(p->after));
	ck_assert_int_eq(p->bound_fired, 0);
	ck_assert_uint_eq(rk_loop_now(p->loop), t);
	d.iterations = p->after.iterations - p->before.iterations;
	d.events = p->after.events - p->before.events;
	d.busy_events = p->after.busy_events - p->before.busy_events;
	d.spin_iters = p->after.spin_iters - p->before.spin_iters;
	d.blocks = p->after.blocks - p->before.blocks;
	d.posts = p->after.posts - p->before.posts;
	ck_assert_uint_eq(d.iterations, 1);
	return d;
}

/* An iteration with nothing to do: it waits per the policy. */
static inline struct rk_loop_stats policy_step(struct policy *p, uint64_t t)
{
	struct rk_loop_stats d = policy_run(p, t, NULL);

	ck_assert_uint_eq(d.events, 0);
	return d;
}

/*
 * An iteration that delivers @post: RK_RUN_ONCE returns after the handler
 * without waiting (something was ready), so the phase shows on the next step.
 */
static inline struct rk_loop_stats policy_post(struct policy *p, uint64_t t, struct rk_post *post)
{
	struct rk_loop_stats d = policy_run(p, t, post);

	ck_assert_uint_eq(d.posts, 1);
	ck_assert_uint_eq(d.events, 1);
	ck_assert_uint_eq(d.spin_iters, 0);
	ck_assert_uint_eq(d.blocks, 0);
	return d;
}

static inline void policy_teardown(struct policy *p)
{
	rk_timer_stop(&p->bound);
	free_loop(p->loop);
}

/* One iteration's phase: 'S'pin, 'B'lock, or '?' for anything else. */
static inline char phase_of(const struct rk_loop_stats *d)
{
	if (d->spin_iters == 1 && !d->blocks)
		return 'S';
	if (!d->spin_iters && d->blocks == 1)
		return 'B';
	return '?';
}

#define ck_assert_phase(d, want)                                                           \
	do {                                                                               \
		struct rk_loop_stats _d = (d);                                             \
		ck_assert_msg(phase_of(&_d) == (want),                                     \
			      "want phase %c: spin_iters %" PRIu64 " blocks %" PRIu64,     \
			      (want), _d.spin_iters, _d.blocks);                           \
	} while (0)

/* ---- predictive waits (rk_source_ops.expect), on the fake clock ---------------------- */

/*
 * A stand-in for a GPU notifier in poll-only mode, on the fake clock: nothing
 * can wake the loop when its event is ready (the poll sees it when the test
 * says so), but it predicts that time, and its arm() relies on the
 * prediction: it arms nothing. Every phase is then the loop's decision alone,
 * whatever else runs on the machine; only a predictive sleep takes real time
 * (its timeout).
 */
struct fpred {
	struct rk_source src;
	uint64_t expect;	/* fake ns; 0 = no prediction */
	bool ready;
	bool no_park;		/* the loop must not go to sleep: arm() fails the test */
	struct rk_loop *loop;	/* set: record what the loop tells its sources */
	bool after_park;	/* rk__loop_after_park() at the last poll */
	uint64_t park_ns;	/* rk__loop_parking_ns() at the last arm */
	atomic_int armed;	/* set by arm(): the loop published 'sleeping' */
};

/* fpred_ops: poll finds the event once the test made it ready; arm records the sleep. */
static inline int fpred_poll(struct rk_source *src, uint64_t now)
{
	struct fpred *p = src->data;

	(void)now;
	if (p->loop)
		p->after_park = rk__loop_after_park(p->loop);
	if (!p->ready)
		return 0;
	p->ready = false;
	p->expect = 0;
	return 1;
}

static inline uint64_t fpred_expect(struct rk_source *src, uint64_t now)
{
	(void)now;
	return ((struct fpred *)src->data)->expect;
}

static inline int fpred_arm(struct rk_source *src)
{
	struct fpred *p = src->data;

	if (p->loop)
		p->park_ns = rk__loop_parking_ns(p->loop);
	ck_assert_msg(!p->no_park, "the loop went to sleep (timeout %" PRIu64 " ns) in a wait it "
		      "must spin through", p->loop ? p->park_ns : 0);
	atomic_store(&p->armed, 1);
	return p->ready ? 1 : 0;
}

static const struct rk_source_ops fpred_ops = {
	.name = "fake-predicting", .poll = fpred_poll, .arm = fpred_arm, .expect = fpred_expect };

/* A loop made from @c on the fake clock @fc (at 1000 s), with @p attached and recording. */
static inline struct rk_loop *fpred_loop(const struct rk_config *c, struct fake_clock *fc,
					 struct fpred *p)
{
	struct rk_loop *loop = new_loop(c);

	fc->t = 1000 * SEC;
	rk_loop_set_clock(loop, fake_now, fc);
	p->src.ops = &fpred_ops;
	p->src.data = p;
	p->loop = loop;
	atomic_init(&p->armed, 0);
	ck_assert_int_eq(rk_loop_add_source(loop, &p->src), 0);
	return loop;
}

static inline void fpred_free(struct rk_loop *loop, struct fpred *p)
{
	ck_assert_int_eq(rk_loop_remove_source(loop, &p->src), 0);
	free_loop(loop);
}

/* A busy event at the fake clock's time: without a prediction the spin window is open. */
static inline void busy_kick(struct rk_loop *loop)
{
	struct rk_post kick = { .cb = busy_post_cb };
	int ran = 0;

	kick.data = &ran;
	rk_loop_post(loop, &kick);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(ran, 1);
}

#endif /* RK_WAIT_TEST_H */
