/* SPDX-License-Identifier: MIT */
/*
 * Decode-round scheduling (the leader's batcher and the followers' launcher).
 *
 * It lives in runtime/, not gpu/: it only forms ROUND frames, calls the
 * backend, and reacts to completion events, so it runs unchanged on the CPU
 * backend, the CUDA backend, or a server's own. One round is in flight at a
 * time; the next is formed in the completion handler of the last, so the
 * ROUND leaves in the same loop iteration (flushed before the loop waits).
 *
 * Work that must not run inside the call that caused it (a submitted request,
 * a completion reported from inside launch()) is deferred to a zero-delay
 * timer: the loop runs it in the same iteration, from its timer step, so the
 * stack never grows with the length of a generation. 'depth' counts the calls
 * out (backend, request callbacks, drafter, tracer) under way; 'walking' is
 * set while the batch is being iterated, when nothing may reshape it.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
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
	bool stopped;			/* no request, no backend call any more */
	bool closing;			/* destroyed: freed at the backend's last report */
	unsigned int depth;		/* calls out under way (see the top of the file) */
	uint64_t frame_max;		/* the largest ROUND payload a link takes */
	uint32_t open;			/* rounds launched here, not yet reported by the backend */

	/* leader */
	struct rk_request *qhead, *qtail;	/* waiting, FIFO */
	struct rk_request **batch;		/* running, in round order */
	uint32_t nbatch;
	uint64_t next_id;
	uint64_t round_id;
	bool in_flight;			/* round_id launched and not yet handled */
	bool walking;			/* the batch is being iterated: it keeps its shape */
	bool done_pending;		/* round_id reported from inside a call: kick handles it */
	int done_status;
	struct rk_timer kick;		/* deferred work, run from the loop's timer step */
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
	 * The last ROUND's launch() said RK_LAUNCH_OFF_LOOP: the round is not
	 * this loop's work, so its frame is reported idle (and the link's learner
	 * of arrival gaps, which predicts the next ROUND, leaves it out).
	 */
	bool off_loop;

	/* round epochs (rk_sched.h): NULL when resident is off or the region
	 * could not be made */
	enum rk_resident_mode resident;	/* rk_sched_resident() */
	struct rk_epoch *ep;
	struct rk_epoch *ep_pub;	/* leader: the shared region, when not ep */
	bool ep_view;			/* follower: ep is the leader's, read-only */
	bool ep_shared;			/* leader: ep is the one its followers map */
	bool ep_fixed;			/* the region is chosen (choose_region()) */

	struct rk_sched_stats stats;
};

static inline void trace_at(struct rk_sched *s, uint64_t round_id, enum rk_sched_event ev,
			    uint64_t t_ns)
{
	if (!s->cfg.trace)
		return;
	s->depth++;
	s->cfg.trace(s->cfg.trace_arg, round_id, ev, t_ns);
	s->depth--;
}

