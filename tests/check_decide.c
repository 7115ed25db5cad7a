/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the wait policy's decisions (runtime/wait.c), called
 * directly: no loop, no ring, no clock. A decision table (the inputs of one
 * wait -> the plan), a table of predictive sleeps' wakes (-> the verdict and
 * what the margin learns), the links' learner, and the ablation bits' names.
 * check_wait*.c drive the same decisions through a loop on an injected clock.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wait_int.h"
#include "rk_check.h"

#define US	1000ull
#define MS	1000000ull
#define T0	(1000 * 1000 * MS)	/* the iteration's now: 1000 s */
#define NONE	UINT64_MAX		/* no timer, no timeout */
#define NEVER	UINT64_MAX		/* never busy */

/* A loop's decision state and what it decides about, with a known policy. */
struct fix {
	struct rk_wait_policy pol;
	struct rk__wait_tuning tun;
	struct rk_loop_stats st;
	struct rk__wait w;
	struct rk__gaps g;		/* a link's learner */
	struct rk_source plain;		/* another source (a GPU notifier, say) */
};

static const struct rk_source_ops plain_ops = { .name = "plain" };

static void fix_init(struct fix *f)
{
	memset(f, 0, sizeof(*f));
	f->pol.mode = RK_WAIT_ADAPTIVE;
	f->pol.spin_ns = 20 * MS;
	f->tun.predict = true;
	f->tun.predict_margin_ns = 20 * US;
	f->tun.predict_min_ns = 20 * US;
	f->tun.learn = true;
	f->tun.learn_spin_min_ns = 1 * MS;
	rk__wait_init(&f->w, &f->pol, &f->tun, &f->st);
	f->g.src.ops = &rk__gaps_ops;
	rk__gaps_init(&f->g, &f->w);
	f->plain.ops = &plain_ops;
}

/* ---- the decision table ----------------------------------------------------------- */

enum who { NOBODY, PLAIN, LEARNER };
/* The learner's state: regular 1 ms gaps, the same with a lateness peak, or
 * cold with one long gap. Its burst began at the last busy event. */
enum shape { TRUSTED, LATE_PEAK, COLD };
/* The policy: fix_init()'s, or one of rk-serve's baselines (--bench-policies):
 * poll50 (RK_SPIN_US=0 RK_PREDICT=0 RK_LEARN=0 RK_POLL_US=50 RK_POLL_FOR_MS=50),
 * yield1s (RK_SPIN_US=1000000 RK_SPIN_YIELD=1 RK_PREDICT=0 RK_LEARN=0). */
enum base { RANKRT, POLL50, YIELD1S };

