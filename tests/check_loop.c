/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the rank loop (runtime/loop.c): lifetime, timers, cross-thread
 * posts and wakes, signals, fd watches, counters and SQPOLL. The wait policy,
 * sources and predictive waits are check_wait.c's.
 *
 * Environment (RK_TEST_* is skipped by rk_config_from_env):
 *   RK_TEST_WAIT=adaptive|block|spin  the wait mode of every loop whose test is
 *                                     not about the policy itself (tests/loop-*.sh)
 *   RK_TEST_POSTS=N                   posts in the stress tests (default 1000000;
 *                                     lower it for valgrind)
 *
 * Valgrind (3.19) holds its big lock across io_uring_enter(), so a loop
 * blocked in the kernel stops every other thread: a loop waiting for a post
 * or wake from a thread deadlocks. Run it with the loops spinning and without
 * the tests that must block for a thread:
 *   CK_FORK=no RK_TEST_WAIT=spin RK_TEST_POSTS=20000 \
 *   CK_EXCLUDE_TAGS=blocks-for-thread valgrind --leak-check=full tests/check_loop
 *
 * Timing assertions are bounds with generous slack (a 20 ms timer fires no
 * earlier than 20 ms after the loop's clock said it was started, and before
 * 2 s); a lost wakeup shows as a hang that the TCase timeout turns into a
 * failure. Everything runs on the forked test process: no ring is ever made
 * in an unchecked fixture. Helper threads never call ck_assert (that is only
 * safe on the test's own thread with CK_FORK=no); they record, and the test
 * thread asserts.
 */
#define _GNU_SOURCE	/* sched_getaffinity() */
#include "loop_test.h"

/* ---- create / destroy --------------------------------------------------------------- */

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

#define MAX_FIRES 16

struct probe {
	struct rk_timer t;
	struct rk_loop *loop;
	int id;
	int fired;
	int stop_at;		/* stop the loop at this many firings (0: never) */
	int stop_self_at;	/* rk_timer_stop() itself at this many firings (0: never) */
	uint64_t now[MAX_FIRES];	/* the callback's 'now' */
	uint64_t real[MAX_FIRES];	/* the monotonic clock in the callback */
	int *order;		/* append id here */
	int *norder;
	struct probe *chain;	/* start this one from the callback */
	uint64_t chain_delay;
};

static enum rk_activity probe_cb(struct rk_timer *t, uint64_t now)
{
	struct probe *p = rk__container_of(t, struct probe, t);

	if (p->fired < MAX_FIRES) {
		p->now[p->fired] = now;
		p->real[p->fired] = rk__now_ns();
	}
	p->fired++;
	if (p->order)
		p->order[(*p->norder)++] = p->id;
	if (p->chain)
		rk_timer_start(p->loop, &p->chain->t, p->chain_delay, 0);
	if (p->stop_self_at && p->fired == p->stop_self_at)
		rk_timer_stop(t);
	if (p->stop_at && p->fired == p->stop_at)
		rk_loop_stop(p->loop);
	return RK_IDLE;
}

static void probe_init(struct probe *p, struct rk_loop *loop, int id)
{
	memset(p, 0, sizeof(*p));
	p->loop = loop;
	p->id = id;
	rk_timer_init(&p->t, probe_cb, NULL);
}

/* Refresh the loop's cached clock, so timers start from "now". */
static uint64_t fresh_now(struct rk_loop *loop)
{
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	return rk_loop_now(loop);
}

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

/* ---- posts and wakes ---------------------------------------------------------------- */

struct seq_post {
	struct rk_post p;
	int id;
	int *log;
	int *nlog;
	int repost;		/* re-post itself this many more times */
	struct rk_loop *loop;
};

static enum rk_activity seq_post_cb(struct rk_post *p)
{
	struct seq_post *sp = rk__container_of(p, struct seq_post, p);

	sp->log[(*sp->nlog)++] = sp->id;
	if (sp->repost > 0) {
		sp->repost--;
		rk_loop_post(sp->loop, p);
	}
	return RK_BUSY;
}

/* Posts from the loop thread itself: FIFO, and a callback may re-post its node. */
START_TEST(test_post_local)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct seq_post sp[3];
	int log[16], nlog = 0, i;
	struct rk_loop_stats s;

	test_config(&c);
	loop = new_loop(&c);
	for (i = 0; i < 3; i++) {
		sp[i] = (struct seq_post){ .p = { .cb = seq_post_cb }, .id = i, .log = log,
					   .nlog = &nlog, .loop = loop };
		rk_loop_post(loop, &sp[i].p);
	}
	sp[1].repost = 2;
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(nlog, 3);
	ck_assert_int_eq(log[0], 0);
	ck_assert_int_eq(log[1], 1);
	ck_assert_int_eq(log[2], 2);
	/* The re-posted node waits for the next iteration, one per iteration. */
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(nlog, 4);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(nlog, 5);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(nlog, 5);
	ck_assert_int_eq(log[3], 1);
	ck_assert_int_eq(log[4], 1);
	s = stats_of(loop);
	ck_assert_uint_eq(s.posts, 5);
	ck_assert_uint_eq(s.busy_events, 5);
	free_loop(loop);
}
END_TEST

/*
 * The stress: POSTS preallocated nodes from 1 or 2 threads, in bursts of
 * 1..512 with a random 0-50 us pause after each, so that a loop with a 2 us
 * spin window really goes to sleep between bursts and must be woken. A lost
 * wakeup leaves the loop asleep forever (the TCase timeout fails the test).
 */
#define MAX_POSTERS 2

struct snode {
	struct rk_post p;
	uint32_t thr;
	uint32_t seq;
};

struct stress {
	struct rk_loop *loop;
	struct snode *nodes;
	uint64_t per_thread;
	uint64_t total;
	uint64_t got;
	uint32_t next[MAX_POSTERS];
	uint64_t order_err;
	uint64_t pauses[MAX_POSTERS];
};

struct poster {
	struct stress *st;
	uint32_t thr;
};

static enum rk_activity stress_cb(struct rk_post *p)
{
	struct snode *n = rk__container_of(p, struct snode, p);
	struct stress *st = p->data;

	if (n->seq != st->next[n->thr])
		st->order_err++;
	st->next[n->thr] = n->seq + 1;
	if (++st->got == st->total)
		rk_loop_stop(st->loop);
	return RK_BUSY;
}

