/* SPDX-License-Identifier: MIT */
/*
 * bench-predict: a predictive wait on the real clock, its CPU and how late it
 * wakes. A source that no wake can reach (a GPU notifier in poll-only mode)
 * says when its next event will be ready, W ms ahead, right after a busy
 * event (so the 200 ms spin window is open); the loop runs until the event is
 * delivered. Two loops, RK_PREDICT on and off, take turns for N waits each.
 * Per loop: the loop thread's CPU per wait, the share of the wait it spent
 * blocked, how long after it was ready the event was seen (p50, p90, max), and
 * the prediction counters. These are the figures check_wait's predictive-wait
 * tests once bounded in time; those tests now run on the injected clock. A
 * benchmark, not a test: it asserts nothing about time.
 *
 *   tests/bench/bench-predict [--waits N] [--wait-ms W] [--margin-us M]
 *
 * Defaults: 20 waits of 30 ms, the default margin (RK_PREDICT_MARGIN_US).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime_int.h"

#define US	1000ull
#define MS	1000000ull
#define SEC	1000000000ull
#define MAX_WAITS	1000

/* Ready at ready_at (CLOCK_MONOTONIC); predicts that time until 5 ms past it. */
struct pred_src {
	struct rk_source src;
	uint64_t ready_at;	/* 0 = nothing outstanding */
	uint64_t seen_at;
};

static int pred_poll(struct rk_source *src, uint64_t now)
{
	struct pred_src *p = src->data;

	(void)now;
	if (!p->ready_at || rk__now_ns() < p->ready_at)
		return 0;
	p->seen_at = rk__now_ns();
	p->ready_at = 0;
	return 1;
}

static uint64_t pred_expect(struct rk_source *src, uint64_t now)
{
	struct pred_src *p = src->data;

	if (!p->ready_at || now > p->ready_at + 5 * MS)
		return 0;
	return p->ready_at;
}

/* Nothing to arm: while it predicts, the loop wakes by the prediction;
 * otherwise (RK_PREDICT=0, or overdue) the loop must not block. */
static int pred_arm(struct rk_source *src)
{
	struct pred_src *p = src->data;

	if (!p->ready_at)
		return 0;
	if (rk__now_ns() < p->ready_at && rk_loop_predicts(src->loop) &&
	    pred_expect(src, rk_loop_now(src->loop)))
		return 0;
	return 1;
}

static const struct rk_source_ops pred_ops = {
	.name = "bench-predicting", .poll = pred_poll, .arm = pred_arm, .expect = pred_expect };

static enum rk_activity busy_cb(struct rk_post *p)
{
	(void)p;
	return RK_BUSY;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

struct side {
	const char *name;
	struct rk_loop *loop;
	struct pred_src p;
	uint64_t cpu, blocked, late[MAX_WAITS];
	unsigned int n;
};

static int side_init(struct side *s, const char *name, bool predict, uint64_t margin_ns)
{
	struct rk_config c;
	int ret;

	memset(s, 0, sizeof(*s));
	s->name = name;
	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 200 * MS;
	rk__config_tuning(&c)->wait.predict = predict;
	if (margin_ns)
		rk__config_tuning(&c)->wait.predict_margin_ns = margin_ns;
	ret = rk_loop_create(&c, &s->loop);
	if (ret)
		return ret;
	s->p.src.ops = &pred_ops;
	s->p.src.data = &s->p;
	return rk_loop_add_source(s->loop, &s->p.src);
}

/* One predicted wait of @wait_ns: run until the event is delivered. */
static int one_wait(struct side *s, uint64_t wait_ns)
{
	struct rk_post kick = { .cb = busy_cb };
	struct rk_loop_stats a, b;
	uint64_t cpu0, ready, end;

	rk_loop_post(s->loop, &kick);
	rk_loop_run(s->loop, RK_RUN_NOWAIT);
	rk_loop_stats(s->loop, &a, sizeof(a));
	s->p.seen_at = 0;
	ready = rk__now_ns() + wait_ns;
	s->p.ready_at = ready;
	cpu0 = thread_cpu_ns();
	end = ready + 10 * SEC;
	while (!s->p.seen_at && rk__now_ns() < end)
		rk_loop_run(s->loop, RK_RUN_ONCE);
	if (!s->p.seen_at)
		return -ETIMEDOUT;
	s->cpu += thread_cpu_ns() - cpu0;
	rk_loop_stats(s->loop, &b, sizeof(b));
	s->blocked += b.ns_blocked - a.ns_blocked;
	s->late[s->n++] = s->p.seen_at - ready;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void side_print(struct side *s, uint64_t wait_ns)
{
	struct rk_loop_stats st;

	qsort(s->late, s->n, sizeof(s->late[0]), cmp_u64);
	rk_loop_stats(s->loop, &st, sizeof(st));
	printf("%-12s %5u %12.1f %9.1f %11.1f %11.1f %11.1f %6" PRIu64 " %6" PRIu64 " %5" PRIu64
	       " %4" PRIu64 " %9.1f\n", s->name, s->n, (double)s->cpu / s->n / US,
	       100.0 * (double)s->blocked / ((double)s->n * (double)wait_ns),
	       (double)s->late[s->n / 2] / US, (double)s->late[s->n * 9 / 10] / US,
	       (double)s->late[s->n - 1] / US, st.predict_waits, st.predict_early,
	       st.predict_late, st.predict_cut, (double)st.predict_margin_ns / US);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-predict [--waits N] [--wait-ms W] [--margin-us M]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct side on, off;
	unsigned long waits = 20, wait_ms = 30, margin_us = 0;
	unsigned int i;
	int ret, a;

	for (a = 1; a < argc; a++) {
		if (a + 1 < argc && !strcmp(argv[a], "--waits"))
			waits = strtoul(argv[++a], NULL, 10);
		else if (a + 1 < argc && !strcmp(argv[a], "--wait-ms"))
			wait_ms = strtoul(argv[++a], NULL, 10);
		else if (a + 1 < argc && !strcmp(argv[a], "--margin-us"))
			margin_us = strtoul(argv[++a], NULL, 10);
		else
			usage();
	}
	if (!waits || waits > MAX_WAITS || !wait_ms || wait_ms > 10000)
		usage();
	ret = side_init(&on, "predict", true, margin_us * US);
	if (!ret)
		ret = side_init(&off, "RK_PREDICT=0", false, margin_us * US);
	if (ret) {
		fprintf(stderr, "bench-predict: %s\n", rk_strerror(ret));
		return 1;
	}
	for (i = 0; i < waits && !ret; i++) {
		ret = one_wait(&on, wait_ms * MS);
		if (!ret)
			ret = one_wait(&off, wait_ms * MS);
	}
	if (ret) {
		fprintf(stderr, "bench-predict: an event was never delivered\n");
		return 1;
	}
	printf("bench-predict: %lu waits of %lu ms in a 200 ms spin window, interleaved\n", waits,
	       wait_ms);
	printf("%-12s %5s %12s %9s %11s %11s %11s %6s %6s %5s %4s %9s\n", "loop", "waits",
	       "cpu_us/wait", "blocked%", "late_p50_us", "late_p90_us", "late_max_us", "pwaits",
	       "early", "late", "cut", "margin_us");
	side_print(&on, wait_ms * MS);
	side_print(&off, wait_ms * MS);
	rk_loop_remove_source(on.loop, &on.p.src);
	rk_loop_remove_source(off.loop, &off.p.src);
	rk_loop_destroy(on.loop);
	rk_loop_destroy(off.loop);
	return 0;
}
