/* SPDX-License-Identifier: MIT */
/*
 * check_wait_predict: predictive waits (rk_source_ops.expect) on the injected
 * clock: a source's prediction turns a spin into a sleep that ends at it, an
 * event cuts it short, the learned margin fades and covers rare lateness, and
 * sources hear how their sleeps ended.
 *
 * Environment: RK_TEST_WAIT=adaptive|block|spin, the wait mode of every loop
 * whose test is not about the policy itself (tests/loop-*.sh). Every ring is
 * made on the forked test process, never in an unchecked fixture; a lost
 * wakeup shows as a hang that the TCase timeout turns into a failure.
 */
#include "wait_test.h"

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

static Suite *wait_predict_suite(void)
{
	Suite *s = suite_create("wait");
	TCase *tc;

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
	return s;
}

int main(void)
{
	return rk_check_run(wait_predict_suite());
}
