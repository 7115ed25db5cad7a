/* SPDX-License-Identifier: MIT */
/*
 * The wait policy's decisions (wait.c): pure functions over struct rk__wait,
 * the state a loop keeps for them, and over the links' learners of arrival
 * gaps (struct rk__gaps, runtime_int.h). No clock, no ring, no loop: loop.c
 * gathers the inputs, carries out the plan and reports the wake; gaps.c ties
 * a learner to its loop. Every constant of the policy is here, once, with
 * why. Never installed.
 */
#ifndef RK_WAIT_INT_H
#define RK_WAIT_INT_H

#include "runtime_int.h"

/* ---- the margin of a predictive sleep: rk__wait_margin() ------------------------- */

/* each learned part of the margin at most this: later is a thread descheduled, not a timer */
#define RK__OVER_CAP_NS		100000ull
/* a later timed wake moves the lateness quantile 1/this of the way up (fast: it costs latency) */
#define RK__OVER_UP		2
/* ...an earlier one 1/this down (slow: a wide margin costs only CPU): about the 99th pct */
#define RK__OVER_DOWN		128
/* a wake this long before its deadline was ended by an event, not by its timeout */
#define RK__WOKE_EARLY_NS	1000ull
/* a late wake grows the boost by 1/this of the base margin, at least RK__LATE_STEP_MIN_NS */
#define RK__LATE_STEP		4
#define RK__LATE_STEP_MIN_NS	2000ull
/* RK_LEARN: an early wake takes 1/this of a step back: about one wake in this many is late */
#define RK__LATE_RATE		256
/* RK_LEARN: the boost is at most 1/this of the sleep (it is spun for before every event) */
#define RK__LATE_SHARE		64
/* without RK_LEARN: an early wake takes 1/this of the boost back (a few us stay) */
#define RK__LATE_FADE		32
/* the learned margin alone keeps a sleep off: the boost fades by 1/this, once a prediction */
#define RK__FADE_BOOST		32
/* ...and the lateness quantile by 1/this (else no sleep comes to teach it narrower) */
#define RK__FADE_OVER		16

/* ---- the learned spin window: rk__wait_window() ----------------------------------- */

/* gaps between busy events seen before the window is the quantile's */
#define RK__GAP_WARM		64
/* the window: this many times the gaps' ~99th percentile (a longer one spins for nothing) */
#define RK__GAP_WIN		4
/* a longer gap raises the quantile by 1/this + RK__GAP_UP_NS... */
#define RK__GAP_UP		4
#define RK__GAP_UP_NS		1000ull
/* ...a shorter one lowers it by 1/this: about one gap in 250 lies above */
#define RK__GAP_DOWN		1024

/* ---- a link's learner of arrival gaps (struct rk__gaps) --------------------------- */

/* closer arrivals are one burst: the frames that follow closely are spun for */
#define RK__GAPS_BURST_NS	20000ull
/* shorter gaps are the spin window's: a sleep would save little */
#define RK__GAPS_MIN_NS		200000ull
/* gaps sampled before it predicts: every gap not predicted costs a spin window */
#define RK__GAPS_WARM		2
/* ...and before its deviation is trusted alone (two or three gaps can agree by chance) */
#define RK__GAPS_SETTLE		8
/* ...until then the deviation is at least mean/this (a late wake costs a block's latency) */
#define RK__GAPS_DEV_MIN	128
/* regular: a deviation at most mean/this; irregular gaps leave the wait to the window */
#define RK__GAPS_REGULAR	4
/* the mean's EWMA weight 1/this, the deviation's 1/RK__GAPS_DEV_W */
#define RK__GAPS_MEAN_W		8
#define RK__GAPS_DEV_W		4
/* the first gap's deviation, a guess (mean/this) until the second gives a spread */
#define RK__GAPS_DEV_GUESS	8
/* a gap more than mean/this from the mean is off the learned pace; it and the next within
 * 1/RK__GAPS_RATE_AGREE of each other are a new pace: the learner starts over from them */
