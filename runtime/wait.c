/* SPDX-License-Identifier: MIT */
/*
 * The wait policy's decisions: how a loop waits when nothing is due (spin or
 * park, why, how long) and what each predictive sleep's wake teaches. Pure
 * functions over struct rk__wait and the links' learners (struct rk__gaps):
 * no clock, no ring, no loop. loop.c reads the clock, gathers the inputs,
 * carries out the plan and reports the wake; gaps.c ties a learner to its
 * loop. The constants are wait_int.h's.
 *
 * Adaptive mode (RK_WAIT=spin always spins, =block always blocks):
 *   1. a source expects its next event at T (rk_source_ops.expect(); each
 *      link's learner is such a source): sleep until T less the margin, then
 *      spin to it; a timer due before that: sleep and spin to the timer
 *      (rk__wait_decide(), predicted());
 *   2. else, inside the spin window after the last busy event: spin;
 *   3. else block until an event or the next timer (RK_POLL_US, a benchmark's
 *      baseline: first timed polls, until RK_POLL_FOR_MS after the last busy
 *      event).
 * The margin (rk__wait_margin()) is RK_PREDICT_MARGIN_US, a high quantile of
 * how late timed wakes come and a boost learned from late predictions. The
 * window (rk__wait_window()) is RK_SPIN_US, cut with RK_LEARN to a multiple
 * of the gaps seen between busy events and, after a learner's arrivals, to
 * where its next burst is overdue.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "runtime_int.h"
#include "wait_int.h"

/* ---- a link's learner of arrival gaps -------------------------------------------- */

/*
 * What a learner learns (struct rk__gaps, runtime_int.h): the gap from the
 * start of one burst of busy arrivals to the start of the next (an arrival
 * within RK__GAPS_BURST_NS of the one before is the same burst), as a mean and
 * mean deviation (EWMA; the second gap sets the deviation to the spread of the
 * first two, so a few gaps are enough). A gap more than a quarter off the
 * mean and the next within an eighth of it start the learner over from those
 * two (gaps_sample()): the pace changed, and the EWMA would take dozens of
 * gaps to say so. While the gaps are regular and long
 * enough to sleep through, it expects the next burst RK__GAPS_EARLY_DEV
 * deviations before the mean, until it is overdue (gaps_until()). After a
 * predictive sleep for it cut short by other busy work it holds its
 * predictions for RK__GAPS_HOLD bursts, twice as long after each further
 * cut, until one works again: the loop has work it cannot see coming, and the
 * spin window serves that better.
 */

static struct rk__gaps *gaps_of(const struct rk_source *src)
{
	return src && src->ops == &rk__gaps_ops ? rk__container_of(src, struct rk__gaps, src) :
						  NULL;
}

/* Warm, not held, and its gaps long and regular: what it predicts can be slept on. */
static bool gaps_trusted(const struct rk__gaps *g)
{
	return g->n >= RK__GAPS_WARM && !g->hold && g->mean >= RK__GAPS_MIN_NS &&
	       g->dev * RK__GAPS_REGULAR <= g->mean;
}

/* The deviation to predict with: while settling, at least mean/RK__GAPS_DEV_MIN
 * (the spread of two or three gaps can be near 0 by chance). */
static uint64_t gaps_dev(const struct rk__gaps *g)
{
	if (g->n < RK__GAPS_SETTLE && g->dev < g->mean / RK__GAPS_DEV_MIN)
		return g->mean / RK__GAPS_DEV_MIN;
	return g->dev;
}

/*
 * When the next burst is overdue: RK__GAPS_LATE_DEV deviations past the mean
 * after this one's start, plus a slack. Past it the learner predicts nothing.
 * Short, because every microsecond of it is spun for: a link whose traffic
 * stops costs this much spinning at idle entry. Unless bursts came later than
 * that lately: a peer whose own timer wakes late now and then sends late by
 * that much, and the deviation, an average, does not see a rare one. Then the
 * bound is that lateness (late_hi) + the slack, at most RK__GAPS_SLACK_MAX_NS
 * past the mean (when the deviations and the slack are not more already).
 */