static void *poster_thread(void *arg)
{
	struct poster *po = arg;
	struct stress *st = po->st;
	struct snode *base = st->nodes + po->thr * st->per_thread;
	uint64_t rng = 0x5eed0000u + po->thr, i, burst = 0;

	for (i = 0; i < st->per_thread; i++) {
		rk_loop_post(st->loop, &base[i].p);
		if (burst-- == 0) {
			burst = rng_next(&rng) % 512;
			sleep_ns(rng_next(&rng) % (50 * US + 1));
			st->pauses[po->thr]++;
		}
	}
	return NULL;
}

static uint64_t stress_posts(void)
{
	const char *s = getenv("RK_TEST_POSTS");
	uint64_t n = 1000000;

	if (s && *s)
		ck_assert_int_eq(rk__parse_u64(s, 1, 100000000, &n), 0);
	return n;
}

static void run_stress(int nposters)
{
	struct rk_config c;
	struct stress st = { 0 };
	struct poster po[MAX_POSTERS];
	pthread_t th[MAX_POSTERS];
	struct rk_loop_stats s;
	uint64_t i, t0, elapsed;
	int t;

	test_config(&c);
	c.wait.spin_ns = 2 * US;
	st.loop = new_loop(&c);
	st.per_thread = stress_posts() / (uint64_t)nposters;
	st.total = st.per_thread * (uint64_t)nposters;
	st.nodes = calloc(st.total, sizeof(*st.nodes));
	ck_assert_ptr_nonnull(st.nodes);
	for (i = 0; i < st.total; i++) {
		st.nodes[i].p.cb = stress_cb;
		st.nodes[i].p.data = &st;
		st.nodes[i].thr = (uint32_t)(i / st.per_thread);
		st.nodes[i].seq = (uint32_t)(i % st.per_thread);
	}
	t0 = rk__now_ns();
	for (t = 0; t < nposters; t++) {
		po[t] = (struct poster){ .st = &st, .thr = (uint32_t)t };
		ck_assert_int_eq(pthread_create(&th[t], NULL, poster_thread, &po[t]), 0);
	}
	ck_assert_int_eq(rk_loop_run(st.loop, RK_RUN_DEFAULT), 0);
	for (t = 0; t < nposters; t++)
		ck_assert_int_eq(pthread_join(th[t], NULL), 0);
	elapsed = rk__now_ns() - t0;
	s = stats_of(st.loop);

	ck_assert_uint_eq(st.got, st.total);
	ck_assert_uint_eq(st.order_err, 0);
	for (t = 0; t < nposters; t++)
		ck_assert_uint_eq(st.next[t], st.per_thread);
	ck_assert_uint_eq(s.posts, st.total);
	ck_assert_uint_eq(s.busy_events, st.total);
	ck_assert_uint_ge(s.events, st.total);
	switch (c.wait.mode) {
	case RK_WAIT_ADAPTIVE:
		/* It really flipped between spinning and sleeping, and was woken. */
		ck_assert_uint_gt(s.spin_iters, 0);
		ck_assert_uint_gt(s.blocks, 0);
		ck_assert_uint_gt(s.wakeups, 0);
		break;
	case RK_WAIT_BLOCK:
		ck_assert_uint_eq(s.spin_iters, 0);
		ck_assert_uint_gt(s.blocks, 0);
		ck_assert_uint_gt(s.wakeups, 0);
		break;
	case RK_WAIT_SPIN:
		ck_assert_uint_gt(s.spin_iters, 0);
		ck_assert_uint_eq(s.blocks, 0);
		ck_assert_uint_eq(s.wakeups, 0);
		break;
	}
	ck_assert_uint_le(s.wakeups, s.blocks);
	fprintf(stderr, "stress %d poster(s), %s: %" PRIu64 " posts in %" PRIu64
		" ms, %" PRIu64 " iterations, %" PRIu64 " blocks, %" PRIu64 " wakeups, %" PRIu64
		" spin iterations\n", nposters, rk_wait_mode_name(c.wait.mode), st.total,
		elapsed / MS, s.iterations, s.blocks, s.wakeups, s.spin_iters);
	free(st.nodes);
	free_loop(st.loop);
}

START_TEST(test_post_stress_one)
{
	run_stress(1);
}
END_TEST

START_TEST(test_post_stress_two)
{
	run_stress(2);
}
END_TEST

/*
 * rk_loop_wake() from another thread ends a block with no timer. The waker
 * acts when the source's arm() says the loop is about to sleep (it has then
 * published 'sleeping'), and wakes exactly once per round: a lost wake hangs.
 */
struct wake_ctx {
	struct rk_source src;
	struct rk_loop *loop;
	atomic_int armed;
	atomic_int quit;
	atomic_int wakes;
};

static int wake_src_poll(struct rk_source *src, uint64_t now)
{
	(void)src;
	(void)now;
	return 0;
}

static int wake_src_arm(struct rk_source *src)
{
	struct wake_ctx *w = src->data;

	atomic_store(&w->armed, 1);
	return 0;
}

static void *waker_thread(void *arg)
{
	struct wake_ctx *w = arg;

	while (!atomic_load(&w->quit)) {
		/* Spin, not sleep: wake as soon after arm() as possible. */
		if (atomic_exchange(&w->armed, 0)) {
			rk_loop_wake(w->loop);
			atomic_fetch_add(&w->wakes, 1);
		}
	}
	return NULL;
}

static enum rk_wait_mode sleeping_mode(void)
{
	int m = forced_mode();

	/* These tests are about a sleeping loop: in the spin run, they block. */
	return m == RK_WAIT_BLOCK || m == RK_WAIT_SPIN ? RK_WAIT_BLOCK : RK_WAIT_ADAPTIVE;
}

START_TEST(test_wake_blocked)
{
	static const struct rk_source_ops ops = {
		.name = "arm-flag", .poll = wake_src_poll, .arm = wake_src_arm };
	struct rk_config c;
	struct wake_ctx w = { .src = { .ops = &ops } };
	struct rk_loop_stats s;
	pthread_t th;
	int i, rounds = 200;

	test_config(&c);
	c.wait.mode = sleeping_mode();
	w.loop = new_loop(&c);
	w.src.data = &w;
	atomic_init(&w.armed, 0);
	atomic_init(&w.quit, 0);
	atomic_init(&w.wakes, 0);
	ck_assert_int_eq(rk_loop_add_source(w.loop, &w.src), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, waker_thread, &w), 0);
	for (i = 0; i < rounds; i++)
		ck_assert_int_eq(rk_loop_run(w.loop, RK_RUN_ONCE), 0);
	atomic_store(&w.quit, 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	s = stats_of(w.loop);
	ck_assert_uint_ge(s.blocks, (uint64_t)rounds / 2);
	/* Every block was ended by one wake, and counted as such. */
	ck_assert_uint_eq(s.wakeups, s.blocks);
	ck_assert_uint_eq((uint64_t)atomic_load(&w.wakes), s.blocks);
	ck_assert_uint_eq(s.busy_events, 0);	/* a wake is not work */
	ck_assert_int_eq(rk_loop_remove_source(w.loop, &w.src), 0);
	free_loop(w.loop);
}
END_TEST

