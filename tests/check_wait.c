/* SPDX-License-Identifier: MIT */
/*
 * check_wait: the rank loop's wait, through a loop (runtime/loop.c carrying
 * out runtime/wait.c's decisions): the adaptive wait policy under an injected
 * clock, rk-serve's baselines (poll50, yield1s) set on a running loop, and
 * sources (polled, armed, polled once more before a block).
 * Predictive waits are check_wait_predict.c's, the links' learners
 * check_wait_learn.c's; lifetime, timers, posts, signals, fd watches and
 * counters check_loop*.c's; the decisions alone, without a loop,
 * check_decide.c's.
 *
 * Environment: RK_TEST_WAIT=adaptive|block|spin, the wait mode of every loop
 * whose test is not about the policy itself (tests/loop-*.sh). Every ring is
 * made on the forked test process, never in an unchecked fixture; a lost
 * wakeup shows as a hang that the TCase timeout turns into a failure.
 */
#include "wait_test.h"

START_TEST(test_policy_adaptive)
{
	struct policy p;
	struct rk_loop_stats d;
	uint64_t b;

	policy_setup(&p, RK_WAIT_ADAPTIVE);
	/* Never busy: straight to blocking. */
	ck_assert_phase(policy_step(&p, p.fc.t), 'B');

	/* A busy event at b opens the window: spin within S, then block. */
	b = p.fc.t + 10 * MS;
	d = policy_post(&p, b, &p.busy);
	ck_assert_int_eq(p.busy_ran, 1);
	ck_assert_uint_eq(d.busy_events, 1);
	ck_assert_phase(policy_step(&p, b), 'S');
	ck_assert_phase(policy_step(&p, b + P_SPIN / 2), 'S');
	ck_assert_phase(policy_step(&p, b + P_SPIN - 1), 'S');
	ck_assert_phase(policy_step(&p, b + P_SPIN), 'B');
	ck_assert_phase(policy_step(&p, b + P_SPIN + P_SPIN / 2), 'B');
	ck_assert_phase(policy_step(&p, b + 100 * MS), 'B');

	/* An idle event runs its handler but does not reopen the window. */
	d = policy_post(&p, b + 101 * MS, &p.idle);
	ck_assert_int_eq(p.idle_ran, 1);
	ck_assert_uint_eq(d.busy_events, 0);
	ck_assert_phase(policy_step(&p, b + 101 * MS), 'B');

	/* ... nor extend it: idle inside the window, the block still starts at b + S. */
	b = b + 200 * MS;
	policy_post(&p, b, &p.busy);
	ck_assert_phase(policy_step(&p, b), 'S');
	ck_assert_uint_eq(policy_post(&p, b + P_SPIN - 10 * US, &p.idle).busy_events, 0);
	ck_assert_phase(policy_step(&p, b + P_SPIN - 10 * US), 'S');
	ck_assert_phase(policy_step(&p, b + P_SPIN), 'B');
	policy_post(&p, b + 2 * P_SPIN - 10 * US, &p.idle);
	ck_assert_phase(policy_step(&p, b + 2 * P_SPIN - 10 * US), 'B');

	/* A busy event after the window (the loop blocks) reopens it. */
	b = b + 300 * MS;
	policy_post(&p, b, &p.busy);
	ck_assert_phase(policy_step(&p, b + P_SPIN + 10 * US), 'B');
	policy_post(&p, b + P_SPIN + 20 * US, &p.busy);
	ck_assert_phase(policy_step(&p, b + P_SPIN + 20 * US), 'S');
	ck_assert_phase(policy_step(&p, b + 2 * P_SPIN + 10 * US), 'S');
	ck_assert_phase(policy_step(&p, b + 2 * P_SPIN + 20 * US), 'B');
	ck_assert_int_eq(p.busy_ran, 4);
	ck_assert_int_eq(p.idle_ran, 3);
	ck_assert_uint_eq(p.after.busy_events, 4);
	policy_teardown(&p);
}
END_TEST