static const struct dcase {
	const char *what;
	enum rk_wait_mode mode;
	enum base base;
	bool no_predict, no_learn;
	unsigned int off;
	uint64_t over_hi, boost;	/* the learned margin */
	uint32_t gap_n;
	uint64_t gap_hi;		/* the busy gaps' quantile */
	uint64_t busy_ago;		/* the last busy event, before now; NEVER */
	enum who busy;			/* ...whose it all was */
	enum shape shape;		/* the learner's */
	uint64_t expect_in;		/* the earliest expectation, after now; 0 = none */
	enum who src;			/* ...whose */
	uint64_t tmo;			/* the next timer; NONE */
	/* the plan */
	char want;			/* 'S'pin, 'B'lock, 'P'redictive sleep, 'T'imed poll */
	enum rk__spin_why why;
	uint64_t timeout;
	enum who sleep_for;
	/* and what the state learned */
	uint64_t cuts;			/* window_cuts */
	uint64_t boost_after;		/* 0: unchanged */
} dcases[] = {
	{ "RK_WAIT=spin spins", RK_WAIT_SPIN, .busy_ago = NEVER, .tmo = NONE, .want = 'S',
	  .why = RK__SPIN_OTHER },
	{ "RK_WAIT=block blocks right after busy work", RK_WAIT_BLOCK, .busy_ago = 0,
	  .tmo = NONE, .want = 'B', .timeout = NONE },
	{ "RK_WAIT=block ignores a prediction", RK_WAIT_BLOCK, .busy_ago = NEVER,
	  .expect_in = 5 * MS, .src = PLAIN, .tmo = 7 * MS, .want = 'B', .timeout = 7 * MS },
	{ "never busy, nothing predicted: block until the timer", .busy_ago = NEVER,
	  .tmo = 7 * MS, .want = 'B', .timeout = 7 * MS },
	{ "never busy, no timer: block until an event", .busy_ago = NEVER, .tmo = NONE,
	  .want = 'B', .timeout = NONE },
	{ "inside the spin window: spin", .busy_ago = 1 * MS, .tmo = NONE, .want = 'S',
	  .why = RK__SPIN_WINDOW },
	{ "past RK_SPIN_US: block, no window cut", .busy_ago = 25 * MS, .tmo = NONE,
	  .want = 'B', .timeout = NONE },
	{ "the quantile's window (4 x 100 us, floor 1 ms): spin at 0.5 ms", .gap_n = 64,
	  .gap_hi = 100 * US, .busy_ago = 500 * US, .tmo = NONE, .want = 'S',
	  .why = RK__SPIN_WINDOW },
	{ "...block at 5 ms: a window cut", .gap_n = 64, .gap_hi = 100 * US,
	  .busy_ago = 5 * MS, .tmo = NONE, .want = 'B', .timeout = NONE, .cuts = 1 },
	{ "...63 gaps seen: not yet the quantile's", .gap_n = 63, .gap_hi = 100 * US,
	  .busy_ago = 5 * MS, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "...winq off: RK_SPIN_US", .off = RK__WAIT_OFF_WINQ, .gap_n = 64, .gap_hi = 100 * US,
	  .busy_ago = 5 * MS, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "...RK_LEARN=0: RK_SPIN_US", .no_learn = true, .gap_n = 64, .gap_hi = 100 * US,
	  .busy_ago = 5 * MS, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "a 4 ms quantile: a 16 ms window", .gap_n = 64, .gap_hi = 4 * MS, .busy_ago = 10 * MS,
	  .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "a trusted learner's work last: spin to its overdue point (1.0625 ms)",
	  .busy_ago = 1 * MS, .busy = LEARNER, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "...then block: a window cut", .busy_ago = 1100 * US, .busy = LEARNER, .tmo = NONE,
	  .want = 'B', .timeout = NONE, .cuts = 1 },
	{ "...gapwin off: RK_SPIN_US", .off = RK__WAIT_OFF_GAPWIN, .busy_ago = 1100 * US,
	  .busy = LEARNER, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "its lateness peak (150 us) widens it to 1.2125 ms", .busy_ago = 1100 * US,
	  .busy = LEARNER, .shape = LATE_PEAK, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "...late off: not widened", .off = RK__WAIT_OFF_LATE, .busy_ago = 1100 * US,
	  .busy = LEARNER, .shape = LATE_PEAK, .tmo = NONE, .want = 'B', .timeout = NONE,
	  .cuts = 1 },
	{ "a cold learner with a long gap: RK_LEARN_SPIN_MIN_US (1 ms)", .busy_ago = 2 * MS,
	  .busy = LEARNER, .shape = COLD, .tmo = NONE, .want = 'B', .timeout = NONE, .cuts = 1 },
	{ "...cold off: RK_SPIN_US", .off = RK__WAIT_OFF_COLD, .busy_ago = 2 * MS,
	  .busy = LEARNER, .shape = COLD, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "another source's work last: RK_SPIN_US", .busy_ago = 2 * MS, .busy = PLAIN,
	  .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "a prediction 10 ms ahead: sleep until it less the margin", .busy_ago = NEVER,
	  .expect_in = 10 * MS, .src = PLAIN, .tmo = NONE, .want = 'P',
	  .timeout = 10 * MS - 20 * US, .sleep_for = PLAIN },
	{ "...inside the spin window too", .busy_ago = 0, .expect_in = 10 * MS, .src = PLAIN,
	  .tmo = NONE, .want = 'P', .timeout = 10 * MS - 20 * US, .sleep_for = PLAIN },
	{ "...the learned margin (lateness 7 us, boost 5 us) wakes it earlier",
	  .over_hi = 7 * US, .boost = 5 * US, .busy_ago = NEVER, .expect_in = 10 * MS,
	  .src = PLAIN, .tmo = NONE, .want = 'P', .timeout = 10 * MS - 32 * US,
	  .sleep_for = PLAIN },
	{ "...boost off", .off = RK__WAIT_OFF_BOOST, .over_hi = 7 * US, .boost = 5 * US,
	  .busy_ago = NEVER, .expect_in = 10 * MS, .src = PLAIN, .tmo = NONE, .want = 'P',
	  .timeout = 10 * MS - 27 * US, .sleep_for = PLAIN },
	{ "...ohi off", .off = RK__WAIT_OFF_OHI, .over_hi = 7 * US, .boost = 5 * US,
	  .busy_ago = NEVER, .expect_in = 10 * MS, .src = PLAIN, .tmo = NONE, .want = 'P',
	  .timeout = 10 * MS - 25 * US, .sleep_for = PLAIN },
	{ "RK_PREDICT=0: the prediction is ignored", .no_predict = true, .busy_ago = 1 * MS,
	  .expect_in = 10 * MS, .src = PLAIN, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "a prediction too close to sleep for (a 10 us sleep): spin", .busy_ago = NEVER,
	  .expect_in = 30 * US, .src = PLAIN, .tmo = NONE, .want = 'S', .why = RK__SPIN_PREDICT },
	{ "only the learned margin keeps the sleep off: the boost fades", .boost = 20 * US,
	  .busy_ago = NEVER, .expect_in = 50 * US, .src = PLAIN, .tmo = NONE, .want = 'S',
	  .why = RK__SPIN_PREDICT, .boost_after = 20 * US - 20 * US / 32 },
	{ "...fade off", .off = RK__WAIT_OFF_FADE, .boost = 20 * US, .busy_ago = NEVER,
	  .expect_in = 50 * US, .src = PLAIN, .tmo = NONE, .want = 'S', .why = RK__SPIN_PREDICT },
	{ "a learner's burst 110 us ahead: spin (no learned sleep under 100 us)",
	  .busy_ago = NEVER, .expect_in = 110 * US, .src = LEARNER, .tmo = NONE, .want = 'S',
	  .why = RK__SPIN_PREDICT },
	{ "...another source's: a 90 us sleep", .busy_ago = NEVER, .expect_in = 110 * US,
	  .src = PLAIN, .tmo = NONE, .want = 'P', .timeout = 90 * US, .sleep_for = PLAIN },
	{ "a learner's burst 150 us ahead: a 130 us sleep for it", .busy_ago = NEVER,
	  .expect_in = 150 * US, .src = LEARNER, .tmo = NONE, .want = 'P', .timeout = 130 * US,
	  .sleep_for = LEARNER },
	{ "a timer 3 ms ahead, before the prediction: sleep to it less the margin, for no one",
	  .busy_ago = NEVER, .expect_in = 10 * MS, .src = PLAIN, .tmo = 3 * MS, .want = 'P',
	  .timeout = 3 * MS - 20 * US, .sleep_for = NOBODY },
	{ "a prediction whose wake comes after the timer's: the timer's sleep", .busy_ago = NEVER,
	  .expect_in = 3 * MS + 10 * US, .src = PLAIN, .tmo = 3 * MS, .want = 'P',
	  .timeout = 3 * MS - 20 * US, .sleep_for = NOBODY },
	{ "a timer within the margin and RK_PREDICT_MIN_US: spin", .busy_ago = NEVER,
	  .expect_in = 10 * MS, .src = PLAIN, .tmo = 30 * US, .want = 'S',
	  .why = RK__SPIN_PREDICT },
	{ "poll50 right after busy work: a timed poll of 50 us", .base = POLL50, .busy_ago = 0,
	  .tmo = NONE, .want = 'T', .timeout = 50 * US },
	{ "poll50 1 ms after: a timed poll of 50 us", .base = POLL50, .busy_ago = 1 * MS,
	  .tmo = NONE, .want = 'T', .timeout = 50 * US },
	{ "poll50 just inside 50 ms: a timed poll", .base = POLL50, .busy_ago = 50 * MS - 1,
	  .tmo = 7 * MS, .want = 'T', .timeout = 50 * US },
	{ "poll50 at 50 ms: block until an event", .base = POLL50, .busy_ago = 50 * MS,
	  .tmo = NONE, .want = 'B', .timeout = NONE },
	{ "...or until the timer", .base = POLL50, .busy_ago = 60 * MS, .tmo = 7 * MS,
	  .want = 'B', .timeout = 7 * MS },
	{ "poll50 never busy: block", .base = POLL50, .busy_ago = NEVER, .tmo = NONE,
	  .want = 'B', .timeout = NONE },
	{ "poll50 with a timer 30 us away: the poll ends at it", .base = POLL50,
	  .busy_ago = 1 * MS, .tmo = 30 * US, .want = 'T', .timeout = 30 * US },
	{ "poll50 ignores a prediction (RK_PREDICT=0)", .base = POLL50, .busy_ago = 1 * MS,
	  .expect_in = 10 * MS, .src = PLAIN, .tmo = NONE, .want = 'T', .timeout = 50 * US },
	{ "poll50 ignores what was learned (RK_LEARN=0)", .base = POLL50, .gap_n = 64,
	  .gap_hi = 100 * US, .busy_ago = 5 * MS, .busy = LEARNER, .tmo = NONE, .want = 'T',
	  .timeout = 50 * US },
	{ "RK_POLL_US under RK_WAIT=block: block", RK_WAIT_BLOCK, .base = POLL50,
	  .busy_ago = 1 * MS, .tmo = NONE, .want = 'B', .timeout = NONE },
	{ "RK_POLL_US under RK_WAIT=spin: spin", RK_WAIT_SPIN, .base = POLL50,
	  .busy_ago = 1 * MS, .tmo = NONE, .want = 'S', .why = RK__SPIN_OTHER },
	{ "yield1s right after busy work: spin", .base = YIELD1S, .busy_ago = 0, .tmo = NONE,
	  .want = 'S', .why = RK__SPIN_WINDOW },
	{ "yield1s just inside 1 s: spin", .base = YIELD1S, .busy_ago = 1000 * MS - 1,
	  .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "yield1s at 1 s: block", .base = YIELD1S, .busy_ago = 1000 * MS, .tmo = NONE,
	  .want = 'B', .timeout = NONE },
	{ "yield1s: no learned window (64 gaps of 100 us, a trusted learner's work)",
	  .base = YIELD1S, .gap_n = 64, .gap_hi = 100 * US, .busy_ago = 900 * MS,
	  .busy = LEARNER, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "yield1s: no cold learner's window", .base = YIELD1S, .busy_ago = 900 * MS,
	  .busy = LEARNER, .shape = COLD, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "yield1s: no predictive sleep", .base = YIELD1S, .busy_ago = 1 * MS,
	  .expect_in = 10 * MS, .src = PLAIN, .tmo = NONE, .want = 'S', .why = RK__SPIN_WINDOW },
	{ "yield1s: spins past a timer (it does not shorten the window)", .base = YIELD1S,
	  .busy_ago = 1 * MS, .tmo = 30 * US, .want = 'S', .why = RK__SPIN_WINDOW },
};