static uint64_t gaps_until(const struct rk__gaps *g, unsigned int off)
{
	uint64_t slack = g->mean / RK__GAPS_SLACK, over, wide;

	if (slack < RK__GAPS_SLACK_MIN_NS)
		slack = RK__GAPS_SLACK_MIN_NS;
	if (slack > RK__GAPS_SLACK_MAX_NS)
		slack = RK__GAPS_SLACK_MAX_NS;
	over = RK__GAPS_LATE_DEV * gaps_dev(g) + slack;
	wide = (off & RK__WAIT_OFF_LATE ? 0 : g->late_hi) + slack;
	if (wide > over)
		over = wide < RK__GAPS_SLACK_MAX_NS ? wide :
		       over > RK__GAPS_SLACK_MAX_NS ? over : RK__GAPS_SLACK_MAX_NS;
	return g->first + g->mean + over;
}

static uint64_t gaps_expect(struct rk_source *src, uint64_t now)
{
	struct rk__gaps *g = rk__container_of(src, struct rk__gaps, src);
	const struct rk__wait *w = g->w;

	if (!w->tun->learn || (w->off & RK__WAIT_OFF_GAPS) || !gaps_trusted(g))
		return 0;
	if (now < g->last + RK__GAPS_BURST_NS)	/* the burst may go on: spin for it */
		return 0;
	if (now > gaps_until(g, w->off))
		return 0;	/* overdue: it says nothing more */
	/* > first: the deviation is at most a quarter of the mean */
	return g->first + g->mean - RK__GAPS_EARLY_DEV * gaps_dev(g);
}

/* Cut short by other busy work: hold, twice as long as last time. Early, as
 * meant: the next cut holds for RK__GAPS_HOLD bursts again. */
static void gaps_verdict(struct rk_source *src, enum rk_verdict v)
{
	struct rk__gaps *g = rk__container_of(src, struct rk__gaps, src);

	if (v == RK_VERDICT_EARLY) {
		g->hold_next = RK__GAPS_HOLD;
	} else if (v == RK_VERDICT_CUT && !(g->w->off & RK__WAIT_OFF_HOLD)) {
		g->w->stats->learn_holds++;
		g->hold = g->hold_next;
		if (g->hold_next < RK__GAPS_HOLD_MAX)
			g->hold_next *= 2;
	}
}

const struct rk_source_ops rk__gaps_ops = {
	.name = "learned-gaps",
	.expect = gaps_expect,
	.verdict = gaps_verdict,
};

void rk__gaps_init(struct rk__gaps *g, struct rk__wait *w)
{
	g->w = w;
	g->hold_next = RK__GAPS_HOLD;
}

