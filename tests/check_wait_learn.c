/* SPDX-License-Identifier: MIT */
/*
 * check_wait_learn: learned waits on the injected clock: a link's arrival gaps
 * (rk__gaps) predict the next frame so a periodic follower sleeps instead of
 * spinning, fall back when the gaps are irregular, hold after a cut, and the
 * learned spin window; a timer due first wins.
 *
 * Environment: RK_TEST_WAIT=adaptive|block|spin, the wait mode of every loop
 * whose test is not about the policy itself (tests/loop-*.sh). Every ring is
 * made on the forked test process, never in an unchecked fixture; a lost
 * wakeup shows as a hang that the TCase timeout turns into a failure.
 */
#include "wait_test.h"

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
 * A learner warm at 5 ms gaps, then frames every 1 ms (each comes during the
 * sleep predicted for 5 ms): returns how many 1 ms frames came before the wait
 * after one was a predictive sleep shorter than 1 ms (the learner on the new
 * pace), 0 if none within 60; @off: ablation bits.
 */
static unsigned int new_pace_frames(unsigned int off, uint64_t *restarts)
{
	struct fake_clock fc;
	struct fpred rec = { 0 };
	struct larr a;
	struct rk_loop *loop = learn_loop(true, &fc, &rec, &a);
	struct rk_loop_stats s0, s1;
	unsigned int i, got = 0;
	uint64_t t;

	rk__loop_wait(loop)->off = off;
	t = learn_warm(&fc, loop, &rec, &a, 5 * MS);
	for (i = 1; i <= 60 && !got; i++) {
		t += 1 * MS;
		arrive(&fc, &a, t);
		s0 = stats_of(loop);
		rec.park_ns = 0;
		s1 = learn_step(&fc, loop, t + L_STEP);
		if (s1.learn_waits > s0.learn_waits && rec.park_ns < 1 * MS)
			got = i;
	}
	*restarts = stats_of(loop).learn_restarts;
	learn_free(loop, &rec, &a);
	return got;
}

/*
 * The pace changes: two 1 ms gaps agree off the 5 ms mean, so the learner
 * starts over from them and the wait after the second 1 ms frame sleeps for
 * the third. With the rate bit off the averages forget 5 ms gap by gap, and
 * the loop spins through the frames meanwhile.
 */
START_TEST(test_learn_new_pace)
{
	uint64_t restarts, restarts_off;
	unsigned int on = new_pace_frames(0, &restarts);
	unsigned int off = new_pace_frames(RK__WAIT_OFF_RATE, &restarts_off);

	ck_assert_uint_eq(on, 2);
	ck_assert_uint_eq(restarts, 1);
	ck_assert_uint_eq(restarts_off, 0);
	ck_assert(off == 0 || off > 2 * RK__GAPS_SETTLE);
}
END_TEST

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

static Suite *wait_learn_suite(void)
{
	Suite *s = suite_create("wait");
	TCase *tc;

	tc = tcase(s, "learn");
	tcase_add_test(tc, test_learn_periodic_sleeps);
	tcase_add_test(tc, test_learn_off_spins);
	tcase_add_test(tc, test_learn_irregular_falls_back);
	tcase_add_test(tc, test_learn_holds_after_cut);
	tcase_add_test(tc, test_learned_window_cut);
	tcase_add_test(tc, test_learned_window_off);
	tcase_add_test(tc, test_learn_idle_entry_short);
	tcase_add_test(tc, test_learn_new_pace);
	tcase_add_test(tc, test_learn_overdue_covers_late);
	tcase_add_test(tc, test_learn_no_short_sleep);
	tcase_add_test(tc, test_learn_cold_long_gaps);
	tcase_add_test(tc, test_learn_cold_short_gaps);
	tcase_add_test(tc, test_predict_timer_first);
	return s;
}

int main(void)
{
	return rk_check_run(wait_learn_suite());
}
