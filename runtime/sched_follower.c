/* SPDX-License-Identifier: MIT */
/*
 * A follower's side of the scheduler: it launches every ROUND at once, as its
 * link decoded it (no second decode), retires the streams absent from it (the
 * stream rule), and tells the leader only of a share that failed
 * (sched_int.h).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "sched_int.h"

/* Tell the leader that our share of @round_id failed (a success sends nothing). */
void rk__sched_follower_report(struct rk_sched *s, uint64_t round_id, int status)
{
	struct rk_wire_round_done d = {
		.round_id = round_id,
		.status = status,
		.elapsed_ns = rk_loop_now(s->loop) - s->t_launch,
	};
	uint8_t buf[24];
	int n;

	s->stats.ns_round_sum += d.elapsed_ns;
	/*
	 * Only a failure is reported. The leader never waits for a success:
	 * its next ROUND follows its own completion, which under tensor
	 * parallelism needs ours anyway (the collective, or our partial
	 * results); and a frame per round would cost both ranks a send, a
	 * receive and a wake.
	 */
	if (!status)
		return;
	n = rk_wire_encode_round_done(buf, sizeof(buf), &d);
	if (n > 0)
		rk_world_send(s->world, 0, RK_FRAME_ROUND_DONE, 0, buf, (uint32_t)n);
}

/* ROUND @view (payload @payload), as the link decoded it: launch it. */
int rk__sched_follower_round(struct rk_sched *s, const struct rk_wire_hdr *h,
			     const uint8_t *payload, const struct rk_wire_round *view)
{
	struct rk_wire_stream st;
	uint32_t i, j;
	uint64_t *t;
	int ret;

	s->round_id = view->round_id;
	if (s->stopped)
		return -RK_ESTOPPED;	/* launched nowhere: the leader fails the round */
	if (view->n_streams > s->ids_cap) {
		uint32_t cap = view->n_streams * 2;

		t = realloc(s->prev_ids, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		s->prev_ids = t;
		t = realloc(s->cur_ids, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		s->cur_ids = t;
		s->ids_cap = cap;
	}
	for (i = 0; i < view->n_streams; i++) {
		rk_wire_round_stream(view, i, &st);
		s->cur_ids[i] = st.stream_id;
	}
	/* a stream absent from this round has finished (the stream rule) */
	for (i = 0; i < s->nprev && s->ops->retire; i++) {
		for (j = 0; j < view->n_streams && s->cur_ids[j] != s->prev_ids[i]; j++)
			;
		if (j == view->n_streams)
			be_retire(s, s->prev_ids[i]);
	}
	t = s->prev_ids;
	s->prev_ids = s->cur_ids;
	s->cur_ids = t;
	s->nprev = view->n_streams;
	rk__sched_publish(s, view->round_id, h->flags, payload, h->len);
	trace(s, s->round_id, RK_SCHED_EV_LAUNCH);
	s->t_launch = rk_loop_now(s->loop);
	s->stats.rounds++;
	s->open++;
	rk__sched_watch_start(s, view->round_id);
	ret = be_launch(s, view, h->flags);
	if (ret) {
		s->open--;
		s->wd_open = false;
	}
	return ret;
}