#define RK__GAPS_RATE		4
#define RK__GAPS_RATE_AGREE	8
/* a cold learner's short window: no gap of its came within this many times the window */
#define RK__GAPS_COLD_FAR	2
/* the next burst is expected this many deviations before the mean (a wake early, not late) */
#define RK__GAPS_EARLY_DEV	3
/* ...and overdue this many after it, plus the slack (rarer bursts pay a block's latency) */
#define RK__GAPS_LATE_DEV	4
/* the slack past that: mean/this, within [RK__GAPS_SLACK_MIN_NS, RK__GAPS_SLACK_MAX_NS] */
#define RK__GAPS_SLACK		16
#define RK__GAPS_SLACK_MIN_NS	20000ull
/* also the most a learned lateness widens the overdue point by: idle entry spins < 2 ms */
#define RK__GAPS_SLACK_MAX_NS	1000000ull
/* a burst later than mean/this is a pause of the traffic, not a late peer */
#define RK__GAPS_LATE_MAX	2
/* the learned lateness peak loses 1/this a burst: a rare late one stays covered a while */
#define RK__GAPS_LATE_DECAY	256
/* no learned sleep shorter: an arrival this close is most likely the answer to a send */
#define RK__GAPS_SLEEP_MIN_NS	100000ull
/* bursts held after a predictive sleep for it is cut by other work; doubles up to MAX
 * (the loop has work it cannot see coming: the window serves it better) */
#define RK__GAPS_HOLD		16
#define RK__GAPS_HOLD_MAX	1024

/* ---- the state, the inputs, the plan ---------------------------------------------- */

/*
 * Ablation bits (struct rk__wait.off): each turns one kept estimator or rule
 * off, so that its A/B can be run again (tests/bench/wait-ab.sh, a build made
 * with --enable-wait-ablation reads RK_TEST_WAIT_OFF). 0 in every normal run.
 */
enum {
	RK__WAIT_OFF_GAPS = 1u << 0,	/* "gaps": the links' learners predict nothing */
	RK__WAIT_OFF_GAPWIN = 1u << 1,	/* "gapwin": the window ignores a trusted learner's
					 * overdue point */
	RK__WAIT_OFF_COLD = 1u << 2,	/* "cold": no short window for a cold learner */
	RK__WAIT_OFF_WINQ = 1u << 3,	/* "winq": the window is not the gap quantile's */
	RK__WAIT_OFF_LATE = 1u << 4,	/* "late": the overdue point ignores late_hi */
	RK__WAIT_OFF_HOLD = 1u << 5,	/* "hold": a learner never holds after cut sleeps */
	RK__WAIT_OFF_BOOST = 1u << 6,	/* "boost": the margin leaves out late_boost */
	RK__WAIT_OFF_FADE = 1u << 7,	/* "fade": the learned margin never fades unslept */
	RK__WAIT_OFF_PREWARM = 1u << 8,	/* "prewarm": no RK_VERDICT_SPIN (no TCP rehearsal) */
	RK__WAIT_OFF_OHI = 1u << 9,	/* "ohi": the margin leaves out oversleep_hi */
	RK__WAIT_OFF_RATE = 1u << 10,	/* "rate": two gaps that agree on a new rate
					 * never restart a learner */
};

/* What a loop keeps for its wait decisions. rk__wait_init() it. */
struct rk__wait {
	const struct rk_wait_policy *pol;	/* the loop's (rk_loop_set_wait() changes it) */
	const struct rk__wait_tuning *tun;	/* the loop's (rk_loop_set_wait_config()) */
	struct rk_loop_stats *stats;		/* the loop's counters these decisions keep */
	unsigned int off;			/* RK__WAIT_OFF_* */
	uint64_t oversleep_hi;		/* a high quantile of timed wakes' lateness */
	uint64_t late_boost;		/* margin added when late, faded when early */
	uint64_t skip_expect;		/* the last prediction the learned margin kept us from */
	uint64_t gap_hi;		/* ~99th percentile of the gaps between busy events */
	uint32_t gap_n;			/* gaps sampled */
	uint64_t cut_busy;		/* the last busy event whose window was cut (once) */
};

