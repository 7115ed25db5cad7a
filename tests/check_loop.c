/* SPDX-License-Identifier: MIT */
/*
 * check_loop: the rank loop's (runtime/loop.c) lifetime, timers (and a
 * blocking wait's timer as a ring timeout), and calls from inside its
 * callbacks. Posts, wakes, signals and fd watches are check_loop_wake's,
 * counters and SQPOLL check_loop_stats'; the wait policy check_wait*'s.
 *
 * Timing assertions are bounds with generous slack (a 20 ms timer fires no
 * earlier than 20 ms after the loop's clock said it was started, and before
 * 2 s).
 *
 * Environment (RK_TEST_* is skipped by rk_config_from_env):
 *   RK_TEST_WAIT=adaptive|block|spin  the wait mode of every loop whose test is
 *                                     not about the policy itself (tests/loop-*.sh)
 *
 * Everything runs on the forked test process: no ring is ever made in an
 * unchecked fixture. Helper threads never call ck_assert (that is only safe on
 * the test's own thread with CK_FORK=no); they record, and the test thread
 * asserts.
 */
#define _GNU_SOURCE	/* sched_getaffinity() */
#include "loop_test.h"

START_TEST(test_create_destroy)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct rk_loop_stats s;

	ck_assert_int_eq(rk_loop_create(NULL, &loop), 0);
	ck_assert_int_eq(rk_loop_config(loop)->wait.mode, RK_WAIT_ADAPTIVE);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	s = stats_of(loop);
	ck_assert_uint_eq(s.iterations, 2);
	ck_assert_uint_eq(s.posts, 0);
	ck_assert_uint_eq(s.busy_events, 0);
	ck_assert_int_eq(rk_loop_signal_stopped(loop), 0);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
	ck_assert_int_eq(rk_loop_destroy(NULL), 0);

	/* The configuration is copied. */
	test_config(&c);
	c.wait.spin_ns = 12345;
	loop = new_loop(&c);
	c.wait.spin_ns = 1;
	ck_assert_uint_eq(rk_loop_config(loop)->wait.spin_ns, 12345);
	/* The clock moves, and rk_loop_now() is the iteration's reading. */
	{
		uint64_t a, b;

		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
		a = rk_loop_now(loop);
		sleep_ns(2 * MS);
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
		b = rk_loop_now(loop);
		ck_assert_uint_ge(b - a, 2 * MS);
		ck_assert_uint_le(b, rk__now_ns());
	}
	free_loop(loop);
}
END_TEST

static int noop_poll(struct rk_source *src, uint64_t now)
{
	(void)src;
	(void)now;
	return 0;
}

static enum rk_activity count_watch_cb(struct rk_fd_watch *w, int revents)
{
	(void)revents;
	(*(int *)w->data)++;
	return RK_BUSY;
}