/* A policy set on a live loop (rk_loop_set_wait()) spins its window, then blocks. */
START_TEST(test_policy_set_window)
{
	struct policy p;
	struct rk_wait_policy w = { .mode = RK_WAIT_ADAPTIVE, .spin_ns = P_SPIN };
	uint64_t b;

	policy_setup(&p, RK_WAIT_ADAPTIVE);
	rk_loop_set_wait(p.loop, &w);
	ck_assert_uint_eq(rk_loop_config(p.loop)->wait.spin_ns, P_SPIN);
	b = p.fc.t;
	policy_post(&p, b, &p.busy);
	ck_assert_phase(policy_step(&p, b), 'S');
	ck_assert_phase(policy_step(&p, b + P_SPIN - 1), 'S');
	ck_assert_phase(policy_step(&p, b + P_SPIN), 'B');
	policy_teardown(&p);
}
END_TEST

START_TEST(test_policy_spin)
{
	struct policy p;
	uint64_t b, t;
	int i;

	policy_setup(&p, RK_WAIT_SPIN);
	b = p.fc.t;
	ck_assert_phase(policy_step(&p, b), 'S');
	policy_post(&p, b + 1, &p.busy);
	ck_assert_phase(policy_step(&p, b + 1), 'S');
	for (i = 1; i <= 20; i++) {
		t = b + (uint64_t)i * 7 * SEC;
		if (i % 2)
			policy_post(&p, t, &p.idle);
		ck_assert_phase(policy_step(&p, t), 'S');
	}
	ck_assert_uint_eq(p.after.blocks, 0);
	ck_assert_uint_eq(p.after.wakeups, 0);
	policy_teardown(&p);
}
END_TEST

START_TEST(test_policy_block)
{
	struct policy p;
	uint64_t b, t;
	int i;

	policy_setup(&p, RK_WAIT_BLOCK);
	b = p.fc.t;
	ck_assert_phase(policy_step(&p, b), 'B');
	policy_post(&p, b + 1, &p.busy);
	ck_assert_phase(policy_step(&p, b + 1), 'B');	/* right after busy work */
	for (i = 1; i <= 20; i++) {
		t = b + 1 + (uint64_t)i * 10 * US;
		policy_post(&p, t, i % 2 ? &p.busy : &p.idle);
		ck_assert_phase(policy_step(&p, t), 'B');
	}
	ck_assert_uint_eq(p.after.spin_iters, 0);
	ck_assert_uint_eq(p.after.busy_events, 11);
	policy_teardown(&p);
}
END_TEST

/* rk_loop_set_wait() switches a live loop between the modes. */
START_TEST(test_policy_switch)
{
	struct policy p;
	struct rk_wait_policy w;
	uint64_t tun[RK_CONFIG_TUNING_WORDS];
	uint64_t b;

	policy_setup(&p, RK_WAIT_ADAPTIVE);
	b = p.fc.t;
	policy_post(&p, b, &p.busy);
	ck_assert_phase(policy_step(&p, b), 'S');
	w = (struct rk_wait_policy){ .mode = RK_WAIT_BLOCK };
	rk_loop_set_wait(p.loop, &w);
	ck_assert_phase(policy_step(&p, b + 1), 'B');
	w = (struct rk_wait_policy){ .mode = RK_WAIT_SPIN };
	rk_loop_set_wait(p.loop, &w);
	ck_assert_phase(policy_step(&p, b + 10 * SEC), 'S');
	w = (struct rk_wait_policy){ .mode = RK_WAIT_ADAPTIVE, .spin_ns = 5 * MS };
	rk_loop_set_wait(p.loop, &w);
	policy_post(&p, b + 20 * SEC, &p.busy);
	ck_assert_phase(policy_step(&p, b + 20 * SEC), 'S');
	ck_assert_phase(policy_step(&p, b + 20 * SEC + 5 * MS - 1), 'S');
	ck_assert_phase(policy_step(&p, b + 20 * SEC + 5 * MS), 'B');
	/* the tuning tier (sqpoll and coop_taskrun among it) stays as created */
	memcpy(tun, rk_loop_config(p.loop)->tuning, sizeof(tun));
	w.mode = RK_WAIT_SPIN;
	rk_loop_set_wait(p.loop, &w);
	ck_assert(!rk__config_ctuning(rk_loop_config(p.loop))->ring.sqpoll);
	ck_assert_mem_eq(tun, rk_loop_config(p.loop)->tuning, sizeof(tun));
	policy_teardown(&p);
}
END_TEST

