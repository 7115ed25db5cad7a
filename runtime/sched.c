/* SPDX-License-Identifier: MIT */
/*
 * Decode-round scheduling (the leader's batcher and the followers' launcher).
 *
 * It lives in runtime/, not gpu/: it only forms ROUND frames, calls the
 * backend, and reacts to completion events, so it runs unchanged on the CPU
 * backend, the CUDA backend, or a server's own. One round is in flight at a
 * time; the next is formed in the completion handler of the last, so the
 * ROUND leaves in the same loop iteration (flushed before the loop waits).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime_int.h"
#include "rk_sched.h"

struct rk_sched {
	struct rk_world *world;
	struct rk_loop *loop;
	struct rk_sched_config cfg;
	const struct rk_backend_ops *ops;
	void *ctx;
	int rank;
	bool stopped;

	/* leader */
	struct rk_request *qhead, *qtail;	/* waiting, FIFO */
	struct rk_request **batch;		/* running, in round order */
	uint32_t nbatch;
	uint64_t next_id;
	uint64_t round_id;
	bool in_flight;
	bool completing;			/* leader_complete() is walking the batch */
	uint64_t t_launch;
	uint8_t *buf;				/* the ROUND payload */
	size_t buf_cap;
	struct rk_wire_stream *streams;
	uint32_t *tokens;
	size_t tok_cap;
	uint32_t *draft_off;			/* per batch index: offset of drafts in tokens */
	uint32_t *outs;				/* scratch: k + 1 outputs */

	/* follower */
	uint64_t *prev_ids, *cur_ids;
	uint32_t nprev;
	uint32_t ids_cap;
	/*
	 * When the next ROUND should come: rounds follow each other at a steady
	 * pace (the leader's GPU work, its host work and the wire), so a loop
	 * source predicts it (expect()) from the last ROUND and the loop sleeps
	 * through most of the wait instead of spinning. The frame itself wakes
	 * the ring. From the ROUND, not from our completion: a backend whose
	 * completions nobody waits for (rk_gpu_notifier_set_lazy()) may see its
	 * completion only at the wake for the next ROUND.
	 */
	struct rk_source src;
	struct rk__pred gap;			/* one ROUND seen -> the next */
	uint64_t t_round;			/* the last ROUND seen, 0 = no ROUND awaited */
	bool round_late;			/* that one was seen right after a sleep */

	struct rk_sched_stats stats;
};

static inline void trace(struct rk_sched *s, uint64_t round_id, enum rk_sched_event ev)
{
	if (!s->cfg.trace)
		return;
	s->cfg.trace(s->cfg.trace_arg, round_id, ev, rk__now_ns());
}

/* ---- follower: predicting the next ROUND ------------------------------------------ */

static int src_poll(struct rk_source *src, uint64_t now)
{
	(void)src;
	(void)now;
	return 0;	/* the frame comes through the ring */
}

static int src_arm(struct rk_source *src)
{
	(void)src;
	return 0;	/* nothing to arm: the frame wakes a sleeping loop */
}

static uint64_t src_expect(struct rk_source *src, uint64_t now)
{
	struct rk_sched *s = src->data;

	return s->t_round ? rk__pred_expect(&s->gap, s->t_round, now) : 0;
}

static const struct rk_source_ops round_source_ops = {
	.name = "sched-next-round",
	.poll = src_poll,
	.arm = src_arm,
	.expect = src_expect,
};

/* A ROUND arrived: learn the time since the one before. */
static void round_seen(struct rk_sched *s)
{
	uint64_t now = rk_loop_now(s->loop);
	bool late = rk__loop_after_park(s->loop);

	/* seen after a sleep, a frame may have waited: this one gives an upper
	 * bound only, and the next nothing (its start is late) */
	if (s->t_round && now > s->t_round && !s->round_late) {
		if (late)
			rk__pred_bound(&s->gap, now - s->t_round);
		else
			rk__pred_sample(&s->gap, now - s->t_round);
	}
	s->t_round = now;
	s->round_late = late;
	rk__loop_source_event(s->loop, &s->src);	/* what a prediction waited for */
}

/* ---- drafting -------------------------------------------------------------------- */

