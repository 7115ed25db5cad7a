// SPDX-License-Identifier: MIT
/*
 * check_gpu_emu: the GPU notifier (gpu/notifier.c) on the emulated device
 * (gpu/emu.c), on the loop's injected clock with the device stepped by hand
 * (a manual device, rk_gpu_emu_run()): a mark is delivered at the modelled
 * time and not before, by the path the mode and the loop's wait say (the
 * polled word while the loop spins, the host function after its wake cost
 * while it blocks), and a warm predictor lets AUTO marks go without a host
 * function. No GPU needed: this runs in every build.
 *
 * Behaviour only: time is the fake clock's, never the wall clock's.
 */
#include "config.h"

#include "loop_test.h"
#include "rk_gpu.h"

#define T0	(1000 * SEC)

struct got {
	unsigned int n;
	uint64_t cookie[8];
	uint64_t at[8];		/* the loop's time at the callback */
	struct rk_loop *loop;
};

static enum rk_activity done_cb(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	struct got *g = arg;

	(void)n;
	if (g->n < 8) {
		g->cookie[g->n] = cookie;
		g->at[g->n] = rk_loop_now(g->loop);
	}
	g->n++;
	return RK_BUSY;
}

static struct rk_gpu_emu *manual_emu(struct fake_clock *fc, uint64_t wake_ns)
{
	struct rk_gpu_emu_attr a;
	struct rk_gpu_emu *e = NULL;

	rk_gpu_emu_attr_init(&a);
	ck_assert_uint_eq(a.wake_ns, RK_GPU_EMU_WAKE_NS);
	a.wake_ns = wake_ns;
	a.clock = fake_now;
	a.clock_arg = fc;
	a.manual = true;
	ck_assert_int_eq(rk_gpu_emu_create(&a, &e), 0);
	return e;
}

static struct rk_gpu_notifier_stats nstats(const struct rk_gpu_notifier *n)
{
	struct rk_gpu_notifier_stats s;

	ck_assert_uint_eq(rk_gpu_notifier_stats(n, &s, sizeof(s)), sizeof(s));
	return s;
}

/* A spinning loop, POLL: the word flips at launch + duration; the loop sees it then. */
START_TEST(test_poll_at_modelled_time)
{
	struct fake_clock fc = { .t = T0 };
	struct rk_config c;
	struct rk_loop *loop;
	struct rk_gpu_emu *e = manual_emu(&fc, 23 * US);
	struct rk_gpu_notifier *n = NULL;
	struct got g = { 0 };
	struct rk_gpu_notifier_stats s;
	uint64_t end = 0;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_SPIN;
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &fc);
	g.loop = loop;
	ck_assert_int_eq(rk_gpu_notifier_create_emu(loop, e, RK_GPU_NOTIFY_POLL, done_cb, &g, &n),
			 0);
	ck_assert_int_eq(rk_gpu_notifier_mode(n), RK_GPU_NOTIFY_POLL);

	ck_assert_int_eq(rk_gpu_emu_launch(e, 1 * MS, &end), 0);
	ck_assert_uint_eq(end, T0 + 1 * MS);
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 7), 0);
	ck_assert_uint_eq(rk_gpu_notifier_outstanding(n), 1);

	/* before the modelled time: nothing, however often the loop looks */
	for (fc.t = T0; fc.t < T0 + 1 * MS; fc.t += 100 * US) {
		ck_assert_int_eq(rk_gpu_emu_run(e), 0);
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
		ck_assert_uint_eq(g.n, 0);
	}
	fc.t = T0 + 1 * MS - 1;
	ck_assert_int_eq(rk_gpu_emu_run(e), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_uint_eq(g.n, 0);

	/* at it: the word is written, the next look delivers */
	fc.t = T0 + 1 * MS;
	ck_assert_int_eq(rk_gpu_emu_run(e), 1);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_uint_eq(g.n, 1);
	ck_assert_uint_eq(g.cookie[0], 7);
	ck_assert_uint_ge(g.at[0], T0 + 1 * MS);
	s = nstats(n);
	ck_assert_uint_eq(s.marks, 1);
	ck_assert_uint_eq(s.via_poll, 1);
	ck_assert_uint_eq(s.via_wake, 0);
	ck_assert_uint_eq(s.outstanding, 0);
	ck_assert_uint_eq(stats_of(loop).blocks, 0);	/* it spun */

	/* work queues behind work: two rounds back to back end at +1 and +3 ms */
	ck_assert_int_eq(rk_gpu_emu_launch(e, 1 * MS, &end), 0);
	ck_assert_uint_eq(end, T0 + 2 * MS);
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 8), 0);
	ck_assert_int_eq(rk_gpu_emu_launch(e, 1 * MS, &end), 0);
	ck_assert_uint_eq(end, T0 + 3 * MS);
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 9), 0);
	fc.t = T0 + 2 * MS;
	ck_assert_int_eq(rk_gpu_emu_run(e), 1);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_uint_eq(g.n, 2);
	fc.t = T0 + 3 * MS;
	ck_assert_int_eq(rk_gpu_emu_run(e), 1);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_uint_eq(g.n, 3);
	ck_assert_uint_eq(g.cookie[1], 8);
	ck_assert_uint_eq(g.cookie[2], 9);

	ck_assert_int_eq(rk_gpu_emu_destroy(e), -EBUSY);	/* the notifier is on it */
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(rk_gpu_emu_destroy(e), 0);
	free_loop(loop);
}
END_TEST

