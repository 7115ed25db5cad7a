/* SPDX-License-Identifier: MIT */
/*
 * A loop's timers: a list sorted by due time (a rank has a handful of
 * timers: heartbeats, peer timeouts, a scheduler's kick), run at the
 * iteration's cached time.
 */
#include "config.h"

#include <string.h>

#include "loop_int.h"

void rk_timer_init(struct rk_timer *t, rk_timer_cb cb, void *data)
{
	memset(t, 0, sizeof(*t));
	t->cb = cb;
	t->data = data;
}

static void timer_unlink(struct rk_timer *t)
{
	struct rk_loop *loop = t->loop;

	if (t->prev)
		t->prev->next = t->next;
	else
		loop->timers = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->next = t->prev = NULL;
	t->active = false;
	rk__loop_unref(loop);
}

static void timer_insert(struct rk_loop *loop, struct rk_timer *t)
{
	struct rk_timer *it = loop->timers, *prev = NULL;

	while (it && it->due <= t->due) {
		prev = it;
		it = it->next;
	}
	t->prev = prev;
	t->next = it;
	if (prev)
		prev->next = t;
	else
		loop->timers = t;
	if (it)
		it->prev = t;
	t->active = true;
	t->loop = loop;
	rk__loop_ref(loop);
}

int rk_timer_start(struct rk_loop *loop, struct rk_timer *t, uint64_t delay_ns,
		   uint64_t period_ns)
{
	if (t->active)
		timer_unlink(t);
	t->due = loop->now + delay_ns;
	t->period = period_ns;
	t->fresh = loop->in_timers;
	loop->nr_fresh += t->fresh;
	timer_insert(loop, t);
	return 0;
}

void rk_timer_stop(struct rk_timer *t)
{
	if (t->active)
		timer_unlink(t);
}

/*
 * A timer started by a callback of this step waits for the next iteration: a
 * continuation that restarts itself with no delay (a scheduler whose backend
 * completes inside launch()) then runs once per iteration, between the
 * iteration's I/O, and RK_RUN_ONCE runs it once. It is inserted after every
 * timer due now, so the first fresh one ends the step.
 */
void rk__timers_run(struct rk_loop *loop)
{
	struct rk_timer *t;
	unsigned int budget = 64;	/* bound the work of one iteration */

	loop->in_timers = true;
	while ((t = loop->timers) && t->due <= loop->now && !t->fresh && budget--) {
		timer_unlink(t);
		if (t->period) {
			t->due += t->period;
			if (t->due <= loop->now)	/* we fell behind: skip, don't burst */
				t->due = loop->now + t->period;
			timer_insert(loop, t);
		}
		rk__loop_note(loop, t->cb(t, loop->now));
	}
	loop->in_timers = false;
	if (loop->nr_fresh) {
		loop->nr_fresh = 0;
		for (t = loop->timers; t; t = t->next)
			t->fresh = false;
	}
}
