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
	timer_insert(loop, t);
	return 0;
}

void rk_timer_stop(struct rk_timer *t)
{
	if (t->active)
		timer_unlink(t);
}

void rk__timers_run(struct rk_loop *loop)
{
	struct rk_timer *t;
	unsigned int budget = 64;	/* bound the work of one iteration */

	while ((t = loop->timers) && t->due <= loop->now && budget--) {
		timer_unlink(t);
		if (t->period) {
			t->due += t->period;
			if (t->due <= loop->now)	/* we fell behind: skip, don't burst */
				t->due = loop->now + t->period;
			timer_insert(loop, t);
		}
		loop->stats.events++;
		rk__loop_note(loop, t->cb(t, loop->now));
	}
}