START_TEST(test_destroy_busy)
{
	static const struct rk_source_ops ops = { .name = "noop", .poll = noop_poll };
	struct rk_config c;
	struct rk_loop *loop;
	struct rk_timer t;
	struct rk_source src = { .ops = &ops };
	struct rk_fd_watch w;
	int fired = 0, calls = 0, efd, i;

	test_config(&c);
	loop = new_loop(&c);

	/* An active timer holds the loop. */
	rk_timer_init(&t, never_cb, &fired);
	ck_assert_int_eq(rk_timer_start(loop, &t, 10 * SEC, 0), 0);
	ck_assert_int_eq(rk_loop_destroy(loop), -EBUSY);
	rk_timer_stop(&t);
	rk_timer_stop(&t);	/* a no-op when inactive */

	/* A one-shot timer detaches itself when it fires. */
	rk_timer_init(&t, never_cb, &fired);
	ck_assert_int_eq(rk_timer_start(loop, &t, 0, 0), 0);
	ck_assert_int_eq(rk_loop_destroy(loop), -EBUSY);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(fired, 1);

	/* A source holds it; adding twice is refused, removing twice too. */
	ck_assert_int_eq(rk_loop_add_source(loop, &src), 0);
	ck_assert_int_eq(rk_loop_add_source(loop, &src), -EALREADY);
	ck_assert_int_eq(rk_loop_destroy(loop), -EBUSY);
	ck_assert_int_eq(rk_loop_remove_source(loop, &src), 0);
	ck_assert_int_eq(rk_loop_remove_source(loop, &src), -ENOENT);

	/* An armed fd watch holds it until its cancellation completed. */
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ck_assert_int_ge(efd, 0);
	rk_fd_watch_init(&w, efd, count_watch_cb, &calls);
	ck_assert_int_eq(rk_fd_watch_start(loop, &w, POLLIN), 0);
	ck_assert(rk_fd_watch_busy(&w));
	ck_assert_int_eq(rk_loop_destroy(loop), -EBUSY);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);	/* submitted */
	rk_fd_watch_stop(&w);
	for (i = 0; i < 2000 && rk_fd_watch_busy(&w); i++) {
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
		if (rk_fd_watch_busy(&w))
			sleep_ns(100 * US);
	}
	ck_assert(!rk_fd_watch_busy(&w));
	ck_assert_int_eq(calls, 0);

	ck_assert_int_eq(rk_loop_destroy(loop), 0);
	close(efd);
}
END_TEST

/* rk_loop_run() from inside a callback of the same loop is refused. */
struct nested {
	struct rk_timer t;
	struct rk_loop *loop;
	int ret;
};

static enum rk_activity nested_cb(struct rk_timer *t, uint64_t now)
{
	struct nested *n = rk__container_of(t, struct nested, t);

	(void)now;
	n->ret = rk_loop_run(n->loop, RK_RUN_NOWAIT);
	rk_loop_stop(n->loop);
	return RK_IDLE;
}