static struct rk_source *who_src(struct fix *f, enum who w)
{
	return w == PLAIN ? &f->plain : w == LEARNER ? &f->g.src : NULL;
}

static void shape_learner(struct rk__gaps *g, enum shape shape, uint64_t start)
{
	g->first = g->last = start;
	g->mean = shape == COLD ? 10 * MS : 1 * MS;
	g->lo = g->mean;
	g->n = shape == COLD ? 1 : 10;
	g->dev = shape == COLD ? g->mean / 8 : 0;
	g->late_hi = shape == LATE_PEAK ? 150 * US : 0;
}

static const char *plan_str(const struct rk__wait_plan *p, char *buf, size_t len)
{
	if (!p->park)
		snprintf(buf, len, "spin (why %d)", (int)p->why);
	else
		snprintf(buf, len, "%s %" PRIu64 " ns",
			 p->how == RK__PARK_PREDICT ? "sleep" :
			 p->how == RK__PARK_POLL ? "timed poll" : "block", p->timeout);
	return buf;
}

START_TEST(test_decide)
{
	const struct dcase *c = &dcases[_i];
	struct rk__wait_in in = { .now = T0, .tmo = c->tmo };
	struct rk__wait_plan p;
	struct fix f;
	char buf[64];

	fix_init(&f);
	f.pol.mode = c->mode;
	f.tun.predict = !c->no_predict;
	f.tun.learn = !c->no_learn;
	if (c->base == POLL50) {
		f.pol.spin_ns = 0;
		f.tun.predict = f.tun.learn = false;
		f.tun.poll_ns = 50 * US;
		f.tun.poll_for_ns = 50 * MS;
	} else if (c->base == YIELD1S) {
		f.pol.spin_ns = 1000 * MS;
		f.tun.spin_yield = 1;
		f.tun.predict = f.tun.learn = false;
	}
	f.w.off = c->off;
	f.w.oversleep_hi = c->over_hi;
	f.w.late_boost = c->boost;
	f.w.gap_n = c->gap_n;
	f.w.gap_hi = c->gap_hi;
	in.last_busy = c->busy_ago == NEVER ? 0 : T0 - c->busy_ago;
	shape_learner(&f.g, c->shape, in.last_busy ? in.last_busy : T0 - 500 * US);
	in.busy = who_src(&f, c->busy);
	in.expect = c->expect_in ? T0 + c->expect_in : 0;
	in.src = who_src(&f, c->src);
	rk__wait_decide(&f.w, &in, &p);
	ck_assert_msg(p.park == (c->want != 'S') &&
		      (!p.park || (p.how == RK__PARK_PREDICT) == (c->want == 'P')) &&
		      (!p.park || (p.how == RK__PARK_POLL) == (c->want == 'T')),
		      "%s: want %c, got %s", c->what, c->want, plan_str(&p, buf, sizeof(buf)));
	if (!p.park) {
		ck_assert_msg(p.why == c->why, "%s: spin why %d, want %d", c->what, (int)p.why,
			      (int)c->why);
	} else {
		ck_assert_msg(p.timeout == c->timeout, "%s: timeout %" PRIu64 ", want %" PRIu64,
			      c->what, p.timeout, c->timeout);
		ck_assert_msg(p.src == (c->want == 'P' ? who_src(&f, c->sleep_for) : NULL),
			      "%s: the sleep is for the wrong source", c->what);
	}
	ck_assert_msg(f.st.window_cuts == c->cuts, "%s: %" PRIu64 " window cuts", c->what,
		      f.st.window_cuts);
	ck_assert_msg(f.w.late_boost == (c->boost_after ? c->boost_after : c->boost),
		      "%s: boost %" PRIu64, c->what, f.w.late_boost);
}
END_TEST