/* What the loop knows when it is about to wait, nothing being due. */
struct rk__wait_in {
	uint64_t now;
	uint64_t tmo;			/* to the next timer, ns; UINT64_MAX = none */
	uint64_t last_busy;		/* the last busy event, 0 = none yet */
	uint64_t expect;		/* the earliest event a source expects, 0 = none */
	struct rk_source *src;		/* ...that source */
	const struct rk_source *busy;	/* whose events the last busy work all was, or NULL */
};

/* What a spin waits for (rk_loop_stats' ns_spin_predict and ns_spin_window). */
enum rk__spin_why { RK__SPIN_OTHER, RK__SPIN_PREDICT, RK__SPIN_WINDOW };
/* How a wait parks: PARK_POLL is RK_POLL_US's timed poll; PARK_IO is
 * rk__loop_run_io()'s, never planned. */
enum rk__park { RK__PARK_BLOCK, RK__PARK_PREDICT, RK__PARK_POLL, RK__PARK_IO };

/* The decision: spin one iteration, or park. */
struct rk__wait_plan {
	bool park;
	enum rk__spin_why why;		/* spin: what for */
	enum rk__park how;		/* park: block, a predictive sleep, a timed poll */
	uint64_t timeout;		/* park: ns, UINT64_MAX = until an event */
	struct rk_source *src;		/* predictive: whose prediction, NULL = a timer's */
};

/* How a predictive sleep ended, as the loop saw it after its wake. */
struct rk__wait_wake {
	uint64_t now;
	uint64_t deadline;		/* when its timeout was due */
	uint64_t sleep_ns;		/* its timeout */
	bool found;			/* the event of the source it was for came */
	bool busy;			/* the iteration after it had busy work */
};

void rk__wait_init(struct rk__wait *w, const struct rk_wait_policy *pol,
		   const struct rk__wait_tuning *tun, struct rk_loop_stats *stats);
/* Adaptive mode with RK_PREDICT: sources' expect() count (rk_loop_predicts()). */
static inline bool rk__wait_predicts(const struct rk__wait *w)
{
	return w->tun->predict && w->pol->mode == RK_WAIT_ADAPTIVE;
}
/* The margin a predictive sleep wakes this much before its event by. */
uint64_t rk__wait_margin(const struct rk__wait *w);
/* The spin window after a busy event at @last_busy, all of it @busy's events (or NULL). */
uint64_t rk__wait_window(const struct rk__wait *w, uint64_t last_busy,
			 const struct rk_source *busy);
/* Busy work at @now, the last at @last_busy (0 = none): learn the gap. */
void rk__wait_busy(struct rk__wait *w, uint64_t last_busy, uint64_t now);
/* How to wait now. */
void rk__wait_decide(struct rk__wait *w, const struct rk__wait_in *in, struct rk__wait_plan *plan);
/* A predictive sleep of @plan's really parks (its counters). */
void rk__wait_slept(struct rk__wait *w, const struct rk__wait_plan *plan);
/*
 * A predictive sleep ended (@in): learn from it. Return the verdict for the
 * source it was for (0 = none); *@warm: tell every other source that the loop
 * spins for an event now (RK_VERDICT_SPIN).
 */
enum rk_verdict rk__wait_woke(struct rk__wait *w, const struct rk__wait_wake *in, bool *warm);
/* "name,name" (RK_TEST_WAIT_OFF) -> RK__WAIT_OFF_* bits. Return 0, or -EINVAL
 * (*@off holds the names it knew). */
int rk__wait_off_parse(const char *list, unsigned int *off);

/* ---- the learners (their source ops in wait.c, their glue to a loop in gaps.c) ---- */

extern const struct rk_source_ops rk__gaps_ops;
/* A learner about to join a loop whose decisions are @w. */
void rk__gaps_init(struct rk__gaps *g, struct rk__wait *w);
/* A busy arrival at @now, seen right after a sleep (@late) or not. Return: it
 * began a burst (the event a prediction waits for). */
bool rk__gaps_seen(struct rk__gaps *g, uint64_t now, bool late);

/* The loop's decision state (loop.c), for its learners. Loop thread. */
struct rk__wait *rk__loop_wait(struct rk_loop *loop);

#endif /* RK_WAIT_INT_H */
