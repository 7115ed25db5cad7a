/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the loop's suites (check_loop*, check_wait*): loops made
 * and checked, the wait mode RK_TEST_WAIT forces, an injected clock, a few
 * timers and a post that do nothing but count or stop. Never installed.
 */
#ifndef RK_LOOP_TEST_H
#define RK_LOOP_TEST_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "runtime_int.h"
#include "rk_check.h"
#include "rk_test.h"

#define TIMEOUT_S	30

/* ---- helpers ------------------------------------------------------------------------ */

static inline void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / SEC), .tv_nsec = (long)(ns % SEC) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * An injected clock (rk_loop_set_clock()): time moves only when the test moves
 * it, so a test can say which phase the loop is in and how long each lasted
 * whatever else runs on the machine.
 */
struct fake_clock {
	uint64_t t;
};

static inline uint64_t fake_now(void *arg)
{
	return ((struct fake_clock *)arg)->t;
}

/* The wait mode RK_TEST_WAIT forces, or -1. */
static inline int forced_mode(void)
{
	const char *s = getenv("RK_TEST_WAIT");

	if (!s || !*s)
		return -1;
	if (!strcmp(s, "adaptive"))
		return RK_WAIT_ADAPTIVE;
	if (!strcmp(s, "block"))
		return RK_WAIT_BLOCK;
	if (!strcmp(s, "spin"))
		return RK_WAIT_SPIN;
	ck_abort_msg("RK_TEST_WAIT='%s': want adaptive, block or spin", s);
	return -1;
}

/* Defaults, with the wait mode RK_TEST_WAIT forces. */
static inline void test_config(struct rk_config *c)
{
	int m = forced_mode();

	rk_config_init(c);
	if (m >= 0)
		c->wait.mode = (enum rk_wait_mode)m;
}

static inline struct rk_loop *new_loop(const struct rk_config *c)
{
	struct rk_loop *loop = NULL;
	int ret = rk_loop_create(c, &loop);

	ck_assert_msg(ret == 0, "rk_loop_create: %s", rk_strerror(ret));
	ck_assert_ptr_nonnull(loop);
	return loop;
}

static inline void free_loop(struct rk_loop *loop)
{
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
}

static inline struct rk_loop_stats stats_of(const struct rk_loop *loop)
{
	struct rk_loop_stats s;

	rk_loop_stats(loop, &s, sizeof(s));
	return s;
}

/* A timer whose callback stops the loop (t->data is the loop). */
static inline enum rk_activity stop_cb(struct rk_timer *t, uint64_t now)
{
	(void)now;
	rk_loop_stop(t->data);
	return RK_IDLE;
}

/* A timer that must never fire: counts, so the test can assert it did not. */
static inline enum rk_activity never_cb(struct rk_timer *t, uint64_t now)
{
	(void)now;
	(*(int *)t->data)++;
	return RK_IDLE;
}

/* A watchdog: stops the loop and records that the test's own stop never came. */
struct guard {
	struct rk_timer t;
	struct rk_loop *loop;
	bool fired;
};

static inline enum rk_activity guard_cb(struct rk_timer *t, uint64_t now)
{
	struct guard *g = rk__container_of(t, struct guard, t);

	(void)now;
	g->fired = true;
	rk_loop_stop(g->loop);
	return RK_IDLE;
}

static inline void guard_start(struct guard *g, struct rk_loop *loop, uint64_t after_ns)
{
	g->loop = loop;
	g->fired = false;
	rk_timer_init(&g->t, guard_cb, g);
	ck_assert_int_eq(rk_timer_start(loop, &g->t, after_ns, 0), 0);
}

/* A post that counts (p->data is an int) and is busy work. */
static inline enum rk_activity busy_post_cb(struct rk_post *p)
{
	(*(int *)p->data)++;
	return RK_BUSY;
}

#define MAX_FIRES 16

/* A timer that records each firing (its 'now', the real clock) and stops what it is told to. */
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

static inline enum rk_activity probe_cb(struct rk_timer *t, uint64_t now)
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

static inline void probe_init(struct probe *p, struct rk_loop *loop, int id)
{
	memset(p, 0, sizeof(*p));
	p->loop = loop;
	p->id = id;
	rk_timer_init(&p->t, probe_cb, NULL);
}

/* Refresh the loop's cached clock, so timers start from "now". */
static inline uint64_t fresh_now(struct rk_loop *loop)
{
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	return rk_loop_now(loop);
}

/* An fd watch that counts its calls and, when told, stops the loop. */
struct fdw {
	struct rk_fd_watch w;
	struct rk_loop *loop;
	int calls;
	int revents;
	bool stop;
};

static inline enum rk_activity fdw_cb(struct rk_fd_watch *w, int revents)
{
	struct fdw *f = rk__container_of(w, struct fdw, w);

	f->calls++;
	f->revents = revents;
	if (f->stop)
		rk_loop_stop(f->loop);
	return RK_BUSY;
}

/* A TCase of the loop's suites: their timeout, no fixture. */
static inline TCase *tcase(Suite *s, const char *name)
{
	return rk_tcase(s, name, TIMEOUT_S, NULL, NULL);
}

#endif /* RK_LOOP_TEST_H */