/*
 * The fade comes once per prediction: the same expectation spun for again
 * leaves the margin alone, and so does the spin after a sleep for it.
 */
START_TEST(test_fade_once)
{
	struct rk__wait_in in = { .now = T0, .tmo = NONE, .expect = T0 + 50 * US };
	struct rk__wait_plan p;
	struct fix f;

	fix_init(&f);
	in.src = &f.plain;
	f.w.late_boost = 20 * US;
	rk__wait_decide(&f.w, &in, &p);
	ck_assert(!p.park);
	ck_assert_uint_eq(f.w.late_boost, 20 * US - 20 * US / 32);
	in.now += 1 * US;
	rk__wait_decide(&f.w, &in, &p);
	ck_assert_uint_eq(f.w.late_boost, 20 * US - 20 * US / 32);
	/* a sleep for a prediction, then the spin to it: no fade for it either */
	in.now = T0 + 1 * MS;
	in.expect = in.now + 10 * MS;
	rk__wait_decide(&f.w, &in, &p);
	ck_assert(p.park);
	f.w.late_boost = 20 * US;
	in.now = in.expect - 45 * US;	/* the base margin and RK_PREDICT_MIN_US would sleep */
	rk__wait_decide(&f.w, &in, &p);
	ck_assert(!p.park);
	ck_assert_uint_eq(f.w.late_boost, 20 * US);
}
END_TEST