uint32_t rk_ngram_draft(void *arg, const uint32_t *hist, size_t n, uint32_t *out, uint32_t k)
{
	size_t g, j, m, c;

	(void)arg;
	for (g = 3; g >= 1; g--) {
		if (n < g + 1)
			continue;
		/* the most recent earlier occurrence of the last g tokens */
		for (j = n - g; j-- > 0;) {
			for (m = 0; m < g && hist[j + m] == hist[n - g + m]; m++)
				;
			if (m < g)
				continue;
			for (c = 0; c < k && j + g + c < n; c++)
				out[c] = hist[j + g + c];
			if (c)
				return (uint32_t)c;
		}
	}
	return 0;
}

/* ---- create / destroy ------------------------------------------------------------ */

int rk_sched_create(struct rk_world *world, const struct rk_sched_config *cfg,
		    const struct rk_backend_ops *ops, void *ctx, struct rk_sched **out)
{
	struct rk_sched *s;
	uint32_t mb;

	if (!ops || !ops->launch || (!ops->token && rk_world_rank(world) == 0))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->world = world;
	s->loop = rk_world_loop(world);
	s->ops = ops;
	s->ctx = ctx;
	s->rank = rk_world_rank(world);
	s->cfg.max_batch = 8;
	if (cfg)
		s->cfg = *cfg;
	if (!s->cfg.max_batch)
		s->cfg.max_batch = 8;
	if (s->cfg.draft_k > RK_SCHED_MAX_DRAFT) {
		free(s);
		return -EINVAL;
	}
	if (!s->cfg.draft)
		s->cfg.draft = rk_ngram_draft;
	mb = s->cfg.max_batch;
	s->next_id = 1;
	s->batch = calloc(mb, sizeof(*s->batch));
	s->streams = calloc(mb, sizeof(*s->streams));
	s->draft_off = calloc(mb, sizeof(*s->draft_off));
	s->outs = calloc(RK_SCHED_MAX_DRAFT + 1, sizeof(*s->outs));
	if (!s->batch || !s->streams || !s->draft_off || !s->outs) {
		rk_sched_destroy(s);
		return -ENOMEM;
	}
	if (s->rank != 0) {
		s->src.ops = &round_source_ops;
		s->src.data = s;
		rk_loop_add_source(s->loop, &s->src);
	}
	*out = s;
	return 0;
}

static void req_finish(struct rk_sched *s, struct rk_request *r, const uint32_t *toks, uint32_t n,
		       int err)
{
	free(r->hist);
	r->hist = NULL;
	r->in_batch = false;
	s->stats.streams_done++;
	r->cb(r, toks, n, true, err);	/* the caller may free r now */
}

static void fail_all(struct rk_sched *s, int err)
{
	struct rk_request *r;
	uint32_t i, n = s->nbatch;

	s->nbatch = 0;
	for (i = 0; i < n; i++) {
		r = s->batch[i];
		if (s->ops->retire)
			s->ops->retire(s->ctx, r->id);
		req_finish(s, r, NULL, 0, err);
	}
	while ((r = s->qhead)) {
		s->qhead = r->next;
		req_finish(s, r, NULL, 0, err);
	}
	s->qtail = NULL;
}

void rk_sched_stop(struct rk_sched *s)
{
	s->stopped = true;
	fail_all(s, -RK_ESTOPPED);
}

void rk_sched_destroy(struct rk_sched *s)
{
	if (!s)
		return;
	fail_all(s, -RK_ESTOPPED);
	if (s->src.loop)
		rk_loop_remove_source(s->loop, &s->src);
	free(s->batch);
	free(s->streams);
	free(s->draft_off);
	free(s->outs);
	free(s->buf);
	free(s->tokens);
	free(s->prev_ids);
	free(s->cur_ids);
	free(s);
}

bool rk_sched_idle(const struct rk_sched *s)
{
	return !s->qhead && !s->nbatch && !s->in_flight;
}

void rk_sched_stats(const struct rk_sched *s, struct rk_sched_stats *out)
{
	*out = s->stats;
}

/* ---- leader: forming rounds ------------------------------------------------------- */

static int hist_reserve(struct rk_request *r, size_t need)
{
	return rk__grow((void **)&r->hist, &r->hist_cap, need, sizeof(*r->hist), 64);
}

