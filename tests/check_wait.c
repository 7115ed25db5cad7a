/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the rank loop's wait, through a loop (runtime/loop.c carrying
 * out runtime/wait.c's decisions): the adaptive wait policy under an injected
 * clock, sources (polled, armed, polled once more before a block, told how
 * predictive sleeps end), predictive waits and their learned margin, the
 * links' learners. Lifetime, timers, posts, signals, fd watches and counters
 * are check_loop.c's; the decisions alone, without a loop, check_decide.c's.
 *
 * Environment: RK_TEST_WAIT=adaptive|block|spin, the wait mode of every loop
 * whose test is not about the policy itself (tests/loop-*.sh). Every ring is
 * made on the forked test process, never in an unchecked fixture; a lost
 * wakeup shows as a hang that the TCase timeout turns into a failure.
 */
#include "loop_test.h"
#include "wait_int.h"
#include "rk_test.h"

/* ---- the wait policy, with an injected clock ---------------------------------------- */

static enum rk_activity idle_post_cb(struct rk_post *p)
{
	(*(int *)p->data)++;
	return RK_IDLE;
}

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

static void policy_setup(struct policy *p, enum rk_wait_mode mode)
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
static struct rk_loop_stats policy_run(struct policy *p, uint64_t t, struct rk_post *post)
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
static struct rk_loop_stats policy_step(struct policy *p, uint64_t t)
{
	struct rk_loop_stats d = policy_run(p, t, NULL);

	ck_assert_uint_eq(d.events, 0);
	return d;
}

/*
 * An iteration that delivers @post: RK_RUN_ONCE returns after the handler
 * without waiting (something was ready), so the phase shows on the next step.
 */
static struct rk_loop_stats policy_post(struct policy *p, uint64_t t, struct rk_post *post)
{
	struct rk_loop_stats d = policy_run(p, t, post);

	ck_assert_uint_eq(d.posts, 1);
	ck_assert_uint_eq(d.events, 1);
	ck_assert_uint_eq(d.spin_iters, 0);
	ck_assert_uint_eq(d.blocks, 0);
	return d;
}

static void policy_teardown(struct policy *p)
{
	rk_timer_stop(&p->bound);
	free_loop(p->loop);
}

/* One iteration's phase: 'S'pin, 'B'lock, or '?' for anything else. */
static char phase_of(const struct rk_loop_stats *d)
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
	ck_assert(!rk__config_ctuning(rk_loop_config(p.loop))->wait.sqpoll);
	ck_assert_mem_eq(tun, rk_loop_config(p.loop)->tuning, sizeof(tun));
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

static int fpred_poll(struct rk_source *src, uint64_t now)
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

static uint64_t fpred_expect(struct rk_source *src, uint64_t now)
{
	(void)now;
	return ((struct fpred *)src->data)->expect;
}

static int fpred_arm(struct rk_source *src)
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
static struct rk_loop *fpred_loop(const struct rk_config *c, struct fake_clock *fc,
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

static void fpred_free(struct rk_loop *loop, struct fpred *p)
{
	ck_assert_int_eq(rk_loop_remove_source(loop, &p->src), 0);
	free_loop(loop);
}

/* A busy event at the fake clock's time: without a prediction the spin window is open. */
static void busy_kick(struct rk_loop *loop)
{
	struct rk_post kick = { .cb = busy_post_cb };
	int ran = 0;

	kick.data = &ran;
	rk_loop_post(loop, &kick);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(ran, 1);
}

/*
 * Inside a 200 ms spin window, a source predicts its event 10 ms ahead: the
 * loop sleeps (one predictive wait, no spin, no block) with a timeout that
 * ends at the prediction less the margin, never past it; woken there, it
 * spins on the source instead of sleeping again, and the first poll that
 * finds the event delivers it. A loop that ignored the prediction would spin
 * the whole window (the control: test_predict_off_spins).
 */
START_TEST(test_predict_sleeps)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc;
	struct fpred p = { 0 };
	struct rk_loop_stats s0, s1;
	uint64_t wait = 10 * MS, margin, t0, slept;
	unsigned int i, n = 4;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 200 * MS;
	ck_assert(rk__config_tuning(&c)->wait.predict);		/* the default */
	loop = fpred_loop(&c, &fc, &p);
	ck_assert(rk_loop_predicts(loop));
	for (i = 0; i < n; i++) {
		busy_kick(loop);
		s0 = stats_of(loop);
		margin = s0.predict_margin_ns;
		ck_assert_uint_ge(margin, rk__config_tuning(&c)->wait.predict_margin_ns);
		ck_assert_uint_lt(margin, wait);
		p.expect = fc.t + wait;

		/* 1: it sleeps, and only until the prediction less the margin */
		t0 = rk__now_ns();
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		slept = rk__now_ns() - t0;
		s1 = stats_of(loop);
		ck_assert_uint_eq(s1.predict_waits, s0.predict_waits + 1);
		ck_assert_uint_eq(s1.spin_iters, s0.spin_iters);
		ck_assert_uint_eq(s1.blocks, s0.blocks);
		ck_assert_uint_eq(p.park_ns, wait - margin);
		/* the ring wait lasted its timeout, as nothing else could end it
		 * (a lower bound: load only makes it longer) */
		ck_assert_uint_ge(slept, wait - margin);

		/* 2: woken at that deadline, the event not in yet: it spins */
		fc.t = p.expect - margin;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		s0 = stats_of(loop);
		ck_assert(p.after_park);
		ck_assert_uint_eq(s0.predict_early, s1.predict_early + 1);
		ck_assert_uint_eq(s0.spin_iters, s1.spin_iters + 1);
		ck_assert_uint_eq(s0.predict_waits, s1.predict_waits);
		fc.t = p.expect - 1;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		s1 = stats_of(loop);
		ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
		ck_assert_uint_eq(s1.predict_waits, s0.predict_waits);

		/* 3: the event at its time: the next poll delivers it, no wait between */
		fc.t = p.expect;
		p.ready = true;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		ck_assert(!p.ready);
		ck_assert(!p.after_park);
		s0 = stats_of(loop);
		ck_assert_uint_eq(s0.spin_iters, s1.spin_iters);
		ck_assert_uint_eq(s0.predict_waits, s1.predict_waits);
		fc.t += 1 * MS;
	}
	s0 = stats_of(loop);
	ck_assert_uint_eq(s0.predict_waits, n);
	ck_assert_uint_eq(s0.predict_early, n);
	ck_assert_uint_eq(s0.predict_late + s0.predict_cut, 0);
	ck_assert_uint_eq(s0.blocks, 0);
	ck_assert_uint_eq(s0.spin_iters, 2 * n);
	fpred_free(loop, &p);
}
END_TEST

/*
 * The same predicted wait inside a 200 ms spin window, with (@predict) or
 * without a source prediction, with RK_PREDICT on or off (@loop_predicts),
 * stepped through on the fake clock: every iteration spins (no predictive
 * sleep, no block: the source's arm() fails the test if the loop goes to
 * sleep), and the first poll that finds the event delivers it.
 */
static void check_spins_through(bool predict, bool loop_predicts)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc;
	struct fpred p = { 0 };
	struct rk_loop_stats s0, s1;
	uint64_t wait = 20 * MS, step = 1 * MS, b, t;
	char err[128];

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 200 * MS;
	if (!loop_predicts)
		ck_assert_int_eq(rk_config_set(&c, "RK_PREDICT", "0", err, sizeof(err)), 0);
	loop = fpred_loop(&c, &fc, &p);
	ck_assert(rk_loop_predicts(loop) == loop_predicts);
	p.no_park = true;
	busy_kick(loop);
	b = fc.t;
	p.expect = predict ? b + wait : 0;
	for (t = b; t < b + wait; t += step) {
		fc.t = t;
		s0 = stats_of(loop);
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		s1 = stats_of(loop);
		ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
		ck_assert_uint_eq(s1.predict_waits + s1.blocks, 0);
	}
	fc.t = b + wait;
	p.ready = true;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert(!p.ready);
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.spin_iters, wait / step);
	ck_assert_uint_eq(s1.predict_waits + s1.blocks, 0);
	fpred_free(loop, &p);
}