START_TEST(test_run_nested)
{
	struct rk_config c;
	struct nested n = { .ret = 1 };

	test_config(&c);
	n.loop = new_loop(&c);
	rk_timer_init(&n.t, nested_cb, NULL);
	ck_assert_int_eq(rk_timer_start(n.loop, &n.t, 0, 0), 0);
	ck_assert_int_eq(rk_loop_run(n.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(n.ret, -EBUSY);
	free_loop(n.loop);
}
END_TEST

/*
 * Four loops, each created and run by its own thread: a 1 ms periodic timer
 * on each posts ROUNDS messages to the next loop in the ring. Every loop must
 * get its neighbour's posts in order and its own ticks, then stop by itself.
 */
#define NLOOPS	4
#define ROUNDS	50

struct ring_post {
	struct rk_post p;
	int seq;
};

struct ring_member {
	struct ring_ctx *ctx;
	int idx;
	struct rk_loop *loop;
	struct rk_timer tick;
	struct ring_post out[ROUNDS];
	int ticks, got, order_err, run_ret, destroy_ret, create_ret;
	uint64_t posts_stat;
};

struct ring_ctx {
	struct ring_member m[NLOOPS];
	pthread_barrier_t created, finished;
};

static void ring_maybe_stop(struct ring_member *m)
{
	if (m->ticks >= ROUNDS && m->got >= ROUNDS)
		rk_loop_stop(m->loop);
}

static enum rk_activity ring_post_cb(struct rk_post *p)
{
	struct ring_post *rp = rk__container_of(p, struct ring_post, p);
	struct ring_member *m = p->data;

	if (rp->seq != m->got)
		m->order_err++;
	m->got++;
	ring_maybe_stop(m);
	return RK_BUSY;
}

static enum rk_activity ring_tick_cb(struct rk_timer *t, uint64_t now)
{
	struct ring_member *m = rk__container_of(t, struct ring_member, tick);
	struct ring_member *to = &m->ctx->m[(m->idx + 1) % NLOOPS];
	struct ring_post *rp = &m->out[m->ticks];

	(void)now;
	rp->seq = m->ticks;
	rp->p.cb = ring_post_cb;
	rp->p.data = to;
	rk_loop_post(to->loop, &rp->p);
	if (++m->ticks == ROUNDS)
		rk_timer_stop(t);
	ring_maybe_stop(m);
	return RK_IDLE;
}

static void *ring_thread(void *arg)
{
	struct ring_member *m = arg;
	struct rk_config c;
	struct rk_loop_stats s;

	test_config(&c);
	c.wait.spin_ns = 200 * US;
	m->create_ret = rk_loop_create(&c, &m->loop);
	pthread_barrier_wait(&m->ctx->created);
	if (m->create_ret == 0) {
		rk_timer_init(&m->tick, ring_tick_cb, m);
		rk_timer_start(m->loop, &m->tick, MS, MS);
		m->run_ret = rk_loop_run(m->loop, RK_RUN_DEFAULT);
		rk_loop_stats(m->loop, &s, sizeof(s));
		m->posts_stat = s.posts;
	}
	/* A neighbour may still be inside rk_loop_post() on this loop. */
	pthread_barrier_wait(&m->ctx->finished);
	if (m->create_ret == 0)
		m->destroy_ret = rk_loop_destroy(m->loop);
	return NULL;
}

START_TEST(test_many_loops)
{
	struct ring_ctx *ctx = calloc(1, sizeof(*ctx));
	pthread_t th[NLOOPS];
	int i;

	ck_assert_ptr_nonnull(ctx);
	pthread_barrier_init(&ctx->created, NULL, NLOOPS);
	pthread_barrier_init(&ctx->finished, NULL, NLOOPS);
	for (i = 0; i < NLOOPS; i++) {
		ctx->m[i].ctx = ctx;
		ctx->m[i].idx = i;
		ck_assert_int_eq(pthread_create(&th[i], NULL, ring_thread, &ctx->m[i]), 0);
	}
	for (i = 0; i < NLOOPS; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	for (i = 0; i < NLOOPS; i++) {
		struct ring_member *m = &ctx->m[i];

		ck_assert_msg(m->create_ret == 0, "loop %d: %s", i, rk_strerror(m->create_ret));
		ck_assert_int_eq(m->run_ret, 0);
		ck_assert_int_eq(m->ticks, ROUNDS);
		ck_assert_int_eq(m->got, ROUNDS);
		ck_assert_int_eq(m->order_err, 0);
		ck_assert_uint_eq(m->posts_stat, ROUNDS);
		ck_assert_int_eq(m->destroy_ret, 0);
	}
	pthread_barrier_destroy(&ctx->created);
	pthread_barrier_destroy(&ctx->finished);
	free(ctx);
}
END_TEST

/* ---- timers ------------------------------------------------------------------------- */

START_TEST(test_timer_oneshot)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct probe p, stop;
	struct guard g;
	int order[4], norder = 0;
	uint64_t t0;

	test_config(&c);
	loop = new_loop(&c);
	probe_init(&p, loop, 0);
	p.order = order;
	p.norder = &norder;
	t0 = fresh_now(loop);
	ck_assert_int_eq(rk_timer_start(loop, &p.t, 20 * MS, 0), 0);
	/* Stop well after it, to see that it fires once, and before the later timer. */
	probe_init(&stop, loop, 1);
	stop.stop_at = 1;
	stop.order = order;
	stop.norder = &norder;
	ck_assert_int_eq(rk_timer_start(loop, &stop.t, 80 * MS, 0), 0);
	guard_start(&g, loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(p.fired, 1);
	ck_assert_int_eq(norder, 2);
	ck_assert_int_eq(order[0], 0);
	ck_assert_int_eq(order[1], 1);
	ck_assert_uint_ge(p.now[0], t0 + 20 * MS);
	ck_assert_uint_ge(p.real[0], t0 + 20 * MS);
	ck_assert_uint_ge(rk_loop_now(loop), t0 + 80 * MS);
	rk_timer_stop(&g.t);
	free_loop(loop);
}
END_TEST

START_TEST(test_timer_periodic)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct probe p;
	struct guard g;
	uint64_t t0;
	int i;

	test_config(&c);
	loop = new_loop(&c);
	probe_init(&p, loop, 0);
	p.stop_at = 6;
	t0 = fresh_now(loop);
	ck_assert_int_eq(rk_timer_start(loop, &p.t, 10 * MS, 5 * MS), 0);
	guard_start(&g, loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(p.fired, 6);
	/* The k-th firing comes no earlier than delay + k periods (late ones skip, never burst). */
	for (i = 0; i < 6; i++) {
		ck_assert_uint_ge(p.now[i], t0 + 10 * MS + (uint64_t)i * 5 * MS);
		if (i)
			ck_assert_uint_gt(p.now[i], p.now[i - 1]);
	}
	/* Still active: destroy refuses until it is stopped. */
	ck_assert_int_eq(rk_loop_destroy(loop), -EBUSY);
	rk_timer_stop(&p.t);
	rk_timer_stop(&g.t);
	free_loop(loop);
}
END_TEST

/*
 * The periodic schedule itself, on the fake clock: due at delay + k periods;
 * an iteration that comes late fires it once (no burst for the periods
 * missed) and the next firing is a period after that iteration.
 */
START_TEST(test_timer_periodic_schedule)
{
	static const struct {
		uint64_t at;	/* fake ms after t0 of one RK_RUN_NOWAIT */
		int fired;	/* firings so far after it */
	} steps[] = {
		{ 9, 0 }, { 10, 1 }, { 14, 1 }, { 15, 2 }, { 16, 2 }, { 20, 3 },
		{ 37, 4 },	/* 25, 30 and 35 missed: one firing, next due at 42 */
		{ 38, 4 }, { 41, 4 }, { 42, 5 }, { 46, 5 }, { 47, 6 },
	};
	struct rk_config c;
	struct rk_loop *loop;
	struct fake_clock fc = { .t = 1000 * SEC };
	struct probe p;
	uint64_t t0 = fc.t;
	int before;
	size_t i;

	test_config(&c);
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &fc);
	probe_init(&p, loop, 0);
	ck_assert_int_eq(rk_timer_start(loop, &p.t, 10 * MS, 5 * MS), 0);
	for (i = 0; i < ARRAY_SIZE(steps); i++) {
		fc.t = t0 + steps[i].at * MS;
		before = p.fired;
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
		ck_assert_msg(p.fired == steps[i].fired, "at %" PRIu64 " ms: %d firings, want %d",
			      steps[i].at, p.fired, steps[i].fired);
		if (p.fired > before)	/* it fired in this iteration, with its time */
			ck_assert_uint_eq(p.now[p.fired - 1], fc.t);
	}
	rk_timer_stop(&p.t);
	free_loop(loop);
}
END_TEST

START_TEST(test_timer_stop_in_callback)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct probe p, stop;

	test_config(&c);
	loop = new_loop(&c);
	probe_init(&p, loop, 0);
	probe_init(&stop, loop, 1);
	p.stop_self_at = 3;
	/*
	 * Each firing moves the stopper to 5 ms after it, so the run ends 5 ms
	 * after the last one: never before the third (due sooner, it runs first
	 * however late the loop wakes), and never while the timer still fires.
	 */
	p.chain = &stop;
	p.chain_delay = 5 * MS;
	stop.stop_at = 1;
	ck_assert_int_eq(rk_timer_start(loop, &p.t, MS, MS), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(p.fired, 3);
	ck_assert_int_eq(stop.fired, 1);
	/* Both are detached now. */
	free_loop(loop);
}
END_TEST

START_TEST(test_timer_restart)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct probe later, sooner;
	struct rk_timer stop;
	struct guard g;
	int order[4], norder = 0;
	uint64_t t0;

	test_config(&c);
	loop = new_loop(&c);
	probe_init(&later, loop, 0);
	probe_init(&sooner, loop, 1);
	later.order = sooner.order = order;
	later.norder = sooner.norder = &norder;
	t0 = fresh_now(loop);
	/* Moved later: 10 ms becomes 150 ms. */
	ck_assert_int_eq(rk_timer_start(loop, &later.t, 10 * MS, 0), 0);
	ck_assert_int_eq(rk_timer_start(loop, &later.t, 150 * MS, 0), 0);
	/* Moved sooner: 10 s becomes 20 ms; a period is replaced too. */
	ck_assert_int_eq(rk_timer_start(loop, &sooner.t, 10 * SEC, 7 * SEC), 0);
	ck_assert_int_eq(rk_timer_start(loop, &sooner.t, 20 * MS, 0), 0);
	rk_timer_init(&stop, stop_cb, loop);
	ck_assert_int_eq(rk_timer_start(loop, &stop, 200 * MS, 0), 0);
	guard_start(&g, loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(later.fired, 1);
	ck_assert_uint_ge(later.now[0], t0 + 150 * MS);
	ck_assert_int_eq(sooner.fired, 1);
	ck_assert_uint_ge(sooner.now[0], t0 + 20 * MS);
	/* sooner (20 ms) before later (150 ms), both before the 200 ms stop */
	ck_assert_int_eq(norder, 2);
	ck_assert_int_eq(order[0], 1);
	ck_assert_int_eq(order[1], 0);
	rk_timer_stop(&g.t);
	free_loop(loop);	/* neither is periodic any more: all detached */
}
END_TEST

START_TEST(test_timer_order)
{
	static const uint64_t delay_ms[] = { 30, 10, 50, 20, 40, 20 };
	struct rk_config c;
	struct rk_loop *loop;
	struct probe p[ARRAY_SIZE(delay_ms)];
	int order[ARRAY_SIZE(delay_ms)], norder = 0;
	static const int want[] = { 1, 3, 5, 0, 4, 2 };	/* equal deadlines: start order */
	struct rk_timer stop;
	size_t i;

	test_config(&c);
	loop = new_loop(&c);
	fresh_now(loop);
	for (i = 0; i < ARRAY_SIZE(delay_ms); i++) {
		probe_init(&p[i], loop, (int)i);
		p[i].order = order;
		p[i].norder = &norder;
		ck_assert_int_eq(rk_timer_start(loop, &p[i].t, delay_ms[i] * MS, 0), 0);
	}
	rk_timer_init(&stop, stop_cb, loop);
	ck_assert_int_eq(rk_timer_start(loop, &stop, 80 * MS, 0), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(norder, (int)ARRAY_SIZE(delay_ms));
	for (i = 0; i < ARRAY_SIZE(want); i++)
		ck_assert_int_eq(order[i], want[i]);
	for (i = 1; i < ARRAY_SIZE(want); i++)
		ck_assert_uint_ge(p[want[i]].now[0], p[want[i - 1]].now[0]);
	free_loop(loop);
}
END_TEST

START_TEST(test_timer_chain)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct probe a, b;
	struct guard g;

	test_config(&c);
	loop = new_loop(&c);
	probe_init(&a, loop, 0);
	probe_init(&b, loop, 1);
	a.chain = &b;
	a.chain_delay = 15 * MS;
	b.stop_at = 1;
	ck_assert_int_eq(rk_timer_start(loop, &a.t, 5 * MS, 0), 0);
	guard_start(&g, loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(a.fired, 1);
	ck_assert_int_eq(b.fired, 1);
	ck_assert_uint_ge(b.now[0], a.now[0] + 15 * MS);
	ck_assert_uint_ge(b.real[0], a.now[0] + 15 * MS);
	rk_timer_stop(&g.t);
	free_loop(loop);
}
END_TEST

/* ---- a blocking wait's timer as a ring timeout (park_timer()) ------------------------ */

struct spaced_poster {
	struct rk_loop *loop;
	struct rk_post posts[20];
	int n;
	unsigned int gap_us;
	int got;			/* incremented by the posts' callbacks, on the loop */
};

static void *spaced_poster_thread(void *arg)
{
	struct spaced_poster *sp = arg;
	int i;

	for (i = 0; i < sp->n; i++) {
		usleep(sp->gap_us);
		rk_post_init(&sp->posts[i], busy_post_cb, &sp->got);
		rk_loop_post(sp->loop, &sp->posts[i]);
	}
	return NULL;
}

/*
 * RK_WAIT_BLOCK with a timer 200 ms away and posts waking the loop every 2 ms:
 * the first wait arms one ring timeout at the timer's deadline and every later
 * wait sleeps on it (no timeout of its own), and it still ends the run on time.
 * Then a timer earlier than an armed ring timeout gets a timed wait of its own
 * (no second ring timeout for it), and fires on time too.
 */
START_TEST(test_block_ring_timeout)
{
	struct spaced_poster sp = { .n = 20, .gap_us = 2000 };
	struct rk_timer stop, late, early;
	struct rk_config c;
	struct rk_loop *loop;
	struct guard g;
	pthread_t th;
	uint64_t t0, blocks;

	test_config(&c);
	c.wait.mode = RK_WAIT_BLOCK;
	loop = new_loop(&c);
	sp.loop = loop;
	rk_timer_init(&stop, stop_cb, loop);
	guard_start(&g, loop, 5 * SEC);
	t0 = fresh_now(loop);
	ck_assert_int_eq(rk_timer_start(loop, &stop, 200 * MS, 0), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, spaced_poster_thread, &sp), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert(!g.fired);
	ck_assert_uint_ge(rk__now_ns(), t0 + 200 * MS);
	blocks = stats_of(loop).blocks;
	ck_assert_uint_ge(blocks, 2);
	ck_assert_uint_eq(rk__loop_ring_timeouts(loop), 1);

	/* A ring timeout armed at 'late', 300 ms away; then 'early', 20 ms away. */
	rk_timer_init(&late, never_cb, &sp.got);
	rk_timer_init(&early, stop_cb, loop);
	ck_assert_int_eq(rk_timer_start(loop, &late, 300 * MS, 0), 0);
	sp.n = 1;
	ck_assert_int_eq(pthread_create(&th, NULL, spaced_poster_thread, &sp), 0);
	while (stats_of(loop).blocks == blocks)
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(rk__loop_ring_timeouts(loop), 2);
	t0 = fresh_now(loop);
	ck_assert_int_eq(rk_timer_start(loop, &early, 20 * MS, 0), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert(!g.fired);
	ck_assert_uint_ge(rk__now_ns(), t0 + 20 * MS);
	ck_assert_uint_eq(rk__loop_ring_timeouts(loop), 2);
	rk_timer_stop(&late);
	rk_timer_stop(&g.t);
	free_loop(loop);
}
END_TEST

/* ---- stop before run, and calls from inside a callback --------------------------------- */

static enum rk_activity count_post(struct rk_post *p)
{
	(*(int *)p->data)++;
	return RK_BUSY;
}

/*
 * rk_loop_stop() before rk_loop_run() makes the run return at once, in every
 * mode, without an iteration (libuv's uv_stop() rule); the stop is consumed,
 * so the next run runs. A lost stop shows as the guard firing.
 */
START_TEST(test_stop_before_run)
{
	static const enum rk_run_mode modes[] = { RK_RUN_DEFAULT, RK_RUN_ONCE, RK_RUN_NOWAIT };
	struct rk_loop_stats a, b;
	struct rk_config c;
	struct rk_loop *loop;
	struct rk_post p;
	struct guard g;
	int posts = 0;
	size_t i;

	test_config(&c);
	loop = new_loop(&c);
	for (i = 0; i < ARRAY_SIZE(modes); i++) {
		guard_start(&g, loop, 2 * SEC);
		rk_post_init(&p, count_post, &posts);
		rk_loop_post(loop, &p);
		rk_loop_stop(loop);
		a = stats_of(loop);
		ck_assert_int_eq(rk_loop_run(loop, modes[i]), 0);
		b = stats_of(loop);
		ck_assert(!g.fired);
		ck_assert_uint_eq(b.iterations, a.iterations);	/* not one iteration */
		ck_assert_int_eq(posts, (int)i);		/* the post waits */
		/* consumed: the next run iterates, and delivers the post */
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
		ck_assert_int_eq(posts, (int)i + 1);
		rk_timer_stop(&g.t);
	}
	free_loop(loop);
}
END_TEST

/* rk_loop_destroy() from inside the loop's own callback refuses, frees nothing. */
struct destroy_in_cb {
	struct rk_timer t;
	struct rk_loop *loop;
	int ret;
};

static enum rk_activity destroy_in_cb(struct rk_timer *t, uint64_t now)
{
	struct destroy_in_cb *d = rk__container_of(t, struct destroy_in_cb, t);

	(void)now;
	d->ret = rk_loop_destroy(d->loop);	/* a one-shot timer: nothing else is attached */
	rk_loop_stop(d->loop);
	return RK_IDLE;
}

START_TEST(test_destroy_from_callback)
{
	struct destroy_in_cb d = { .ret = 1 };
	struct rk_config c;

	test_config(&c);
	d.loop = new_loop(&c);
	rk_timer_init(&d.t, destroy_in_cb, NULL);
	ck_assert_int_eq(rk_timer_start(d.loop, &d.t, 0, 0), 0);
	ck_assert_int_eq(rk_loop_run(d.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(d.ret, -EBUSY);
	ck_assert_int_eq(rk_loop_run(d.loop, RK_RUN_NOWAIT), 0);	/* still whole */
	free_loop(d.loop);
}
END_TEST

/* The init functions write every "none" a zeroed struct gets wrong. */
START_TEST(test_init_functions)
{
	struct rk_wait_policy w;
	struct rk_config c;
	struct rk_source src;
	struct rk_post p;
	int x;

	memset(&w, 0xa5, sizeof(w));
	rk_wait_policy_init(&w);
	rk_config_init(&c);
	ck_assert_mem_eq(&w, &c.wait, sizeof(w));
	ck_assert_int_eq(rk__config_tuning(&c)->ring.sqpoll_cpu, -1);
	memset(&p, 0xa5, sizeof(p));
	rk_post_init(&p, count_post, &x);
	ck_assert(p.cb == count_post);
	ck_assert_ptr_eq(p.data, &x);
	ck_assert_ptr_null(p.next);
	memset(&src, 0xa5, sizeof(src));
	rk_source_init(&src, NULL, &x);
	ck_assert_ptr_null(src.ops);
	ck_assert_ptr_eq(src.data, &x);
	ck_assert_ptr_null(src.loop);	/* rk_loop_add_source() would say -EALREADY */
	ck_assert_ptr_null(src.next);
}
END_TEST

static Suite *loop_suite(void)
{
	Suite *s = suite_create("loop");
	TCase *tc;

	tc = tcase(s, "lifetime");
	tcase_add_test(tc, test_create_destroy);
	tcase_add_test(tc, test_destroy_busy);
	tcase_add_test(tc, test_run_nested);
	tcase_add_test(tc, test_many_loops);

	tc = tcase(s, "timers");
	tcase_add_test(tc, test_timer_oneshot);
	tcase_add_test(tc, test_timer_periodic);
	tcase_add_test(tc, test_timer_periodic_schedule);
	tcase_add_test(tc, test_timer_stop_in_callback);
	tcase_add_test(tc, test_timer_restart);
	tcase_add_test(tc, test_timer_order);
	tcase_add_test(tc, test_timer_chain);
	tcase_add_test(tc, test_block_ring_timeout);

	tc = tcase(s, "reentrancy");
	tcase_add_test(tc, test_stop_before_run);
	tcase_add_test(tc, test_destroy_from_callback);
	tcase_add_test(tc, test_init_functions);
	return s;
}

int main(void)
{
	return rk_check_run(loop_suite());
}