/* ---- what a predictive sleep's wake teaches ------------------------------------------ */

static const struct wcase {
	const char *what;
	bool no_learn;
	unsigned int off;
	uint64_t hi, boost;		/* before */
	int64_t woke;			/* now - deadline, ns */
	uint64_t sleep_ns;		/* 0: 1 ms */
	bool found, busy;
	enum rk_verdict want;		/* 0: none */
	bool warm;
	uint64_t early, late, overslept, cut, oversleep_ns;	/* counters */
	uint64_t hi_after, boost_after;
} wcases[] = {
	{ "woke at its deadline, the event not in: early, the others hear spin",
	  .want = RK_VERDICT_EARLY, .warm = true, .early = 1 },
	{ "...prewarm off: nobody else is told", .off = RK__WAIT_OFF_PREWARM,
	  .want = RK_VERDICT_EARLY, .early = 1 },
	{ "0.5 us before the deadline is still the timer's wake", .woke = -500,
	  .want = RK_VERDICT_EARLY, .warm = true, .early = 1 },
	{ "100 us before it, ended by its event: late, the boost grows a step (5 us)",
	  .woke = -100 * (int64_t)US, .found = true, .want = RK_VERDICT_LATE, .late = 1,
	  .boost_after = 5 * US },
	{ "100 us before it, ended by other busy work: cut", .woke = -100 * (int64_t)US,
	  .busy = true, .want = RK_VERDICT_CUT, .cut = 1 },
	{ "100 us before it, ended by idle work: no verdict", .woke = -100 * (int64_t)US,
	  .cut = 1 },
	{ "10 us late, the event in: late and overslept; the lateness quantile half way up",
	  .woke = 10 * US, .found = true, .want = RK_VERDICT_LATE, .late = 1, .overslept = 1,
	  .oversleep_ns = 10 * US, .hi_after = 5 * US, .boost_after = 5 * US },
	{ "10 us late, the event not in: early, the lateness learned", .woke = 10 * US,
	  .want = RK_VERDICT_EARLY, .warm = true, .early = 1, .oversleep_ns = 10 * US,
	  .hi_after = 5 * US },
	{ "3 ms late: learned as 100 us (a descheduled thread, not the timer)",
	  .woke = 3 * MS, .want = RK_VERDICT_EARLY, .warm = true, .early = 1,
	  .oversleep_ns = 3 * MS, .hi_after = 50 * US },
	{ "on time: the quantile comes down by 1/128", .hi = 64 * US, .want = RK_VERDICT_EARLY,
	  .warm = true, .early = 1, .hi_after = 64 * US - 64 * US / 128 },
	{ "early: the boost loses 1/256 of a step, and at most 1/64 of the sleep stays",
	  .boost = 20 * US, .want = RK_VERDICT_EARLY, .warm = true, .early = 1,
	  .boost_after = 1 * MS / 64 },
	{ "early, RK_LEARN=0: the boost loses 1/32", .no_learn = true, .boost = 32 * US,
	  .want = RK_VERDICT_EARLY, .warm = true, .early = 1, .boost_after = 31 * US },
	{ "late with the boost at 1/64 of the sleep or more: not grown", .boost = 20 * US,
	  .woke = -100 * (int64_t)US, .found = true, .want = RK_VERDICT_LATE, .late = 1,
	  .boost_after = 20 * US },
	{ "late, RK_LEARN=0: grown to the 100 us cap", .no_learn = true, .boost = 98 * US,
	  .woke = -100 * (int64_t)US, .found = true, .want = RK_VERDICT_LATE, .late = 1,
	  .boost_after = 100 * US },
	{ "late after a 10 ms sleep: a step", .sleep_ns = 10 * MS, .woke = -100 * (int64_t)US,
	  .found = true, .want = RK_VERDICT_LATE, .late = 1, .boost_after = 5 * US },
};