/* ---- rk-serve's baselines (--bench-policies), set on a running loop ----------------- */

/* @p's loop to its own config with @n knobs ("NAME", "VALUE" pairs) set. */
static void policy_knobs(struct policy *p, const char *const *kv, unsigned int n)
{
	struct rk_config c = *rk_loop_config(p->loop);
	char err[160];
	unsigned int i;

	for (i = 0; i < n; i++)
		ck_assert_msg(!rk_config_set(&c, kv[2 * i], kv[2 * i + 1], err, sizeof(err)),
			      "%s", err);
	ck_assert_int_eq(rk_loop_set_wait_config(p->loop, &c), 0);
}

static const char *const poll50[] = { "RK_SPIN_US", "0", "RK_PREDICT", "0", "RK_LEARN", "0",
				      "RK_POLL_US", "50", "RK_POLL_FOR_MS", "50" };
static const char *const yield1s[] = { "RK_SPIN_US", "1000000", "RK_SPIN_YIELD", "1",
				       "RK_PREDICT", "0", "RK_LEARN", "0" };

/*
 * One empty iteration at @t parks as @want: 'T' a timed poll (RK_POLL_US, its
 * own timeout), 'B' a block (until the next timer: the bound, P_BOUND away).
 * Both count as a block; the wait's timeout tells them apart.
 */
static void assert_park(struct policy *p, uint64_t t, char want)
{
	ck_assert_phase(policy_step(p, t), 'B');
	ck_assert_msg(rk__loop_parking_ns(p->loop) == (want == 'T' ? 50 * US : P_BOUND),
		      "at +%" PRIu64 " ns: want %c, the wait's timeout was %" PRIu64 " ns",
		      t - 1000 * SEC, want, rk__loop_parking_ns(p->loop));
}

/*
 * poll50: timed polls of 50 us while within 50 ms of the last busy event,
 * then a block; a busy event starts the 50 ms afresh, an idle one does not.
 * It never spins.
 */
START_TEST(test_policy_poll50)
{
	struct policy p;
	uint64_t b, b2;

	policy_setup(&p, RK_WAIT_ADAPTIVE);
	policy_knobs(&p, poll50, 5);
	b = p.fc.t;
	assert_park(&p, b, 'B');		/* never busy */
	policy_post(&p, b + 1 * MS, &p.busy);
	b += 1 * MS;
	assert_park(&p, b, 'T');
	assert_park(&p, b + 1, 'T');		/* and again: it looks, then polls again */
	assert_park(&p, b + 20 * MS, 'T');
	assert_park(&p, b + 50 * MS - 1, 'T');
	assert_park(&p, b + 50 * MS, 'B');
	assert_park(&p, b + 80 * MS, 'B');
	policy_post(&p, b + 90 * MS, &p.idle);	/* housekeeping: no new budget */
	assert_park(&p, b + 90 * MS, 'B');
	b2 = b + 100 * MS;
	policy_post(&p, b2, &p.busy);		/* busy work: 50 ms afresh */
	assert_park(&p, b2, 'T');
	assert_park(&p, b2 + 49 * MS, 'T');
	policy_post(&p, b2 + 49 * MS, &p.busy);	/* ...from the latest */
	assert_park(&p, b2 + 98 * MS, 'T');
	assert_park(&p, b2 + 99 * MS, 'B');
	ck_assert_uint_eq(p.after.spin_iters, 0);
	ck_assert_uint_eq(rk__loop_yields(p.loop), 0);
	policy_teardown(&p);
}
END_TEST

/* One empty iteration at @t spins, and yields (RK_SPIN_YIELD=1: every time). */
static void assert_spin_yield(struct policy *p, uint64_t t)
{
	uint64_t y = rk__loop_yields(p->loop);

	ck_assert_phase(policy_step(p, t), 'S');
	ck_assert_uint_eq(rk__loop_yields(p->loop), y + 1);
}