static int tok_reserve(struct rk_sched *s, size_t need)
{
	return rk__grow((void **)&s->tokens, &s->tok_cap, need, sizeof(*s->tokens), 1024);
}

static void admit(struct rk_sched *s)
{
	struct rk_request *r;

	while (s->nbatch < s->cfg.max_batch && (r = s->qhead)) {
		s->qhead = r->next;
		if (!s->qhead)
			s->qtail = NULL;
		r->next = NULL;
		r->in_batch = true;
		s->batch[s->nbatch++] = r;
	}
}

static void sched_step(struct rk_sched *s);

static int form_round(struct rk_sched *s, uint32_t *flags, int64_t *len)
{
	uint64_t total = 0;
	uint32_t i, n = s->nbatch, k, remaining, off;
	int ret;

	*flags = 0;
	/* inputs and drafts, stream by stream, as the wire layout wants them */
	for (i = 0; i < n; i++) {
		struct rk_request *r = s->batch[i];

		r->n_in = (uint32_t)(r->hist_len - r->fed);
		total += r->n_in + (uint32_t)r->draft_k;
	}
	ret = tok_reserve(s, total);
	if (ret)
		return ret;
	off = 0;
	for (i = 0; i < n; i++) {
		struct rk_request *r = s->batch[i];
		struct rk_wire_stream *st = &s->streams[i];

		memcpy(s->tokens + off, r->hist + r->fed, r->n_in * sizeof(uint32_t));
		off += r->n_in;
		s->draft_off[i] = off;
		remaining = r->max_tokens - r->generated;
		k = (uint32_t)r->draft_k < remaining - 1 ? (uint32_t)r->draft_k : remaining - 1;
		r->n_draft = k ? s->cfg.draft(s->cfg.draft_arg, r->hist, r->hist_len,
					      s->tokens + off, k) : 0;
		if (r->n_draft > k)
			r->n_draft = k;
		off += r->n_draft;
		s->stats.drafted += r->n_draft;
		if (r->n_draft)
			*flags |= RK_FRAME_F_DRAFTED;
		if (r->n_in > 1)
			*flags |= RK_FRAME_F_PREFILL;
		st->stream_id = r->id;
		st->position = r->fed;
		st->n_tokens = r->n_in;
		st->n_draft = r->n_draft;
		st->top_k = r->top_k;
		st->temperature = r->temperature;
		st->top_p = r->top_p;
		st->seed = r->seed;
	}
	*len = rk_wire_round_size(n, off);
	if (*len < 0)
		return (int)*len;
	ret = rk__grow((void **)&s->buf, &s->buf_cap, (size_t)*len, 1, 4096);
	if (ret)
		return ret;
	*len = rk_wire_encode_round(s->buf, s->buf_cap, s->round_id + 1, s->streams, n, s->tokens);
	return *len < 0 ? (int)*len : 0;
}

static void sched_step(struct rk_sched *s)
{
	struct rk_wire_round view;
	uint32_t flags;
	int64_t len;
	int ret;

	if (s->in_flight || s->stopped)
		return;
	admit(s);
	if (!s->nbatch)
		return;
	ret = form_round(s, &flags, &len);
	if (ret)
		goto fail;
	s->round_id++;
	if (rk_world_size(s->world) > 1) {
		ret = rk_world_broadcast(s->world, RK_FRAME_ROUND, flags, s->buf, (uint32_t)len);
		if (ret)
			goto fail;
		/* Send the ROUND now, not after our own launch: the followers'
		 * start must not wait for the leader's kernel launches. */
		trace(s, s->round_id, RK_SCHED_EV_SENT);
		rk__loop_flush_now(s->loop);
	}
	ret = rk_wire_decode_round(s->buf, (size_t)len, &view);
	if (ret)
		goto fail;
	s->in_flight = true;
	trace(s, s->round_id, RK_SCHED_EV_LAUNCH);
	s->t_launch = rk_loop_now(s->loop);
	s->stats.rounds++;
	ret = s->ops->launch(s->ctx, &view, flags);
	if (ret) {
		s->in_flight = false;
		goto fail;
	}
	return;
fail:
	rk__err(s->rank, "round %llu: %s", (unsigned long long)s->round_id + 1, rk_strerror(ret));
	fail_all(s, ret);
}