START_TEST(test_woke)
{
	const struct wcase *c = &wcases[_i];
	struct rk__wait_wake in = {
		.now = (uint64_t)((int64_t)T0 + c->woke),
		.deadline = T0,
		.sleep_ns = c->sleep_ns ? c->sleep_ns : 1 * MS,
		.found = c->found,
		.busy = c->busy,
	};
	enum rk_verdict v;
	struct fix f;
	bool warm = !c->warm;

	fix_init(&f);
	f.tun.learn = !c->no_learn;
	f.w.off = c->off;
	f.w.oversleep_hi = c->hi;
	f.w.late_boost = c->boost;
	v = rk__wait_woke(&f.w, &in, &warm);
	ck_assert_msg(v == c->want, "%s: verdict %d, want %d", c->what, (int)v, (int)c->want);
	ck_assert_msg(warm == c->warm, "%s: warm %d", c->what, warm);
	ck_assert_msg(f.st.predict_early == c->early && f.st.predict_late == c->late &&
		      f.st.predict_overslept == c->overslept && f.st.predict_cut == c->cut &&
		      f.st.ns_oversleep == c->oversleep_ns,
		      "%s: early %" PRIu64 " late %" PRIu64 " overslept %" PRIu64 " cut %" PRIu64
		      " oversleep %" PRIu64, c->what, f.st.predict_early, f.st.predict_late,
		      f.st.predict_overslept, f.st.predict_cut, f.st.ns_oversleep);
	ck_assert_msg(f.w.oversleep_hi == c->hi_after, "%s: lateness %" PRIu64, c->what,
		      f.w.oversleep_hi);
	ck_assert_msg(f.w.late_boost == c->boost_after, "%s: boost %" PRIu64, c->what,
		      f.w.late_boost);
}
END_TEST

/* ---- the links' learner -------------------------------------------------------------- */

/*
 * Bursts every 1 ms (each with a follower frame 5 us in): the learner samples
 * the gaps between burst starts, trusts them from RK__GAPS_WARM on, and then
 * expects the next burst early by the settling floor of its deviation; it says
 * nothing within a burst, past the overdue point, with RK_LEARN=0 or with the
 * gaps bit off. A burst seen right after a sleep is counted as woken.
 */