/* With RK_PREDICT=0 the same wait spins: the control for the test above. */
START_TEST(test_predict_off_spins)
{
	check_spins_through(true, false);
}
END_TEST

struct cut_poster {
	struct fpred *src;
	struct rk_loop *loop;
	struct rk_post post;
	int ran;
};

/* Posts once the loop is committing to its sleep (arm() ran: 'sleeping' is published). */
static void *cut_poster_thread(void *arg)
{
	struct cut_poster *pp = arg;

	while (!atomic_load(&pp->src->armed))
		sched_yield();
	rk_loop_post(pp->loop, &pp->post);
	return NULL;
}

static enum rk_activity cut_post_cb(struct rk_post *p)
{
	struct cut_poster *pp = p->data;

	pp->ran = 1;
	return RK_BUSY;
}

/*
 * A predictive sleep is an ordinary wait on the ring with a timeout: another
 * event (here a post from a thread, as a network frame or a host function
 * would come) ends it, long before the prediction. The prediction is 1000 s
 * ahead: a sleep that only its timeout could end hangs the test (the TCase
 * timeout fails it). The counters say which sleep it was and what ended it.
 */
START_TEST(test_predict_cut_by_event)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc;
	struct fpred p = { 0 };
	struct cut_poster pp = { .src = &p };
	struct rk_loop_stats s;
	uint64_t margin;
	pthread_t th;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	loop = fpred_loop(&c, &fc, &p);
	pp.loop = loop;
	pp.post = (struct rk_post){ .cb = cut_post_cb, .data = &pp };
	margin = stats_of(loop).predict_margin_ns;
	p.expect = fc.t + 1000 * SEC;
	ck_assert_int_eq(pthread_create(&th, NULL, cut_poster_thread, &pp), 0);
	while (!pp.ran)
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	s = stats_of(loop);
	ck_assert_uint_eq(p.park_ns, 1000 * SEC - margin);	/* bounded by the prediction */
	ck_assert_uint_eq(s.predict_waits, 1);
	ck_assert_uint_eq(s.wakeups, 1);			/* ended by the post's wake */
	ck_assert_uint_eq(s.predict_cut, 1);			/* ...not by its own event */
	ck_assert_uint_eq(s.predict_early + s.predict_late, 0);
	ck_assert_uint_eq(s.blocks, 0);
	p.expect = 0;
	fpred_free(loop, &p);
}
END_TEST

/* ---- the learned margin fades when it alone stops predictive sleeps ----------------- */

/*
 * Grow the learned margin with late predictions, then predict waits that only
 * that learned part keeps the loop from sleeping through: the margin must fade
 * until it sleeps again. Before the fix it faded only after a sleep, so once
 * it was too wide no sleep came and the loop spun through every such wait.
 * Everything runs on a fake clock: a predictive sleep is ~1 ms of real time.
 */
START_TEST(test_predict_margin_fades)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc = { .t = 1000 * SEC };
	struct fpred p = { .src = { .ops = &fpred_ops } };
	struct rk_loop_stats s0, s1;
	uint64_t base, margin, grown;
	unsigned int i;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 0;		/* only the prediction decides */
	ck_assert(rk__config_tuning(&c)->wait.predict);
	base = rk__config_tuning(&c)->wait.predict_margin_ns;
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &fc);
	p.src.data = &p;
	ck_assert_int_eq(rk_loop_add_source(loop, &p.src), 0);

	/* 1: late predictions: woken exactly at the deadline, the event already in */
	for (i = 0; i < 40; i++) {
		s0 = stats_of(loop);
		p.expect = fc.t + 1 * MS;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);	/* parks ~1 ms */
		s1 = stats_of(loop);
		ck_assert_uint_eq(s1.predict_waits, s0.predict_waits + 1);
		fc.t = p.expect - s0.predict_margin_ns;		/* the deadline: no oversleep */
		p.ready = true;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);	/* delivers it */
		ck_assert(!p.ready);
		fc.t += 10 * MS;
	}
	s0 = stats_of(loop);
	grown = s0.predict_margin_ns;
	ck_assert_uint_ge(s0.predict_late, 40);
	ck_assert_uint_ge(grown, base + 10 * US);	/* the learned part grew... */
	ck_assert_uint_le(grown, base + 1 * MS / 64);	/* ...to 1/64 of the sleep at most */

	/* 2: waits the grown margin says to spin through, but the base would sleep in */
	for (i = 0; i < 100; i++) {
		p.expect = fc.t + base + rk__config_tuning(&c)->wait.predict_min_ns +
			   (grown - base) / 2;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		fc.t = p.expect;
		p.ready = true;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		fc.t += 10 * MS;
	}
	s1 = stats_of(loop);
	margin = s1.predict_margin_ns;
	fprintf(stderr, "predict margin: base %" PRIu64 " us, grown %" PRIu64 " us, after %" PRIu64
		" us; predictive sleeps in part 2: %" PRIu64 "\n", base / US, grown / US, margin / US,
		s1.predict_waits - s0.predict_waits);
	ck_assert_uint_lt(margin, grown);
	ck_assert_uint_ge(s1.predict_waits, s0.predict_waits + 1);	/* it sleeps again */
	ck_assert_int_eq(rk_loop_remove_source(loop, &p.src), 0);
	free_loop(loop);
}
END_TEST

/*
 * One predictive sleep of @p's source for an event 1 ms ahead, woken @over ns
 * after its deadline, the event at the predicted time: late when the wake
 * comes after it (then delivered at once), else spun to and delivered there.
 * Returns the sleep's length.
 */
static uint64_t late_cycle(struct rk_loop *loop, struct fake_clock *fc, struct fpred *p,
			   uint64_t over)
{
	struct rk_loop_stats s0 = stats_of(loop), s1;
	uint64_t expect = fc->t + 1 * MS, park;

	p->expect = expect;
	p->park_ns = 0;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);	/* parks ~1 ms */
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.predict_waits, s0.predict_waits + 1);
	park = p->park_ns;
	ck_assert_uint_gt(park, 0);
	fc->t += park + over;
	p->ready = fc->t >= expect;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);	/* late: delivers it */
	if (p->ready) {						/* early: spun to it */
		fc->t = expect;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	}
	ck_assert(!p->ready);
	fc->t += 10 * US;
	return park;
}

/*
 * A timer that wakes on time but one wake in 50 comes 60 us late (a thread the
 * host ran late now and then): the oversleep quantile alone forgets such a wake
 * between two of them (it keeps the margin at 20 + ~31 us) and every one of
 * them is a late wake, its event waiting for the thread. The learned boost
 * stays: after a few late wakes it keeps the predictive sleeps ending earlier
 * and most of the later slow wakes come before their event (at most one in
 * three late; without it every one). Bounded: wakes late by milliseconds,
 * which no margin serves, grow the boost to 1/64 of the sleep and no more.
 * It fails where each early wake takes 1/32 of the boost away (1 us left of
 * 5 after 49 wakes), or where the spin to the event after each early wake
 * fades the quantile and the boost as if the margin had kept the loop from a
 * sleep (by 1/16 and 1/32 a wake while the margin is above base + predict_min).
 */