/* A source that says when the loop has published 'sleeping' (its arm()). */
struct sleep_flag {
	struct rk_source src;
	atomic_int armed;
};

static int flag_poll(struct rk_source *src, uint64_t now)
{
	(void)src;
	(void)now;
	return 0;
}

static int flag_arm(struct rk_source *src)
{
	struct sleep_flag *f = src->data;

	atomic_store(&f->armed, 1);
	return 0;
}

static const struct rk_source_ops flag_ops = {
	.name = "test-sleep-flag",
	.poll = flag_poll,
	.arm = flag_arm,
};

struct stepper {
	struct rk_gpu_emu *e;
	struct sleep_flag *f;
	int ran;
};

/* The device's host: once the loop sleeps, step the device (its host function posts). */
static void *stepper_main(void *arg)
{
	struct stepper *st = arg;

	while (!atomic_load(&st->f->armed))
		sleep_ns(100 * US);
	st->ran = rk_gpu_emu_run(st->e);
	return NULL;
}

/* A blocking loop, WAKE: the host function runs at launch + duration + wake cost and wakes it. */
START_TEST(test_wake_when_blocked)
{
	struct fake_clock fc = { .t = T0 };
	struct rk_config c;
	struct rk_loop *loop;
	struct rk_gpu_emu *e = manual_emu(&fc, 23 * US);
	struct rk_gpu_notifier *n = NULL;
	struct got g = { 0 };
	struct sleep_flag f = { 0 };
	struct stepper st = { .e = e, .f = &f };
	struct rk_gpu_notifier_stats s;
	struct rk_loop_stats ls;
	pthread_t th;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_BLOCK;
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &fc);
	g.loop = loop;
	rk_source_init(&f.src, &flag_ops, &f);
	ck_assert_int_eq(rk_loop_add_source(loop, &f.src), 0);
	ck_assert_int_eq(rk_gpu_notifier_create_emu(loop, e, RK_GPU_NOTIFY_WAKE, done_cb, &g, &n),
			 0);
	ck_assert_int_eq(rk_gpu_emu_launch(e, 1 * MS, NULL), 0);
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 42), 0);

	/* the work is done at +1 ms, but the host function costs its wake on top */
	fc.t = T0 + 1 * MS;
	ck_assert_int_eq(rk_gpu_emu_run(e), 0);
	fc.t = T0 + 1 * MS + 23 * US - 1;
	ck_assert_int_eq(rk_gpu_emu_run(e), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_uint_eq(g.n, 0);

	/* due: the loop blocks, the device's host function wakes it */
	fc.t = T0 + 1 * MS + 23 * US;
	atomic_store(&f.armed, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, stepper_main, &st), 0);
	while (!g.n)
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(st.ran, 1);
	ck_assert_uint_eq(g.n, 1);
	ck_assert_uint_eq(g.cookie[0], 42);
	ck_assert_uint_ge(g.at[0], T0 + 1 * MS + 23 * US);
	s = nstats(n);
	ck_assert_uint_eq(s.via_wake, 1);
	ck_assert_uint_eq(s.via_poll, 0);
	ls = stats_of(loop);
	ck_assert_uint_ge(ls.blocks, 1);
	ck_assert_uint_ge(ls.wakeups, 1);

	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), 0);
	ck_assert_int_eq(rk_loop_remove_source(loop, &f.src), 0);
	ck_assert_int_eq(rk_gpu_emu_destroy(e), 0);
	free_loop(loop);
}
END_TEST

/*
 * AUTO on an adaptive loop: cold, a mark enqueues its host function too;
 * once the predictor is warm, marks go with the word only (predicted), and
 * the loop sleeps until shortly before the modelled time instead.
 */