int rk_sched_cancel(struct rk_sched *s, struct rk_request *req)
{
	struct rk_request **pp;
	uint32_t i;

	for (pp = &s->qhead; *pp; pp = &(*pp)->next) {
		if (*pp != req)
			continue;
		*pp = req->next;
		if (s->qtail == req) {
			struct rk_request *t = s->qhead;

			while (t && t->next)
				t = t->next;
			s->qtail = t;
		}
		req->next = NULL;
		req_finish(s, req, NULL, 0, -ECANCELED);
		return 0;
	}
	for (i = 0; i < s->nbatch && s->batch[i] != req; i++)
		;
	if (i == s->nbatch)
		return -ENOENT;
	if (s->in_flight || s->completing) {
		/* the round in flight, or the completion walking the batch, still
		 * holds its index: it leaves before the next round is formed */
		req->cancelled = true;
		return 0;
	}
	memmove(&s->batch[i], &s->batch[i + 1], (s->nbatch - i - 1) * sizeof(*s->batch));
	s->nbatch--;
	if (s->ops->retire)
		s->ops->retire(s->ctx, req->id);
	req_finish(s, req, NULL, 0, -ECANCELED);
	return 0;
}

int rk_sched_submit(struct rk_sched *s, struct rk_request *req)
{
	if (s->rank != 0)
		return -EPERM;
	if (s->stopped)
		return -RK_ESTOPPED;
	if (!req->cb || !req->prompt || !req->prompt_len || !req->max_tokens ||
	    req->draft_k < -1 || req->draft_k > RK_SCHED_MAX_DRAFT)
		return -EINVAL;
	if (req->draft_k < 0)
		req->draft_k = (int32_t)s->cfg.draft_k;
	req->hist = NULL;
	req->hist_len = req->hist_cap = 0;
	if (hist_reserve(req, (size_t)req->prompt_len + req->max_tokens + 1))
		return -ENOMEM;
	memcpy(req->hist, req->prompt, req->prompt_len * sizeof(uint32_t));
	req->hist_len = req->prompt_len;
	req->fed = 0;
	req->generated = 0;
	req->id = s->next_id++;
	req->next = NULL;
	req->in_batch = false;
	req->cancelled = false;
	if (s->qtail)
		s->qtail->next = req;
	else
		s->qhead = req;
	s->qtail = req;
	sched_step(s);
	return 0;
}

/* ---- leader: completion ----------------------------------------------------------- */

static void leader_complete(struct rk_sched *s, int status)
{
	uint32_t i, j, keep = 0, n = s->nbatch, acc, emit;
	int ret;

	s->in_flight = false;
	s->stats.ns_round_sum += rk_loop_now(s->loop) - s->t_launch;
	if (status) {
		rk__err(s->rank, "round %llu failed: %s", (unsigned long long)s->round_id,
			rk_strerror(status));
		fail_all(s, status);
		return;
	}
	s->completing = true;
	for (i = 0; i < n; i++) {
		struct rk_request *r = s->batch[i];
		const uint32_t *draft = s->tokens + s->draft_off[i];
		bool done;

		if (r->cancelled) {
			if (s->ops->retire)
				s->ops->retire(s->ctx, r->id);
			req_finish(s, r, NULL, 0, -ECANCELED);
			continue;
		}

		for (j = 0; j <= r->n_draft; j++) {
			ret = s->ops->token(s->ctx, i, j, &s->outs[j]);
			if (ret) {
				/* streams before i are finished or kept in [0, keep) */
				memmove(&s->batch[keep], &s->batch[i], (n - i) * sizeof(*s->batch));
				s->nbatch = keep + (n - i);
				s->completing = false;
				fail_all(s, ret);
				return;
			}
		}
		/* accept the longest prefix of drafts the model agrees with, plus
		 * the model's own next token: acc + 1 tokens */
		for (acc = 0; acc < r->n_draft && draft[acc] == s->outs[acc]; acc++)
			;
		s->stats.accepted += acc;
		r->fed += r->n_in;
		emit = acc + 1;
		if (emit > r->max_tokens - r->generated)
			emit = r->max_tokens - r->generated;
		for (j = 0; j < emit; j++) {
			if (r->stop_token >= 0 && s->outs[j] == (uint32_t)r->stop_token) {
				emit = j + 1;
				break;
			}
		}
		memcpy(r->hist + r->hist_len, s->outs, emit * sizeof(uint32_t));
		r->hist_len += emit;
		r->generated += emit;
		s->stats.tokens += emit;
		done = r->generated >= r->max_tokens ||
		       (r->stop_token >= 0 && s->outs[emit - 1] == (uint32_t)r->stop_token);
		if (done) {
			if (s->ops->retire)
				s->ops->retire(s->ctx, r->id);
			req_finish(s, r, s->outs, emit, 0);
		} else {
			s->batch[keep++] = r;
			r->cb(r, s->outs, emit, false, 0);
		}
	}
	s->nbatch = keep;
	/* requests cancelled from a token callback above leave now */
	for (i = 0, keep = 0; i < s->nbatch; i++) {
		struct rk_request *r = s->batch[i];

		if (!r->cancelled) {
			s->batch[keep++] = r;
			continue;
		}
		if (s->ops->retire)
			s->ops->retire(s->ctx, r->id);
		req_finish(s, r, NULL, 0, -ECANCELED);
	}
	s->nbatch = keep;
	s->completing = false;
	sched_step(s);
}