static inline void trace(struct rk_sched *s, uint64_t round_id, enum rk_sched_event ev)
{
	if (s->cfg.trace)
		trace_at(s, round_id, ev, rk__now_ns());
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

/* ---- calls out ------------------------------------------------------------------- */

static int be_launch(struct rk_sched *s, const struct rk_wire_round *view, unsigned int flags)
{
	int ret;

	s->depth++;
	ret = s->ops->launch(s->ctx, s, view, flags);
	s->depth--;
	if (s->rank != 0)
		s->off_loop = ret == RK_LAUNCH_OFF_LOOP;
	if (ret == RK_LAUNCH_OFF_LOOP) {
		s->stats.off_loop_rounds += s->rank != 0;
		ret = 0;
	}
	return ret;
}

static int be_token(struct rk_sched *s, uint32_t i, uint32_t j, uint32_t *tok)
{
	int ret;

	s->depth++;
	ret = s->ops->token(s->ctx, i, j, tok);
	s->depth--;
	return ret;
}

static void be_retire(struct rk_sched *s, uint64_t id)
{
	if (!s->ops->retire || s->stopped)
		return;
	s->depth++;
	s->ops->retire(s->ctx, id);
	s->depth--;
}

static void req_call(struct rk_sched *s, struct rk_request *r, const uint32_t *toks, uint32_t n,
		     bool done, int err)
{
	s->depth++;
	r->cb(r, toks, n, done, err);	/* done: the caller may free r now */
	s->depth--;
}

static void kick(struct rk_sched *s)
{
	if (!s->kick.active)
		rk_timer_start(s->loop, &s->kick, 0, 0);
}

/*
 * The region behind rk_sched_epoch(), once, before any backend takes it (at
 * rk_sched_create() on a settled world, else before the first round's
 * launch): the same-host region when there is one (rk__world_epoch()) and it
 * is not closed (a scheduler before this one used it: its rounds were its
 * own), the leader also publishing into it for its followers when its own
 * backend keeps the local one. Anything else keeps the local region.
 */
static void choose_region(struct rk_sched *s)
{
	bool opt_in = (s->ops->flags & RK_BACKEND_SHARED_EPOCH) != 0;
	struct rk_epoch *sh;

	if (s->ep_fixed)
		return;
	s->ep_fixed = true;
	if (s->resident == RK_RESIDENT_OFF || rk_world_size(s->world) < 2)
		return;
	sh = rk__world_epoch(s->world);
	if (sh && rk_epoch_current(sh) == RK_EPOCH_CLOSED)
		sh = NULL;
	if (!sh) {
		if (s->rank != 0)
			rk__info(s->rank, "round epochs: this rank's own region (the link to "
				 "rank 0 has no shared one)");
		return;
	}
	rk_epoch_hold(sh);
	if (s->rank == 0 && !opt_in) {
		s->ep_pub = sh;
		rk__info(0, "round epochs: also published in the region same-host followers map");
		return;
	}
	if (s->rank != 0 && !opt_in) {
		rk_epoch_release(sh);
		rk__info(s->rank, "round epochs: this rank's own region (the backend does not "
			 "take the shared one)");
		return;
	}
	rk_epoch_release(s->ep);	/* no backend has taken it yet */
	s->ep = sh;
	s->ep_view = s->rank != 0;
	s->ep_shared = s->rank == 0;
	rk__info(s->rank, s->rank ? "round epochs: the leader's region, shared on this host"
				  : "round epochs: one region, shared with same-host followers");
}

/*
 * Publish round @id (ROUND payload @p, @len bytes) for resident consumers in
 * @e. A refusal (a descriptor too large for the region) still moves the
 * epoch, and the consumers see that they must leave this round to the launch
 * path; it is counted, never fatal. Return: rk_epoch_publish()'s.
 */
static int publish_in(struct rk_sched *s, struct rk_epoch *e, uint64_t id, uint32_t flags,
		      const uint8_t *p, uint32_t len)
{
	int ret = rk_epoch_publish(e, id, flags, p, len);

	if (ret) {
		if (!s->stats.resident_fallbacks)
			rk__warn(s->rank, "round %llu: not published for resident consumers: %s",
				 (unsigned long long)id, rk_strerror(ret));
		s->stats.resident_fallbacks++;
	}
	return ret;
}

/*
 * Round @id in this rank's own region, right before launch(): the leader
 * once the ROUND is sent, a follower as it receives it; a follower on the
 * leader's region only counts it.
 */
static void publish(struct rk_sched *s, uint64_t id, uint32_t flags, const uint8_t *p,
		    uint32_t len)
{
	int ret;

	if (!s->ep_fixed)
		choose_region(s);
	if (!s->ep || s->ep_shared)
		return;		/* the leader's shared region: publish_shared() */
	if (s->ep_view) {
		/* the leader published it there before it sent the ROUND */
		s->stats.shared_rounds++;
		return;
	}
	ret = publish_in(s, s->ep, id, flags, p, len);
	if (ret && ret != -RK_ETOOBIG)
		return;
	s->stats.published++;
}

/*
 * Leader: round @id into the region its same-host followers map, before the
 * ROUND is sent: a follower whose loop has the ROUND finds its epoch there
 * (its launch() and its consumer decide from the same facts), and its
 * consumer starts without waiting for its loop.
 */
static void publish_shared(struct rk_sched *s, uint64_t id, uint32_t flags, const uint8_t *p,
			   uint32_t len)
{
	struct rk_epoch *e;
	int ret;

	if (!s->ep_fixed)
		choose_region(s);
	e = s->ep_shared ? s->ep : s->ep_pub;
	if (!e)
		return;
	ret = publish_in(s, e, id, flags, p, len);
	if (ret && ret != -RK_ETOOBIG)
		return;
	s->stats.shared_rounds++;
	if (e == s->ep)
		s->stats.published++;
}

struct rk_epoch *rk_sched_epoch(const struct rk_sched *s)
{
	return s ? s->ep : NULL;
}

enum rk_resident_mode rk_sched_resident(const struct rk_sched *s)
{
	return s ? s->resident : RK_RESIDENT_OFF;
}

/* ---- requests -------------------------------------------------------------------- */

void rk_request_init(struct rk_request *req)
{
	memset(req, 0, sizeof(*req));
	req->stop_token = -1;
	req->top_p = 1.0f;
	req->draft_k = -1;
}

void rk_sched_config_init(struct rk_sched_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_batch = 8;
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

/* ---- create / destroy ------------------------------------------------------------ */

static enum rk_activity kick_cb(struct rk_timer *t, uint64_t now);

/* The config's mode, auto taking the loop's RK_RESIDENT; off without resident consumers. */
static enum rk_resident_mode resident_mode(const struct rk_sched *s, const struct rk_config *lc)
{
	if (!(s->ops->flags & (RK_BACKEND_RESIDENT | RK_BACKEND_SHARED_EPOCH)))
		return RK_RESIDENT_OFF;
	if (s->cfg.resident != RK_RESIDENT_AUTO)
		return s->cfg.resident;
	return rk__config_ctuning(lc)->resident;
}

int rk_sched_create(struct rk_world *world, const struct rk_sched_config *cfg,
		    const struct rk_backend_ops *ops, void *ctx, struct rk_sched **out)
{
	const struct rk_config *lc;
	struct rk_sched *s;
	uint32_t mb;

	if (!world || !out || !ops || !ops->launch || (!ops->token && rk_world_rank(world) == 0))
		return -EINVAL;
	if (cfg && (cfg->draft_k > RK_SCHED_MAX_DRAFT ||
		    (unsigned int)cfg->resident > RK_RESIDENT_OFF))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->world = world;
	s->loop = rk_world_loop(world);
	s->ops = ops;
	s->ctx = ctx;
	s->rank = rk_world_rank(world);
	if (cfg)
		s->cfg = *cfg;
	else
		rk_sched_config_init(&s->cfg);
	if (!s->cfg.max_batch)
		s->cfg.max_batch = 8;
	if (!s->cfg.draft)
		s->cfg.draft = rk_ngram_draft;
	lc = rk_loop_config(s->loop);
	s->frame_max = lc->max_frame < RK_WIRE_MAX_PAYLOAD ? lc->max_frame : RK_WIRE_MAX_PAYLOAD;
	mb = s->cfg.max_batch;
	s->next_id = 1;
	rk_timer_init(&s->kick, kick_cb, s);
	s->batch = calloc(mb, sizeof(*s->batch));
	s->streams = calloc(mb, sizeof(*s->streams));
	s->draft_off = calloc(mb, sizeof(*s->draft_off));
	s->outs = calloc(RK_SCHED_MAX_DRAFT + 1, sizeof(*s->outs));
	if (!s->batch || !s->streams || !s->draft_off || !s->outs) {
		free(s->batch);
		free(s->streams);
		free(s->draft_off);
		free(s->outs);
		free(s);
		return -ENOMEM;
	}
	s->resident = resident_mode(s, lc);
	if (s->resident != RK_RESIDENT_OFF) {
		int ret = rk_epoch_create(rk__epoch_desc_bound(lc->max_frame), &s->ep);

		if (ret) {
			/* the launch path still runs every round */
			rk__warn(s->rank, "resident rounds off: no epoch region: %s",
				 rk_strerror(ret));
			s->ep = NULL;
			s->stats.resident_fallbacks++;
		}
	}
	/* a ready world: settle the same-host upgrades, then the region is known */
	if (rk__world_settle(world))
		choose_region(s);
	rk__world_hold(world);
	*out = s;
	return 0;
}

void rk_sched_stop(struct rk_sched *s)
{
	s->stopped = true;
	if (s->done_pending) {
		/* the backend has reported: nothing is left for the kick to do */
		s->done_pending = false;
		s->in_flight = false;
	}
	rk_timer_stop(&s->kick);
	if (s->walking)
		return;	/* the walk under way fails the rest when it ends */
	fail_batch(s, -RK_ESTOPPED);
	fail_queue(s, -RK_ESTOPPED);
}

bool rk_sched_busy(const struct rk_sched *s)
{
	return s->open > 0;
}

static void sched_free(struct rk_sched *s)
{
	free(s->batch);
	free(s->streams);
	free(s->draft_off);
	free(s->outs);
	free(s->buf);
	free(s->tokens);
	free(s->prev_ids);
	free(s->cur_ids);
	rk_epoch_release(s->ep);
	rk_epoch_release(s->ep_pub);
	free(s);
}

int rk_sched_destroy(struct rk_sched *s)
{
	if (!s)
		return 0;
	if (s->depth || s->walking)
		return -EBUSY;	/* from inside one of our callbacks */
	rk_sched_stop(s);
	if (s->ep)
		rk_epoch_close(s->ep);	/* a consumer still armed for a next round gives up */
	if (s->ep_pub)
		rk_epoch_close(s->ep_pub);	/* the followers' too */
	rk__world_release(s->world);
	/*
	 * As a libuv handle after uv_close(): nothing of the scheduler runs any
	 * more, but a backend that still holds a round holds s too, so its
	 * memory goes with the last report (rk_sched_complete() below).
	 */
	s->closing = true;
	if (!s->open)
		sched_free(s);
	return 0;
}

bool rk_sched_idle(const struct rk_sched *s)
{
	return !s->qhead && !s->nbatch && !s->in_flight;
}

size_t rk_sched_stats(const struct rk_sched *s, struct rk_sched_stats *out, size_t size)
{
	struct rk_sched_stats st = s->stats;
	const struct rk_request *r;

	st.queued = 0;
	for (r = s->qhead; r; r = r->next)	/* bounded by what was submitted */
		st.queued++;
	st.running = s->nbatch;
	return rk__stats_copy(out, size, &st, sizeof(st));
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
			r->n_draft = s->cfg.draft(s->cfg.draft_arg, r->hist, r->hist_len,
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

/* The stop came while the batch was being walked: its requests end now. */
static void stop_deferred(struct rk_sched *s)
{
	fail_batch(s, -RK_ESTOPPED);
	fail_queue(s, -RK_ESTOPPED);
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
	publish_shared(s, id, flags, s->buf, (uint32_t)len);
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
	ret = rk_wire_decode_round(s->buf, (size_t)len, &view);
	if (ret)
		goto fail;
	publish(s, id, flags, s->buf, (uint32_t)len);
	s->in_flight = true;
	trace(s, s->round_id, RK_SCHED_EV_LAUNCH);
	s->t_launch = rk_loop_now(s->loop);
	s->stats.rounds++;
	s->open++;
	ret = be_launch(s, &view, flags);
	if (ret) {
		s->open--;
		s->in_flight = false;
		s->done_pending = false;
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

/* ---- leader: completion ----------------------------------------------------------- */

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

static void leader_complete(struct rk_sched *s, int status)
{
	uint32_t i, keep = 0, n = s->nbatch, emit = 0;
	int ret;

	s->in_flight = false;
	s->done_pending = false;
	s->stats.ns_round_sum += rk_loop_now(s->loop) - s->t_launch;
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

static enum rk_activity kick_cb(struct rk_timer *t, uint64_t now)
{
	struct rk_sched *s = t->data;

	(void)now;
	if (s->done_pending)
		leader_complete(s, s->done_status);
	else
		sched_step(s);
	return RK_BUSY;
}

/* ---- follower --------------------------------------------------------------------- */

/* Tell the leader that our share of @round_id failed (a success sends nothing). */
static void follower_report(struct rk_sched *s, uint64_t round_id, int status)
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
	s->round_id = view.round_id;
	if (s->stopped)
		return -RK_ESTOPPED;	/* launched nowhere: the leader fails the round */
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
			be_retire(s, s->prev_ids[i]);
	}
	t = s->prev_ids;
	s->prev_ids = s->cur_ids;
	s->cur_ids = t;
	s->nprev = view.n_streams;
	publish(s, view.round_id, h->flags, payload, h->len);
	trace(s, s->round_id, RK_SCHED_EV_LAUNCH);
	s->t_launch = rk_loop_now(s->loop);
	s->stats.rounds++;
	s->open++;
	ret = be_launch(s, &view, h->flags);
	if (ret)
		s->open--;
	return ret;
}

void rk_sched_complete(struct rk_sched *s, uint64_t round_id, int status)
{
	if (s->open)
		s->open--;	/* the backend handed a round back */
	if (s->closing) {
		/* destroyed: touch nothing (loop, world, tracer), only count */
		if (!s->open)
			sched_free(s);
		return;
	}
	trace(s, round_id, RK_SCHED_EV_DONE);
	if (s->rank != 0) {
		follower_report(s, round_id, status);
		return;
	}
	if (!s->in_flight || s->done_pending || round_id != s->round_id) {
		/* an older one ended another way (a follower's failure): it is only
		 * counted; a round never launched is the backend's bug */
		if (round_id > s->round_id)
			rk__warn(0, "completion for round %llu, expected %llu: ignored",
				 (unsigned long long)round_id, (unsigned long long)s->round_id);
		return;
	}
	if (s->depth || s->walking) {
		/* reported from inside launch() (or another call of ours): handled
		 * from the loop, so a backend that completes at once never recurses */
		s->done_pending = true;
		s->done_status = status;
		kick(s);
		return;
	}
	leader_complete(s, status);
}

int rk_sched_on_frame(struct rk_sched *s, int peer, const struct rk_wire_hdr *h,
		      const uint8_t *payload)
{
	struct rk_wire_round_done d;
	int ret;

	if (!s)
		return -ENOENT;
	switch (h->type) {
	case RK_FRAME_ROUND:
		if (s->rank == 0 || peer != 0)
			return -ENOENT;
		ret = follower_round(s, h, payload);
		if (ret) {
			s->off_loop = false;
			if (ret != -RK_ESTOPPED)
				rk__err(s->rank, "round %llu: %s", (unsigned long long)s->round_id,
					rk_strerror(ret));
			follower_report(s, s->round_id, ret);
			return RK_BUSY;
		}
		/* a round the backend runs without this loop is not its work */
		return s->off_loop ? RK_IDLE : RK_BUSY;
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