START_TEST(test_predict_late_rare_covered)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc;
	struct fpred p = { 0 };
	struct rk_loop_stats s0, s1;
	uint64_t base, park, shortest = UINT64_MAX;
	unsigned int i, slow = 0;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 0;		/* only the prediction decides */
	ck_assert(rk__config_tuning(&c)->wait.learn);
	base = rk__config_tuning(&c)->wait.predict_margin_ns;
	loop = fpred_loop(&c, &fc, &p);
	for (i = 0; i < 50; i++)	/* on time: the margin is the base */
		late_cycle(loop, &fc, &p, 0);
	s0 = stats_of(loop);
	ck_assert_uint_eq(s0.predict_late, 0);
	ck_assert_uint_eq(s0.predict_margin_ns, base);
	for (i = 0; i < 600; i++) {
		if (i % 50 == 49)
			slow++;
		late_cycle(loop, &fc, &p, i % 50 == 49 ? 60 * US : 0);
	}
	s1 = stats_of(loop);
	fprintf(stderr, "rare oversleeps: %u slow wakes, %" PRIu64 " late, margin %" PRIu64
		" us\n", slow, s1.predict_late - s0.predict_late, s1.predict_margin_ns / US);
	ck_assert_uint_ge(s1.predict_late, s0.predict_late + 1);	/* it learned from some */
	ck_assert_uint_le(s1.predict_late - s0.predict_late, slow / 3);
	ck_assert_uint_eq(s1.predict_overslept - s0.predict_overslept,
			  s1.predict_late - s0.predict_late);	/* all the timer's */
	/* bounded: the boost is at most 1/64 of the sleep beside the capped quantile */
	for (i = 0; i < 60; i++) {
		park = late_cycle(loop, &fc, &p, 3 * MS);
		if (park < shortest)
			shortest = park;
	}
	s0 = stats_of(loop);
	ck_assert_uint_ge(s0.predict_late, s1.predict_late + 60);
	ck_assert_uint_ge(shortest, 1 * MS - base - 100 * US - 1 * MS / 64);
	p.expect = 0;
	fpred_free(loop, &p);
}
END_TEST

/*
 * The boost is paid at every sleep, so one grown for long sleeps is cut to
 * 1/64 of a short one: 10 ms predictions whose events come before the wake
 * (late, the event woke it: no oversleep learned) grow it to the 100 us cap,
 * then the first 1 ms sleep that wakes on time cuts it to 15 us, and the next
 * 1 ms sleep ends no earlier than that (uncut: 100 us before).
 */
START_TEST(test_predict_boost_short_sleeps)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc;
	struct fpred p = { 0 };
	struct rk_loop_stats s;
	uint64_t base, park;
	unsigned int i;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 0;
	base = rk__config_tuning(&c)->wait.predict_margin_ns;
	loop = fpred_loop(&c, &fc, &p);
	for (i = 0; i < 25; i++) {
		p.expect = fc.t + 10 * MS;
		p.park_ns = 0;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);	/* parks ~10 ms */
		ck_assert_uint_gt(p.park_ns, 0);
		fc.t += p.park_ns - 5 * US;	/* the event ended the sleep early */
		p.ready = true;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		ck_assert(!p.ready);
		fc.t += 10 * US;
	}
	s = stats_of(loop);
	ck_assert_uint_eq(s.predict_late, 25);
	ck_assert_uint_eq(s.predict_overslept, 0);
	ck_assert_uint_eq(s.predict_margin_ns, base + 100 * US);	/* the boost's cap */
	late_cycle(loop, &fc, &p, 0);		/* a 1 ms sleep, on time */
	s = stats_of(loop);
	ck_assert_uint_eq(s.predict_early, 1);
	ck_assert_uint_le(s.predict_margin_ns, base + 1 * MS / 64);
	park = late_cycle(loop, &fc, &p, 0);
	ck_assert_uint_ge(park, 1 * MS - base - 1 * MS / 64);
	p.expect = 0;
	fpred_free(loop, &p);
}
END_TEST

/*
 * What the loop tells a source about its waits, when it is run one iteration
 * at a time (RK_RUN_ONCE, as a server's own loop does): arm() sees the
 * timeout of the wait (none for a block), and the first poll after a wait
 * that slept sees rk__loop_after_park(). Before the fix that flag came from
 * the phase, which every rk_loop_run() call resets, so ONCE never showed it.
 */
static void *wake_when_armed(void *arg)
{
	struct fpred *p = arg;

	/* after arm(): the loop has published 'sleeping', so this wake is never lost */
	while (!atomic_load(&p->armed))
		sched_yield();
	rk_loop_wake(p->loop);
	return NULL;
}

START_TEST(test_source_sees_waits)
{
	pthread_t th;
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc = { .t = 1000 * SEC };
	struct fpred p = { .src = { .ops = &fpred_ops } };
	struct rk_loop_stats s0, s1;
	uint64_t margin;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 0;
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &fc);
	p.src.data = &p;
	p.loop = loop;
	ck_assert_int_eq(rk_loop_add_source(loop, &p.src), 0);

	/* a predictive sleep: bounded, then the first poll knows it slept */
	s0 = stats_of(loop);
	margin = s0.predict_margin_ns;
	p.expect = fc.t + 2 * MS;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.predict_waits, s0.predict_waits + 1);
	ck_assert_uint_eq(p.park_ns, 2 * MS - margin);
	ck_assert(!p.after_park);	/* polled before the wait */
	p.ready = true;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert(!p.ready);
	ck_assert_msg(p.after_park, "the poll after a sleep did not see rk__loop_after_park()");
	/* no wait in between: the next poll does not */
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert(!p.after_park);

	/* nothing predicted, no window: a block without a timeout (a wake ends it) */
	p.expect = 0;
	p.park_ns = 0;
	atomic_store(&p.armed, 0);
	s0 = stats_of(loop);
	ck_assert_int_eq(pthread_create(&th, NULL, wake_when_armed, &p), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(p.park_ns, UINT64_MAX);
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.blocks, s0.blocks + 1);
	ck_assert_uint_eq(s1.wakeups, s0.wakeups + 1);
	ck_assert_int_eq(rk_loop_remove_source(loop, &p.src), 0);
	free_loop(loop);
}
END_TEST

/*
 * A predictive sleep for @a (1 ms ahead) that the event of @by ends 100 us in,
 * reported as a frame on the ring would be. Return the loop's counters after.
 */
static struct rk_loop_stats sleep_cut_by(struct rk_loop *loop, struct fake_clock *fc,
					 struct fpred *a, struct rk_source *by)
{
	a->expect = fc->t + 1 * MS;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	fc->t += 100 * US;
	rk__loop_source_event(loop, by);
	a->expect = 0;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	return stats_of(loop);
}

/*
 * Late or not is the predicting source's business: another source's event
 * found after the sleep (a lazy GPU mark on a follower, say) must not widen
 * the margin. Before the fix any event after a predictive sleep counted as
 * "late", and the margin grew every round. A sleep cut short by the awaited
 * event itself (a frame, told with rk__loop_source_event()) is late.
 */
START_TEST(test_predict_late_is_per_source)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc = { .t = 1000 * SEC };
	struct fpred a = { .src = { .ops = &fpred_ops } }, b = { .src = { .ops = &fpred_ops } };
	struct rk_loop_stats s0, s1;
	unsigned int i;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 0;
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &fc);
	a.src.data = &a;
	b.src.data = &b;
	ck_assert_int_eq(rk_loop_add_source(loop, &a.src), 0);
	ck_assert_int_eq(rk_loop_add_source(loop, &b.src), 0);
	s0 = stats_of(loop);
	for (i = 0; i < 40; i++) {
		a.expect = fc.t + 1 * MS;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);	/* sleeps for a */
		fc.t = a.expect - stats_of(loop).predict_margin_ns;	/* woken on time */
		b.ready = true;				/* b's event is in, a's not yet */
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		ck_assert(!b.ready);
		a.ready = true;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		ck_assert(!a.ready);
		fc.t += 10 * MS;
	}
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.predict_waits, s0.predict_waits + 40);
	ck_assert_uint_eq(s1.predict_late, s0.predict_late);
	ck_assert_uint_eq(s1.predict_early, s0.predict_early + 40);
	ck_assert_uint_le(s1.predict_margin_ns, s0.predict_margin_ns);

	/* cut short by a's own event (on the ring): late; by nothing of a's: a cut */
	s0 = sleep_cut_by(loop, &fc, &a, &a.src);
	ck_assert_uint_eq(s0.predict_late, s1.predict_late + 1);
	ck_assert_uint_gt(s0.predict_margin_ns, s1.predict_margin_ns);
	s1 = sleep_cut_by(loop, &fc, &a, &b.src);
	ck_assert_uint_eq(s1.predict_late, s0.predict_late);
	ck_assert_uint_eq(s1.predict_cut, s0.predict_cut + 1);
	ck_assert_int_eq(rk_loop_remove_source(loop, &a.src), 0);
	ck_assert_int_eq(rk_loop_remove_source(loop, &b.src), 0);
	free_loop(loop);
}
END_TEST