/*
 * yield1s: spin, with sched_yield() at every iteration, for 1 s after each
 * busy event, then block. Neither a learned quantile of the busy gaps, nor a
 * link's learner, nor a prediction shortens it: 64 busy events 1 ms apart
 * (with RK_LEARN a 4 ms window) still leave the whole second.
 */
START_TEST(test_policy_yield1s)
{
	struct policy p;
	uint64_t b, y;
	int i;

	policy_setup(&p, RK_WAIT_ADAPTIVE);
	policy_knobs(&p, yield1s, 4);
	b = p.fc.t;
	assert_park(&p, b, 'B');		/* never busy */
	policy_post(&p, b + 1 * MS, &p.busy);
	b += 1 * MS;
	assert_spin_yield(&p, b);
	assert_spin_yield(&p, b + 1);
	assert_spin_yield(&p, b + 500 * MS);
	assert_spin_yield(&p, b + 1 * SEC - 1);
	y = rk__loop_yields(p.loop);
	assert_park(&p, b + 1 * SEC, 'B');
	ck_assert_uint_eq(rk__loop_yields(p.loop), y);
	policy_post(&p, b + 2 * SEC, &p.idle);	/* housekeeping: no new window */
	assert_park(&p, b + 2 * SEC, 'B');
	b += 3 * SEC;
	for (i = 0; i <= 64; i++)
		policy_post(&p, b + (uint64_t)i * MS, &p.busy);
	b += 64 * MS;
	assert_spin_yield(&p, b + 5 * MS);
	assert_spin_yield(&p, b + 999 * MS);
	assert_park(&p, b + 1 * SEC, 'B');
	ck_assert_uint_eq(p.after.window_cuts, 0);
	policy_teardown(&p);
}
END_TEST

/*
 * rk_loop_set_wait_config() takes the whole wait policy, tuning included, and
 * leaves no knob behind: back to the loop's first config, the spin window and
 * RK_SPIN_YIELD are those again. A config nobody filled is refused.
 */
START_TEST(test_policy_set_wait_config)
{
	struct policy p;
	struct rk_config first, zero;
	uint64_t b, y;

	policy_setup(&p, RK_WAIT_ADAPTIVE);
	first = *rk_loop_config(p.loop);
	policy_knobs(&p, poll50, 5);
	ck_assert_uint_eq(rk_loop_config(p.loop)->wait.spin_ns, 0);
	ck_assert_uint_eq(rk__config_ctuning(rk_loop_config(p.loop))->wait.poll_ns, 50 * US);
	ck_assert_int_eq(rk_loop_set_wait_config(p.loop, &first), 0);
	ck_assert_mem_eq(rk_loop_config(p.loop), &first, sizeof(first));
	b = p.fc.t;
	policy_post(&p, b, &p.busy);
	y = rk__loop_yields(p.loop);
	ck_assert_phase(policy_step(&p, b), 'S');	/* P_SPIN again */
	ck_assert_uint_eq(rk__loop_yields(p.loop), y);	/* every 64th, not every one */
	assert_park(&p, b + P_SPIN, 'B');		/* no timed poll */
	memset(&zero, 0, sizeof(zero));
	zero.wait.mode = RK_WAIT_SPIN;
	ck_assert_int_eq(rk_loop_set_wait_config(p.loop, &zero), -EINVAL);
	ck_assert_mem_eq(rk_loop_config(p.loop), &first, sizeof(first));
	policy_teardown(&p);
}
END_TEST

/*
 * RK_RUN_ONCE waits only when nothing was ready: an iteration that ran a
 * handler returns at once (a caller polling a flag, like rk_world_wait_ready(),
 * must see it), one with nothing waits. No other timer here: waiting after a
 * handler would hang.
 */