START_TEST(test_gaps_learn)
{
	uint64_t (*expect)(struct rk_source *, uint64_t) = rk__gaps_ops.expect;
	struct fix f;
	uint64_t t = T0, dev;
	unsigned int i;

	fix_init(&f);
	ck_assert_ptr_null(rk__gaps_ops.poll);
	for (i = 0; i <= RK__GAPS_WARM; i++, t += 1 * MS) {
		ck_assert_uint_eq(expect(&f.g.src, t), 0);	/* not yet trusted */
		ck_assert(rk__gaps_seen(&f.g, t, false));
		ck_assert(!rk__gaps_seen(&f.g, t + 5 * US, false));	/* the same burst */
	}
	t -= 1 * MS;
	ck_assert_uint_eq(f.g.n, RK__GAPS_WARM);
	ck_assert_uint_eq(f.g.mean, 1 * MS);
	ck_assert_uint_eq(f.g.first, t);
	ck_assert_uint_eq(f.g.last, t + 5 * US);
	ck_assert_uint_eq(expect(&f.g.src, t + 10 * US), 0);	/* the burst may go on */
	dev = 1 * MS / RK__GAPS_DEV_MIN;	/* the floor while it settles */
	ck_assert_uint_eq(expect(&f.g.src, t + 100 * US), t + 1 * MS - RK__GAPS_EARLY_DEV * dev);
	/* overdue past the mean + 4 deviations + mean/16 */
	ck_assert_uint_ne(expect(&f.g.src, t + 1 * MS + 4 * dev + 1 * MS / 16), 0);
	ck_assert_uint_eq(expect(&f.g.src, t + 1 * MS + 4 * dev + 1 * MS / 16 + 1), 0);
	f.tun.learn = false;
	ck_assert_uint_eq(expect(&f.g.src, t + 100 * US), 0);
	f.tun.learn = true;
	f.w.off = RK__WAIT_OFF_GAPS;
	ck_assert_uint_eq(expect(&f.g.src, t + 100 * US), 0);
	f.w.off = 0;
	/* one seen only after a sleep, 300 us late: counted, its lateness kept,
	 * the mean (an end seen late teaches only earlier gaps) left alone */
	ck_assert(rk__gaps_seen(&f.g, t + 1300 * US, true));
	ck_assert_uint_eq(f.st.learn_woken, 1);
	ck_assert_uint_eq(f.st.learn_overdue, 1);
	ck_assert_uint_eq(f.g.late_hi, 300 * US);
	ck_assert_uint_eq(f.g.mean, 1 * MS);
	ck_assert(f.g.first_late);
}
END_TEST

/* Bursts every @gap from @t, @n of them; returns the next one's time. */
static uint64_t bursts(struct fix *f, uint64_t t, uint64_t gap, unsigned int n)
{
	for (; n; n--, t += gap)
		ck_assert(rk__gaps_seen(&f->g, t, false));
	return t;
}

/*
 * A learner trusted at 1 ms: a gap of 5 ms moves the mean by its EWMA share;
 * a gap off the pace (more than a quarter from the mean) and the next within
 * an eighth of it are a new pace, and the learner starts over from them,
 * trusted at once (as a cold one after its first two): after that outlier,
 * two gaps of 1 ms; then 10.4 and 10 ms; then 1 and 1 ms. Two that disagree
 * (5 and 1, 1 and 0.5 ms) are none. With the rate bit off, the EWMA alone.
 */
START_TEST(test_gaps_rate)
{
	uint64_t (*expect)(struct rk_source *, uint64_t) = rk__gaps_ops.expect;
	unsigned int off;
	struct fix f;
	uint64_t t;

	for (off = 0; off <= RK__WAIT_OFF_RATE; off += RK__WAIT_OFF_RATE) {
		fix_init(&f);
		f.w.off = off;
		t = bursts(&f, T0, 1 * MS, 12);
		ck_assert_uint_eq(f.g.mean, 1 * MS);
		t = bursts(&f, t - 1 * MS + 5 * MS, 1 * MS, 2);	/* 5 ms, then 1 ms */
		ck_assert_uint_eq(f.g.off_rate, 1 * MS);
		ck_assert_uint_eq(f.st.learn_restarts, 0);
		t = bursts(&f, t, 1 * MS, 1);			/* 1 ms again */
		ck_assert_uint_eq(f.st.learn_restarts, off ? 0 : 1);
		ck_assert_uint_eq(f.g.mean, off ? (7 * (7 * 1500 * US + 1 * MS) / 8 + 1 * MS) / 8 : 1 * MS);
		t = bursts(&f, t - 1 * MS + 10400 * US, 1 * MS, 1);
		ck_assert_uint_eq(f.g.off_rate, 10400 * US);
		t = bursts(&f, t - 1 * MS + 10 * MS, 1 * MS, 1);
		if (off) {
			ck_assert_uint_eq(f.st.learn_restarts, 0);
			ck_assert_uint_lt(f.g.mean, 4 * MS);
			continue;
		}
		ck_assert_uint_eq(f.st.learn_restarts, 2);
		ck_assert_uint_eq(f.g.mean, 10200 * US);
		ck_assert_uint_eq(f.g.dev, 400 * US);
		ck_assert_uint_eq(f.g.lo, 10 * MS);
		ck_assert_uint_eq(f.g.late_hi, 0);	/* it came late by the old mean */
		ck_assert_uint_eq(f.g.n, RK__GAPS_WARM);
		t -= 1 * MS;		/* the last burst's start */
		ck_assert_uint_eq(expect(&f.g.src, t + 100 * US),
				  t + 10200 * US - RK__GAPS_EARLY_DEV * 400 * US);
		t = bursts(&f, t + 1 * MS, 500 * US, 2);	/* 1 ms, 0.5 ms */
		ck_assert_uint_eq(f.st.learn_restarts, 2);
		bursts(&f, t - 500 * US + 1 * MS, 1 * MS, 2);	/* 1 ms, 1 ms */
		ck_assert_uint_eq(f.st.learn_restarts, 3);
		ck_assert_uint_eq(f.g.mean, 1 * MS);
	}
}
END_TEST