/*
 * What each source hears of a predictive sleep (rk_source_ops.verdict()):
 * the one it was for hears early, late or cut; when it woke early as meant,
 * every other source with the hook hears that the loop spins now, here a
 * source with no poll() at all (never polled: a NULL poll would crash).
 */
struct vsrc {
	struct rk_source src;
	struct fpred *p;	/* the predicting part, or NULL: a listener only */
	int heard[RK_VERDICT_SPIN + 1];
};

static int vsrc_poll(struct rk_source *src, uint64_t now)
{
	return fpred_poll(&((struct vsrc *)src->data)->p->src, now);
}

static uint64_t vsrc_expect(struct rk_source *src, uint64_t now)
{
	return fpred_expect(&((struct vsrc *)src->data)->p->src, now);
}

static int vsrc_arm(struct rk_source *src)
{
	return fpred_arm(&((struct vsrc *)src->data)->p->src);
}

static void vsrc_verdict(struct rk_source *src, enum rk_verdict v)
{
	struct vsrc *vs = src->data;

	ck_assert_int_ge(v, RK_VERDICT_EARLY);
	ck_assert_int_le(v, RK_VERDICT_SPIN);
	vs->heard[v]++;
}

/* The verdicts @vs heard, as "early cut late spin". */
static void ck_heard(const struct vsrc *vs, int early, int cut, int late, int spin)
{
	ck_assert_msg(vs->heard[RK_VERDICT_EARLY] == early && vs->heard[RK_VERDICT_CUT] == cut &&
		      vs->heard[RK_VERDICT_LATE] == late && vs->heard[RK_VERDICT_SPIN] == spin,
		      "heard early %d cut %d late %d spin %d, want %d %d %d %d",
		      vs->heard[RK_VERDICT_EARLY], vs->heard[RK_VERDICT_CUT],
		      vs->heard[RK_VERDICT_LATE], vs->heard[RK_VERDICT_SPIN], early, cut, late,
		      spin);
}

START_TEST(test_source_verdicts)
{
	static const struct rk_source_ops pred_ops = {
		.name = "predicting", .poll = vsrc_poll, .arm = vsrc_arm, .expect = vsrc_expect,
		.verdict = vsrc_verdict };
	static const struct rk_source_ops listen_ops = { .name = "listening",
							 .verdict = vsrc_verdict };
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc = { .t = 1000 * SEC };
	struct fpred p = { 0 };
	struct vsrc a = { .p = &p }, li = { 0 };
	struct rk_post post;
	struct rk_loop_stats s;
	uint64_t margin;
	int ran = 0;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 0;		/* only the prediction decides */
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &fc);
	p.src.data = &p;
	p.loop = loop;
	atomic_init(&p.armed, 0);
	rk_source_init(&a.src, &pred_ops, &a);
	rk_source_init(&li.src, &listen_ops, &li);
	ck_assert_int_eq(rk_loop_add_source(loop, &a.src), 0);
	ck_assert_int_eq(rk_loop_add_source(loop, &li.src), 0);
	ck_assert_int_eq(rk_loop_add_source(loop, &li.src), -EALREADY);

	/* woken at the deadline, the event not in: early for a, "spin" for the listener */
	margin = stats_of(loop).predict_margin_ns;
	p.expect = fc.t + 1 * MS;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);	/* sleeps ~1 ms */
	ck_assert_uint_eq(stats_of(loop).predict_waits, 1);
	ck_heard(&a, 0, 0, 0, 0);
	fc.t = p.expect - margin;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_heard(&a, 1, 0, 0, 0);
	ck_heard(&li, 0, 0, 0, 1);
	fc.t = p.expect;
	p.ready = true;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);	/* delivered while spinning */
	ck_heard(&a, 1, 0, 0, 0);

	/* the event in at the wake: late for a, nothing for the listener */
	fc.t += 10 * MS;
	margin = stats_of(loop).predict_margin_ns;
	p.expect = fc.t + 1 * MS;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	fc.t = p.expect - margin;
	p.ready = true;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_heard(&a, 1, 0, 1, 0);
	ck_heard(&li, 0, 0, 0, 1);

	/* ended 100 us in by busy work (a post): cut; by idle work: no verdict */
	fc.t += 10 * MS;
	p.expect = fc.t + 1 * MS;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	fc.t += 100 * US;
	rk_post_init(&post, busy_post_cb, &ran);
	rk_loop_post(loop, &post);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(ran, 1);
	ck_heard(&a, 1, 1, 1, 0);
	p.expect = fc.t + 1 * MS;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	fc.t += 100 * US;
	rk_post_init(&post, idle_post_cb, &ran);
	rk_loop_post(loop, &post);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(ran, 2);
	s = stats_of(loop);
	ck_assert_uint_eq(s.predict_cut, 2);
	ck_heard(&a, 1, 1, 1, 0);
	ck_heard(&li, 0, 0, 0, 1);
	p.expect = 0;
	ck_assert_int_eq(rk_loop_remove_source(loop, &li.src), 0);
	ck_assert_int_eq(rk_loop_remove_source(loop, &li.src), -ENOENT);
	ck_assert_int_eq(rk_loop_remove_source(loop, &a.src), 0);
	free_loop(loop);
}
END_TEST

/* A source that gives no prediction keeps the old policy: spin in the window. */
START_TEST(test_predict_none_keeps_window)
{
	check_spins_through(false, true);
}
END_TEST

/*
 * The predictor behind expect(): it settles near the 10th percentile of the
 * durations, a censored bound below it lowers it (a late wake teaches an
 * earlier one), one above it changes nothing, and it stops predicting once
 * the event is overdue.
 */
