/* SPDX-License-Identifier: MIT */
/*
 * A loop's event sources (rk_source_ops): those with a poll() on the list
 * every iteration walks, those without (learners, listeners) on a quiet list
 * the spin path never walks; their predictions, their verdicts, their arming
 * before a block.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "loop_int.h"

void rk_source_init(struct rk_source *src, const struct rk_source_ops *ops, void *data)
{
	memset(src, 0, sizeof(*src));
	src->ops = ops;
	src->data = data;
}

int rk_loop_add_source(struct rk_loop *loop, struct rk_source *src)
{
	struct rk_source **head = src->ops->poll ? &loop->sources : &loop->quiet;

	if (src->loop)
		return -EALREADY;
	src->loop = loop;
	src->next = *head;
	*head = src;
	rk__loop_ref(loop);
	return 0;
}

bool rk_loop_predicts(const struct rk_loop *loop)
{
	return rk__wait_predicts(&loop->wait);
}

int rk_loop_remove_source(struct rk_loop *loop, struct rk_source *src)
{
	struct rk_source **pp;

	if (src->loop != loop)
		return -ENOENT;
	for (pp = src->ops->poll ? &loop->sources : &loop->quiet; *pp != src; pp = &(*pp)->next)
		;
	*pp = src->next;
	if (loop->pred_src == src)
		loop->pred_src = NULL;
	if (loop->pred_next == src)
		loop->pred_next = NULL;
	if (loop->busy_src == src)
		loop->busy_src = NULL;
	if (loop->iter_src == src)
		loop->iter_src = NULL;
	src->next = NULL;
	src->loop = NULL;
	rk__loop_unref(loop);
	return 0;
}

struct rk_source *rk__loop_source_find(struct rk_loop *loop, const struct rk_source_ops *ops)
{
	struct rk_source *s;

	for (s = ops->poll ? loop->sources : loop->quiet; s; s = s->next)
		if (s->ops == ops)
			return s;
	return NULL;
}

void rk__loop_busy_by(struct rk_loop *loop, struct rk_source *src)
{
	if (loop->iter_src && loop->iter_src != src)
		loop->iter_mixed = true;
	loop->iter_src = src;
	loop->iter_src_n++;
}

void rk__loop_count_prewarm(struct rk_loop *loop)
{
	loop->stats.prewarms++;
}

/* Poll every source; what they handle counts as busy events of this iteration. */
void rk__sources_poll(struct rk_loop *loop)
{
	struct rk_source *s, *next;
	int ret;

	for (s = loop->sources; s; s = next) {
		next = s->next;
		ret = s->ops->poll(s, loop->now);
		if (ret > 0) {
			if (s == loop->pred_src)
				loop->pred_found = true;
			loop->stats.events += (uint64_t)ret;
			loop->iter_events += (unsigned int)ret;
			loop->iter_busy += (unsigned int)ret;
		} else if (ret < 0) {
			rk__warn(loop->cfg.rank, "source %s: %s", s->ops->name, rk_strerror(ret));
		}
	}
}

/* The earliest time a source expects its next event at, 0 = none predicted. */
uint64_t rk__sources_expect(struct rk_loop *loop)
{
	struct rk_source *s, *lists[2] = { loop->sources, loop->quiet };
	uint64_t t, first = 0;
	unsigned int i;

	loop->pred_next = NULL;
	for (i = 0; i < 2; i++) {
		for (s = lists[i]; s; s = s->next) {
			if (!s->ops->expect)
				continue;
			t = s->ops->expect(s, loop->now);
			if (t && (!first || t < first)) {
				first = t;
				loop->pred_next = s;
			}
		}
	}
	return first;
}

/* Tell every source with a verdict() but @skip that the loop spins for an event now. */
void rk__sources_spin(struct rk_loop *loop, struct rk_source *skip)
{
	struct rk_source *s, *next, *lists[2] = { loop->sources, loop->quiet };
	unsigned int i;

	for (i = 0; i < 2; i++) {
		for (s = lists[i]; s; s = next) {
			next = s->next;
			if (s != skip && s->ops->verdict)
				s->ops->verdict(s, RK_VERDICT_SPIN);
		}
	}
}

/* Before blocking: arm each source (or poll it, for sources woken by their
 * producer). Return > 0 when something is pending and the loop must not block. */
int rk__sources_arm(struct rk_loop *loop)
{
	struct rk_source *s, *next;
	int pending = 0, ret;

	for (s = loop->quiet; s; s = next) {
		next = s->next;
		ret = s->ops->arm ? s->ops->arm(s) : 0;
		if (ret > 0)
			pending += ret;
	}
	for (s = loop->sources; s; s = next) {
		next = s->next;
		if (s->ops->arm) {
			ret = s->ops->arm(s);
		} else {
			/* This poll handles what it finds: busy work like step 4's,
			 * so it is counted and restarts the spin window. */
			ret = s->ops->poll(s, loop->now);
			if (ret > 0) {
				loop->stats.events += (uint64_t)ret;
				loop->stats.busy_events += (uint64_t)ret;
				loop->last_busy = loop->now;
				loop->busy_src = NULL;
			}
		}
		if (ret > 0)
			pending += ret;
	}
	return pending;
}
