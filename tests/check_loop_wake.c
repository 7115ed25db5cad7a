/* SPDX-License-Identifier: MIT */
/*
 * check_loop_wake: what wakes a rank loop from outside: cross-thread posts
 * (and their stress), rk_loop_wake(), signals, and fd watches.
 *
 * Valgrind (3.19) holds its big lock across io_uring_enter(), so a loop
 * blocked in the kernel stops every other thread: a loop waiting for a post
 * or wake from a thread deadlocks. Run it with the loops spinning and without
 * the tests that must block for a thread:
 *   CK_FORK=no RK_TEST_WAIT=spin RK_TEST_POSTS=20000 \
 *   CK_EXCLUDE_TAGS=blocks-for-thread valgrind --leak-check=full tests/check_loop_wake
 *
 * A lost wakeup shows as a hang that the TCase timeout turns into a failure.
 *
 * Environment (RK_TEST_* is skipped by rk_config_from_env):
 *   RK_TEST_WAIT=adaptive|block|spin  the wait mode of every loop whose test is
 *                                     not about the policy itself (tests/loop-*.sh)
 *   RK_TEST_POSTS=N                   posts in the stress tests (default 1000000;
 *                                     lower it for valgrind)
 *
 * Everything runs on the forked test process: no ring is ever made in an
 * unchecked fixture. Helper threads never call ck_assert (that is only safe on
 * the test's own thread with CK_FORK=no); they record, and the test thread
 * asserts.
 */
#define _GNU_SOURCE	/* sched_getaffinity() */
#include "loop_test.h"

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

static Suite *loop_wake_suite(void)
{
	Suite *s = suite_create("loop");
	TCase *tc;

	tc = tcase(s, "posts");
	tcase_add_test(tc, test_post_local);
	tcase_add_test(tc, test_post_stress_one);
	tcase_add_test(tc, test_post_stress_two);

	/* These block whatever RK_TEST_WAIT says, until another thread wakes them. */
	tc = tcase(s, "wake");
#if CHECK_MAJOR_VERSION > 0 || CHECK_MINOR_VERSION >= 13	/* tags: Check 0.13 */
	tcase_set_tags(tc, "blocks-for-thread");
#endif
	tcase_add_test(tc, test_wake_blocked);
	tcase_add_test(tc, test_wake_counted);
	tcase_add_test(tc, test_wake_plain);

	tc = tcase(s, "signals");
	tcase_add_test(tc, test_signal_raise_in_loop);
	tcase_add_test(tc, test_signal_from_thread);
	tcase_add_test(tc, test_signal_not_caught);
	tcase_add_test(tc, test_signal_unrelated);

	tc = tcase(s, "fd_watch");
	tcase_add_test(tc, test_fd_watch_fires_once);
	tcase_add_test(tc, test_fd_watch_stop);
	tcase_add_test(tc, test_fd_watch_stop_idle);
	return s;
}

int main(void)
{
	return rk_check_run(loop_wake_suite());
}