START_TEST(test_predictor)
{
	struct rk__pred p = { 0 };
	uint64_t rs = 7, i, d, below = 0, q;

	ck_assert_uint_eq(rk__pred_expect(&p, 1000, 1000), 0);	/* cold */
	for (i = 0; i < 20000; i++)
		rk__pred_sample(&p, 100 * US + rng_next(&rs) % (100 * US));	/* 100..200 us */
	ck_assert_msg(p.q > 100 * US && p.q < 118 * US, "q %" PRIu64 " ns", p.q);
	ck_assert_uint_ge(p.mean, 140 * US);
	ck_assert_uint_le(p.mean, 160 * US);
	for (i = 0; i < 1000; i++) {
		d = 100 * US + rng_next(&rs) % (100 * US);
		below += d < p.q;
		rk__pred_sample(&p, d);
	}
	ck_assert_msg(below > 40 && below < 200, "%" PRIu64 " of 1000 below q", below);
	ck_assert_uint_eq(rk__pred_expect(&p, 5 * SEC, 5 * SEC),
			  5 * SEC + (p.q < p.mean - 2 * p.dev ? p.q : p.mean - 2 * p.dev));
	/* overdue past max(q, mean + 4 dev) + slack */
	ck_assert_uint_eq(rk__pred_expect(&p, 5 * SEC, 5 * SEC + 10 * MS), 0);
	q = p.q;
	rk__pred_bound(&p, q + 50 * US);	/* "at most later than q": says nothing */
	ck_assert_uint_eq(p.q, q);
	rk__pred_bound(&p, q - 1);		/* it came before q: aim earlier */
	ck_assert_uint_lt(p.q, q);
	/* a cold predictor takes a bound as its first guess */
	memset(&p, 0, sizeof(p));
	rk__pred_bound(&p, 42 * US);
	ck_assert_uint_eq(p.q, 42 * US);
	ck_assert_uint_eq(p.n, 1);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

/* ---- learned waits: a link's arrival gaps, the learned spin window ------------------ */

/* A link's busy frame, as link.c reports it: an arrival on @g at the iteration's time. */
struct larr {
	struct rk__gaps g;
	struct rk_loop *loop;
	struct rk_post post;
	int n;
};

static enum rk_activity arrival_cb(struct rk_post *p)
{
	struct larr *a = p->data;

	rk__gaps_arrival(a->loop, &a->g);
	a->n++;
	return RK_BUSY;
}

#define L_GAP		(1 * MS)
#define L_STEP		(30 * US)	/* past the burst: the loop decides how to wait */

/*
 * A loop on the fake clock with a 200 ms spin window (so without a learned
 * prediction every wait in these tests spins), @rec attached to record what
 * the loop tells its sources (it predicts nothing itself), @a a link's learner.
 */
static struct rk_loop *learn_loop(bool learn, struct fake_clock *fc, struct fpred *rec,
				  struct larr *a)
{
	struct rk_config c;
	struct rk_loop *loop;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 200 * MS;
	ck_assert(rk__config_tuning(&c)->wait.learn);	/* the default */
	rk__config_tuning(&c)->wait.learn = learn;
	loop = fpred_loop(&c, fc, rec);
	memset(a, 0, sizeof(*a));
	a->loop = loop;
	a->post = (struct rk_post){ .cb = arrival_cb, .data = a };
	return loop;
}

static void learn_free(struct rk_loop *loop, struct fpred *rec, struct larr *a)
{
	rk__gaps_detach(&a->g);
	ck_assert_ptr_null(a->g.src.loop);
	fpred_free(loop, rec);
}

/* A frame at @t: one iteration delivers it, and returns without waiting. */
static void arrive(struct fake_clock *fc, struct larr *a, uint64_t t)
{
	int n = a->n;

	fc->t = t;
	rk_loop_post(a->loop, &a->post);
	ck_assert_int_eq(rk_loop_run(a->loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(a->n, n + 1);
}

/* One empty iteration at @t; returns the stats after it. */
static struct rk_loop_stats learn_step(struct fake_clock *fc, struct rk_loop *loop, uint64_t t)
{
	fc->t = t;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	return stats_of(loop);
}

/*
 * Frames every 1 ms, each seen while the loop spins (exact samples). Until
 * the learner has RK__GAPS_WARM gaps, the wait after each frame spins (the
 * window); from then on it is a predictive sleep for the link (learn_waits)
 * that ends before the next frame less the margin, woken there it spins, and
 * the frame comes while it spins (early, never late). With RK_LEARN=0
 * (@learn false) every wait spins: the control.
 */
static void check_learn_periodic(bool learn)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(learn, &fc, &rec, &a);
	struct rk_loop_stats s0, s1;
	uint64_t base = fc.t, t, margin;
	unsigned int i, n = 24, slept = 0;

	for (i = 0; i < n; i++) {
		t = base + i * L_GAP;
		arrive(&fc, &a, t);
		ck_assert(!a.g.first_late);	/* seen while spinning: an exact sample */
		s0 = stats_of(loop);
		margin = s0.predict_margin_ns;
		rec.park_ns = 0;
		s1 = learn_step(&fc, loop, t + L_STEP);
		if (!learn || i < RK__GAPS_WARM) {
			ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
			ck_assert_uint_eq(s1.predict_waits, s0.predict_waits);
			continue;
		}
		ck_assert_uint_eq(s1.predict_waits, s0.predict_waits + 1);
		ck_assert_uint_eq(s1.learn_waits, s0.learn_waits + 1);
		ck_assert_uint_eq(s1.spin_iters, s0.spin_iters);
		/* until before the next frame, less the margin; exact gaps have no
		 * deviation, so the first learned sleeps end 3 x mean/128 before
		 * it (the floor while settling), the later ones right there (the
		 * second gap set the deviation from the spread, not a guess) */
		ck_assert_uint_gt(rec.park_ns, L_GAP / 2);
		ck_assert_uint_le(rec.park_ns, L_GAP - L_STEP - margin);
		ck_assert_uint_eq(rec.park_ns, L_GAP - L_STEP - margin -
					       (i < RK__GAPS_SETTLE ? 3 * (L_GAP / 128) : 0));
		slept++;
		/* woken at the deadline: it spins for the frame */
		s0 = learn_step(&fc, loop, t + L_STEP + rec.park_ns);
		ck_assert_uint_eq(s0.predict_early, s1.predict_early + 1);
		ck_assert_uint_eq(s0.spin_iters, s1.spin_iters + 1);
	}
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.learn_waits, slept);
	ck_assert_uint_eq(s1.predict_waits, slept);
	ck_assert_uint_eq(s1.predict_early, slept);
	ck_assert_uint_eq(s1.predict_late + s1.predict_cut + s1.learn_holds, 0);
	ck_assert_uint_eq(s1.blocks, 0);
	ck_assert_uint_eq(slept, learn ? n - RK__GAPS_WARM : 0);
	learn_free(loop, &rec, &a);
}

START_TEST(test_learn_periodic_sleeps)
{
	check_learn_periodic(true);
}
END_TEST

START_TEST(test_learn_off_spins)
{
	check_learn_periodic(false);
}
END_TEST

/*
 * Irregular gaps (0.4 and 1.6 ms in turn: a deviation far above a quarter of
 * the mean) predict nothing, so the window and block rules decide: with no
 * spin window (RK_SPIN_US=0) every wait after a frame blocks (until a bound
 * timer 1 ms ahead), where a learner that predicted would spin. Then the same
 * link turns periodic and the learner predicts again.
 */
START_TEST(test_learn_irregular_falls_back)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(true, &fc, &rec, &a);
	struct rk_wait_policy w = rk_loop_config(loop)->wait;
	struct rk_loop_stats s0, s1;
	struct rk_timer bound;
	uint64_t t = fc.t;
	unsigned int i;
	int fired = 0;	/* it fires at the frames after the long gaps: harmless */

	w.spin_ns = 0;
	rk_loop_set_wait(loop, &w);
	rk_timer_init(&bound, never_cb, &fired);
	for (i = 0; i < 40; i++) {
		t += i % 2 ? 1600 * US : 400 * US;
		arrive(&fc, &a, t);
		ck_assert_int_eq(rk_timer_start(loop, &bound, L_STEP + 1 * MS, 0), 0);
		s0 = stats_of(loop);
		s1 = learn_step(&fc, loop, t + L_STEP);
		ck_assert_uint_eq(s1.blocks, s0.blocks + 1);
		ck_assert_uint_eq(s1.spin_iters, s0.spin_iters);
		ck_assert_uint_eq(s1.predict_waits, s0.predict_waits);
	}
	rk_timer_stop(&bound);
	ck_assert_uint_ge(a.g.n, RK__GAPS_WARM);
	/* periodic again: the deviation settles and the sleeps come back */
	for (i = 0; i < 40 && !stats_of(loop).learn_waits; i++) {
		t += L_GAP;
		arrive(&fc, &a, t);
		ck_assert_int_eq(rk_timer_start(loop, &bound, L_STEP + 1 * MS, 0), 0);
		s1 = learn_step(&fc, loop, t + L_STEP);
		rk_timer_stop(&bound);
		if (s1.learn_waits)
			learn_step(&fc, loop, t + L_STEP + rec.park_ns);
	}
	ck_assert_uint_eq(stats_of(loop).learn_waits, 1);
	learn_free(loop, &rec, &a);
}
END_TEST

