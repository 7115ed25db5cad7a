/* SPDX-License-Identifier: MIT */
/*
 * check_loop_stats: what a rank loop counts (rk_loop_stats(): iterations,
 * events, spins, blocks, its accounts of busy and idle time), what a binding
 * sees of it without a struct layout, and SQPOLL rings.
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
	rk__config_tuning(&c)->ring.sqpoll = true;
	c.wait.spin_ns = 2 * MS;
	ret = rk_loop_create(&c, &loop);
	if (ret == -EPERM || ret == -EACCES || ret == -EOPNOTSUPP) {
		fprintf(stderr, "sqpoll: not permitted here (%s), skipped\n", rk_strerror(ret));
		return;
	}
	ck_assert_msg(ret == 0, "rk_loop_create(sqpoll): %s", rk_strerror(ret));
	ck_assert(rk__config_ctuning(rk_loop_config(loop))->ring.sqpoll);

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
	ck_assert(rk__config_tuning(&c)->ring.coop_taskrun);		/* the default */
	rk__config_tuning(&c)->ring.sqpoll = true;
	rk__config_tuning(&c)->ring.sqpoll_cpu = cpu;	/* the last CPU this process may use */
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
	ck_assert(rk__config_tuning(&c)->ring.sqpoll_auto);
	ck_assert(!rk__config_tuning(&c)->ring.sqpoll);
	CPU_ZERO(&set);
	for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &all); cpu++)
		;
	CPU_SET(cpu, &set);
	ck_assert_int_eq(sched_setaffinity(0, sizeof(set), &set), 0);
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	ck_assert(!rk__config_ctuning(rk_loop_config(loop))->ring.sqpoll);
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
	ck_assert(rk__config_ctuning(rk_loop_config(loop))->ring.sqpoll);
	free_loop(loop);
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

static Suite *loop_stats_suite(void)
{
	Suite *s = suite_create("loop");
	TCase *tc;

	tc = tcase(s, "stats");
	tcase_add_test(tc, test_stats);
	tcase_add_test(tc, test_stats_accounts);
	tcase_add_test(tc, test_binding);

	tc = tcase(s, "sqpoll");
	tcase_add_test(tc, test_sqpoll);
	tcase_add_test(tc, test_sqpoll_cpu);
	tcase_add_test(tc, test_sqpoll_auto);
	return s;
}

int main(void)
{
	return rk_check_run(loop_stats_suite());
}