START_TEST(test_auto_learns)
{
	struct fake_clock fc = { .t = T0 };
	struct rk_config c;
	struct rk_loop *loop;
	struct rk_gpu_emu *e = manual_emu(&fc, 23 * US);
	struct rk_gpu_notifier *n = NULL;
	struct got g = { 0 };
	struct rk_gpu_notifier_stats s;
	unsigned int i;
	uint64_t start, t;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	loop = new_loop(&c);
	rk_loop_set_clock(loop, fake_now, &fc);
	g.loop = loop;
	ck_assert_int_eq(rk_gpu_notifier_create_emu(loop, e, RK_GPU_NOTIFY_AUTO, done_cb, &g, &n),
			 0);
	for (i = 0; i < 40; i++) {
		start = fc.t;
		ck_assert_int_eq(rk_gpu_emu_launch(e, 1 * MS, NULL), 0);
		ck_assert_int_eq(rk_gpu_notifier_mark(n, i), 0);
		/* the loop looks every 10 us, as a spinning loop would (samples, not bounds) */
		for (t = start; g.n == i; t += 10 * US) {
			fc.t = t;
			rk_gpu_emu_run(e);
			ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
			ck_assert_msg(g.n == i || t >= start + 1 * MS, "mark %u early", i);
		}
		ck_assert_uint_eq(g.n, i + 1);
		/* a late host function's post finds its mark delivered */
		fc.t = t + 100 * US;
		rk_gpu_emu_run(e);
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	}
	s = nstats(n);
	ck_assert_uint_eq(s.marks, 40);
	/* the word is first: the host function comes 23 us after it */
	ck_assert_uint_eq(s.via_poll, 40);
	ck_assert_uint_gt(s.predicted, 0);	/* warm: marks without a host function */
	ck_assert_uint_lt(s.predicted, 40);	/* cold: the first ones had one */
	ck_assert_uint_ge(s.pred_q_ns, 900 * US);
	ck_assert_uint_le(s.pred_q_ns, 1100 * US);
	ck_assert_uint_eq(s.wake_late, 40 - s.predicted);

	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), 0);
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(rk_gpu_emu_destroy(e), 0);
	free_loop(loop);
}
END_TEST

/* The errors the API documents. */
START_TEST(test_errors)
{
	struct fake_clock fc = { .t = T0 };
	struct rk_config c;
	struct rk_loop *loop;
	struct rk_gpu_emu *e = NULL;
	struct rk_gpu_notifier *n = NULL;
	struct got g = { 0 };

	ck_assert_int_eq(rk_gpu_emu_create(NULL, NULL), -EINVAL);
	ck_assert_int_eq(rk_gpu_emu_create(NULL, &e), 0);	/* a device thread */
	ck_assert_int_eq(rk_gpu_emu_run(e), -EINVAL);		/* not manual */
	ck_assert_int_eq(rk_gpu_emu_launch(NULL, 1, NULL), -EINVAL);
	rk_config_init(&c);
	loop = new_loop(&c);
	ck_assert_int_eq(rk_gpu_notifier_create_emu(NULL, e, RK_GPU_NOTIFY_AUTO, done_cb, &g, &n),
			 -EINVAL);
	ck_assert_int_eq(rk_gpu_notifier_create_emu(loop, NULL, RK_GPU_NOTIFY_AUTO, done_cb, &g,
						    &n), -EINVAL);
	ck_assert_int_eq(rk_gpu_notifier_create_emu(loop, e, RK_GPU_NOTIFY_AUTO, NULL, &g, &n),
			 -EINVAL);
	ck_assert_int_eq(rk_gpu_notifier_create_emu(loop, e, (enum rk_gpu_notify_mode)9, done_cb,
						    &g, &n), -EINVAL);
	ck_assert_int_eq(rk_gpu_emu_destroy(e), 0);	/* the failed creates left nothing */
	ck_assert_int_eq(rk_gpu_emu_destroy(NULL), 0);

	/* set_mode: every mode (it has every path), -EBUSY while a mark is out */
	e = manual_emu(&fc, 0);
	rk_loop_set_clock(loop, fake_now, &fc);
	g.loop = loop;
	ck_assert_int_eq(rk_gpu_notifier_create_emu(loop, e, RK_GPU_NOTIFY_AUTO, done_cb, &g, &n),
			 0);
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, RK_GPU_NOTIFY_WAKE), 0);
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, RK_GPU_NOTIFY_POLL), 0);
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, (enum rk_gpu_notify_mode)9), -EINVAL);
	ck_assert_int_eq(rk_gpu_emu_launch(e, 1 * MS, NULL), 0);
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 1), 0);
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, RK_GPU_NOTIFY_AUTO), -EBUSY);
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), -EBUSY);
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, true), 0);	/* dropped: no callback */
	ck_assert_int_eq(rk_loop_run(loop, RK_RUN_NOWAIT), 0);
	fc.t = T0 + 2 * MS;
	ck_assert_int_eq(rk_gpu_emu_run(e), 0);		/* its word write went with it */
	ck_assert_uint_eq(g.n, 0);
	ck_assert_int_eq(rk_gpu_emu_destroy(e), 0);
	free_loop(loop);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gpu_emu");
	TCase *tc = tcase(s, "emu");

	tcase_add_test(tc, test_poll_at_modelled_time);
	tcase_add_test(tc, test_wake_when_blocked);
	tcase_add_test(tc, test_auto_learns);
	tcase_add_test(tc, test_errors);
	return rk_check_run(s);
}