struct learn_cutter {
	struct fpred *rec;
	struct rk_loop *loop;
	struct rk_post post;
	int ran;
};

/* Posts busy work once the loop commits to a sleep (its sources armed). */
static void *learn_cutter_thread(void *arg)
{
	struct learn_cutter *lc = arg;

	while (!atomic_load(&lc->rec->armed))
		sched_yield();
	rk_loop_post(lc->loop, &lc->post);
	return NULL;
}

static enum rk_activity learn_cut_cb(struct rk_post *p)
{
	((struct learn_cutter *)p->data)->ran = 1;
	return RK_BUSY;
}

/*
 * A learned sleep cut short by other busy work (a worker's post, as a CPU
 * backend's completion comes): the learner holds its predictions for the
 * next RK__GAPS_HOLD bursts (the waits after them spin), then predicts again.
 * The control for the hold is the count: one learn_hold, and the sleep after
 * the hold is a learned one again.
 */
START_TEST(test_learn_holds_after_cut)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(true, &fc, &rec, &a);
	struct learn_cutter lc = { .rec = &rec, .loop = loop };
	struct rk_loop_stats s0, s1;
	uint64_t base = fc.t, t, waits;
	unsigned int i;
	pthread_t th;

	lc.post = (struct rk_post){ .cb = learn_cut_cb, .data = &lc };
	for (i = 0; i <= RK__GAPS_WARM; i++) {
		t = base + i * L_GAP;
		arrive(&fc, &a, t);
		learn_step(&fc, loop, t + L_STEP);
	}
	/* that last step was a learned sleep; spin to the next frame */
	ck_assert_uint_eq(stats_of(loop).learn_waits, 1);
	learn_step(&fc, loop, t + L_STEP + rec.park_ns);
	t += L_GAP;
	arrive(&fc, &a, t);
	/* the next learned sleep is cut by a post */
	atomic_store(&rec.armed, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, learn_cutter_thread, &lc), 0);
	s0 = learn_step(&fc, loop, t + L_STEP);
	ck_assert_uint_eq(s0.learn_waits, 2);
	while (!lc.ran)
		learn_step(&fc, loop, t + 2 * L_STEP);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	s0 = stats_of(loop);
	/* (a sleep that timed out before the post came, in real time, is cut
	 * by nothing busy: no hold) */
	ck_assert_uint_ge(s0.predict_cut, 1);
	ck_assert_uint_eq(s0.learn_holds, 1);
	waits = s0.learn_waits;	/* (as many as those timeouts: one or more) */
	/* held: the waits after the next RK__GAPS_HOLD - 1 frames spin */
	for (i = 1; i < RK__GAPS_HOLD; i++) {
		t += L_GAP;
		arrive(&fc, &a, t);
		s0 = stats_of(loop);
		s1 = learn_step(&fc, loop, t + L_STEP);
		ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
		ck_assert_uint_eq(s1.predict_waits, s0.predict_waits);
	}
	/* the hold is over: a learned sleep again */
	t += L_GAP;
	arrive(&fc, &a, t);
	s1 = learn_step(&fc, loop, t + L_STEP);
	ck_assert_uint_eq(s1.learn_waits, waits + 1);
	learn_free(loop, &rec, &a);
}
END_TEST

/* A learner settled by RK__GAPS_SETTLE + 1 frames @gap apart, seen while
 * spinning; the last one at the returned time, its learned sleep and spin done. */
static uint64_t learn_warm(struct fake_clock *fc, struct rk_loop *loop, struct fpred *rec,
			   struct larr *a, uint64_t gap)
{
	uint64_t t = fc->t;
	unsigned int i;

	for (i = 0; i <= RK__GAPS_SETTLE; i++) {
		t += gap;
		arrive(fc, a, t);
		rec->park_ns = 0;
		learn_step(fc, loop, t + L_STEP);
		if (rec->park_ns)
			learn_step(fc, loop, t + L_STEP + rec->park_ns);
	}
	ck_assert_uint_ge(stats_of(loop).learn_waits, 1);
	return t;
}

/*
 * A link whose frames stop (idle entry): after the last one the loop sleeps
 * until the next is due less the margin and spins for it, but only until the
 * learner calls it overdue (mean + 4 deviations + mean/16, here 1.0625 ms after
 * the frame); then the window, cut to that same point because the last busy
 * work was the learner's, has ended: the loop blocks (a bound timer ends the
 * block). A loop that kept the configured 200 ms window (or a slack of a quarter
 * gap) would spin on.
 */
START_TEST(test_learn_idle_entry_short)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(true, &fc, &rec, &a);
	struct rk_loop_stats s0, s1;
	struct rk_timer bound;
	uint64_t t, until;
	int fired = 0;

	t = learn_warm(&fc, loop, &rec, &a, L_GAP);
	ck_assert_uint_eq(a.g.dev, 0);
	until = t + L_GAP + L_GAP / 16;
	rk_timer_init(&bound, never_cb, &fired);
	/* the frame after it never comes: spun for up to the overdue point */
	s0 = learn_step(&fc, loop, t + L_GAP + 10 * US);
	s1 = learn_step(&fc, loop, until - 1 * US);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
	ck_assert_uint_eq(s1.blocks, s0.blocks);
	ck_assert_uint_lt(s1.spin_window_ns, 2 * MS);
	/* past it: block, not spin */
	ck_assert_int_eq(rk_timer_start(loop, &bound, 1 * MS, 0), 0);
	s0 = stats_of(loop);
	s1 = learn_step(&fc, loop, until + 1 * US);
	ck_assert_uint_eq(s1.blocks, s0.blocks + 1);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters);
	ck_assert_uint_eq(s1.window_cuts, s0.window_cuts + 1);
	rk_timer_stop(&bound);
	/* other busy work last (a post): the configured window is back */
	busy_kick(loop);
	s0 = stats_of(loop);
	s1 = learn_step(&fc, loop, fc.t + 5 * MS);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
	ck_assert_uint_eq(s1.spin_window_ns, 200 * MS);
	learn_free(loop, &rec, &a);
}
END_TEST

/*
 * The learner's next frame is late: the loop spins at @spin_to, then, when
 * @block_at is not 0, blocks there (a timer bounds it), and the frame comes at
 * @at, overdue and woken for exactly when the loop blocked. Its learned sleep
 * and spin after it as learn_warm()'s; returns @at.
 */
static uint64_t late_frame(struct fake_clock *fc, struct rk_loop *loop, struct fpred *rec,
			   struct larr *a, uint64_t spin_to, uint64_t block_at, uint64_t at)
{
	bool blocks = block_at != 0;
	struct rk_loop_stats s0, s1;
	struct rk_timer bound;
	int fired = 0;

	rk_timer_init(&bound, never_cb, &fired);
	s0 = stats_of(loop);
	s1 = learn_step(fc, loop, spin_to);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
	ck_assert_uint_eq(s1.blocks, s0.blocks);
	if (blocks) {
		ck_assert_int_eq(rk_timer_start(loop, &bound, at - spin_to + 1 * MS, 0), 0);
		s0 = stats_of(loop);
		s1 = learn_step(fc, loop, block_at);
		ck_assert_uint_eq(s1.blocks, s0.blocks + 1);
		rk_timer_stop(&bound);
	}
	s0 = stats_of(loop);
	arrive(fc, a, at);
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.learn_overdue, s0.learn_overdue + blocks);
	ck_assert_uint_eq(s1.learn_woken, s0.learn_woken + blocks);
	rec->park_ns = 0;
	learn_step(fc, loop, at + L_STEP);
	if (rec->park_ns)
		learn_step(fc, loop, at + L_STEP + rec->park_ns);
	return at;
}