/* ---- follower --------------------------------------------------------------------- */

static int follower_round(struct rk_sched *s, const struct rk_wire_hdr *h, const uint8_t *payload)
{
	struct rk_wire_round view;
	struct rk_wire_stream st;
	uint32_t i, j;
	uint64_t *t;
	int ret;

	ret = rk_wire_decode_round(payload, h->len, &view);
	if (ret)
		return ret;
	if (view.n_streams > s->ids_cap) {
		uint32_t cap = view.n_streams * 2;

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
	for (i = 0; i < view.n_streams; i++) {
		rk_wire_round_stream(&view, i, &st);
		s->cur_ids[i] = st.stream_id;
	}
	/* a stream absent from this round has finished (the stream rule) */
	for (i = 0; i < s->nprev && s->ops->retire; i++) {
		for (j = 0; j < view.n_streams && s->cur_ids[j] != s->prev_ids[i]; j++)
			;
		if (j == view.n_streams)
			s->ops->retire(s->ctx, s->prev_ids[i]);
	}
	t = s->prev_ids;
	s->prev_ids = s->cur_ids;
	s->cur_ids = t;
	s->nprev = view.n_streams;
	s->round_id = view.round_id;
	trace(s, s->round_id, RK_SCHED_EV_LAUNCH);
	s->t_launch = rk_loop_now(s->loop);
	s->stats.rounds++;
	return s->ops->launch(s->ctx, &view, h->flags);
}

void rk_sched_complete(struct rk_sched *s, uint64_t round_id, int status)
{
	trace(s, round_id, RK_SCHED_EV_DONE);
	if (s->rank == 0) {
		if (!s->in_flight || round_id != s->round_id) {
			rk__warn(0, "completion for round %llu, expected %llu: ignored",
				 (unsigned long long)round_id, (unsigned long long)s->round_id);
			return;
		}
		leader_complete(s, status);
		return;
	}
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
		s->t_round = 0;	/* no ROUND is awaited after a failure */
	}
}

int rk_sched_on_frame(struct rk_sched *s, int peer, const struct rk_wire_hdr *h,
		      const uint8_t *payload)
{
	struct rk_wire_round_done d;
	int ret;

	switch (h->type) {
	case RK_FRAME_ROUND:
		if (s->rank == 0 || peer != 0)
			return -ENOENT;
		round_seen(s);
		ret = follower_round(s, h, payload);
		if (ret) {
			rk__err(s->rank, "round: %s", rk_strerror(ret));
			rk_sched_complete(s, s->round_id, ret);
		}
		return RK_BUSY;
	case RK_FRAME_ROUND_DONE:
		if (s->rank != 0 || rk_wire_decode_round_done(payload, h->len, &d))
			return -ENOENT;
		if (d.status) {
			rk__err(0, "rank %d: round %llu failed: %s", peer,
				(unsigned long long)d.round_id, rk_strerror(d.status));
			if (s->in_flight && d.round_id == s->round_id)
				leader_complete(s, d.status);
		}
		return RK_IDLE;
	default:
		return -ENOENT;
	}
}