static uint64_t absdiff(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

/* Off the learned pace: more than mean/RK__GAPS_RATE from the mean (a regular
 * learner's deviation is at most that, gaps_trusted()). */
static bool gaps_off_rate(const struct rk__gaps *g, uint64_t d)
{
	return absdiff(d, g->mean) * RK__GAPS_RATE > g->mean;
}

static void gaps_sample(struct rk__gaps *g, uint64_t d)
{
	uint64_t prev = g->off_rate;

	g->off_rate = g->n && gaps_off_rate(g, d) ? d : 0;
	if (prev && absdiff(d, prev) * RK__GAPS_RATE_AGREE <= d &&
	    !(g->w->off & RK__WAIT_OFF_RATE)) {
		/*
		 * A gap off the pace and the next agreeing with it: the
		 * traffic changed its pace (a stream starting after a pause,
		 * decode steps getting longer), or the one before was an
		 * outlier. The mean and deviation would take dozens of gaps to
		 * forget the old pace, each spun through untrusted: start over
		 * from these two, as a cold learner does from its first two.
		 */
		g->mean = (prev + d) / 2;
		g->dev = absdiff(d, prev);
		g->lo = prev < d ? prev : d;
		g->late_hi = 0;		/* measured against the old mean */
		g->n = RK__GAPS_WARM;
		g->off_rate = 0;
		g->w->stats->learn_restarts++;
		return;
	}
	if (!g->n || d < g->lo)
		g->lo = d;
	if (!g->n) {
		g->mean = d;
		g->dev = d / RK__GAPS_DEV_GUESS;
	} else if (g->n == 1) {
		/* the spread of the first two gaps, not the guess above: a few
		 * regular gaps then predict (RK__GAPS_WARM) */
		g->dev = absdiff(d, g->mean);
		g->mean = (g->mean + d) / 2;
	} else {
		g->dev = (g->dev * (RK__GAPS_DEV_W - 1) + absdiff(d, g->mean)) / RK__GAPS_DEV_W;
		g->mean = (g->mean * (RK__GAPS_MEAN_W - 1) + d) / RK__GAPS_MEAN_W;
	}
	if (g->n < UINT32_MAX)
		g->n++;
}

/*
 * A burst @d ns after the one before: how far past the mean it came, as a
 * decaying peak. Every burst counts, also one seen only after a sleep (it
 * came at most that late) that the mean leaves out.
 */
static void gaps_late(struct rk__gaps *g, uint64_t d)
{
	uint64_t late = d > g->mean ? d - g->mean : 0;

	if (late > g->mean / RK__GAPS_LATE_MAX)
		late = g->mean / RK__GAPS_LATE_MAX;
	if (late >= g->late_hi)
		g->late_hi = late;
	else
		/* rounded up: a small peak decays to 0 too */
		g->late_hi -= (g->late_hi + RK__GAPS_LATE_DECAY - 1) / RK__GAPS_LATE_DECAY;
}

bool rk__gaps_seen(struct rk__gaps *g, uint64_t now, bool late)
{
	struct rk__wait *w = g->w;
	uint64_t d;

	if (g->first && now < g->last + RK__GAPS_BURST_NS) {
		g->last = now;		/* the same burst */
		return false;
	}
	if (g->first && now > g->first) {
		d = now - g->first;
		if (w->tun->learn && rk__wait_predicts(w) && gaps_trusted(g) &&
		    now > gaps_until(g, w->off))
			w->stats->learn_overdue++;	/* what the window had given up on */
		if (g->n)
			gaps_late(g, d);
		/*
		 * An arrival seen after a sleep may have waited up to a wake's
		 * latency. Both ends seen so: the delays cancel (a gap beyond
		 * the spin window is only ever seen like that); only the start:
		 * the gap looks shorter, which is safe; only the end: longer,
		 * so it may teach an earlier gap, never a later one (but while
		 * cold anything is better than nothing).
		 */
		if (!late || g->first_late || g->n < RK__GAPS_WARM || d < g->mean)
			gaps_sample(g, d);
		if (g->hold)
			g->hold--;
	}
	if (late)
		w->stats->learn_woken++;
	g->first = g->last = now;
	g->first_late = late;
	return true;
}

/* ---- the state -------------------------------------------------------------------- */

void rk__wait_init(struct rk__wait *w, const struct rk_wait_policy *pol,
		   const struct rk__wait_tuning *tun, struct rk_loop_stats *stats)
{
	memset(w, 0, sizeof(*w));
	w->pol = pol;
	w->tun = tun;
	w->stats = stats;
}

int rk__wait_off_parse(const char *list, unsigned int *off)
{
	static const char *const names[] = { "gaps", "gapwin", "cold", "winq", "late",
					     "hold", "boost", "fade", "prewarm", "ohi", "rate" };
	size_t i, n;
	int ret = 0;

	*off = 0;
	while (list && *list) {
		n = strcspn(list, ",");
		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (n == strlen(names[i]) && !strncmp(list, names[i], n))
				break;
		if (i < sizeof(names) / sizeof(names[0]))
			*off |= 1u << i;
		else if (n)
			ret = -EINVAL;
		list += n + (list[n] == ',');
	}
	return ret;
}

/* ---- the margin and the window ----------------------------------------------------- */

/*
 * The configured base, how late timed wakes have come (a VM's timer wake is
 * tens of us late, ARCHITECTURE.md), and a boost that grows when a
 * prediction turned out late and fades when early (late(), early()).
 */
uint64_t rk__wait_margin(const struct rk__wait *w)
{
	uint64_t m = w->tun->predict_margin_ns;

	if (!(w->off & RK__WAIT_OFF_OHI))
		m += w->oversleep_hi;
	if (!(w->off & RK__WAIT_OFF_BOOST))
		m += w->late_boost;
	return m;
}

/*
 * The spin window after the last busy event: spin_ns, or, once the loop has
 * seen RK__GAP_WARM gaps between busy events, RK__GAP_WIN times their ~99th
 * percentile (never below learn_spin_min_ns): a window far longer than any
 * gap seen spins for nothing at the start of an idle episode. And when the
 * last busy work was all one trusted learner's arrivals, the window ends where
 * that learner's next burst is overdue: the learner has said when its next one
 * comes, and the predictive wait slept and spun for it; spinning on past that
 * is the idle-entry spin of a link whose traffic stopped. While that learner
 * is still cold (RK__GAPS_WARM), but each gap it sampled was twice
 * learn_spin_min_ns or more, the window is learn_spin_min_ns: at 10 ms gaps
 * each of those costs 1 ms of spinning, not the whole gap (the frame that
 * ends it pays a block's latency, a few times per link). A learner that is
 * warm but not trusted (irregular) gets that window only when every gap it
 * sampled was twice the window or more. Other work (a post, a timer, a GPU
 * completion) keeps the quantile's window.
 */
uint64_t rk__wait_window(const struct rk__wait *w, uint64_t last_busy,
			 const struct rk_source *busy)
{
	const struct rk_wait_policy *pol = w->pol;
	const struct rk__wait_tuning *tun = w->tun;
	const struct rk__gaps *g = gaps_of(busy);
	uint64_t win, until, far;

	if (!tun->learn || !tun->predict)
		return pol->spin_ns;
	win = pol->spin_ns;
	if (w->gap_n >= RK__GAP_WARM && !(w->off & RK__WAIT_OFF_WINQ)) {
		win = w->gap_hi * RK__GAP_WIN;
		if (win < tun->learn_spin_min_ns)
			win = tun->learn_spin_min_ns;
		if (win > pol->spin_ns)
			win = pol->spin_ns;
	}
	if (!g)
		return win;
	far = g->lo / RK__GAPS_COLD_FAR;
	if (gaps_trusted(g)) {
		if (w->off & RK__WAIT_OFF_GAPWIN)
			return win;
		until = gaps_until(g, w->off);
		until = until > last_busy ? until - last_busy : 0;
		if (until < win)
			win = until;
	} else if (!(w->off & RK__WAIT_OFF_COLD) && g->n && !g->hold &&
		   tun->learn_spin_min_ns < win &&
		   (far >= win || (g->n < RK__GAPS_WARM && far >= tun->learn_spin_min_ns))) {
		/* no gap of its ever came within twice the window, or it is
		 * still cold and none came within twice the short one: the
		 * next is unlikely to (a block's latency if so) */
		win = tun->learn_spin_min_ns;
	}
	return win;
}

/*
 * Track a high quantile of the gaps between busy events stochastically, in
 * proportion to it: a gap above it raises it by 1/RK__GAP_UP, one below
 * lowers it by 1/RK__GAP_DOWN.
 */
void rk__wait_busy(struct rk__wait *w, uint64_t last_busy, uint64_t now)
{
	uint64_t d;

	if (!last_busy || now <= last_busy)
		return;
	d = now - last_busy;
	if (!w->gap_n)
		w->gap_hi = d;
	else if (d > w->gap_hi)
		w->gap_hi += w->gap_hi / RK__GAP_UP + RK__GAP_UP_NS;
	else
		w->gap_hi -= w->gap_hi / RK__GAP_DOWN;
	if (w->gap_n < UINT32_MAX)
		w->gap_n++;
}

/* ---- the decision ------------------------------------------------------------------ */

static void spin(struct rk__wait_plan *p, enum rk__spin_why why)
{
	*p = (struct rk__wait_plan){ .park = false, .why = why };
}

static void park(struct rk__wait_plan *p, enum rk__park how, uint64_t timeout,
		 struct rk_source *src)
{
	*p = (struct rk__wait_plan){ .park = true, .how = how, .timeout = timeout, .src = src };
}

/*
 * A source predicts its next event at in->expect: sleep until then less the
 * margin when that is at least predict_min away (RK__GAPS_SLEEP_MIN_NS for a
 * learner), else spin; a timer due before the wake is slept and spun for
 * instead. This decides the wait: the window and block rules do not apply.
 */
static void predicted(struct rk__wait *w, const struct rk__wait_in *in, struct rk__wait_plan *p)
{
	const struct rk__wait_tuning *tun = w->tun;
	uint64_t margin = rk__wait_margin(w), expect = in->expect, now = in->now, tmo = in->tmo;
	uint64_t wake = expect > margin ? expect - margin : 0;
	uint64_t min = tun->predict_min_ns;

	/* a learned arrival this close is most likely the answer to what this
	 * loop just sent: a sleep would save little and wake late for it */
	if (gaps_of(in->src) && min < RK__GAPS_SLEEP_MIN_NS)
		min = RK__GAPS_SLEEP_MIN_NS;
	if (wake <= now + min) {
		/*
		 * Due (or too close to sleep): spin; the source stops predicting
		 * once it is overdue, so this is bounded. When only the learned
		 * part of the margin stands in the way, let it fade a step, once
		 * per prediction, as an early wake would: else a margin grown in
		 * one bad stretch stops every later sleep, and with them the
		 * samples that could narrow it again.
		 */
		if (!(w->off & RK__WAIT_OFF_FADE) && expect > now + tun->predict_margin_ns + min &&
		    expect != w->skip_expect) {
			w->skip_expect = expect;
			w->late_boost -= w->late_boost / RK__FADE_BOOST;
			w->oversleep_hi -= w->oversleep_hi / RK__FADE_OVER;
		}
		spin(p, RK__SPIN_PREDICT);
		return;
	}
	if (wake - now > (tmo > margin ? tmo - margin : 0)) {
		/*
		 * A timer is due first, or so soon after the wake that its own
		 * wake comes first. Nothing is predicted before the wake, so the
		 * spin window does not apply (it would spin up to 20 ms for a
		 * timer a heartbeat away): sleep until the timer less the margin,
		 * as for a predicted event, and spin to it, so it runs on time
		 * and on a thread that is awake (not one the timer's lateness
		 * just woke). A sleep for the timer, no source's: its lateness
		 * teaches the margin, and no source is judged early or late by it.
		 */
		if (tmo <= margin + tun->predict_min_ns)
			spin(p, RK__SPIN_PREDICT);
		else
			park(p, RK__PARK_PREDICT, tmo - margin, NULL);
		return;
	}
	/* the spin after this sleep's wake is the margin doing its work, not a
	 * sleep the margin kept the loop from: no fade for this prediction */
	w->skip_expect = expect;
	park(p, RK__PARK_PREDICT, wake - now, in->src);
}

void rk__wait_decide(struct rk__wait *w, const struct rk__wait_in *in, struct rk__wait_plan *plan)
{
	const struct rk_wait_policy *pol = w->pol;
	const struct rk__wait_tuning *tun = w->tun;
	uint64_t since = in->now - in->last_busy;

	if (pol->mode == RK_WAIT_SPIN) {
		spin(plan, RK__SPIN_OTHER);
		return;
	}
	if (pol->mode == RK_WAIT_ADAPTIVE && tun->predict && in->expect) {
		predicted(w, in, plan);
		return;
	}
	if (pol->mode == RK_WAIT_ADAPTIVE && since < pol->spin_ns) {
		if (since < rk__wait_window(w, in->last_busy, in->busy)) {
			spin(plan, RK__SPIN_WINDOW);
			return;
		}
		if (w->cut_busy != in->last_busy) {
			w->cut_busy = in->last_busy;
			w->stats->window_cuts++;
		}
	}
	/*
	 * A benchmark's baseline, not this policy's own (issue 31 measured it
	 * worse than spinning and than blocking): the seed experiment's timed
	 * polls, a wait of poll_ns then a look again, until poll_for_ns after
	 * the last busy event.
	 */
	if (pol->mode == RK_WAIT_ADAPTIVE && tun->poll_ns && in->last_busy &&
	    since < tun->poll_for_ns) {
		park(plan, RK__PARK_POLL, in->tmo < tun->poll_ns ? in->tmo : tun->poll_ns, NULL);
		return;
	}
	park(plan, RK__PARK_BLOCK, in->tmo, NULL);
}

void rk__wait_slept(struct rk__wait *w, const struct rk__wait_plan *plan)
{
	w->stats->predict_waits++;
	if (gaps_of(plan->src))
		w->stats->learn_waits++;
}

/* ---- what a wake teaches ----------------------------------------------------------- */

static uint64_t late_step(const struct rk__wait *w)
{
	uint64_t step = w->tun->predict_margin_ns / RK__LATE_STEP;

	return step > RK__LATE_STEP_MIN_NS ? step : RK__LATE_STEP_MIN_NS;
}

/*
 * A predictive sleep's event came late: widen the margin by a step. With
 * learn, each early wake takes back 1/RK__LATE_RATE of a step (early()), so
 * the boost settles where about one wake in RK__LATE_RATE is late, whatever
 * made them late: a timer wake later than the lateness quantile covers (a
 * rare one: the quantile forgets half of it in 90 wakes), or events earlier
 * than predicted. A late wake is a frame that waited for a wake, on a path
 * gone cold. Bounded by 1/RK__LATE_SHARE of the sleep that was late: every
 * nanosecond of it is spun for before every event, and where late wakes do
 * not stop (a thread descheduled for milliseconds) it buys nothing.
 */
static void late(struct rk__wait *w, uint64_t sleep_ns, bool overslept)
{
	uint64_t cap = RK__OVER_CAP_NS;

	w->stats->predict_late++;
	if (overslept)
		w->stats->predict_overslept++;
	if (w->tun->learn && sleep_ns / RK__LATE_SHARE < cap)
		cap = sleep_ns / RK__LATE_SHARE;
	if (w->late_boost >= cap)
		return;		/* a boost learned for longer sleeps is not cut */
	w->late_boost += late_step(w);
	if (w->late_boost > cap)
		w->late_boost = cap;
}

/* Woke before its event, as meant: the boost fades, and with learn is cut to
 * 1/RK__LATE_SHARE of this sleep (one grown for long sleeps is not paid at
 * every short one). */
static void early(struct rk__wait *w, uint64_t sleep_ns)
{
	uint64_t down = w->late_boost / RK__LATE_FADE, cap;

	if (w->tun->learn) {
		down = late_step(w) / RK__LATE_RATE;
		if (down > w->late_boost)
			down = w->late_boost;
		cap = sleep_ns / RK__LATE_SHARE;
		if (w->late_boost - down > cap)
			down = w->late_boost - cap;
	}
	w->late_boost -= down;
}

/*
 * Cut short, early (spin now) or late? Only the event of the source the sleep
 * was for counts (@in->found): another source's, e.g. a lazy GPU mark, says
 * nothing of it.
 */
enum rk_verdict rk__wait_woke(struct rk__wait *w, const struct rk__wait_wake *in, bool *warm)
{
	uint64_t over;

	*warm = false;
	if (in->now + RK__WOKE_EARLY_NS < in->deadline) {
		/* ended by an event: the awaited one (a frame on the ring) came
		 * before the wake, so it was late; another one says nothing */
		if (in->found) {
			late(w, in->sleep_ns, false);
			return RK_VERDICT_LATE;
		}
		w->stats->predict_cut++;
		return in->busy ? RK_VERDICT_CUT : 0;
	}
	over = in->now > in->deadline ? in->now - in->deadline : 0;
	w->stats->ns_oversleep += over;
	/*
	 * The tail, not the mean: a wake later than the margin costs a block's
	 * latency. Rise fast, fall slowly: an oversleep costs latency, a wide
	 * margin only CPU. Capped: a margin wider than the waits would stop
	 * every predictive sleep, and with them the samples that could narrow it.
	 */
	if (over > RK__OVER_CAP_NS)
		over = RK__OVER_CAP_NS;
	if (over > w->oversleep_hi)
		w->oversleep_hi += (over - w->oversleep_hi) / RK__OVER_UP;
	else
		w->oversleep_hi -= w->oversleep_hi / RK__OVER_DOWN;
	if (in->found) {
		late(w, in->sleep_ns, true);
		return RK_VERDICT_LATE;
	}
	w->stats->predict_early++;
	early(w, in->sleep_ns);
	*warm = !(w->off & RK__WAIT_OFF_PREWARM);
	return RK_VERDICT_EARLY;
}