/* @n regular frames L_GAP apart after @t, each slept for and spun to; returns the last. */
static uint64_t regular_frames(struct fake_clock *fc, struct rk_loop *loop, struct fpred *rec,
			       struct larr *a, uint64_t t, unsigned int n)
{
	while (n--) {
		t += L_GAP;
		arrive(fc, a, t);
		ck_assert(!a->g.first_late);
		rec->park_ns = 0;
		learn_step(fc, loop, t + L_STEP);
		ck_assert_uint_gt(rec->park_ns, 0);	/* a learned sleep */
		learn_step(fc, loop, t + L_STEP + rec->park_ns);
	}
	return t;
}

/*
 * A link whose peer sends late now and then (its own timer woke late): exact
 * 1 ms gaps, then one frame 150 us late, past the learned bound (mean + 4
 * deviations + mean/16: 62.5 us with no deviation), so the loop blocked and
 * the frame waited for a wake (learn_overdue, learn_woken). The bound then
 * covers that lateness: after regular frames, the next frame as late is spun
 * for and seen while spinning (not overdue). Bounded: a frame 10 ms late (a
 * pause) widens it by half a gap and no more (the spin at idle entry stays
 * under 2 ms), and past that the loop blocks. Unwidened, the bound would stay
 * mean + 4 deviations + mean/16 (the control: the first late frame).
 */
START_TEST(test_learn_overdue_covers_late)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(true, &fc, &rec, &a);
	struct rk_loop_stats s0, s1;
	struct rk_timer bound;
	uint64_t t, until, first;
	int fired = 0;

	rk_timer_init(&bound, never_cb, &fired);
	t = learn_warm(&fc, loop, &rec, &a, L_GAP);
	ck_assert_uint_eq(a.g.dev, 0);
	ck_assert_uint_eq(a.g.late_hi, 0);
	/* 150 us late, the bound at 62.5: blocked for, overdue */
	t = late_frame(&fc, loop, &rec, &a, t + L_GAP + L_GAP / 16 - 1 * US,
		       t + L_GAP + L_GAP / 16 + 1 * US, t + L_GAP + 150 * US);
	ck_assert_uint_eq(a.g.late_hi, 150 * US);
	ck_assert_uint_eq(a.g.mean, L_GAP);	/* seen after a sleep: not sampled */
	t = regular_frames(&fc, loop, &rec, &a, t, 4);
	/* as late again: spun for to the frame, seen while spinning */
	ck_assert_int_eq(rk_timer_start(loop, &bound, 2 * MS, 0), 0);	/* bounds a wrong block */
	t = late_frame(&fc, loop, &rec, &a, t + L_GAP + 150 * US - 1 * US, 0,
		       t + L_GAP + 150 * US);
	rk_timer_stop(&bound);
	ck_assert(!a.g.first_late);
	/* a pause of 10 ms: the lateness learned is half a gap, no more */
	t = regular_frames(&fc, loop, &rec, &a, t, 12);
	t = late_frame(&fc, loop, &rec, &a, t + L_GAP + 100 * US, t + L_GAP + L_GAP / 2,
		       t + 10 * MS);
	ck_assert_uint_eq(a.g.late_hi, a.g.mean / 2);
	t = regular_frames(&fc, loop, &rec, &a, t, 1);
	/* idle entry: spun for up to mean + late_hi + slack, then a block */
	first = a.g.first;
	until = first + a.g.mean + a.g.late_hi + a.g.mean / 16;
	ck_assert_uint_gt(4 * a.g.dev, 0);
	ck_assert_uint_lt(4 * a.g.dev, a.g.late_hi);
	ck_assert_uint_le(until - first, a.g.mean + a.g.mean / 2 + a.g.mean / 16);
	s0 = stats_of(loop);
	s1 = learn_step(&fc, loop, until - 1 * US);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
	ck_assert_uint_lt(s1.spin_window_ns, 2 * MS);
	ck_assert_int_eq(rk_timer_start(loop, &bound, 1 * MS, 0), 0);
	s0 = stats_of(loop);
	s1 = learn_step(&fc, loop, until + 1 * US);
	ck_assert_uint_eq(s1.blocks, s0.blocks + 1);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters);
	rk_timer_stop(&bound);
	ck_assert_int_eq(fired, 0);
	learn_free(loop, &rec, &a);
}
END_TEST

/*
 * The learner's second frame came at @t, one gap sampled: 500 us after it the
 * loop still spins, and 2 ms after it (a timer bounds the wait at 3 ms, and
 * must not fire) it blocks with the window at RK_LEARN_SPIN_MIN_US. Return the
 * counters after that block.
 */
static struct rk_loop_stats cold_window_blocks(struct fake_clock *fc, struct rk_loop *loop,
					       struct larr *a, uint64_t t)
{
	struct rk_loop_stats s0, s1;
	struct rk_timer bound;
	int fired = 0;

	ck_assert_uint_eq(a->g.n, 1);
	ck_assert_uint_lt(a->g.n, RK__GAPS_WARM);
	rk_timer_init(&bound, never_cb, &fired);
	s0 = stats_of(loop);
	s1 = learn_step(fc, loop, t + 500 * US);	/* inside 1 ms: spins */
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
	ck_assert_int_eq(rk_timer_start(loop, &bound, 3 * MS, 0), 0);
	s0 = stats_of(loop);
	s1 = learn_step(fc, loop, t + 2 * MS);
	ck_assert_uint_eq(s1.blocks, s0.blocks + 1);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters);
	ck_assert_uint_eq(s1.spin_window_ns,
			  rk__config_ctuning(rk_loop_config(loop))->wait.learn_spin_min_ns);
	rk_timer_stop(&bound);
	ck_assert_int_eq(fired, 0);
	return s1;
}

/*
 * A cold learner whose gaps were all long (500 ms, against the 200 ms window):
 * after its first frame (no gap yet) the loop spins the window; after the
 * second (one gap sampled, not yet enough to predict) the window is
 * RK_LEARN_SPIN_MIN_US, so 2 ms after the frame the loop blocks.
 */
START_TEST(test_learn_cold_long_gaps)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(true, &fc, &rec, &a);
	struct rk_loop_stats s0, s1;
	uint64_t t = fc.t;

	arrive(&fc, &a, t);
	s0 = stats_of(loop);
	s1 = learn_step(&fc, loop, t + 2 * MS);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
	t += 500 * MS;
	arrive(&fc, &a, t);
	cold_window_blocks(&fc, loop, &a, t);
	learn_free(loop, &rec, &a);
}
END_TEST

/*
 * A cold learner whose gaps are shorter than the window (10 ms against 200 ms)
 * but twice RK_LEARN_SPIN_MIN_US or more: after its second frame (one gap, not
 * yet enough to predict) the window is RK_LEARN_SPIN_MIN_US, not the gap, so
 * 2 ms after the frame the loop blocks, and the frame after it is one that
 * waited for a wake (learn_woken).
 */
START_TEST(test_learn_cold_short_gaps)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(true, &fc, &rec, &a);
	struct rk_loop_stats s1;
	uint64_t t = fc.t;

	arrive(&fc, &a, t);
	t += 10 * MS;
	arrive(&fc, &a, t);
	s1 = cold_window_blocks(&fc, loop, &a, t);
	/* the next frame is first seen after that sleep: counted as woken, the
	 * frames before it (seen while spinning) were not */
	ck_assert_uint_eq(s1.learn_woken, 0);
	arrive(&fc, &a, t + 10 * MS);
	ck_assert_uint_eq(stats_of(loop).learn_woken, 1);
	learn_free(loop, &rec, &a);
}
END_TEST

/*
 * A learned arrival less than RK__GAPS_SLEEP_MIN_NS away (what a loop that just
 * sent a request expects: the answer) is spun for, not slept for, though the
 * sleep would be longer than RK_PREDICT_MIN_US (20 us).
 */