START_TEST(test_run_once_returns_after_work)
{
	struct policy p;
	struct rk_timer t;
	int fired = 0;

	policy_setup(&p, RK_WAIT_BLOCK);
	rk_timer_init(&t, never_cb, &fired);
	ck_assert_int_eq(rk_timer_start(p.loop, &t, 5 * MS, 0), 0);
	ck_assert_phase(policy_step(&p, p.fc.t + 1 * MS), 'B');
	ck_assert_int_eq(fired, 0);
	rk_timer_stop(&p.bound);
	p.fc.t += 10 * MS;
	rk_loop_stats(p.loop, &p.before, sizeof(p.before));
	ck_assert_int_eq(rk_loop_run(p.loop, RK_RUN_ONCE), 0);	/* the timer is due */
	rk_loop_stats(p.loop, &p.after, sizeof(p.after));
	ck_assert_int_eq(fired, 1);
	ck_assert_uint_eq(p.after.blocks, p.before.blocks);
	/* A post, in every mode. */
	policy_post(&p, p.fc.t, &p.busy);
	rk_timer_stop(&p.bound);
	p.busy_ran = 0;
	rk_loop_post(p.loop, &p.busy);
	ck_assert_int_eq(rk_loop_run(p.loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(p.busy_ran, 1);
	policy_teardown(&p);
}
END_TEST

/* ---- sources ------------------------------------------------------------------------ */

struct csrc {
	struct rk_source src;
	struct rk_loop *loop;
	int polls, arms;
	int events_left;	/* poll() reports one per call while > 0 */
	int arm_pending;	/* arm() returns > 0 this many times */
	int stop_after_polls;
	int event_on_poll;	/* poll() call number that reports one event (0: none) */
	uint64_t blocks_at_arm;
};

static int csrc_poll(struct rk_source *src, uint64_t now)
{
	struct csrc *c = rk__container_of(src, struct csrc, src);

	(void)now;
	c->polls++;
	if (c->stop_after_polls && c->polls >= c->stop_after_polls)
		rk_loop_stop(c->loop);
	if (c->event_on_poll && c->polls == c->event_on_poll)
		return 1;
	if (c->events_left > 0) {
		c->events_left--;
		return 1;
	}
	return 0;
}

static int csrc_arm(struct rk_source *src)
{
	struct csrc *c = rk__container_of(src, struct csrc, src);
	struct rk_loop_stats s;

	c->arms++;
	rk_loop_stats(c->loop, &s, sizeof(s));
	c->blocks_at_arm = s.blocks;
	if (c->arm_pending > 0) {
		c->arm_pending--;
		return 1;
	}
	return 0;
}

static const struct rk_source_ops csrc_ops = { .name = "counting", .poll = csrc_poll,
					       .arm = csrc_arm };
static const struct rk_source_ops csrc_noarm_ops = { .name = "counting-noarm",
						     .poll = csrc_poll };

/*
 * A source with events is polled every spin iteration; its events keep the
 * loop spinning. On the fake clock, frozen: the window never runs out under
 * the test, however slowly the machine lets it spin.
 */
START_TEST(test_source_poll_spin)
{
	struct rk_config c;
	struct csrc cs = { .src = { .ops = &csrc_ops } };
	struct fake_clock fc = { .t = 1000 * SEC };
	struct rk_loop_stats s;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 2 * SEC;
	cs.loop = new_loop(&c);
	rk_loop_set_clock(cs.loop, fake_now, &fc);
	cs.events_left = 50;
	cs.stop_after_polls = 1000;
	ck_assert_int_eq(rk_loop_add_source(cs.loop, &cs.src), 0);
	ck_assert_int_eq(rk_loop_run(cs.loop, RK_RUN_DEFAULT), 0);
	s = stats_of(cs.loop);
	ck_assert_int_eq(cs.polls, 1000);
	ck_assert_uint_eq(s.iterations, 1000);
	ck_assert_uint_eq(s.busy_events, 50);
	ck_assert_uint_ge(s.events, 50);
	ck_assert_uint_eq(s.spin_iters, 1000 - 1);	/* all but the one that stopped */
	ck_assert_uint_eq(s.blocks, 0);
	ck_assert_int_eq(cs.arms, 0);
	ck_assert_int_eq(rk_loop_remove_source(cs.loop, &cs.src), 0);
	free_loop(cs.loop);
}
END_TEST

/*
 * Every 5 ms: stop the loop once it has blocked at least once (or at the hang
 * guard). A one-shot timer could expire while a loaded machine keeps the test
 * off the CPU, and the loop would then run it without ever blocking.
 */
static uint64_t blocked_guard_ns;

static enum rk_activity stop_once_blocked_cb(struct rk_timer *t, uint64_t now)
{
	(void)now;
	if (stats_of(t->data).blocks >= 1 || rk_test_now_ns() > blocked_guard_ns)
		rk_loop_stop(t->data);
	return RK_IDLE;
}

/* arm() is called before every wait; a pending report (> 0) keeps the loop from blocking. */
START_TEST(test_source_arm)
{
	struct rk_config c;
	struct csrc cs = { .src = { .ops = &csrc_ops } };
	struct rk_loop_stats s;
	int i;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_BLOCK;
	cs.loop = new_loop(&c);
	ck_assert_int_eq(rk_loop_add_source(cs.loop, &cs.src), 0);

	/* No timer at all: if a pending arm() did not prevent the block, this hangs. */
	cs.arm_pending = 100;
	for (i = 0; i < 100; i++)
		ck_assert_int_eq(rk_loop_run(cs.loop, RK_RUN_ONCE), 0);
	s = stats_of(cs.loop);
	ck_assert_int_eq(cs.arms, 100);
	ck_assert_uint_eq(s.blocks, 0);
	ck_assert_int_ge(cs.polls, 100);

	/* Once armed, the loop blocks (bounded by a timer), after the arm. */
	{
		struct rk_timer t;

		blocked_guard_ns = rk_test_deadline_ms(10000);
		rk_timer_init(&t, stop_once_blocked_cb, cs.loop);
		ck_assert_int_eq(rk_timer_start(cs.loop, &t, 5 * MS, 5 * MS), 0);
		ck_assert_int_eq(rk_loop_run(cs.loop, RK_RUN_DEFAULT), 0);
		rk_timer_stop(&t);
	}
	s = stats_of(cs.loop);
	ck_assert_uint_ge(s.blocks, 1);
	ck_assert_int_ge(cs.arms, 100 + (int)s.blocks);
	ck_assert_uint_eq(cs.blocks_at_arm, s.blocks - 1);	/* the last arm preceded the last block */
	ck_assert_int_eq(rk_loop_remove_source(cs.loop, &cs.src), 0);
	free_loop(cs.loop);
}
END_TEST

/*
 * A source without arm() is polled once more before the loop blocks (after it
 * published 'sleeping'): an event that shows up only on that poll must keep
 * the loop from blocking. No timer: a missed event hangs.
 */
START_TEST(test_source_noarm_polled_before_block)
{
	struct rk_config c;
	struct csrc cs = { .src = { .ops = &csrc_noarm_ops } };
	struct rk_loop_stats s;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_BLOCK;
	cs.loop = new_loop(&c);
	ck_assert_int_eq(rk_loop_add_source(cs.loop, &cs.src), 0);
	cs.event_on_poll = 2;	/* poll #1 is step 4, poll #2 the one before blocking */
	ck_assert_int_eq(rk_loop_run(cs.loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(cs.polls, 2);
	s = stats_of(cs.loop);
	ck_assert_uint_eq(s.blocks, 0);
	ck_assert_int_eq(rk_loop_remove_source(cs.loop, &cs.src), 0);
	free_loop(cs.loop);
}
END_TEST

/*
 * Work that the last poll before blocking finds is busy work like any other:
 * it is counted and restarts the spin window (injected clock: the next
 * iteration at the same instant must spin, not block).
 */
START_TEST(test_source_prepoll_busy)
{
	struct policy p;
	struct csrc cs = { .src = { .ops = &csrc_noarm_ops } };
	struct rk_loop_stats d;
	uint64_t t;

	policy_setup(&p, RK_WAIT_ADAPTIVE);
	cs.loop = p.loop;
	ck_assert_int_eq(rk_loop_add_source(p.loop, &cs.src), 0);
	t = p.fc.t;
	ck_assert_phase(policy_step(&p, t), 'B');	/* idle: polls #1 and #2, then blocks */
	ck_assert_int_eq(cs.polls, 2);
	cs.event_on_poll = 4;	/* #3 is step 4, #4 the poll before blocking */
	d = policy_run(&p, t + 10 * MS, NULL);
	ck_assert_int_eq(cs.polls, 4);
	ck_assert_uint_eq(d.blocks, 0);
	ck_assert_uint_eq(d.events, 1);
	ck_assert_uint_eq(d.busy_events, 1);
	ck_assert_phase(policy_step(&p, t + 10 * MS), 'S');
	ck_assert_phase(policy_step(&p, t + 10 * MS + P_SPIN - 1), 'S');
	ck_assert_phase(policy_step(&p, t + 10 * MS + P_SPIN), 'B');
	ck_assert_int_eq(rk_loop_remove_source(p.loop, &cs.src), 0);
	policy_teardown(&p);
}
END_TEST

/*
 * A producer thread publishes events into a counter and calls rk_loop_wake();
 * the source has no arm(). With a 2 us spin window the loop sleeps between the
 * producer's bursts; a missed event would leave it asleep (the TCase timeout).
 */
struct psrc {
	struct rk_source src;
	struct rk_loop *loop;
	atomic_uint_fast64_t published;
	uint64_t consumed;
	uint64_t total;
};

static int psrc_poll(struct rk_source *src, uint64_t now)
{
	struct psrc *p = rk__container_of(src, struct psrc, src);
	uint64_t n = atomic_exchange(&p->published, 0);

	(void)now;
	p->consumed += n;
	if (p->consumed >= p->total)
		rk_loop_stop(p->loop);
	return n > 1000 ? 1000 : (int)n;
}

static void *producer_thread(void *arg)
{
	struct psrc *p = arg;
	uint64_t rng = 0xabcdef, i, burst = 0;

	for (i = 0; i < p->total; i++) {
		atomic_fetch_add(&p->published, 1);
		rk_loop_wake(p->loop);
		if (burst-- == 0) {
			burst = rng_next(&rng) % 64;
			sleep_ns(rng_next(&rng) % (50 * US + 1));
		}
	}
	return NULL;
}

START_TEST(test_source_producer_wake)
{
	static const struct rk_source_ops ops = { .name = "producer", .poll = psrc_poll };
	struct rk_config c;
	struct psrc p = { .src = { .ops = &ops } };
	struct rk_loop_stats s;
	pthread_t th;

	test_config(&c);
	c.wait.spin_ns = 2 * US;
	p.loop = new_loop(&c);
	p.total = 100000;
	atomic_init(&p.published, 0);
	ck_assert_int_eq(rk_loop_add_source(p.loop, &p.src), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, producer_thread, &p), 0);
	ck_assert_int_eq(rk_loop_run(p.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(p.consumed, p.total);
	s = stats_of(p.loop);
	if (c.wait.mode != RK_WAIT_SPIN) {
		ck_assert_uint_gt(s.blocks, 0);
		ck_assert_uint_gt(s.wakeups, 0);
	}
	ck_assert_int_eq(rk_loop_remove_source(p.loop, &p.src), 0);
	free_loop(p.loop);
}
END_TEST

static Suite *wait_suite(void)
{
	Suite *s = suite_create("wait");
	TCase *tc;

	tc = tcase(s, "policy");
	tcase_add_test(tc, test_policy_adaptive);
	tcase_add_test(tc, test_policy_set_window);
	tcase_add_test(tc, test_policy_spin);
	tcase_add_test(tc, test_policy_block);
	tcase_add_test(tc, test_policy_switch);
	tcase_add_test(tc, test_run_once_returns_after_work);

	tc = tcase(s, "baselines");
	tcase_add_test(tc, test_policy_poll50);
	tcase_add_test(tc, test_policy_yield1s);
	tcase_add_test(tc, test_policy_set_wait_config);

	tc = tcase(s, "sources");
	tcase_add_test(tc, test_source_poll_spin);
	tcase_add_test(tc, test_source_arm);
	tcase_add_test(tc, test_source_noarm_polled_before_block);
	tcase_add_test(tc, test_source_prepoll_busy);
	tcase_add_test(tc, test_source_producer_wake);
	return s;
}

int main(void)
{
	return rk_check_run(wait_suite());
}