/*
 * stats.wakeups counts a wake that lands while the loop is committing to
 * sleep: arm() (called after 'sleeping' is published) hands over to another
 * thread and returns only once that thread's rk_loop_wake() is done.
 */
struct handoff {
	struct rk_source src;
	struct rk_loop *loop;
	atomic_int req, done, quit;
};

static int handoff_arm(struct rk_source *src)
{
	struct handoff *h = rk__container_of(src, struct handoff, src);

	atomic_store(&h->req, 1);
	while (!atomic_exchange(&h->done, 0))
		sched_yield();
	return 0;
}

static void *handoff_thread(void *arg)
{
	struct handoff *h = arg;

	while (!atomic_load(&h->quit)) {
		if (atomic_exchange(&h->req, 0)) {
			rk_loop_wake(h->loop);
			atomic_store(&h->done, 1);
		} else {
			sleep_ns(10 * US);
		}
	}
	return NULL;
}

START_TEST(test_wake_counted)
{
	static const struct rk_source_ops ops = {
		.name = "handoff", .poll = wake_src_poll, .arm = handoff_arm };
	struct rk_config c;
	struct handoff h = { .src = { .ops = &ops } };
	struct rk_loop_stats s;
	pthread_t th;
	int i;

	test_config(&c);
	c.wait.mode = sleeping_mode();
	h.loop = new_loop(&c);
	atomic_init(&h.req, 0);
	atomic_init(&h.done, 0);
	atomic_init(&h.quit, 0);
	ck_assert_int_eq(rk_loop_add_source(h.loop, &h.src), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, handoff_thread, &h), 0);
	/* Odd runs block and are woken at once; even runs reap the wake (an event) and return. */
	for (i = 0; i < 50; i++)
		ck_assert_int_eq(rk_loop_run(h.loop, RK_RUN_ONCE), 0);
	atomic_store(&h.quit, 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	s = stats_of(h.loop);
	ck_assert_uint_eq(s.blocks, 25);
	ck_assert_uint_eq(s.wakeups, 25);
	ck_assert_int_eq(rk_loop_remove_source(h.loop, &h.src), 0);
	free_loop(h.loop);
}
END_TEST

/* Without any source or timer: a single thread wakes every 10 ms until seen. */
struct wake_plain {
	struct rk_loop *loop;
	atomic_int done;
};

static void *plain_waker(void *arg)
{
	struct wake_plain *w = arg;

	while (!atomic_load(&w->done)) {
		sleep_ns(10 * MS);
		rk_loop_wake(w->loop);
	}
	return NULL;
}

START_TEST(test_wake_plain)
{
	struct rk_config c;
	struct wake_plain w;
	struct rk_loop_stats s;
	pthread_t th;
	uint64_t t0;

	test_config(&c);
	c.wait.mode = sleeping_mode();
	w.loop = new_loop(&c);
	atomic_init(&w.done, 0);
	fresh_now(w.loop);
	t0 = rk__now_ns();
	ck_assert_int_eq(pthread_create(&th, NULL, plain_waker, &w), 0);
	ck_assert_int_eq(rk_loop_run(w.loop, RK_RUN_ONCE), 0);
	atomic_store(&w.done, 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	s = stats_of(w.loop);
	ck_assert_uint_eq(s.blocks, 1);
	ck_assert_uint_eq(s.wakeups, 1);
	ck_assert_uint_ge(rk__now_ns() - t0, 10 * MS);
	ck_assert_uint_gt(s.ns_blocked, 0);
	free_loop(w.loop);
}
END_TEST

/* ---- signals ------------------------------------------------------------------------ */

static enum rk_activity raise_cb(struct rk_timer *t, uint64_t now)
{
	(void)now;
	raise((int)(intptr_t)t->data);
	return RK_IDLE;
}

START_TEST(test_signal_raise_in_loop)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct rk_timer t;
	struct guard g;

	test_config(&c);
	c.catch_signals = true;
	loop = new_loop(&c);
	rk_timer_init(&t, raise_cb, (void *)(intptr_t)SIGTERM);
	ck_assert_int_eq(rk_timer_start(loop, &t, 10 * MS, 0), 0);
	guard_start(&g, loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), -RK_ESTOPPED);
	ck_assert(!g.fired);
	ck_assert_int_eq(rk_loop_signal_stopped(loop), SIGTERM);
	rk_timer_stop(&g.t);
	/* The mask is restored and the signal was consumed: still alive after this. */
	free_loop(loop);
}
END_TEST

struct killer {
	int sig;
	uint64_t delay;
};

static void *killer_thread(void *arg)
{
	struct killer *k = arg;

	sleep_ns(k->delay);
	kill(getpid(), k->sig);
	return NULL;
}

START_TEST(test_signal_from_thread)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct guard g;
	struct killer k = { .sig = SIGINT, .delay = 20 * MS };
	pthread_t th;

	test_config(&c);
	c.catch_signals = true;
	loop = new_loop(&c);
	/* Created after the loop, the thread inherits its blocked SIGINT/SIGTERM. */
	ck_assert_int_eq(pthread_create(&th, NULL, killer_thread, &k), 0);
	guard_start(&g, loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), -RK_ESTOPPED);
	ck_assert(!g.fired);
	ck_assert_int_eq(rk_loop_signal_stopped(loop), SIGINT);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	rk_timer_stop(&g.t);
	free_loop(loop);
}
END_TEST

/* Without catch_signals, SIGINT/SIGTERM are left alone: no signalfd, no mask. */
START_TEST(test_signal_not_caught)
{
	struct rk_config c;
	struct rk_loop *loop;
	sigset_t cur;

	test_config(&c);
	loop = new_loop(&c);
	ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
	ck_assert(!sigismember(&cur, SIGINT));
	ck_assert(!sigismember(&cur, SIGTERM));
	free_loop(loop);

	c.catch_signals = true;
	loop = new_loop(&c);
	ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
	ck_assert(sigismember(&cur, SIGINT));
	ck_assert(sigismember(&cur, SIGTERM));
	free_loop(loop);
	ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
	ck_assert(!sigismember(&cur, SIGINT));
	ck_assert(!sigismember(&cur, SIGTERM));
}
END_TEST