START_TEST(test_learn_no_short_sleep)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(true, &fc, &rec, &a);
	struct rk_loop_stats s0, s1;
	uint64_t t, margin;

	t = learn_warm(&fc, loop, &rec, &a, L_GAP);
	margin = stats_of(loop).predict_margin_ns;
	ck_assert_uint_lt(margin, 200 * US);
	t += L_GAP;
	arrive(&fc, &a, t);
	/* the next frame is due in margin + 60 us: a 60 us sleep is not taken */
	rec.no_park = true;
	s0 = stats_of(loop);
	s1 = learn_step(&fc, loop, t + L_GAP - margin - 60 * US);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
	ck_assert_uint_eq(s1.predict_waits, s0.predict_waits);
	rec.no_park = false;
	learn_free(loop, &rec, &a);
}
END_TEST

/*
 * A source predicts its event 10 ms ahead, inside a 200 ms spin window, and a
 * timer is due in 3 ms: the loop sleeps until the timer less the margin (a
 * predictive wait, for no source: nothing early or late), spins to it, runs
 * it, then sleeps for the prediction. Spinning the window to the timer was the
 * old way: 3 ms of CPU for every timer that comes before a predicted event (a
 * heartbeat before a 100 ms gap's next frame).
 */
START_TEST(test_predict_timer_first)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc;
	struct fpred p = { 0 };
	struct rk_loop_stats s0, s1;
	struct rk_timer tm;
	uint64_t t0, margin;
	int fired = 0;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 200 * MS;
	loop = fpred_loop(&c, &fc, &p);
	busy_kick(loop);	/* the window is open */
	t0 = fc.t;
	margin = stats_of(loop).predict_margin_ns;
	p.expect = t0 + 10 * MS;
	rk_timer_init(&tm, never_cb, &fired);	/* counts: here it must fire, once */
	ck_assert_int_eq(rk_timer_start(loop, &tm, 3 * MS, 0), 0);
	s0 = stats_of(loop);
	fc.t = t0 + 10 * US;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.predict_waits, s0.predict_waits + 1);
	ck_assert_uint_eq(s1.spin_iters, s0.spin_iters);
	ck_assert_uint_eq(p.park_ns, 3 * MS - 10 * US - margin);
	/* woken before the timer: spin to it */
	fc.t = t0 + 3 * MS - margin;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	s0 = stats_of(loop);
	ck_assert_uint_eq(s0.spin_iters, s1.spin_iters + 1);
	ck_assert_uint_eq(s0.predict_waits, s1.predict_waits);
	ck_assert_uint_eq(s0.predict_late + s0.learn_waits, 0);
	ck_assert_int_eq(fired, 0);
	fc.t = t0 + 3 * MS;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(fired, 1);
	/* then the prediction's own sleep */
	fc.t = t0 + 3 * MS + 10 * US;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.predict_waits, s0.predict_waits + 1);
	ck_assert_uint_eq(p.park_ns, 10 * MS - margin - (3 * MS + 10 * US));
	fc.t = t0 + 10 * MS;
	p.ready = true;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	/* a prediction due just after a timer (its wake after the timer's own):
	 * the sleep ends at the timer less the margin, not at the prediction's */
	t0 = fc.t;
	margin = stats_of(loop).predict_margin_ns;
	p.expect = t0 + 3 * MS + margin / 2;
	ck_assert_int_eq(rk_timer_start(loop, &tm, 3 * MS, 0), 0);
	fc.t = t0 + 10 * US;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert_uint_eq(p.park_ns, 3 * MS - 10 * US - margin);
	rk_timer_stop(&tm);
	fpred_free(loop, &p);
}
END_TEST

/*
 * The learned spin window: after 100 busy events 10 us apart, the window
 * after the last one is the floor (RK_LEARN_SPIN_MIN_US, 1 ms), not the
 * configured 200 ms: it spins at 0.5 ms and blocks at 2 ms, counted once as
 * a window cut. With RK_LEARN=0 it spins at 2 ms (the control). After busy
 * events 20 ms apart the window grows to 4 times that (it spins at 50 ms).
 */
static void check_learned_window(bool learn)
{
	struct policy p;
	struct rk_wait_policy w;
	struct rk_loop_stats s;
	uint64_t t;
	unsigned int i;

	policy_setup(&p, RK_WAIT_ADAPTIVE);
	w = rk_loop_config(p.loop)->wait;
	w.spin_ns = 200 * MS;
	rk_loop_set_wait(p.loop, &w);
	rk_test_wait_tuning(p.loop)->learn = learn;
	rk_test_wait_tuning(p.loop)->learn_spin_min_ns = 1 * MS;
	t = p.fc.t;
	for (i = 0; i < 100; i++) {
		t += 10 * US;
		policy_post(&p, t, &p.busy);
	}
	ck_assert_phase(policy_step(&p, t + 500 * US), 'S');
	ck_assert_phase(policy_step(&p, t + 2 * MS), learn ? 'B' : 'S');
	ck_assert_phase(policy_step(&p, t + 3 * MS), learn ? 'B' : 'S');
	rk_loop_stats(p.loop, &s, sizeof(s));
	ck_assert_uint_eq(s.window_cuts, learn ? 1 : 0);
	ck_assert_uint_eq(s.spin_window_ns, learn ? 1 * MS : 200 * MS);
	/* gaps of 20 ms: the window grows back to the configured one */
	t += 3 * MS;
	for (i = 0; i < 40; i++) {
		t += 20 * MS;
		policy_post(&p, t, &p.busy);
	}
	ck_assert_phase(policy_step(&p, t + 50 * MS), 'S');
	rk_loop_stats(p.loop, &s, sizeof(s));
	ck_assert_uint_ge(s.spin_window_ns, learn ? 80 * MS : 200 * MS);
	ck_assert_uint_le(s.spin_window_ns, 200 * MS);
	ck_assert_uint_eq(s.window_cuts, learn ? 1 : 0);
	policy_teardown(&p);
}

START_TEST(test_learned_window_cut)
{
	check_learned_window(true);
}
END_TEST

START_TEST(test_learned_window_off)
{
	check_learned_window(false);
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

	tc = tcase(s, "sources");
	tcase_add_test(tc, test_source_poll_spin);
	tcase_add_test(tc, test_source_arm);
	tcase_add_test(tc, test_source_noarm_polled_before_block);
	tcase_add_test(tc, test_source_prepoll_busy);
	tcase_add_test(tc, test_source_producer_wake);

	tc = tcase(s, "predict");
	tcase_add_test(tc, test_predict_sleeps);
	tcase_add_test(tc, test_predict_off_spins);
	tcase_add_test(tc, test_predict_cut_by_event);
	tcase_add_test(tc, test_predict_none_keeps_window);
	tcase_add_test(tc, test_predict_margin_fades);
	tcase_add_test(tc, test_predict_late_rare_covered);
	tcase_add_test(tc, test_predict_boost_short_sleeps);
	tcase_add_test(tc, test_source_sees_waits);
	tcase_add_test(tc, test_predict_late_is_per_source);
	tcase_add_test(tc, test_source_verdicts);
	tcase_add_test(tc, test_predictor);

	tc = tcase(s, "learn");
	tcase_add_test(tc, test_learn_periodic_sleeps);
	tcase_add_test(tc, test_learn_off_spins);
	tcase_add_test(tc, test_learn_irregular_falls_back);
	tcase_add_test(tc, test_learn_holds_after_cut);
	tcase_add_test(tc, test_learned_window_cut);
	tcase_add_test(tc, test_learned_window_off);
	tcase_add_test(tc, test_learn_idle_entry_short);
	tcase_add_test(tc, test_learn_overdue_covers_late);
	tcase_add_test(tc, test_learn_no_short_sleep);
	tcase_add_test(tc, test_learn_cold_long_gaps);
	tcase_add_test(tc, test_learn_cold_short_gaps);
	tcase_add_test(tc, test_predict_timer_first);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(wait_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
