/* SPDX-License-Identifier: MIT */
/*
 * The leader's side of the scheduler: requests (submit, cancel, their
 * failures), admission into the running batch, forming and broadcasting each
 * ROUND and launching the leader's share, then, when the round is complete,
 * verifying drafts and handing each request its tokens (sched_int.h).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

/* ---- requests -------------------------------------------------------------------- */

void rk_request_init(struct rk_request *req)
{
	memset(req, 0, sizeof(*req));
	req->stop_token = -1;
	req->top_p = 1.0f;
	req->draft_k = -1;
}

/*
 * The fields a round reads, checked at submit and again before every round
 * (the caller must not change them, but one that does fails alone). Return:
 * the name of the first bad one, or NULL.
 */
static const char *bad_param(const struct rk_sched *s, const struct rk_request *r)
{
	if (r->stop_token < -1 || r->stop_token > (int64_t)UINT32_MAX ||
	    (s->cfg.vocab && r->stop_token >= (int64_t)s->cfg.vocab))
		return "stop_token";
	if (!isfinite(r->temperature) || r->temperature < 0.0f)
		return "temperature";
	if (!isfinite(r->top_p) || r->top_p < 0.0f || r->top_p > 1.0f)
		return "top_p";
	if (r->draft_k < -1 || r->draft_k > RK_SCHED_MAX_DRAFT)
		return "draft_k";
	return NULL;
}

/* ROUND bytes of @r's entry: its stream, inputs and drafts. */
static uint64_t round_cost(const struct rk_request *r)
{
	return RK_WIRE_ROUND_STREAM_LEN + 4ull * (r->hist_len - r->fed + r->dk);
}

static void req_finish(struct rk_sched *s, struct rk_request *r, const uint32_t *toks, uint32_t n,
		       int err)
{
	free(r->hist);
	r->hist = NULL;
	r->hist_len = r->hist_cap = 0;
	r->in_batch = false;
	r->queued = false;
	s->stats.streams_done++;
	req_call(s, r, toks, n, true, err);
}

/* @r fails alone (its stream leaves every rank); the round and the others go on. */
static void req_fail(struct rk_sched *s, struct rk_request *r, int err, const char *field)
{
	r->err_field = field;
	rk__warn(s->rank, "request %llu fails alone: %s%s%s", (unsigned long long)r->id,
		 rk_strerror(err), field ? ", field " : "", field ? field : "");
	be_retire(s, r->id);
	req_finish(s, r, NULL, 0, err);
}

/* The running requests end with @err; their streams leave the backend (unless stopped). */
static void fail_batch(struct rk_sched *s, int err)
{
	struct rk_request *r;
	uint32_t i, n = s->nbatch;

	s->nbatch = 0;
	for (i = 0; i < n; i++) {
		r = s->batch[i];
		be_retire(s, r->id);
		req_finish(s, r, NULL, 0, err);
	}
}

static void fail_queue(struct rk_sched *s, int err)
{
	struct rk_request *r;

	while ((r = s->qhead)) {
		s->qhead = r->next;
		if (!s->qhead)
			s->qtail = NULL;
		r->next = NULL;
		req_finish(s, r, NULL, 0, err);
	}
}

/* A whole round failed: its requests end, the queued ones go on with the next. */
static void round_fail(struct rk_sched *s, uint64_t round_id, int err)
{
	rk__err(s->rank, "round %llu: %s: its %u requests fail", (unsigned long long)round_id,
		rk_strerror(err), s->nbatch);
	fail_batch(s, err);
}

/* ---- forming rounds ---------------------------------------------------------------- */

static int hist_reserve(struct rk_request *r, size_t need)
{
	return rk__grow((void **)&r->hist, &r->hist_cap, need, sizeof(*r->hist), 64);
}

static int tok_reserve(struct rk_sched *s, size_t need)
{
	return rk__grow((void **)&s->tokens, &s->tok_cap, need, sizeof(*s->tokens), 1024);
}

/* FIFO, up to max_batch streams and as many bytes as one ROUND may carry. */
static void admit(struct rk_sched *s)
{
	uint64_t used = RK_WIRE_ROUND_HDR_LEN;
	struct rk_request *r;
	uint32_t i;

	for (i = 0; i < s->nbatch; i++)
		used += round_cost(s->batch[i]);
	while (s->nbatch < s->cfg.max_batch && (r = s->qhead)) {
		/* submit made sure that every request fits a ROUND alone */
		if (s->nbatch && used + round_cost(r) > s->frame_max)
			break;
		used += round_cost(r);
		s->qhead = r->next;
		if (!s->qhead)
			s->qtail = NULL;
		r->next = NULL;
		r->queued = false;
		r->in_batch = true;
		s->batch[s->nbatch++] = r;
	}
}