/*
 * An unrelated signal with a handler (SIGUSR1, no SA_RESTART) hits the loop
 * thread every 2 ms while it waits for a 200 ms timer: each is an empty wait,
 * the timer still fires on time, and nothing errors out.
 */
static atomic_int g_usr1;

static void usr1_handler(int sig)
{
	(void)sig;
	atomic_fetch_add(&g_usr1, 1);
}

struct pester {
	pthread_t target;
	atomic_int done;
};

static void *pester_thread(void *arg)
{
	struct pester *p = arg;

	while (!atomic_load(&p->done)) {
		pthread_kill(p->target, SIGUSR1);
		sleep_ns(2 * MS);
	}
	return NULL;
}

START_TEST(test_signal_unrelated)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct sigaction sa, old;
	struct pester pe;
	struct probe p;
	struct guard g;
	struct rk_loop_stats s;
	pthread_t th;
	uint64_t t0;
	int n;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = usr1_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;	/* no SA_RESTART: the wait sees EINTR */
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, &old), 0);
	atomic_store(&g_usr1, 0);

	test_config(&c);
	c.catch_signals = true;	/* a signalfd for INT/TERM must not swallow USR1 */
	loop = new_loop(&c);
	pe.target = pthread_self();
	atomic_init(&pe.done, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, pester_thread, &pe), 0);
	while (atomic_load(&g_usr1) == 0)
		sleep_ns(100 * US);
	probe_init(&p, loop, 0);
	p.stop_at = 1;
	t0 = fresh_now(loop);
	ck_assert_int_eq(rk_timer_start(loop, &p.t, 200 * MS, 0), 0);
	guard_start(&g, loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	atomic_store(&pe.done, 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	n = atomic_load(&g_usr1);
	ck_assert(!g.fired);
	ck_assert_int_eq(p.fired, 1);
	ck_assert_uint_ge(p.now[0], t0 + 200 * MS);
	ck_assert_uint_ge(p.real[0], t0 + 200 * MS);
	ck_assert_int_eq(rk_loop_signal_stopped(loop), 0);
	s = stats_of(loop);
	ck_assert_uint_le(s.eintr, (uint64_t)n);
	ck_assert_uint_eq(s.busy_events, 0);
	rk_timer_stop(&g.t);
	free_loop(loop);
	ck_assert_int_eq(sigaction(SIGUSR1, &old, NULL), 0);
}
END_TEST

/* ---- fd watches --------------------------------------------------------------------- */

struct fdw {
	struct rk_fd_watch w;
	struct rk_loop *loop;
	int calls;
	int revents;
	bool stop;
};

static enum rk_activity fdw_cb(struct rk_fd_watch *w, int revents)
{
	struct fdw *f = rk__container_of(w, struct fdw, w);

	f->calls++;
	f->revents = revents;
	if (f->stop)
		rk_loop_stop(f->loop);
	return RK_BUSY;
}

struct writer {
	int fd;
	uint64_t delay;
};

static void *writer_thread(void *arg)
{
	struct writer *wr = arg;
	uint64_t one = 1;

	sleep_ns(wr->delay);
	if (write(wr->fd, &one, sizeof(one)) != sizeof(one))
		abort();
	return NULL;
}

START_TEST(test_fd_watch_fires_once)
{
	struct rk_config c;
	struct fdw f = { .stop = true };
	struct writer wr;
	struct guard g;
	struct rk_timer stop;
	pthread_t th;
	uint64_t v = 1;
	int efd;

	test_config(&c);
	f.loop = new_loop(&c);
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ck_assert_int_ge(efd, 0);
	rk_fd_watch_init(&f.w, efd, fdw_cb, NULL);
	ck_assert(!rk_fd_watch_busy(&f.w));
	ck_assert_int_eq(rk_fd_watch_start(f.loop, &f.w, POLLIN), 0);
	ck_assert_int_eq(rk_fd_watch_start(f.loop, &f.w, POLLIN), 0);	/* no-op while armed */
	ck_assert(rk_fd_watch_busy(&f.w));
	wr = (struct writer){ .fd = efd, .delay = 20 * MS };
	ck_assert_int_eq(pthread_create(&th, NULL, writer_thread, &wr), 0);
	guard_start(&g, f.loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(f.calls, 1);
	ck_assert(f.revents & POLLIN);
	ck_assert(!rk_fd_watch_busy(&f.w));

	/* One-shot: still readable, but no second callback until restarted. */
	f.stop = false;
	rk_timer_init(&stop, stop_cb, f.loop);
	ck_assert_int_eq(rk_timer_start(f.loop, &stop, 30 * MS, 0), 0);
	ck_assert_int_eq(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(f.calls, 1);
	/* Restarted on a still-readable fd: fires at once. */
	f.stop = true;
	ck_assert_int_eq(rk_fd_watch_start(f.loop, &f.w, POLLIN), 0);
	ck_assert_int_eq(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(f.calls, 2);
	ck_assert_int_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
	rk_timer_stop(&g.t);
	free_loop(f.loop);
	close(efd);
}
END_TEST

START_TEST(test_fd_watch_stop)
{
	struct rk_config c;
	struct fdw f = { 0 };
	struct rk_loop_stats s;
	struct rk_timer stop;
	int pfd[2], i;
	char ch = 'x';

	test_config(&c);
	f.loop = new_loop(&c);
	ck_assert_int_eq(pipe(pfd), 0);
	rk_fd_watch_init(&f.w, pfd[0], fdw_cb, NULL);
	ck_assert_int_eq(rk_fd_watch_start(f.loop, &f.w, POLLIN), 0);
	ck_assert_int_eq(rk_loop_run(f.loop, RK_RUN_NOWAIT), 0);
	ck_assert(rk_fd_watch_busy(&f.w));
	rk_fd_watch_stop(&f.w);
	rk_fd_watch_stop(&f.w);	/* idempotent */
	ck_assert(rk_fd_watch_busy(&f.w));	/* until the cancellation completes */
	for (i = 0; i < 2000 && rk_fd_watch_busy(&f.w); i++) {
		ck_assert_int_eq(rk_loop_run(f.loop, RK_RUN_NOWAIT), 0);
		if (rk_fd_watch_busy(&f.w))
			sleep_ns(100 * US);
	}
	ck_assert(!rk_fd_watch_busy(&f.w));
	/* Readable now, but nobody is watching. */
	ck_assert_int_eq(write(pfd[1], &ch, 1), 1);
	rk_timer_init(&stop, stop_cb, f.loop);
	ck_assert_int_eq(rk_timer_start(f.loop, &stop, 20 * MS, 0), 0);
	ck_assert_int_eq(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(f.calls, 0);
	s = stats_of(f.loop);
	ck_assert_uint_eq(s.busy_events, 0);
	/* Its storage may be reused: start it again, it fires. */
	f.stop = true;
	ck_assert_int_eq(rk_fd_watch_start(f.loop, &f.w, POLLIN), 0);
	ck_assert_int_eq(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(f.calls, 1);
	free_loop(f.loop);
	close(pfd[0]);
	close(pfd[1]);
}
END_TEST

/* Stopping a watch that is not armed does nothing. */
START_TEST(test_fd_watch_stop_idle)
{
	struct rk_config c;
	struct fdw f = { 0 };
	int efd;

	test_config(&c);
	f.loop = new_loop(&c);
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ck_assert_int_ge(efd, 0);
	rk_fd_watch_init(&f.w, efd, fdw_cb, NULL);
	rk_fd_watch_stop(&f.w);
	ck_assert(!rk_fd_watch_busy(&f.w));
	ck_assert_int_eq(rk_loop_run(f.loop, RK_RUN_NOWAIT), 0);
	free_loop(f.loop);
	close(efd);
}
END_TEST

/* ---- counters ----------------------------------------------------------------------- */

struct feeder {
	struct rk_loop *loop;
	struct rk_post posts[100];
	int ran;
	uint64_t blocks_at_last;	/* the loop's blocks when the last post ran */
};

static void *feeder_thread(void *arg)
{
	struct feeder *f = arg;
	int i;

	for (i = 0; i < 100; i++) {
		rk_loop_post(f->loop, &f->posts[i]);
		sleep_ns(MS);
	}
	return NULL;
}

static enum rk_activity feeder_post_cb(struct rk_post *p)
{
	struct feeder *f = p->data;

	if (++f->ran == 100)
		f->blocks_at_last = stats_of(f->loop).blocks;
	return RK_BUSY;
}

/*
 * Stops the loop once every post ran and, where the mode blocks at all, the
 * loop has blocked since the last one: however slowly the feeder runs, the
 * run then holds each phase the mode has.
 */
struct stopper {
	struct rk_timer t;
	struct feeder *fe;
	bool blocks;
};

static enum rk_activity stopper_cb(struct rk_timer *t, uint64_t now)
{
	struct stopper *st = rk__container_of(t, struct stopper, t);
	struct feeder *fe = st->fe;

	(void)now;
	if (fe->ran == 100 && (!st->blocks || stats_of(fe->loop).blocks > fe->blocks_at_last))
		rk_loop_stop(fe->loop);
	return RK_IDLE;
}

START_TEST(test_stats)
{
	struct rk_config c;
	struct feeder fe = { 0 };
	struct probe tick;
	struct stopper stop;
	struct guard g;
	struct rk_loop_stats s0, s;
	pthread_t th;
	uint64_t t0, wall, sum;
	int i;

	test_config(&c);
	fe.loop = new_loop(&c);
	for (i = 0; i < 100; i++)
		fe.posts[i] = (struct rk_post){ .cb = feeder_post_cb, .data = &fe };
	probe_init(&tick, fe.loop, 0);
	fresh_now(fe.loop);
	s = stats_of(fe.loop);
	ck_assert_uint_eq(s.iterations, 1);
	ck_assert_uint_eq(s.events, 0);
	ck_assert_int_eq(rk_timer_start(fe.loop, &tick.t, 10 * MS, 10 * MS), 0);
	stop = (struct stopper){ .fe = &fe, .blocks = c.wait.mode != RK_WAIT_SPIN };
	rk_timer_init(&stop.t, stopper_cb, NULL);
	ck_assert_int_eq(rk_timer_start(fe.loop, &stop.t, 10 * MS, 10 * MS), 0);
	guard_start(&g, fe.loop, 20 * SEC);
	ck_assert_int_eq(pthread_create(&th, NULL, feeder_thread, &fe), 0);
	s0 = stats_of(fe.loop);
	t0 = rk__now_ns();
	ck_assert_int_eq(rk_loop_run(fe.loop, RK_RUN_DEFAULT), 0);
	wall = rk__now_ns() - t0;
	s = stats_of(fe.loop);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert(!g.fired);
	rk_timer_stop(&tick.t);
	rk_timer_stop(&stop.t);
	rk_timer_stop(&g.t);

	ck_assert_int_eq(fe.ran, 100);
	ck_assert_uint_eq(s.posts, 100);
	/* The posts were busy; the ticks, the stopper and wakes are not. */
	ck_assert_uint_eq(s.busy_events, 100);
	/* events: completions, timer firings, posts, source events. */
	ck_assert_int_ge(tick.fired, 1);
	ck_assert_uint_ge(s.events, 100 + (uint64_t)tick.fired + 1);
	/* posts that came together ran in one iteration: no count of them bounds it */
	ck_assert_uint_gt(s.iterations, s0.iterations);
	ck_assert_uint_ge(s.iterations - s0.iterations, s.blocks - s0.blocks);
	ck_assert_uint_le(s.wakeups, s.blocks);
	/* The time accounts of the run lie within it (test_stats_accounts: exactly). */
	sum = (s.ns_spin - s0.ns_spin) + (s.ns_blocked - s0.ns_blocked) + (s.ns_run - s0.ns_run);
	ck_assert_uint_le(sum, wall);
	ck_assert_uint_gt(s.ns_run, 0);
	switch (c.wait.mode) {
	case RK_WAIT_ADAPTIVE:
		/* 20 ms window: spinning between the posts, blocked after them. */
		ck_assert_uint_gt(s.ns_spin, 0);
		ck_assert_uint_gt(s.ns_blocked, 0);
		ck_assert_uint_gt(s.blocks, 0);
		ck_assert_uint_gt(s.spin_iters, 0);
		break;
	case RK_WAIT_BLOCK:
		ck_assert_uint_eq(s.spin_iters, 0);
		ck_assert_uint_gt(s.blocks, 0);
		ck_assert_uint_gt(s.ns_blocked, 0);
		break;
	case RK_WAIT_SPIN:
		ck_assert_uint_eq(s.blocks, 0);
		ck_assert_uint_eq(s.ns_blocked, 0);
		ck_assert_uint_gt(s.spin_iters, 0);
		ck_assert_uint_gt(s.ns_spin, 0);
		break;
	}
	fprintf(stderr, "stats %s: %" PRIu64 " iterations, %" PRIu64 " events, spin %" PRIu64
		" ms, blocked %" PRIu64 " ms, run %" PRIu64 " ms, wall %" PRIu64 " ms\n",
		rk_wait_mode_name(c.wait.mode), s.iterations, s.events, s.ns_spin / MS,
		s.ns_blocked / MS, s.ns_run / MS, wall / MS);
	free_loop(fe.loop);
}
END_TEST

/*
 * Where the time goes, on the fake clock, moved only by the loop's own calls:
 * a post's handler costs RUN_NS, and a source's poll and arm POLL_NS and
 * ARM_NS. A handler's time is 'run'; an iteration that found nothing is
 * charged to the wait it ends in (spin, blocked), its arm() and the
 * wait itself included; and the accounts add up to the time that passed
 * inside rk_loop_run(), nothing lost and nothing from between the calls.
 */
#define RUN_NS	(300 * US)
#define POLL_NS	(7 * US)
#define ARM_NS	(50 * US)

struct acct {
	struct rk_source src;
	struct fake_clock fc;
	struct rk_post post;
	int polls, arms, runs;
};

static int acct_poll(struct rk_source *src, uint64_t now)
{
	struct acct *a = rk__container_of(src, struct acct, src);

	(void)now;
	a->polls++;
	a->fc.t += POLL_NS;
	return 0;
}

static int acct_arm(struct rk_source *src)
{
	struct acct *a = rk__container_of(src, struct acct, src);

	a->arms++;
	a->fc.t += ARM_NS;
	return 0;
}

static enum rk_activity acct_post_cb(struct rk_post *p)
{
	struct acct *a = p->data;

	a->runs++;
	a->fc.t += RUN_NS;
	return RK_BUSY;
}

START_TEST(test_stats_accounts)
{
	static const struct rk_source_ops ops = { .name = "accounting", .poll = acct_poll,
						  .arm = acct_arm };
	static const struct {
		uint64_t at;		/* fake us after t0 of one RK_RUN_ONCE */
		bool post;		/* with a post */
		char phase;		/* the account it adds to: Run, Spin, Blocked */
	} steps[] = {
		{ 0, false, 'B' },	/* never busy */
		{ 1000, true, 'R' },	/* busy: the window opens at its end */
		{ 1400, false, 'S' }, { 2000, false, 'S' },
		{ 2400, false, 'B' }, { 3000, false, 'B' },	/* spin 1 ms, then block */
		{ 3400, false, 'B' }, { 9000, false, 'B' },
		{ 9100, true, 'R' }, { 9500, false, 'S' },
	};
	struct rk_config c;
	struct rk_loop *loop;
	struct acct a = { .src = { .ops = &ops }, .fc = { .t = 1000 * SEC } };
	struct rk_timer bound;
	struct rk_loop_stats s0, s1;
	uint64_t t0 = a.fc.t, d, inside = 0, sum;
	int bound_fired = 0;
	size_t i;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 1 * MS;
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &a.fc);
	a.post = (struct rk_post){ .cb = acct_post_cb, .data = &a };
	ck_assert_int_eq(rk_loop_add_source(loop, &a.src), 0);
	rk_timer_init(&bound, never_cb, &bound_fired);
	for (i = 0; i < ARRAY_SIZE(steps); i++) {
		ck_assert_uint_ge(t0 + steps[i].at * US, a.fc.t);
		a.fc.t = t0 + steps[i].at * US;	/* between the calls: not accounted */
		/* due 200 us (fake) after this call's start: a real wait lasts at most
		 * that, and the clock never gets there (the delay counts from the
		 * loop's cached time, the last call's) */
		ck_assert_int_eq(rk_timer_start(loop, &bound,
						a.fc.t + 200 * US - rk_loop_now(loop), 0), 0);
		if (steps[i].post)
			rk_loop_post(loop, &a.post);
		s0 = stats_of(loop);
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
		s1 = stats_of(loop);
		d = a.fc.t - (t0 + steps[i].at * US);	/* what passed inside the run */
		inside += d;
		ck_assert_uint_eq(s1.iterations, s0.iterations + 1);
		switch (steps[i].phase) {
		case 'R':
			ck_assert_uint_eq(d, RUN_NS + POLL_NS);
			ck_assert_uint_eq(s1.ns_run - s0.ns_run, d);
			break;
		case 'S':
			ck_assert_uint_eq(s1.spin_iters, s0.spin_iters + 1);
			ck_assert_uint_eq(d, POLL_NS);
			ck_assert_uint_eq(s1.ns_spin - s0.ns_spin, d);
			/* no source predicts: all of it is the window's */
			ck_assert_uint_eq(s1.ns_spin_window - s0.ns_spin_window, d);
			ck_assert_uint_eq(s1.ns_spin_predict, s0.ns_spin_predict);
			break;
		case 'B':
			ck_assert_uint_eq(s1.blocks, s0.blocks + 1);
			ck_assert_uint_eq(d, POLL_NS + ARM_NS);
			ck_assert_uint_eq(s1.ns_blocked - s0.ns_blocked, d);
			break;
		}
		sum = (s1.ns_spin - s0.ns_spin) + (s1.ns_blocked - s0.ns_blocked) +
		      (s1.ns_run - s0.ns_run);
		ck_assert_msg(sum == d, "step %zu (%c): %" PRIu64 " ns accounted of %" PRIu64,
			      i, steps[i].phase, sum, d);
	}
	rk_timer_stop(&bound);
	ck_assert_int_eq(bound_fired, 0);
	ck_assert_int_eq(a.runs, 2);
	s1 = stats_of(loop);
	ck_assert_uint_eq(s1.ns_spin + s1.ns_blocked + s1.ns_run, inside);
	ck_assert_int_eq(rk_loop_remove_source(loop, &a.src), 0);
	free_loop(loop);
}
END_TEST

/* ---- SQPOLL ------------------------------------------------------------------------- */

struct sq_feeder {
	struct rk_loop *loop;
	struct rk_post posts[50];
};

static void *sq_feeder_thread(void *arg)
{
	struct sq_feeder *f = arg;
	int i;

	for (i = 0; i < 50; i++) {
		rk_loop_post(f->loop, &f->posts[i]);
		sleep_ns(i % 5 ? 100 * US : 5 * MS);	/* let the loop (and SQ thread) go idle */
	}
	return NULL;
}

static enum rk_activity sq_post_cb(struct rk_post *p)
{
	struct probe *pr = p->data;

	if (++pr->fired == 50)
		rk_loop_stop(pr->loop);
	return RK_BUSY;
}

START_TEST(test_sqpoll)
{
	struct rk_config c;
	struct rk_loop *loop;
	struct sq_feeder fe;
	struct probe tick, got;
	struct fdw f = { .stop = false };
	struct guard g;
	pthread_t th;
	uint64_t t0;
	int i, ret, efd;

	test_config(&c);
	rk__config_tuning(&c)->wait.sqpoll = true;
	c.wait.spin_ns = 2 * MS;
	ret = rk_loop_create(&c, &loop);
	if (ret == -EPERM || ret == -EACCES || ret == -EOPNOTSUPP) {
		fprintf(stderr, "sqpoll: not permitted here (%s), skipped\n", rk_strerror(ret));
		return;
	}
	ck_assert_msg(ret == 0, "rk_loop_create(sqpoll): %s", rk_strerror(ret));
	ck_assert(rk__config_ctuning(rk_loop_config(loop))->wait.sqpoll);

	/* Timers. */
	probe_init(&tick, loop, 0);
	tick.stop_at = 3;
	t0 = fresh_now(loop);
	ck_assert_int_eq(rk_timer_start(loop, &tick.t, 10 * MS, 10 * MS), 0);
	guard_start(&g, loop, 5 * SEC);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(tick.fired, 3);
	ck_assert_uint_ge(tick.now[2], t0 + 30 * MS);
	rk_timer_stop(&tick.t);

	/* Cross-thread posts, with pauses past the SQ thread's idle time. */
	probe_init(&got, loop, 1);
	fe.loop = loop;
	for (i = 0; i < 50; i++)
		fe.posts[i] = (struct rk_post){ .cb = sq_post_cb, .data = &got };
	ck_assert_int_eq(pthread_create(&th, NULL, sq_feeder_thread, &fe), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(got.fired, 50);

	/* An fd watch: SQEs submitted through the SQ thread. */
	efd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
	ck_assert_int_ge(efd, 0);
	f.loop = loop;
	f.stop = true;
	rk_fd_watch_init(&f.w, efd, fdw_cb, NULL);
	ck_assert_int_eq(rk_fd_watch_start(loop, &f.w, POLLIN), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_DEFAULT), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(f.calls, 1);
	close(efd);

	rk_timer_stop(&g.t);
	free_loop(loop);
}
END_TEST

/*
 * The SQ thread of this process's ring, found by name ("iou-sqp-<pid>"): the
 * CPUs it may run on as /proc lists them ("1", "0-1") into @out[64].
 * Return: 1 when found, 0 when not (yet).
 */
static int sq_thread_cpus(char out[64])
{
	char path[sizeof("/proc/self/task//status") + 256], line[256];
	struct dirent *d;
	DIR *dir = opendir("/proc/self/task");
	int found = 0;
	FILE *f;

	ck_assert_ptr_nonnull(dir);
	while (!found && (d = readdir(dir))) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", d->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		found = fgets(line, sizeof(line), f) && !strncmp(line, "iou-sqp-", 8);
		fclose(f);
		if (!found)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", d->d_name);
		f = fopen(path, "r");
		found = 0;
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "Cpus_allowed_list: %63s", out) == 1)
				found = 1;
		if (f)
			fclose(f);
	}
	closedir(dir);
	return found;
}

/*
 * RK_SQPOLL_CPU pins the SQ thread, also with COOP_TASKRUN asked for (the
 * default), which the kernel refuses together with SQPOLL: the ring is then
 * set up without COOP_TASKRUN and with everything else it was asked for.
 */
START_TEST(test_sqpoll_cpu)
{
	struct rk_config c;
	struct rk_loop *loop;
	cpu_set_t set;
	char want[16], got[64] = "";
	uint64_t deadline;
	int cpu, ret;

	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	for (cpu = CPU_SETSIZE - 1; cpu > 0 && !CPU_ISSET(cpu, &set); cpu--)
		;
	test_config(&c);
	ck_assert(rk__config_tuning(&c)->wait.coop_taskrun);		/* the default */
	rk__config_tuning(&c)->wait.sqpoll = true;
	rk__config_tuning(&c)->wait.sqpoll_cpu = cpu;	/* the last CPU this process may use */
	c.wait.spin_ns = 2 * MS;
	ret = rk_loop_create(&c, &loop);
	if (ret == -EPERM || ret == -EACCES || ret == -EOPNOTSUPP) {
		fprintf(stderr, "sqpoll: not permitted here (%s), skipped\n", rk_strerror(ret));
		return;
	}
	ck_assert_msg(ret == 0, "rk_loop_create(sqpoll, cpu %d): %s", cpu, rk_strerror(ret));
	/* the thread pins itself when it starts */
	snprintf(want, sizeof(want), "%d", cpu);
	deadline = rk__now_ns() + 5 * SEC;
	while ((!sq_thread_cpus(got) || strcmp(got, want)) && rk__now_ns() < deadline)
		sleep_ns(MS);
	ck_assert_msg(!strcmp(got, want), "the SQ thread may run on CPUs '%s', not only on %s", got,
		      want);
	free_loop(loop);
}
END_TEST

/*
 * RK_SQPOLL=auto decides at rk_loop_create() from the affinity mask: off with
 * fewer than RK_SQPOLL_AUTO_CPUS CPUs in it (here: the mask cut to one CPU),
 * on with that many (when this machine has them; else that half is skipped).
 * The test process is forked, so its mask is its own to change.
 */
START_TEST(test_sqpoll_auto)
{
	struct rk_config c;
	struct rk_loop *loop;
	cpu_set_t all, set;
	char err[128];
	int cpu, n = 0, ret;

	ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	test_config(&c);
	ck_assert_int_eq(rk_config_set(&c, "RK_SQPOLL", "auto", err, sizeof(err)), 0);
	ck_assert(rk__config_tuning(&c)->wait.sqpoll_auto);
	ck_assert(!rk__config_tuning(&c)->wait.sqpoll);
	CPU_ZERO(&set);
	for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &all); cpu++)
		;
	CPU_SET(cpu, &set);
	ck_assert_int_eq(sched_setaffinity(0, sizeof(set), &set), 0);
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	ck_assert(!rk__config_ctuning(rk_loop_config(loop))->wait.sqpoll);
	free_loop(loop);

	CPU_ZERO(&set);
	for (cpu = 0; cpu < CPU_SETSIZE && n < RK_SQPOLL_AUTO_CPUS; cpu++) {
		if (CPU_ISSET(cpu, &all)) {
			CPU_SET(cpu, &set);
			n++;
		}
	}
	if (n < RK_SQPOLL_AUTO_CPUS) {
		fprintf(stderr, "sqpoll auto: %d CPUs here, the 'on' half skipped\n", n);
		return;
	}
	ck_assert_int_eq(sched_setaffinity(0, sizeof(set), &set), 0);
	ret = rk_loop_create(&c, &loop);
	if (ret == -EPERM || ret == -EACCES || ret == -EOPNOTSUPP) {
		fprintf(stderr, "sqpoll: not permitted here (%s), skipped\n", rk_strerror(ret));
		return;
	}
	ck_assert_int_eq(ret, 0);
	ck_assert(rk__config_ctuning(rk_loop_config(loop))->wait.sqpoll);
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
	ck_assert_int_eq(rk__config_tuning(&c)->wait.sqpoll_cpu, -1);
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

/* ---- what a binding sees: no struct layout ------------------------------------------ */

/*
 * A caller that knows no struct size (a binding through ctypes or cffi):
 * a config from rk_config_create(), knobs of both tiers set by name, a
 * loop, counters read into a buffer of a size it chose. Stats of a larger
 * struct than the library's (a newer caller) come back with the library's
 * counters and zeroes after them; of a smaller one (an older caller) with
 * the counters that fit, and nothing written past its size.
 */
START_TEST(test_binding)
{
	const size_t lib = sizeof(struct rk_loop_stats);
	struct rk_config *cfg;
	struct rk_loop *loop;
	struct rk_loop_stats ref;
	unsigned char buf[sizeof(struct rk_loop_stats) + 64];
	char err[128] = "", *out = NULL;
	size_t len = 0, i;
	FILE *f;

	ck_assert_int_eq(rk_config_create(&cfg), 0);
	ck_assert_msg(rk_config_set(cfg, "RK_WAIT", "block", err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(rk_config_set(cfg, "spin_yield", "0", err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(rk_config_set(cfg, "RK_RING_ENTRIES", "64", err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_int_eq(rk_loop_create(cfg, &loop), 0);
	rk_config_destroy(cfg);		/* the loop holds its own copy */
	f = open_memstream(&out, &len);
	ck_assert_ptr_nonnull(f);
	rk_config_print(rk_loop_config(loop), f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_msg(strstr(out, "\nRK_WAIT=block\n") && strstr(out, "\nRK_SPIN_YIELD=0\n") &&
		      strstr(out, "\nRK_RING_ENTRIES=64\n"), "%s", out);
	free(out);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);

	/* larger: the library's counters, then zeroes */
	memset(buf, 0xa5, sizeof(buf));
	ck_assert_uint_eq(rk_loop_stats(loop, (struct rk_loop_stats *)(void *)buf, sizeof(buf)),
			  lib);
	ck_assert_uint_eq(rk_loop_stats(loop, &ref, sizeof(ref)), lib);
	ck_assert_uint_gt(ref.iterations, 0);
	ck_assert_mem_eq(buf, &ref, lib);
	for (i = lib; i < sizeof(buf); i++)
		ck_assert_uint_eq(buf[i], 0);
	/* smaller: the first two counters, nothing after them */
	memset(buf, 0xa5, sizeof(buf));
	ck_assert_uint_eq(rk_loop_stats(loop, (struct rk_loop_stats *)(void *)buf, 16), 16);
	ck_assert_mem_eq(buf, &ref, 16);
	for (i = 16; i < sizeof(buf); i++)
		ck_assert_uint_eq(buf[i], 0xa5);
	ck_assert_uint_eq(rk_loop_stats(loop, (struct rk_loop_stats *)(void *)buf, 0), 0);
	ck_assert_uint_eq(buf[0], ref.iterations & 0xff);
	free_loop(loop);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

static Suite *loop_suite(void)
{
	Suite *s = suite_create("loop");
	TCase *tc;

	tc = tcase(s, "lifetime", TIMEOUT_S);
	tcase_add_test(tc, test_create_destroy);
	tcase_add_test(tc, test_destroy_busy);
	tcase_add_test(tc, test_run_nested);
	tcase_add_test(tc, test_many_loops);

	tc = tcase(s, "timers", TIMEOUT_S);
	tcase_add_test(tc, test_timer_oneshot);
	tcase_add_test(tc, test_timer_periodic);
	tcase_add_test(tc, test_timer_periodic_schedule);
	tcase_add_test(tc, test_timer_stop_in_callback);
	tcase_add_test(tc, test_timer_restart);
	tcase_add_test(tc, test_timer_order);
	tcase_add_test(tc, test_timer_chain);
	tcase_add_test(tc, test_block_ring_timeout);

	tc = tcase(s, "posts", TIMEOUT_S);
	tcase_add_test(tc, test_post_local);
	tcase_add_test(tc, test_post_stress_one);
	tcase_add_test(tc, test_post_stress_two);

	/* These block whatever RK_TEST_WAIT says, until another thread wakes them. */
	tc = tcase(s, "wake", TIMEOUT_S);
#if CHECK_MAJOR_VERSION > 0 || CHECK_MINOR_VERSION >= 13	/* tags: Check 0.13 */
	tcase_set_tags(tc, "blocks-for-thread");
#endif
	tcase_add_test(tc, test_wake_blocked);
	tcase_add_test(tc, test_wake_counted);
	tcase_add_test(tc, test_wake_plain);

	tc = tcase(s, "signals", TIMEOUT_S);
	tcase_add_test(tc, test_signal_raise_in_loop);
	tcase_add_test(tc, test_signal_from_thread);
	tcase_add_test(tc, test_signal_not_caught);
	tcase_add_test(tc, test_signal_unrelated);

	tc = tcase(s, "fd_watch", TIMEOUT_S);
	tcase_add_test(tc, test_fd_watch_fires_once);
	tcase_add_test(tc, test_fd_watch_stop);
	tcase_add_test(tc, test_fd_watch_stop_idle);

	tc = tcase(s, "stats", TIMEOUT_S);
	tcase_add_test(tc, test_stats);
	tcase_add_test(tc, test_stats_accounts);
	tcase_add_test(tc, test_binding);

	tc = tcase(s, "sqpoll", TIMEOUT_S);
	tcase_add_test(tc, test_sqpoll);
	tcase_add_test(tc, test_sqpoll_cpu);
	tcase_add_test(tc, test_sqpoll_auto);

	tc = tcase(s, "reentrancy", TIMEOUT_S);
	tcase_add_test(tc, test_stop_before_run);
	tcase_add_test(tc, test_destroy_from_callback);
	tcase_add_test(tc, test_init_functions);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(loop_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