/* A sleep for the learner cut by other work holds it, each time twice as
 * long; one that woke early as meant resets that; the hold bit keeps it off. */
START_TEST(test_gaps_hold)
{
	void (*verdict)(struct rk_source *, enum rk_verdict) = rk__gaps_ops.verdict;
	struct fix f;

	fix_init(&f);
	verdict(&f.g.src, RK_VERDICT_CUT);
	ck_assert_uint_eq(f.g.hold, RK__GAPS_HOLD);
	ck_assert_uint_eq(f.st.learn_holds, 1);
	verdict(&f.g.src, RK_VERDICT_CUT);
	ck_assert_uint_eq(f.g.hold, 2 * RK__GAPS_HOLD);
	verdict(&f.g.src, RK_VERDICT_LATE);
	verdict(&f.g.src, RK_VERDICT_SPIN);
	ck_assert_uint_eq(f.g.hold_next, 4 * RK__GAPS_HOLD);
	verdict(&f.g.src, RK_VERDICT_EARLY);
	ck_assert_uint_eq(f.g.hold_next, RK__GAPS_HOLD);
	/* a held learner sees its bursts count the hold down */
	rk__gaps_seen(&f.g, T0, false);
	rk__gaps_seen(&f.g, T0 + 1 * MS, false);
	ck_assert_uint_eq(f.g.hold, 2 * RK__GAPS_HOLD - 1);
	f.g.hold = 0;
	f.w.off = RK__WAIT_OFF_HOLD;
	verdict(&f.g.src, RK_VERDICT_CUT);
	ck_assert_uint_eq(f.g.hold, 0);
	ck_assert_uint_eq(f.st.learn_holds, 2);
}
END_TEST

/* ---- the ablation bits' names --------------------------------------------------------- */

START_TEST(test_off_names)
{
	static const struct {
		const char *list;
		int ret;
		unsigned int off;
	} t[] = {
		{ NULL, 0, 0 },
		{ "", 0, 0 },
		{ "gaps", 0, RK__WAIT_OFF_GAPS },
		{ "hold,late", 0, RK__WAIT_OFF_HOLD | RK__WAIT_OFF_LATE },
		{ "gaps,gapwin,cold,winq,late,hold,boost,fade,prewarm,ohi,rate", 0,
		  RK__WAIT_OFF_GAPS | RK__WAIT_OFF_GAPWIN | RK__WAIT_OFF_COLD | RK__WAIT_OFF_WINQ |
			  RK__WAIT_OFF_LATE | RK__WAIT_OFF_HOLD | RK__WAIT_OFF_BOOST |
			  RK__WAIT_OFF_FADE | RK__WAIT_OFF_PREWARM | RK__WAIT_OFF_OHI |
			  RK__WAIT_OFF_RATE },
		{ "fade,", 0, RK__WAIT_OFF_FADE },
		{ "oavg,boost", -EINVAL, RK__WAIT_OFF_BOOST },	/* removed: unknown */
		{ "gap", -EINVAL, 0 },
	};
	unsigned int off, i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		ck_assert_int_eq(rk__wait_off_parse(t[i].list, &off), t[i].ret);
		ck_assert_uint_eq(off, t[i].off);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("decide");
	TCase *tc = rk_tcase(s, "table", 30, NULL, NULL);

	tcase_add_loop_test(tc, test_decide, 0, (int)(sizeof(dcases) / sizeof(dcases[0])));
	tcase_add_test(tc, test_fade_once);
	tcase_add_loop_test(tc, test_woke, 0, (int)(sizeof(wcases) / sizeof(wcases[0])));
	tc = rk_tcase(s, "learner", 30, NULL, NULL);
	tcase_add_test(tc, test_gaps_learn);
	tcase_add_test(tc, test_gaps_rate);
	tcase_add_test(tc, test_gaps_hold);
	tcase_add_test(tc, test_off_names);
	return rk_check_run(s);
}