/* Requests whose fields turned bad since submit leave the batch, alone. */
static void drop_bad(struct rk_sched *s)
{
	const char *field;
	uint32_t i, keep = 0, n = s->nbatch;

	s->walking = true;
	for (i = 0; i < n; i++) {
		struct rk_request *r = s->batch[i];

		field = bad_param(s, r);
		if (!field && r->generated >= r->max_tokens)
			field = "max_tokens";
		if (field && !s->stopped)
			req_fail(s, r, -EINVAL, field);
		else
			s->batch[keep++] = r;
	}
	s->nbatch = keep;
	s->walking = false;
}

static int form_round(struct rk_sched *s, uint64_t id, uint32_t *flags, int64_t *len)
{
	uint64_t total = 0;
	uint32_t i, n = s->nbatch, k, remaining, off;
	int ret;

	*flags = 0;
	/* inputs and drafts, stream by stream, as the wire layout wants them */
	for (i = 0; i < n; i++) {
		struct rk_request *r = s->batch[i];

		r->n_in = (uint32_t)(r->hist_len - r->fed);
		total += r->n_in + r->dk;
	}
	ret = tok_reserve(s, total);
	if (ret)
		return ret;
	off = 0;
	s->walking = true;
	for (i = 0; i < n; i++) {
		struct rk_request *r = s->batch[i];
		struct rk_wire_stream *st = &s->streams[i];

		memcpy(s->tokens + off, r->hist + r->fed, r->n_in * sizeof(uint32_t));
		off += r->n_in;
		s->draft_off[i] = off;
		remaining = r->max_tokens - r->generated;
		k = r->dk < remaining - 1 ? r->dk : remaining - 1;
		r->n_draft = 0;
		if (k) {
			s->depth++;
			r->n_draft = s->cfg.draft(s->cfg.draft_arg, r, r->hist, r->hist_len,
						  s->tokens + off, k);
			s->depth--;
		}
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
	s->walking = false;
	*len = rk_wire_round_size(n, off);
	if (*len < 0)
		return (int)*len;
	ret = rk__grow((void **)&s->buf, &s->buf_cap, (size_t)*len, 1, 4096);
	if (ret)
		return ret;
	*len = rk_wire_encode_round(s->buf, s->buf_cap, id, s->streams, n, s->tokens);
	return *len < 0 ? (int)*len : 0;
}

void rk__sched_fail_all(struct rk_sched *s, int err)
{
	fail_batch(s, err);
	fail_queue(s, err);
}

/* The stop came while the batch was being walked: its requests end now. */
static void stop_deferred(struct rk_sched *s)
{
	rk__sched_fail_all(s, -RK_ESTOPPED);
}

static void sched_step(struct rk_sched *s)
{
	uint64_t id = s->round_id + 1;
	struct rk_wire_round view;
	uint32_t flags;
	int64_t len;
	int ret;

	if (s->in_flight || s->stopped)
		return;
	admit(s);
	drop_bad(s);
	if (s->stopped) {
		stop_deferred(s);
		return;
	}
	if (!s->nbatch) {
		if (s->qhead)
			kick(s);	/* the failures made room: admit again from the loop */
		return;
	}
	ret = form_round(s, id, &flags, &len);
	if (s->stopped) {
		stop_deferred(s);
		return;
	}
	if (ret)
		goto fail;
	s->round_id = id;
	rk__sched_publish_shared(s, id, flags, s->buf, (uint32_t)len);
	if (rk_world_size(s->world) > 1) {
		/* stamped before the broadcast: a same-host follower reads the
		 * ROUND from shared memory as soon as it is written */
		uint64_t t_sent = s->cfg.trace ? rk__now_ns() : 0;

		ret = rk_world_broadcast(s->world, RK_FRAME_ROUND, flags, s->buf, (uint32_t)len);
		if (ret)
			goto fail;
		/* Send the ROUND now, not after our own launch: the followers'
		 * start must not wait for the leader's kernel launches. */
		trace_at(s, s->round_id, RK_SCHED_EV_SENT, t_sent);
		rk__loop_flush_now(s->loop);
	}
	/* its one decode on this rank (a follower's link makes the other) */
	ret = rk_wire_decode_round(s->buf, (size_t)len, &view);
	if (ret)
		goto fail;
	s->stats.round_decodes++;
	rk__sched_publish(s, id, flags, s->buf, (uint32_t)len);
	s->in_flight = true;
	trace(s, s->round_id, RK_SCHED_EV_LAUNCH);
	s->t_launch = rk_loop_now(s->loop);
	s->stats.rounds++;
	s->open++;
	rk__sched_watch_start(s, id);
	ret = be_launch(s, &view, flags);
	if (ret) {
		s->open--;
		s->in_flight = false;
		s->done_pending = false;
		s->wd_open = false;
		goto fail;
	}
	return;
fail:
	if (s->stopped)
		return;
	round_fail(s, id, ret);
	if (s->qhead)
		kick(s);	/* the queue goes on from the loop, not from here */
}

int rk_sched_cancel(struct rk_sched *s, struct rk_request *req)
{
	struct rk_request **pp, *prev = NULL;
	uint32_t i;

	if (req->queued) {
		for (pp = &s->qhead; *pp; prev = *pp, pp = &(*pp)->next) {
			if (*pp != req)
				continue;
			*pp = req->next;
			if (s->qtail == req)
				s->qtail = prev;
			req->next = NULL;
			req_finish(s, req, NULL, 0, -ECANCELED);
			return 0;
		}
		return -ENOENT;
	}
	if (!req->in_batch)
		return -ENOENT;
	for (i = 0; i < s->nbatch && s->batch[i] != req; i++)
		;
	if (i == s->nbatch)
		return -ENOENT;
	if (s->in_flight || s->walking) {
		/* the round in flight, or the walk under way, still holds its
		 * index: it leaves before the next round is formed */
		req->cancelled = true;
		return 0;
	}
	memmove(&s->batch[i], &s->batch[i + 1], (s->nbatch - i - 1) * sizeof(*s->batch));
	s->nbatch--;
	be_retire(s, req->id);
	req_finish(s, req, NULL, 0, -ECANCELED);
	return 0;
}

int rk_sched_submit(struct rk_sched *s, struct rk_request *req)
{
	const char *field = NULL;
	uint32_t i, dk;
	int ret = -EINVAL;

	req->err_field = NULL;
	if (s->rank != 0)
		return -EPERM;
	if (s->stopped)
		return -RK_ESTOPPED;
	/* every public field, in the struct's order; the prompt is read last */
	if (!req->prompt) {
		field = "prompt";
	} else if (!req->prompt_len) {
		field = "prompt_len";
	} else if (RK_WIRE_ROUND_HDR_LEN + RK_WIRE_ROUND_STREAM_LEN +
			   4ull * ((uint64_t)req->prompt_len + RK_SCHED_MAX_DRAFT) > s->frame_max) {
		/* its first ROUND, with any drafts, must fit a frame alone */
		field = "prompt_len";
		ret = -RK_ETOOBIG;
	} else if (!req->max_tokens || (uint64_t)req->prompt_len + req->max_tokens > UINT32_MAX) {
		field = "max_tokens";
	} else if ((field = bad_param(s, req))) {
		/* named by bad_param() */
	} else if (!req->cb) {
		field = "cb";
	} else {
		for (i = 0; s->cfg.vocab && i < req->prompt_len; i++)
			if (req->prompt[i] >= s->cfg.vocab)
				break;
		if (s->cfg.vocab && i < req->prompt_len)
			field = "prompt";
	}
	if (field) {
		req->err_field = field;
		return ret;
	}
	dk = req->draft_k < 0 ? s->cfg.draft_k : (uint32_t)req->draft_k;
	req->hist = NULL;
	req->hist_len = req->hist_cap = 0;
	if (hist_reserve(req, (size_t)req->prompt_len + dk + 2))
		return -ENOMEM;
	memcpy(req->hist, req->prompt, req->prompt_len * sizeof(uint32_t));
	req->hist_len = req->prompt_len;
	req->dk = dk;
	req->fed = 0;
	req->generated = 0;
	req->id = s->next_id++;
	req->next = NULL;
	req->queued = true;
	req->in_batch = false;
	req->cancelled = false;
	if (s->qtail)
		s->qtail->next = req;
	else
		s->qhead = req;
	s->qtail = req;
	/* it joins from the loop: no callback runs before this call returns */
	if (!s->in_flight)
		kick(s);
	return 0;
}

/* ---- completion -------------------------------------------------------------------- */

/* Stream @i of the round: take the model's tokens and emit. Return: done, or -errno. */
static int stream_outputs(struct rk_sched *s, struct rk_request *r, uint32_t i, uint32_t *emitp)
{
	const uint32_t *draft = s->tokens + s->draft_off[i];
	uint32_t j, acc, emit;
	int ret;

	for (j = 0; j <= r->n_draft; j++) {
		ret = be_token(s, i, j, &s->outs[j]);
		if (ret)
			return ret;
	}
	/* accept the longest prefix of drafts the model agrees with, plus
	 * the model's own next token: acc + 1 tokens */
	for (acc = 0; acc < r->n_draft && draft[acc] == s->outs[acc]; acc++)
		;
	emit = acc + 1;
	if (emit > r->max_tokens - r->generated)
		emit = r->max_tokens - r->generated;
	for (j = 0; j < emit; j++) {
		if (r->stop_token >= 0 && s->outs[j] == (uint32_t)r->stop_token) {
			emit = j + 1;
			break;
		}
	}
	ret = hist_reserve(r, r->hist_len + emit);
	if (ret)
		return ret;
	s->stats.accepted += acc;
	r->fed += r->n_in;
	memcpy(r->hist + r->hist_len, s->outs, emit * sizeof(uint32_t));
	r->hist_len += emit;
	r->generated += emit;
	s->stats.tokens += emit;
	*emitp = emit;
	return r->generated >= r->max_tokens ||
	       (r->stop_token >= 0 && s->outs[emit - 1] == (uint32_t)r->stop_token);
}

void rk__sched_leader_complete(struct rk_sched *s, int status)
{
	uint32_t i, keep = 0, n = s->nbatch, emit = 0;
	int ret;

	s->in_flight = false;
	s->done_pending = false;
	s->stats.ns_round_sum += rk_loop_now(s->loop) - s->t_launch;
	rk__sched_watch_done(s, s->round_id, status);
	if (s->stopped)
		return;	/* rk_sched_stop() ended its requests */
	if (status) {
		round_fail(s, s->round_id, status);
		sched_step(s);
		return;
	}
	s->walking = true;
	for (i = 0; i < n; i++) {
		struct rk_request *r = s->batch[i];

		if (s->stopped) {
			s->batch[keep++] = r;	/* failed with the others below */
			continue;
		}
		if (r->cancelled) {
			be_retire(s, r->id);
			req_finish(s, r, NULL, 0, -ECANCELED);
			continue;
		}
		ret = stream_outputs(s, r, i, &emit);
		if (ret < 0) {
			req_fail(s, r, ret, NULL);
		} else if (ret) {
			be_retire(s, r->id);
			req_finish(s, r, s->outs, emit, 0);
		} else {
			s->batch[keep++] = r;
			req_call(s, r, s->outs, emit, false, 0);
		}
	}
	s->nbatch = keep;
	/* requests cancelled from a token callback above leave now */
	for (i = 0, keep = 0; i < s->nbatch; i++) {
		struct rk_request *r = s->batch[i];

		if (!r->cancelled || s->stopped) {
			s->batch[keep++] = r;
			continue;
		}
		be_retire(s, r->id);
		req_finish(s, r, NULL, 0, -ECANCELED);
	}
	s->nbatch = keep;
	s->walking = false;
	if (s->stopped) {
		stop_deferred(s);
		return;
	}
	sched_step(s);
}

void rk__sched_leader_timeout(struct rk_sched *s, int rank)
{
	uint64_t id = s->round_id;

	s->in_flight = false;
	s->done_pending = false;
	s->wd_open = false;
	s->stats.ns_round_sum += rk_loop_now(s->loop) - s->t_launch;
	/* a stop from the callback ends the queue, after the round's own requests */
	s->walking = true;
	rk__sched_watch_tell(s, id, rank);
	s->walking = false;
	round_fail(s, id, -RK_EROUNDTIMEOUT);
	if (s->stopped) {
		stop_deferred(s);
		return;
	}
	sched_step(s);
}

enum rk_activity rk__sched_kick_cb(struct rk_timer *t, uint64_t now)
{
	struct rk_sched *s = t->data;

	(void)now;
	if (s->done_pending)
		rk__sched_leader_complete(s, s->done_status);
	else
		sched_step(s);
	return RK_BUSY;
}
