/* SPDX-License-Identifier: MIT */
/*
 * Scheduler tests on a one-rank world with a fake backend whose "model" is a
 * pure function of a stream's history: it checks the stream rules (positions,
 * inputs, drafts), and the scheduler's batching, verification and retirement.
 */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime_int.h"
#include "rk_sched.h"
#include "rk_test.h"

#define MAXS 64
#define VOC 23

struct fstream {
	uint64_t id;
	uint32_t hist[4096];
	uint32_t len;		/* committed (= position of the next input) */
	uint32_t top_k;
	uint64_t seed;
	bool live;
};

struct fake {
	struct rk_loop *loop;
	struct rk_world *world;
	struct rk_sched *sched;
	struct rk_sched *target;	/* the scheduler of the round launched last */
	struct fstream st[MAXS];
	uint32_t out[MAXS][16];	/* per round index: outputs */
	uint64_t ids[MAXS];	/* per round index: the stream */
	uint64_t round_id;
	struct rk_post done;
	int launches, retires, bad;
};

/* The fake model: the next token after h[0..n). Sampled streams mix in the seed. */
static uint32_t model(const uint32_t *h, uint32_t n, uint32_t top_k, uint64_t seed)
{
	uint32_t a = n ? h[n - 1] : 7, b = n > 1 ? h[n - 2] : 3;
	uint32_t t = (a * 5 + b * 3 + (n % 4)) % VOC;

	if (top_k)
		t = (uint32_t)((t + (seed * 2654435761u + n) % 3) % VOC);
	return t;
}

static struct fstream *find(struct fake *f, uint64_t id, bool create)
{
	int i, freei = -1;

	for (i = 0; i < MAXS; i++) {
		if (f->st[i].live && f->st[i].id == id)
			return &f->st[i];
		if (!f->st[i].live && freei < 0)
			freei = i;
	}
	if (!create || freei < 0)
		return NULL;
	memset(&f->st[freei], 0, sizeof(f->st[freei]));
	f->st[freei].id = id;
	f->st[freei].live = true;
	return &f->st[freei];
}

static enum rk_activity done_cb(struct rk_post *p)
{
	struct fake *f = p->data;

	rk_sched_complete(f->target, f->round_id, 0);
	return RK_BUSY;
}

static int f_launch(void *ctx, struct rk_sched *sched, const struct rk_wire_round *r,
		    unsigned int flags)
{
	struct fake *f = ctx;
	struct rk_wire_stream ws;
	uint32_t i, j, t = 0, tmp[4200], n;
	struct fstream *s;

	(void)flags;
	f->launches++;
	for (i = 0; i < r->n_streams; i++) {
		rk_wire_round_stream(r, i, &ws);
		s = find(f, ws.stream_id, ws.position == 0);
		if (!s || s->len != ws.position) {
			f->bad++;
			return -EPROTO;
		}
		s->top_k = ws.top_k;
		s->seed = ws.seed;
		f->ids[i] = ws.stream_id;
		for (j = 0; j < ws.n_tokens; j++)
			s->hist[s->len++] = rk_wire_round_token(r, t++);
		memcpy(tmp, s->hist, s->len * sizeof(uint32_t));
		n = s->len;
		for (j = 0; j <= ws.n_draft; j++) {
			f->out[i][j] = model(tmp, n, s->top_k, s->seed);
			if (j < ws.n_draft)
				tmp[n++] = rk_wire_round_token(r, t++);
		}
	}
	f->round_id = r->round_id;
	f->target = sched;
	rk_post_init(&f->done, done_cb, f);
	rk_loop_post(f->loop, &f->done);	/* completion arrives as a loop event */
	return 0;
}

static int f_token(void *ctx, uint32_t i, uint32_t j, uint32_t *tok)
{
	*tok = ((struct fake *)ctx)->out[i][j];
	return 0;
}

static void f_retire(void *ctx, uint64_t id)
{
	struct fake *f = ctx;
	struct fstream *s = find(f, id, false);

	if (s) {
		s->live = false;
		f->retires++;
	}
}

static const struct rk_backend_ops fake_ops = {
	.launch = f_launch,
	.token = f_token,
	.retire = f_retire,
};

struct out {
	struct rk_request req;
	uint32_t toks[1024];
	uint32_t n;
	int done, err;
	struct fake *f;
};

static int *g_pending;

static void on_tokens(struct rk_request *req, const uint32_t *t, uint32_t n, bool done, int err)
{
	struct out *o = req->data;

	ck_assert_uint_le(o->n + n, 1024);
	if (n)		/* t is NULL when there are none (a final done, an error) */
		memcpy(o->toks + o->n, t, n * sizeof(*t));
	o->n += n;
	if (done) {
		o->done++;
		o->err = err;
		if (--*g_pending == 0)
			rk_loop_stop(o->f->loop);
	}
}

/* Cancel and stop tests call the scheduler from inside its callbacks. */
static struct rk_sched *g_sched;

static void fake_setup(struct fake *f, uint32_t max_batch, uint32_t draft_k)
{
	struct rk_sched_config sc = { .max_batch = max_batch, .draft_k = draft_k, .vocab = VOC };
	struct rk_config cfg;

	memset(f, 0, sizeof(*f));
	rk_config_init(&cfg);
	cfg.rank = 0;
	cfg.world_size = 1;
	ck_assert_int_eq(rk_loop_create(&cfg, &f->loop), 0);
	ck_assert_int_eq(rk_world_create(f->loop, NULL, NULL, &f->world), 0);
	ck_assert_int_eq(rk_sched_create(f->world, &sc, &fake_ops, f, &f->sched), 0);
}

static void fake_teardown(struct fake *f)
{
	ck_assert_int_eq(rk_sched_destroy(f->sched), 0);
	rk_world_destroy(f->world);
	ck_assert_int_eq(rk_loop_destroy(f->loop), 0);
}

static const uint32_t prompts[][6] = {
	{ 1, 2, 3, 1, 2, 3 }, { 4, 4, 4, 4, 4, 4 }, { 9, 8, 7, 6, 5, 4 }, { 1, 1, 2, 3, 5, 8 },
	{ 0, 1, 0, 1, 0, 1 }, { 22, 3, 22, 3, 22, 3 }, { 5, 6, 7, 8, 9, 10 }, { 2, 7, 1, 8, 2, 8 },
	{ 3, 1, 4, 1, 5, 9 }, { 1, 4, 1, 4, 2, 1 },
};
#define NPROMPT ((int)ARRAY_SIZE(prompts))

/* A greedy request of a 6-token prompt into @o, the scheduler's default draft_k. */
static void out_init(struct out *o, struct fake *f, const uint32_t *prompt, uint32_t max_tokens)
{
	memset(o, 0, sizeof(*o));
	o->f = f;
	rk_request_init(&o->req);
	o->req.prompt = prompt;
	o->req.prompt_len = 6;
	o->req.max_tokens = max_tokens;
	o->req.cb = on_tokens;
	o->req.data = o;
}

/* Generate every prompt (first @np) with the given batch and draft settings. */
static void generate(struct out *o, int first, int np, uint32_t max_batch, uint32_t draft_k,
		     bool sampled, uint32_t max_tokens, int64_t stop)
{
	struct fake f;
	int i, pending = np;

	fake_setup(&f, max_batch, draft_k);
	g_pending = &pending;
	for (i = 0; i < np; i++) {
		out_init(&o[i], &f, prompts[(first + i) % NPROMPT], max_tokens);
		o[i].req.stop_token = stop;
		o[i].req.top_k = sampled ? 5 : 0;
		o[i].req.temperature = sampled ? 0.8f : 0.0f;
		o[i].req.top_p = 1.0f;
		o[i].req.seed = 1000 + (uint64_t)(first + i);
		ck_assert_int_eq(rk_sched_submit(f.sched, &o[i].req), 0);
	}
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(f.bad, 0);
	ck_assert_int_eq(f.retires, np);
	ck_assert(rk_sched_idle(f.sched));
	fake_teardown(&f);
}

/* The reference: the fake model run token by token. */
static void reference(int i, bool sampled, uint32_t max_tokens, int64_t stop, uint32_t *t,
		      uint32_t *n)
{
	uint32_t h[2048], len = 6;

	memcpy(h, prompts[i % NPROMPT], sizeof(prompts[0]));
	*n = 0;
	while (*n < max_tokens) {
		uint32_t x = model(h, len, sampled ? 5 : 0, 1000 + (uint64_t)i);

		h[len++] = x;
		t[(*n)++] = x;
		if (stop >= 0 && x == (uint32_t)stop)
			break;
	}
}

static struct out g_a[NPROMPT], g_b[NPROMPT];

static void check_against_reference(struct out *o, int np, bool sampled, uint32_t max_tokens,
				    int64_t stop)
{
	uint32_t ref[1024], n;
	int i;

	for (i = 0; i < np; i++) {
		reference(i, sampled, max_tokens, stop, ref, &n);
		ck_assert_int_eq(o[i].done, 1);
		ck_assert_int_eq(o[i].err, 0);
		ck_assert_uint_eq(o[i].n, n);
		ck_assert_mem_eq(o[i].toks, ref, n * sizeof(uint32_t));
		ck_assert_uint_eq(o[i].req.generated, n);
	}
}

/* loop index: bit0 sampled, bit1 drafted, bit2 batch of 4 (queueing) vs solo */
START_TEST(test_matches_reference)
{
	bool sampled = _i & 1, drafted = _i & 2, batched = _i & 4;
	int np = batched ? NPROMPT : 1, i;

	if (batched) {
		generate(g_a, 0, np, 4, drafted ? 4 : 0, sampled, 40, -1);
	} else {
		np = NPROMPT;
		for (i = 0; i < NPROMPT; i++)	/* each prompt alone */
			generate(&g_a[i], i, 1, 1, drafted ? 4 : 0, sampled, 40, -1);
	}
	check_against_reference(g_a, np, sampled, 40, -1);
}
END_TEST

START_TEST(test_drafted_equals_plain)
{
	generate(g_a, 0, NPROMPT, 8, 0, _i, 64, -1);
	generate(g_b, 0, NPROMPT, 8, 5, _i, 64, -1);
	for (int i = 0; i < NPROMPT; i++) {
		ck_assert_uint_eq(g_a[i].n, g_b[i].n);
		ck_assert_mem_eq(g_a[i].toks, g_b[i].toks, g_a[i].n * sizeof(uint32_t));
	}
}
END_TEST

START_TEST(test_drafts_are_accepted)
{
	struct fake f;
	struct rk_sched_stats st;
	int pending = 1;
	struct out *o = &g_a[0];

	/* a repeating prompt: prompt lookup must propose, and the model agrees */
	fake_setup(&f, 1, 4);
	g_pending = &pending;
	out_init(o, &f, prompts[1], 200);
	ck_assert_int_eq(rk_sched_submit(f.sched, &o->req), 0);
	while (pending)
		rk_loop_run(f.loop, RK_RUN_DEFAULT);
	rk_sched_stats(f.sched, &st, sizeof(st));
	ck_assert_uint_eq(st.tokens, 200);
	ck_assert_uint_gt(st.drafted, 0);
	ck_assert_uint_gt(st.accepted, 0);
	ck_assert_uint_lt(st.rounds, 200);	/* accepted drafts save rounds */
	fake_teardown(&f);
}
END_TEST

/* The first token callback sees the gauges of a round in flight. */
static struct rk_sched_stats g_gauges;
static int g_gauge_calls;

static void on_tokens_gauges(struct rk_request *req, const uint32_t *t, uint32_t n, bool done,
			     int err)
{
	struct out *o = req->data;

	if (n && !g_gauge_calls++)
		rk_sched_stats(o->f->sched, &g_gauges, sizeof(g_gauges));
	on_tokens(req, t, n, done, err);
}

/* queued and running: 3 requests through a batch of 2, then none of either. */
START_TEST(test_stats_gauges)
{
	struct fake f;
	struct rk_sched_stats st;
	int i, pending = 3;

	fake_setup(&f, 2, 0);
	g_pending = &pending;
	g_gauge_calls = 0;
	for (i = 0; i < 3; i++) {
		out_init(&g_a[i], &f, prompts[i], 4);
		g_a[i].req.cb = on_tokens_gauges;
		ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[i].req), 0);
	}
	rk_sched_stats(f.sched, &st, sizeof(st));
	ck_assert_uint_eq(st.queued, 3);
	ck_assert_uint_eq(st.running, 0);
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_uint_eq(g_gauges.queued, 1);
	ck_assert_uint_eq(g_gauges.running, 2);
	rk_sched_stats(f.sched, &st, sizeof(st));
	ck_assert_uint_eq(st.queued, 0);
	ck_assert_uint_eq(st.running, 0);
	fake_teardown(&f);
}
END_TEST

START_TEST(test_stop_token)
{
	uint32_t ref[1024], n;

	int64_t stop;

	reference(2, false, 100, -1, ref, &n);
	stop = ref[10];
	generate(g_a, 2, 1, 1, 3, false, 100, stop);
	reference(2, false, 100, stop, ref, &n);
	ck_assert_uint_le(n, 11);
	ck_assert_uint_eq(g_a[0].n, n);
	ck_assert_mem_eq(g_a[0].toks, ref, n * sizeof(uint32_t));
}
END_TEST

START_TEST(test_submit_errors)
{
	struct fake f;
	struct rk_request r;

	fake_setup(&f, 2, 0);
	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(rk_sched_submit(f.sched, &r), -EINVAL);
	ck_assert_str_eq(r.err_field, "prompt");
	r.prompt = prompts[0];
	r.prompt_len = 6;
	r.max_tokens = 1;
	ck_assert_int_eq(rk_sched_submit(f.sched, &r), -EINVAL);	/* no callback */
	ck_assert_str_eq(r.err_field, "cb");
	r.cb = on_tokens;
	r.draft_k = RK_SCHED_MAX_DRAFT + 1;
	ck_assert_int_eq(rk_sched_submit(f.sched, &r), -EINVAL);
	ck_assert_str_eq(r.err_field, "draft_k");
	r.draft_k = 0;
	r.cb = NULL;
	rk_sched_stop(f.sched);
	r.cb = on_tokens;
	ck_assert_int_eq(rk_sched_submit(f.sched, &r), -RK_ESTOPPED);
	fake_teardown(&f);
}
END_TEST

/* Cancel: a queued request ends at once; a running one is cancelled from its
 * own token callback and leaves before the next round; the others finish. */
static uint32_t g_cancel_after;

static void on_tokens_cancel(struct rk_request *req, const uint32_t *t, uint32_t n, bool done,
			     int err)
{
	struct out *o = req->data;

	on_tokens(req, t, n, done, err);
	if (!done && o->n >= g_cancel_after)
		ck_assert_int_eq(rk_sched_cancel(g_sched, req), 0);
}

START_TEST(test_cancel)
{
	struct fake f;
	struct rk_sched_stats st;
	int i, pending = 3;
	uint32_t ref[1024], n;

	fake_setup(&f, 2, 0);
	g_pending = &pending;
	g_sched = f.sched;
	g_cancel_after = 5;
	for (i = 0; i < 3; i++) {
		memset(&g_a[i], 0, sizeof(g_a[i]));
		g_a[i].f = &f;
		rk_request_init(&g_a[i].req);
		g_a[i].req.draft_k = 0;
		g_a[i].req.prompt = prompts[i];
		g_a[i].req.prompt_len = 6;
		g_a[i].req.max_tokens = 30;
		g_a[i].req.seed = 1000 + (uint64_t)i;
		g_a[i].req.cb = i == 1 ? on_tokens_cancel : on_tokens;
		g_a[i].req.data = &g_a[i];
	}
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[i].req), 0);
	/* max_batch 2: request 2 waits in the queue; cancel it there */
	ck_assert_int_eq(rk_sched_cancel(f.sched, &g_a[2].req), 0);
	ck_assert_int_eq(g_a[2].done, 1);
	ck_assert_int_eq(g_a[2].err, -ECANCELED);
	ck_assert_uint_eq(g_a[2].n, 0);
	ck_assert_int_eq(rk_sched_cancel(f.sched, &g_a[2].req), -ENOENT);
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	/* request 1 stopped right after its 5th token, with -ECANCELED */
	ck_assert_int_eq(g_a[1].done, 1);
	ck_assert_int_eq(g_a[1].err, -ECANCELED);
	ck_assert_uint_eq(g_a[1].n, 5);
	/* request 0 is untouched by its neighbour's cancellation */
	reference(0, false, 30, -1, ref, &n);
	ck_assert_int_eq(g_a[0].err, 0);
	ck_assert_uint_eq(g_a[0].n, n);
	ck_assert_mem_eq(g_a[0].toks, ref, n * sizeof(uint32_t));
	/* the backend retired both streams it had seen, and saw the right positions */
	ck_assert_int_eq(f.retires, 2);
	ck_assert_int_eq(f.bad, 0);
	rk_sched_stats(f.sched, &st, sizeof(st));
	ck_assert_uint_eq(st.tokens, 30 + 5);
	ck_assert(rk_sched_idle(f.sched));
	fake_teardown(&f);
}
END_TEST

START_TEST(test_ngram)
{
	uint32_t h[] = { 1, 2, 3, 4, 1, 2, 3 }, out[8];

	ck_assert_uint_eq(rk_ngram_draft(NULL, h, 7, out, 3), 3);	/* "1 2 3" -> 4 1 2 */
	ck_assert_uint_eq(out[0], 4);
	ck_assert_uint_eq(out[1], 1);
	ck_assert_uint_eq(out[2], 2);
	ck_assert_uint_eq(rk_ngram_draft(NULL, h, 7, out, 1), 1);
	{
		uint32_t h2[] = { 5, 6, 7, 8, 9, 5, 6 };

		ck_assert_uint_eq(rk_ngram_draft(NULL, h2, 7, out, 2), 2);
		ck_assert_uint_eq(out[0], 7);
		ck_assert_uint_eq(out[1], 8);
	}
	{
		uint32_t h3[] = { 1, 2, 3 };

		ck_assert_uint_eq(rk_ngram_draft(NULL, h3, 3, out, 4), 0);
	}
}
END_TEST

struct tr {
	uint64_t round[512];
	enum rk_sched_event ev[512];
	uint64_t t[512];
	int n;
};

static void trace_cb(void *arg, uint64_t round_id, enum rk_sched_event ev, uint64_t t_ns)
{
	struct tr *tr = arg;

	ck_assert_int_lt(tr->n, 512);
	tr->round[tr->n] = round_id;
	tr->ev[tr->n] = ev;
	tr->t[tr->n++] = t_ns;
}

/* The round tracer sees launch then done for every round, in time order. */
START_TEST(test_trace)
{
	struct rk_sched_config sc = { .max_batch = 1, .trace = trace_cb };
	struct rk_sched_stats st;
	struct tr tr = { .n = 0 };
	struct fake f;
	struct out *o = &g_a[0];
	int pending = 1, i;

	sc.trace_arg = &tr;
	fake_setup(&f, 1, 0);
	ck_assert_int_eq(rk_sched_destroy(f.sched), 0);
	ck_assert_int_eq(rk_sched_create(f.world, &sc, &fake_ops, &f, &f.sched), 0);
	g_pending = &pending;
	out_init(o, &f, prompts[0], 20);
	ck_assert_int_eq(rk_sched_submit(f.sched, &o->req), 0);
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	rk_sched_stats(f.sched, &st, sizeof(st));
	ck_assert_uint_eq(st.rounds, 20);
	ck_assert_int_eq(tr.n, 40);	/* TP1: nothing is sent */
	for (i = 0; i < tr.n; i++) {
		ck_assert_uint_eq(tr.round[i], (uint64_t)i / 2 + 1);
		ck_assert_int_eq(tr.ev[i], i % 2 ? RK_SCHED_EV_DONE : RK_SCHED_EV_LAUNCH);
		if (i)
			ck_assert_uint_ge(tr.t[i], tr.t[i - 1]);
	}
	fake_teardown(&f);
}
END_TEST

/* ---- errors belong to their request ---------------------------------------------------- */

#define BAD_AT 3	/* the request of the ten that is made bad */

/* Requests @o[0..np) but @skip each ended once, as the greedy reference of @max_tokens. */
static void check_others(const struct out *o, int np, int skip, uint32_t max_tokens)
{
	uint32_t ref[1024], n;
	int i;

	for (i = 0; i < np; i++) {
		if (i == skip)
			continue;
		reference(i, false, max_tokens, -1, ref, &n);
		ck_assert_int_eq(o[i].done, 1);
		ck_assert_int_eq(o[i].err, 0);
		ck_assert_uint_eq(o[i].n, n);
		ck_assert_mem_eq(o[i].toks, ref, n * sizeof(uint32_t));
	}
}

/* Make @r bad in way @i; return the error and the field submit must name. */
static int make_bad(struct rk_request *r, int i, const char **field)
{
	static const uint32_t big_token[6] = { 1, 2, VOC, 3, 4, 5 };

	switch (i) {
	case 0: r->prompt = NULL;			*field = "prompt";	break;
	case 1: r->prompt_len = 0;			*field = "prompt_len";	break;
	case 2: r->max_tokens = 0;			*field = "max_tokens";	break;
	case 3: r->max_tokens = UINT32_MAX;		*field = "max_tokens";	break;
	case 4: r->stop_token = -2;			*field = "stop_token";	break;
	case 5: r->stop_token = VOC;			*field = "stop_token";	break;
	case 6: r->temperature = -1.0f;			*field = "temperature";	break;
	case 7: r->temperature = __builtin_nanf("");	*field = "temperature";	break;
	case 8: r->top_p = 1.5f;			*field = "top_p";	break;
	case 9: r->draft_k = -2;			*field = "draft_k";	break;
	case 10: r->cb = NULL;				*field = "cb";		break;
	case 11: r->prompt = big_token;			*field = "prompt";	break;
	default: r->prompt_len = 2u << 20;		*field = "prompt_len";
		return -RK_ETOOBIG;	/* 8 MiB of prompt: past max_frame (4 MiB) */
	}
	return -EINVAL;
}
#define N_BAD 13

/* Ten requests, one of them bad: submit refuses it alone and names the field;
 * the other nine run as if it had never been there. */
START_TEST(test_bad_field_fails_alone)
{
	const char *field = NULL;
	struct fake f;
	int i, err, pending = NPROMPT - 1;

	fake_setup(&f, 4, 0);
	g_pending = &pending;
	for (i = 0; i < NPROMPT; i++) {
		out_init(&g_a[i], &f, prompts[i], 30);
		g_a[i].req.seed = 1000 + (uint64_t)i;
		if (i != BAD_AT) {
			ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[i].req), 0);
			ck_assert_ptr_null(g_a[i].req.err_field);
			continue;
		}
		err = make_bad(&g_a[i].req, _i, &field);
		ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[i].req), err);
		ck_assert_ptr_nonnull(g_a[i].req.err_field);
		ck_assert_str_eq(g_a[i].req.err_field, field);
	}
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(g_a[BAD_AT].done, 0);	/* refused: never called back */
	check_others(g_a, NPROMPT, BAD_AT, 30);
	ck_assert_int_eq(f.bad, 0);
	fake_teardown(&f);
}
END_TEST

/* A request whose field turns bad after submit (from its own callback, 5
 * tokens in) fails alone at the next round, with the field named; its stream
 * is retired and the others run on. */
static void on_tokens_spoil(struct rk_request *req, const uint32_t *t, uint32_t n, bool done,
			    int err)
{
	struct out *o = req->data;

	on_tokens(req, t, n, done, err);
	if (!done && o->n >= 5)
		req->top_p = 2.0f;	/* a contract breach the scheduler survives */
}

START_TEST(test_field_turns_bad)
{
	struct fake f;
	int i, pending = 3;

	fake_setup(&f, 4, 0);
	g_pending = &pending;
	for (i = 0; i < 3; i++) {
		out_init(&g_a[i], &f, prompts[i], 30);
		if (i == 1)
			g_a[i].req.cb = on_tokens_spoil;
		ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[i].req), 0);
	}
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(g_a[1].done, 1);
	ck_assert_int_eq(g_a[1].err, -EINVAL);
	ck_assert_str_eq(g_a[1].req.err_field, "top_p");
	ck_assert_uint_eq(g_a[1].n, 5);
	check_others(g_a, 3, 1, 30);
	ck_assert_int_eq(f.retires, 3);
	ck_assert_int_eq(f.bad, 0);
	fake_teardown(&f);
}
END_TEST

/* The backend fails one stream: token() for it says -EIO from its 4th round on. */
static uint64_t g_fail_id;

static int f_token_failing(void *ctx, uint32_t i, uint32_t j, uint32_t *tok)
{
	struct fake *f = ctx;

	if (f->round_id >= 4 && f->ids[i] == g_fail_id)
		return -EIO;
	return f_token(ctx, i, j, tok);
}

static const struct rk_backend_ops failing_ops = {
	.launch = f_launch,
	.token = f_token_failing,
	.retire = f_retire,
};

START_TEST(test_backend_fails_one_stream)
{
	struct rk_sched_config sc;
	struct fake f;
	int i, pending = 4;

	fake_setup(&f, 4, 0);
	ck_assert_int_eq(rk_sched_destroy(f.sched), 0);
	rk_sched_config_init(&sc);
	sc.max_batch = 4;
	ck_assert_int_eq(rk_sched_create(f.world, &sc, &failing_ops, &f, &f.sched), 0);
	g_pending = &pending;
	for (i = 0; i < 4; i++) {
		out_init(&g_a[i], &f, prompts[i], 30);
		ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[i].req), 0);
	}
	g_fail_id = g_a[2].req.id;
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(g_a[2].done, 1);
	ck_assert_int_eq(g_a[2].err, -EIO);
	ck_assert_uint_eq(g_a[2].n, 3);		/* rounds 1-3 gave a token each */
	check_others(g_a, 4, 2, 30);
	ck_assert_int_eq(f.retires, 4);
	fake_teardown(&f);
}
END_TEST

/* rk_request_init() on a zeroed request: it runs to max_tokens, through the
 * token 0 that a zeroed stop_token would have stopped at. */
START_TEST(test_zeroed_then_init)
{
	uint32_t ref[1024], n, i;
	struct out *o = &g_a[0];
	bool has_zero = false;
	struct fake f;
	int pending = 1;

	reference(2, false, 200, -1, ref, &n);
	for (i = 0; i < n; i++)
		has_zero |= ref[i] == 0;
	ck_assert_msg(has_zero, "the reference must emit token 0 for this test to mean anything");
	fake_setup(&f, 1, 0);
	g_pending = &pending;
	memset(o, 0, sizeof(*o));
	o->f = &f;
	rk_request_init(&o->req);
	o->req.prompt = prompts[2];
	o->req.prompt_len = 6;
	o->req.max_tokens = 200;
	o->req.cb = on_tokens;
	o->req.data = o;
	ck_assert_int_eq(rk_sched_submit(f.sched, &o->req), 0);
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	ck_assert_int_eq(o->err, 0);
	ck_assert_uint_eq(o->n, 200);
	ck_assert_uint_eq(o->req.generated, 200);
	ck_assert_mem_eq(o->toks, ref, 200 * sizeof(uint32_t));
	fake_teardown(&f);
}
END_TEST

/* ---- re-entrancy: completing inside launch() -------------------------------------------- */

/*
 * A backend that completes every round inside launch(), as a one-rank CPU
 * backend computing inline would. It records whether launch() was ever entered
 * while another launch() was on the stack, and how deep below the first
 * launch() the stack went.
 */
struct deep {
	struct rk_loop *loop;
	struct rk_world *world;
	struct rk_sched *sched;
	struct rk_request req;
	bool fail;			/* launch() refuses instead */
	uint64_t round;
	uint32_t n, tokens_max;
	int done, err;
	int in_launch, nested;
	uintptr_t sp0, depth_max;
	bool in_submit;
	int cb_in_submit;
	int line;			/* the thread's failure, 0 = none */
};

static int deep_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *r,
		       unsigned int flags)
{
	struct deep *d = ctx;
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);

	(void)flags;
	if (d->fail)
		return -EIO;
	if (d->in_launch)
		d->nested++;
	d->in_launch++;
	if (!d->sp0)
		d->sp0 = sp;
	if (sp < d->sp0 && d->sp0 - sp > d->depth_max)
		d->depth_max = d->sp0 - sp;
	d->round = r->round_id;
	rk_sched_complete(s, r->round_id, 0);	/* done at once */
	d->in_launch--;
	return 0;
}

static int deep_token(void *ctx, uint32_t i, uint32_t j, uint32_t *tok)
{
	struct deep *d = ctx;

	*tok = (uint32_t)(d->round + i + j) % 7;
	return 0;
}

static const struct rk_backend_ops deep_ops = {
	.launch = deep_launch,
	.token = deep_token,
};

static void deep_cb(struct rk_request *req, const uint32_t *t, uint32_t n, bool done, int err)
{
	struct deep *d = req->data;

	(void)t;
	if (d->in_submit)
		d->cb_in_submit++;
	d->n += n;
	if (done) {
		d->done++;
		d->err = err;
		rk_loop_stop(d->loop);
	}
}

#define D_FAIL(d) do { (d)->line = __LINE__; goto out; } while (0)

/* The thread body: no Check assertions here, the test thread checks. */
static void *deep_main(void *arg)
{
	static const uint32_t prompt[3] = { 1, 2, 3 };
	struct deep *d = arg;
	struct rk_config c;

	rk_config_init(&c);
	c.rank = 0;
	c.world_size = 1;
	if (rk_loop_create(&c, &d->loop))
		D_FAIL(d);
	if (rk_world_create(d->loop, NULL, NULL, &d->world))
		D_FAIL(d);
	if (rk_sched_create(d->world, NULL, &deep_ops, d, &d->sched))
		D_FAIL(d);
	rk_request_init(&d->req);
	d->req.prompt = prompt;
	d->req.prompt_len = 3;
	d->req.max_tokens = d->tokens_max;
	d->req.cb = deep_cb;
	d->req.data = d;
	d->in_submit = true;
	if (rk_sched_submit(d->sched, &d->req))
		D_FAIL(d);
	d->in_submit = false;
	while (!d->done)
		if (rk_loop_run(d->loop, RK_RUN_DEFAULT) < 0)
			D_FAIL(d);
out:
	if (d->sched && rk_sched_destroy(d->sched) && !d->line)
		d->line = __LINE__;
	if (d->world && rk_world_destroy(d->world) && !d->line)
		d->line = __LINE__;
	if (d->loop && rk_loop_destroy(d->loop) && !d->line)
		d->line = __LINE__;
	return NULL;
}

/* Run deep_main() on a thread with a 1 MiB stack. */
static void deep_run(struct deep *d)
{
	pthread_attr_t attr;
	pthread_t th;

	ck_assert_int_eq(pthread_attr_init(&attr), 0);
	ck_assert_int_eq(pthread_attr_setstacksize(&attr, 1u << 20), 0);
	ck_assert_int_eq(pthread_create(&th, &attr, deep_main, d), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	pthread_attr_destroy(&attr);
	ck_assert_msg(!d->line, "the rank thread failed at line %d", d->line);
}

/* 4096 tokens, each round completed inside launch(), on a 1 MiB stack: no
 * launch() inside another, and the stack stays as deep as one round needs. */
START_TEST(test_complete_inside_launch)
{
	struct deep *d = calloc(1, sizeof(*d));

	d->tokens_max = 4096;
	deep_run(d);
	ck_assert_int_eq(d->done, 1);
	ck_assert_int_eq(d->err, 0);
	ck_assert_uint_eq(d->n, 4096);
	ck_assert_uint_eq(d->round, 4096);
	ck_assert_int_eq(d->nested, 0);
	ck_assert_uint_lt(d->depth_max, 64u << 10);
	ck_assert_int_eq(d->cb_in_submit, 0);
	free(d);
}
END_TEST

/* A request's callbacks never run inside the rk_sched_submit() that queued it:
 * not when its round completes inside launch() (0), nor when launch() fails (1). */
START_TEST(test_no_callback_inside_submit)
{
	struct deep *d = calloc(1, sizeof(*d));

	d->tokens_max = 1;
	d->fail = _i == 1;
	deep_run(d);
	ck_assert_int_eq(d->done, 1);
	ck_assert_int_eq(d->err, _i == 1 ? -EIO : 0);
	ck_assert_int_eq(d->cb_in_submit, 0);
	free(d);
}
END_TEST

/* rk_sched_stop() from a token callback in the middle of a round's walk:
 * every request ends exactly once, the rest with -RK_ESTOPPED; and
 * rk_sched_destroy() from a callback refuses. */
static void on_tokens_stop(struct rk_request *req, const uint32_t *t, uint32_t n, bool done,
			   int err)
{
	struct out *o = req->data;

	on_tokens(req, t, n, done, err);
	if (!done && o->n == 3) {
		ck_assert_int_eq(rk_sched_destroy(g_sched), -EBUSY);
		rk_sched_stop(g_sched);
		ck_assert_int_eq(rk_sched_submit(g_sched, &g_b[0].req), -RK_ESTOPPED);
	}
}

START_TEST(test_stop_from_callback)
{
	struct fake f;
	int i, pending = 4;

	fake_setup(&f, 4, 0);
	g_pending = &pending;
	g_sched = f.sched;
	out_init(&g_b[0], &f, prompts[0], 5);
	for (i = 0; i < 4; i++) {
		out_init(&g_a[i], &f, prompts[i], 30);
		if (i == 1)
			g_a[i].req.cb = on_tokens_stop;
		ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[i].req), 0);
	}
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(g_a[i].done, 1);
		ck_assert_int_eq(g_a[i].err, -RK_ESTOPPED);
		/* the walk stopped at request 1: 0 and 1 had their third token */
		ck_assert_uint_eq(g_a[i].n, i <= 1 ? 3 : 2);
	}
	ck_assert_int_eq(g_b[0].done, 0);
	ck_assert(rk_sched_idle(f.sched));
	fake_teardown(&f);
}
END_TEST

/* ---- teardown orders: a two-rank world, both loops pumped in this thread ----------------- */

/*
 * A backend in an allocation of its own, so that a call into it after its
 * teardown is a use after free that ASan reports. Completion comes from a
 * post; as under tensor parallelism, the leader's share of a round completes
 * only once the follower has launched it too (g_f_round), so a follower that
 * launches nothing holds the leader's round until the leader aborts it.
 */
struct tb {
	struct rk_loop *loop;
	struct rk_world *w;		/* set: a follower sends a message per round */
	uint64_t msgs;			/* leader: messages received (tb_frame) */
	struct rk_post post;
	struct rk_sched *target;
	uint64_t round;
	bool held;			/* launched; the post has not reported it */
	bool leader;
	bool abort;			/* a peer failed: report what is held, failed */
	uint32_t n_streams;
};

static uint64_t g_f_round;		/* the last round the follower launched */

#define TB_TAG	0x7462u			/* the backend's messages (tb_frame) */

static enum rk_activity tb_done(struct rk_post *p)
{
	struct tb *b = p->data;

	if (!b->abort && b->leader && g_f_round < b->round) {
		rk_loop_post(b->loop, p);	/* look again next iteration */
		return RK_IDLE;
	}
	if (b->w && !b->leader)		/* as a follower's partials would go */
		ck_assert_int_eq(rk_world_send_user(b->w, 0, TB_TAG, &b->round,
						    sizeof(b->round)), 0);
	b->held = false;
	rk_sched_complete(b->target, b->round, b->abort ? -ECONNRESET : 0);
	return RK_BUSY;
}

static int tb_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *r,
		     unsigned int flags)
{
	struct tb *b = ctx;

	(void)flags;
	if (b->held || b->abort)
		return -EBUSY;
	b->target = s;
	b->round = r->round_id;
	b->n_streams = r->n_streams;
	b->held = true;
	if (!b->leader)
		g_f_round = r->round_id;
	rk_loop_post(b->loop, &b->post);
	return 0;
}

static int tb_token(void *ctx, uint32_t i, uint32_t j, uint32_t *tok)
{
	struct tb *b = ctx;

	if (i >= b->n_streams)
		return -EINVAL;
	*tok = (uint32_t)(b->round * 3 + i + j) % VOC;
	return 0;
}

static void tb_retire(void *ctx, uint64_t id)
{
	(void)ctx;
	(void)id;
}

/* The leader gets the follower's messages from the scheduler, never from the world. */
static int tb_frame(void *ctx, int peer, const struct rk_wire_user *msg)
{
	struct tb *b = ctx;

	if (!b->leader || peer != 1 || msg->tag != TB_TAG || msg->len != sizeof(uint64_t))
		return -EPROTO;
	b->msgs++;
	return RK_BUSY;
}

static const struct rk_backend_ops tb_ops = {
	.launch = tb_launch,
	.token = tb_token,
	.retire = tb_retire,
	.frame = tb_frame,
	.user_tag = TB_TAG,
	.user_tags = 1,
};

static struct tb *tb_create(struct rk_loop *loop, bool leader)
{
	struct tb *b = calloc(1, sizeof(*b));

	ck_assert_ptr_nonnull(b);
	b->loop = loop;
	b->leader = leader;
	rk_post_init(&b->post, tb_done, b);
	return b;
}

/* -EBUSY while it holds a round, as toy_cpu_destroy(). */
static int tb_destroy(struct tb *b)
{
	if (b->held)
		return -EBUSY;
	free(b);
	return 0;
}

struct trank {
	struct rk_loop *loop;
	struct rk_world *w;
	struct rk_sched *s;
	struct tb *b;
	int ready, peer_errs;
	uint64_t offered[RK_FRAME__COUNT];	/* frames the world's callback got, by type */
	uint64_t offered_tb;		/* ...of them USER frames of the backend's tag */
	uint64_t offered_app;		/* ...and of the application's own tag */
};

static void tr_ready(struct rk_world *w, void *arg)
{
	(void)w;
	((struct trank *)arg)->ready++;
}

static enum rk_activity tr_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct trank *t = arg;
	struct rk_wire_user u;

	(void)w;
	(void)peer;
	/* the scheduler takes its own: ROUND, ROUND_DONE, the backend's tag */
	t->offered[h->type]++;
	if (h->type == RK_FRAME_USER && !rk_wire_decode_user(payload, h->len, &u)) {
		t->offered_tb += u.tag == TB_TAG;
		t->offered_app += u.tag == TB_TAG + 1;
	}
	return RK_IDLE;
}

/* What a server does when a rank dies: stop generating, fail what waits for it. */
static void tr_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct trank *t = arg;

	(void)w;
	(void)rank;
	(void)err;
	t->peer_errs++;
	if (t->s)
		rk_sched_stop(t->s);
	if (t->b)
		t->b->abort = true;
}

static const struct rk_world_ops tr_ops = {
	.ready = tr_ready,
	.frame = tr_frame,
	.peer_error = tr_peer_error,
};

/* One NOWAIT iteration of each live loop; a short nap when both were idle. */
static void tr_pump(struct trank *r)
{
	struct rk_loop_stats a, b;
	uint64_t ev = 0;
	int i;

	for (i = 0; i < 2; i++) {
		if (!r[i].loop)
			continue;
		rk_loop_stats(r[i].loop, &a, sizeof(a));
		ck_assert_int_ge(rk_loop_run(r[i].loop, RK_RUN_NOWAIT), 0);
		rk_loop_stats(r[i].loop, &b, sizeof(b));
		ev += b.events - a.events;
	}
	if (!ev)
		usleep(100);
}

#define TR_PUMP_UNTIL(r, cond)								\
	do {										\
		uint64_t dl_ = rk_test_deadline_ms(10000);			\
		while (!(cond)) {							\
			ck_assert_msg(rk_test_now_ns() < dl_, "timed out: %s", #cond);	\
			tr_pump(r);							\
		}									\
	} while (0)

static void tr_start(struct trank *r)
{
	uint64_t deadline = rk_test_deadline_ms(10000);
	struct rk_sched_config sc;
	atomic_int port = 0;
	struct rk_config c;
	int i;

	memset(r, 0, 2 * sizeof(*r));
	g_f_round = 0;
	for (i = 0; i < 2; i++) {
		rk_config_init(&c);
		c.rank = i;
		c.world_size = 2;
		c.session_id = 0x7464;
		ck_assert_int_eq(rk_test_join(&c, &port, deadline, &tr_ops, &r[i], &r[i].loop,
					      &r[i].w), 0);
		r[i].b = tb_create(r[i].loop, i == 0);
		rk_sched_config_init(&sc);
		sc.max_batch = 4;
		ck_assert_int_eq(rk_sched_create(r[i].w, &sc, &tb_ops, r[i].b, &r[i].s), 0);
	}
	TR_PUMP_UNTIL(r, r[0].ready && r[1].ready);
}

/* Whatever is left of rank @t, in the documented order: scheduler, backend, world, loop. */
static void tr_down(struct trank *t, struct trank *all)
{
	if (t->s) {
		ck_assert_int_eq(rk_sched_destroy(t->s), 0);
		t->s = NULL;
	}
	if (t->b) {
		TR_PUMP_UNTIL(all, !t->b->held);
		ck_assert_int_eq(tb_destroy(t->b), 0);
		t->b = NULL;
	}
	if (t->w) {
		ck_assert_int_eq(rk_world_destroy(t->w), 0);
		t->w = NULL;
	}
	ck_assert_int_eq(rk_loop_run(t->loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(rk_loop_destroy(t->loop), 0);
	t->loop = NULL;
}

enum { TD_STOP_DRAIN, TD_SCHED_THEN_WORLD, TD_WORLD_THEN_SCHED, TD_BACKEND_FIRST,
       TD_BACKEND_FIRST_IDLE, TD_FOLLOWER_FIRST, TD_FOLLOWER_STOPS, TD__COUNT };

static void on_tokens_quiet(struct rk_request *req, const uint32_t *t, uint32_t n, bool done,
			    int err)
{
	struct out *o = req->data;

	if (n && o->n + n <= ARRAY_SIZE(o->toks))
		memcpy(o->toks + o->n, t, n * sizeof(*t));
	o->n += n;
	if (done) {
		o->done++;
		o->err = err;
	}
}

static int tr_done(void)
{
	int i, n = 0;

	for (i = 0; i < 4; i++)
		n += g_a[i].done;
	return n;
}

static uint64_t tr_rounds(struct trank *t)
{
	struct rk_sched_stats st;

	rk_sched_stats(t->s, &st, sizeof(st));
	return st.rounds;
}

/*
 * Each teardown order, mid-generation (a round in flight whose completion is
 * a post not yet run), of the leader or of the follower: the library makes
 * the order safe or refuses it (-EBUSY) until it is, every request ends
 * exactly once, and nothing reaches a destroyed object (run under ASan).
 */
START_TEST(test_teardown_order)
{
	struct trank r[2];
	uint64_t rounds;
	int i;

	tr_start(r);
	for (i = 0; i < 4; i++) {
		out_init(&g_a[i], NULL, prompts[i], _i == TD_BACKEND_FIRST_IDLE ? 8 : 400);
		g_a[i].req.cb = on_tokens_quiet;
		ck_assert_int_eq(rk_sched_submit(r[0].s, &g_a[i].req), 0);
	}
	out_init(&g_b[0], NULL, prompts[0], 8);
	g_b[0].req.cb = on_tokens_quiet;
	if (_i == TD_BACKEND_FIRST_IDLE)
		TR_PUMP_UNTIL(r, tr_done() == 4);
	else
		TR_PUMP_UNTIL(r, tr_rounds(&r[0]) >= 3 && rk_sched_busy(r[0].s));

	switch (_i) {
	case TD_STOP_DRAIN:
		rk_sched_stop(r[0].s);
		ck_assert_int_eq(tr_done(), 4);
		TR_PUMP_UNTIL(r, !rk_sched_busy(r[0].s));
		break;
	case TD_SCHED_THEN_WORLD:
		/* destroyed with its round held: the report frees it, later */
		ck_assert(rk_sched_busy(r[0].s));
		ck_assert_int_eq(rk_sched_destroy(r[0].s), 0);
		r[0].s = NULL;
		ck_assert_int_eq(tr_done(), 4);
		ck_assert(r[0].b->held);
		ck_assert_int_eq(rk_world_destroy(r[0].w), 0);
		r[0].w = NULL;
		break;
	case TD_WORLD_THEN_SCHED:
		ck_assert_int_eq(rk_world_destroy(r[0].w), -EBUSY);	/* nothing changed */
		ck_assert_int_eq(tr_done(), 0);
		rounds = tr_rounds(&r[0]);
		TR_PUMP_UNTIL(r, tr_rounds(&r[0]) > rounds + 2);
		break;
	case TD_BACKEND_FIRST:
		rk_sched_stop(r[0].s);
		TR_PUMP_UNTIL(r, !r[0].b->held);
		ck_assert_int_eq(tb_destroy(r[0].b), 0);
		r[0].b = NULL;
		for (i = 0; i < 50; i++)	/* nothing may call the freed backend now */
			tr_pump(r);
		ck_assert_int_eq(rk_sched_submit(r[0].s, &g_b[0].req), -RK_ESTOPPED);
		break;
	case TD_BACKEND_FIRST_IDLE:
		ck_assert(rk_sched_idle(r[0].s));
		ck_assert_int_eq(tb_destroy(r[0].b), 0);	/* no stop: destroy calls no op */
		r[0].b = NULL;
		break;
	case TD_FOLLOWER_FIRST:
		/* the follower goes with a ROUND on its way to it: its world's
		 * teardown must not hand that frame to the freed scheduler (the
		 * pointer stays dangling, on purpose, until the world is gone) */
		TR_PUMP_UNTIL(r, !rk_sched_busy(r[1].s) && !r[1].b->held);
		ck_assert_int_eq(rk_sched_destroy(r[1].s), 0);
		ck_assert_int_eq(tb_destroy(r[1].b), 0);
		r[1].b = NULL;
		for (i = 0; i < 20; i++)
			ck_assert_int_eq(rk_loop_run(r[0].loop, RK_RUN_NOWAIT), 0);
		ck_assert_int_eq(rk_world_destroy(r[1].w), 0);
		r[1].w = NULL;
		r[1].s = NULL;
		tr_down(&r[1], r);
		/* the leader hears of it and stops (tr_peer_error) */
		TR_PUMP_UNTIL(r, tr_done() == 4);
		for (i = 0; i < 4; i++)
			ck_assert_int_ne(g_a[i].err, 0);
		break;
	case TD_FOLLOWER_STOPS:
		/* a stopped follower launches nothing: it fails the leader's round */
		rk_sched_stop(r[1].s);
		TR_PUMP_UNTIL(r, tr_done() == 4);
		for (i = 0; i < 4; i++)
			ck_assert_int_eq(g_a[i].err, -RK_ESTOPPED);
		ck_assert_int_eq(r[0].peer_errs, 0);	/* the world is whole */
		r[0].b->abort = true;	/* the follower's share will never come */
		break;
	}
	if (r[0].loop)
		tr_down(&r[0], r);
	if (r[1].loop)
		tr_down(&r[1], r);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(g_a[i].done, 1);
}
END_TEST

/*
 * The world hands the scheduler its frames: through a generation, a failed
 * share and the backend's messages, the application's frame callback gets
 * only its own frame, never a ROUND, a ROUND_DONE or a message of the
 * backend's tag, and the backend gets every one of its messages from the
 * scheduler. A ROUND is decoded once per rank: the follower's scheduler
 * decodes none (its link did), the leader's its own, once.
 */
START_TEST(test_frames_claimed)
{
	struct rk_sched_stats st[2];
	struct trank r[2];
	int i;

	tr_start(r);
	r[1].b->w = r[1].w;
	for (i = 0; i < 4; i++) {
		out_init(&g_a[i], NULL, prompts[i], 12);
		g_a[i].req.cb = on_tokens_quiet;
		ck_assert_int_eq(rk_sched_submit(r[0].s, &g_a[i].req), 0);
	}
	TR_PUMP_UNTIL(r, tr_done() == 4 && !r[1].b->held);
	TR_PUMP_UNTIL(r, r[0].b->msgs == tr_rounds(&r[1]));
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(g_a[i].err, 0);
	ck_assert_int_eq(rk_world_send_user(r[1].w, 0, TB_TAG + 1, NULL, 0), 0);
	TR_PUMP_UNTIL(r, r[0].offered_app == 1);
	/* a stopped follower answers the next ROUND with a ROUND_DONE */
	rk_sched_stop(r[1].s);
	out_init(&g_b[0], NULL, prompts[0], 8);
	g_b[0].req.cb = on_tokens_quiet;
	ck_assert_int_eq(rk_sched_submit(r[0].s, &g_b[0].req), 0);
	TR_PUMP_UNTIL(r, g_b[0].done);
	ck_assert_int_eq(g_b[0].err, -RK_ESTOPPED);
	r[0].b->abort = true;	/* the follower's share will never come */
	for (i = 0; i < 2; i++) {
		rk_sched_stats(r[i].s, &st[i], sizeof(st[i]));
		ck_assert_uint_eq(r[i].offered[RK_FRAME_ROUND], 0);
		ck_assert_uint_eq(r[i].offered[RK_FRAME_ROUND_DONE], 0);
		ck_assert_uint_eq(r[i].offered_tb, 0);
		ck_assert_uint_eq(r[i].offered[RK_FRAME_USER], i == 0 ? 1 : 0);
	}
	ck_assert_uint_gt(st[1].rounds, 0);
	ck_assert_uint_eq(st[0].rounds, st[1].rounds + 1);	/* the last one, failed */
	ck_assert_uint_eq(r[0].b->msgs, st[1].rounds);
	ck_assert_uint_eq(st[0].round_decodes, st[0].rounds);
	ck_assert_uint_eq(st[1].round_decodes, 0);
	tr_down(&r[0], r);
	tr_down(&r[1], r);
}
END_TEST

/* ---- round epochs ------------------------------------------------------------------ */

/* A same-host follower's view of the leader's region (rk__epoch_map()): the
 * words of its link segment, here plain memory the "leader" rings. */
struct view_waiter {
	struct rk_epoch *e;
	uint64_t want;
	int ret;
};

static void *view_wait_thread(void *arg)
{
	struct view_waiter *w = arg;
	uint32_t kicks = rk_epoch_kicks(w->e);

	w->ret = rk_epoch_wait(w->e, w->want, 0, &kicks);	/* no spin: it sleeps */
	return NULL;
}

static void until_asleep(_Atomic uint32_t *waiters)
{
	/* the consumer counted itself: a wake from here on reaches it */
	while (!atomic_load(waiters))
		sched_yield();
}

START_TEST(test_epoch_view_sees_writer)
{
	static _Atomic uint32_t waiters, bell;
	uint8_t desc[16] = { 1, 2, 3, 4, 5, 6, 7, 8 }, out[16];
	struct rk_epoch *w, *v;
	uint64_t ep;
	uint32_t fl;
	size_t len;
	void *base;
	int fd;

	ck_assert_int_eq(rk__epoch_create_fd(sizeof(desc), &fd, &w), 0);
	ck_assert_int_eq(rk__epoch_map(fd, sizeof(desc) + 4096, &waiters, &bell, &v), -RK_EFIELD);
	ck_assert_int_eq(rk__epoch_map(fd, sizeof(desc), &waiters, &bell, &v), 0);
	/* nothing is iterated between the writer's store and the view's load */
	ck_assert_int_eq(rk_epoch_publish(w, 7, 0x3, desc, 8), 0);
	ck_assert_uint_eq(rk_epoch_current(v), 7);
	ck_assert_int_eq(rk_epoch_read(v, &ep, &fl, out, sizeof(out)), 8);
	ck_assert_uint_eq(ep, 7);
	ck_assert_uint_eq(fl, 0x3);
	ck_assert_mem_eq(out, desc, 8);
	/* the view is a reader: it publishes nothing, and cannot be made writable */
	ck_assert_int_eq(rk_epoch_publish(v, 8, 0, desc, 8), -EPERM);
	base = rk_epoch_base(v, &len);
	ck_assert_int_eq(mprotect(base, len, PROT_READ | PROT_WRITE), -1);
	ck_assert_int_eq(errno, EACCES);
	ck_assert_int_eq(rk__epoch_bell_add(v, &waiters, &bell), -EINVAL);
	rk_epoch_release(v);
	close(fd);
	rk_epoch_release(w);
}
END_TEST

START_TEST(test_epoch_view_unsealed)
{
	static _Atomic uint32_t waiters, bell;
	struct rk_epoch *v;
	int fd = memfd_create("unsealed", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	/* a region its sender could still write, or resize under us, is refused */
	ck_assert_int_eq(rk__epoch_map(fd, 16, &waiters, &bell, &v), -EPERM);
	close(fd);
}
END_TEST

/* @how: 0 the writer publishes, 1 the view closes, 2 the view kicks, 3 the writer closes */
START_TEST(test_epoch_view_wakes)
{
	static _Atomic uint32_t waiters, bell;
	uint8_t desc[8] = { 9 };
	struct view_waiter vw = { .want = 1 };
	struct rk_epoch *w, *v;
	pthread_t t;
	int fd;

	ck_assert_int_eq(rk__epoch_create_fd(sizeof(desc), &fd, &w), 0);
	ck_assert_int_eq(rk__epoch_map(fd, sizeof(desc), &waiters, &bell, &v), 0);
	close(fd);
	ck_assert_int_eq(rk__epoch_bell_add(w, &waiters, &bell), 0);
	vw.e = v;
	ck_assert_int_eq(pthread_create(&t, NULL, view_wait_thread, &vw), 0);
	until_asleep(&waiters);
	switch (_i) {
	case 0:
		ck_assert_int_eq(rk_epoch_publish(w, 1, 0, desc, sizeof(desc)), 0);
		break;
	case 1:
		rk_epoch_close(v);
		break;
	case 2:
		rk_epoch_kick(v);
		break;
	case 3:
		rk_epoch_close(w);
		break;
	}
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	switch (_i) {
	case 0:
		ck_assert_int_eq(vw.ret, 1);	/* it slept, and the publication woke it */
		ck_assert_uint_eq(rk_epoch_current(v), 1);
		break;
	case 1:
		ck_assert_int_ge(vw.ret, 0);
		ck_assert_uint_eq(rk_epoch_current(v), RK_EPOCH_CLOSED);
		ck_assert_uint_eq(rk_epoch_current(w), 0);	/* the writer's is not ours */
		ck_assert_int_eq(rk_epoch_read(v, NULL, NULL, NULL, 0), -RK_ETOOBIG);
		break;
	case 2:
		ck_assert_int_eq(vw.ret, -EINTR);
		ck_assert_uint_eq(rk_epoch_kicks(w), 0);
		break;
	case 3:
		ck_assert_int_ge(vw.ret, 0);
		ck_assert_uint_eq(rk_epoch_current(v), RK_EPOCH_CLOSED);
		break;
	}
	ck_assert_uint_eq(atomic_load(&waiters), 0);
	rk__epoch_bell_del(w, &bell);
	rk_epoch_release(v);
	rk_epoch_release(w);
}
END_TEST

/* Nobody asleep: a publication rings no bell (and makes no system call). */
START_TEST(test_epoch_view_quiet)
{
	static _Atomic uint32_t waiters, bell;
	struct rk_epoch *w, *v;
	int fd;

	ck_assert_int_eq(rk__epoch_create_fd(8, &fd, &w), 0);
	ck_assert_int_eq(rk__epoch_map(fd, 8, &waiters, &bell, &v), 0);
	close(fd);
	ck_assert_int_eq(rk__epoch_bell_add(w, &waiters, &bell), 0);
	ck_assert_int_eq(rk_epoch_publish(w, 1, 0, "x", 1), 0);
	ck_assert_uint_eq(atomic_load(&bell), 0);
	atomic_store(&waiters, 1);	/* as a consumer on its way to sleep */
	ck_assert_int_eq(rk_epoch_publish(w, 2, 0, "y", 1), 0);
	ck_assert_uint_eq(atomic_load(&bell), 1);
	atomic_store(&waiters, 0);
	rk__epoch_bell_del(w, &bell);
	ck_assert_int_eq(rk_epoch_publish(w, 3, 0, "z", 1), 0);
	ck_assert_uint_eq(atomic_load(&bell), 1);
	rk_epoch_release(v);
	rk_epoch_release(w);
}
END_TEST


START_TEST(test_epoch_publish_read)
{
	struct rk_epoch *e;
	uint8_t desc[64], out[64];
	uint64_t ep = 99;
	uint32_t fl = 0, kicks;
	size_t len = 0;
	uint8_t *base;

	ck_assert_int_eq(rk_epoch_create(0, &e), -EINVAL);
	ck_assert_int_eq(rk_epoch_create(RK_WIRE_MAX_PAYLOAD + 1u, &e), -EINVAL);
	ck_assert_int_eq(rk_epoch_create(sizeof(desc), &e), 0);
	base = rk_epoch_base(e, &len);
	/* its own page-aligned mapping, the layout of rk_sched.h */
	ck_assert_uint_eq((uintptr_t)base % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
	ck_assert_uint_ge(len, RK_EPOCH_OFF_DESC + sizeof(desc));
	ck_assert_uint_eq(rk_epoch_desc_max(e), sizeof(desc));
	ck_assert_uint_eq(rk_epoch_current(e), 0);
	ck_assert_int_eq(rk_epoch_read(e, &ep, &fl, out, sizeof(out)), -ENOENT);

	memset(desc, 0xa5, sizeof(desc));
	ck_assert_int_eq(rk_epoch_publish(e, 0, 0, desc, 8), -EINVAL);
	ck_assert_int_eq(rk_epoch_publish(e, 3, 0x5, desc, 8), 0);
	ck_assert_uint_eq(rk_epoch_current(e), 3);
	ck_assert_uint_eq(*(uint64_t *)(void *)(base + RK_EPOCH_OFF_EPOCH), 3);
	ck_assert_uint_eq(*(uint32_t *)(void *)(base + RK_EPOCH_OFF_DESC_LEN), 8);
	ck_assert_int_eq(rk_epoch_read(e, &ep, &fl, out, sizeof(out)), 8);
	ck_assert_uint_eq(ep, 3);
	ck_assert_uint_eq(fl, 0x5);
	ck_assert_mem_eq(out, desc, 8);
	ck_assert_int_eq(rk_epoch_read(e, &ep, NULL, out, 4), -ENOSPC);
	/* epochs only grow */
	ck_assert_int_eq(rk_epoch_publish(e, 3, 0, desc, 8), -EINVAL);
	ck_assert_int_eq(rk_epoch_publish(e, 2, 0, desc, 8), -EINVAL);
	ck_assert_uint_eq(rk_epoch_current(e), 3);
	/* too large: the epoch moves, the readers are told to take the launch path */
	ck_assert_int_eq(rk_epoch_publish(e, 4, 0, desc, sizeof(desc) + 1), -RK_ETOOBIG);
	ck_assert_uint_eq(rk_epoch_current(e), 4);
	ck_assert_int_eq(rk_epoch_read(e, &ep, NULL, out, sizeof(out)), -RK_ETOOBIG);
	ck_assert_uint_eq(ep, 4);
	ck_assert_int_eq(rk_epoch_publish(e, 5, 0, NULL, 0), 0);
	ck_assert_int_eq(rk_epoch_read(e, &ep, NULL, NULL, 0), 0);
	ck_assert_int_eq(rk_epoch_publish(e, RK_EPOCH_CLOSED, 0, NULL, 0), -EINVAL);

	/* reached already: no wait; a kick ends a wait that would not be */
	kicks = rk_epoch_kicks(e);
	ck_assert_int_eq(rk_epoch_wait(e, 5, 0, &kicks), 0);
	rk_epoch_kick(e);
	ck_assert_int_eq(rk_epoch_wait(e, 6, 0, &kicks), -EINTR);
	ck_assert_uint_eq(kicks, rk_epoch_kicks(e));
	/* closed: every wait is met, nothing more is published */
	rk_epoch_close(e);
	ck_assert_uint_eq(rk_epoch_current(e), RK_EPOCH_CLOSED);
	ck_assert_int_eq(rk_epoch_wait(e, 1000000, 0, &kicks), 0);
	ck_assert_int_eq(rk_epoch_read(e, &ep, NULL, out, sizeof(out)), -RK_ETOOBIG);
	ck_assert_uint_eq(ep, RK_EPOCH_CLOSED);
	ck_assert_int_eq(rk_epoch_publish(e, 6, 0, desc, 8), -EINVAL);
	/* a GPU's GEQ compares signed differences: closed meets any epoch */
	ck_assert_int_ge((int64_t)(RK_EPOCH_CLOSED - 1000000), 0);
	rk_epoch_close(e);	/* twice: a no-op */
	rk_epoch_hold(e);
	rk_epoch_release(e);
	rk_epoch_release(e);
	rk_epoch_release(NULL);
}
END_TEST

/*
 * Resident rounds only for a backend with resident consumers: one without
 * RK_BACKEND_RESIDENT gets no region and no publication, whatever the mode
 * (the loop's RK_RESIDENT auto or on, the config's on); one with it (or with
 * RK_BACKEND_SHARED_EPOCH, which implies it) has every round published under
 * auto and on and none under off; the config's on or off wins over the
 * loop's RK_RESIDENT, its auto takes it.
 */
static const struct rcase {
	unsigned int flags;
	const char *loop;		/* RK_RESIDENT */
	enum rk_resident_mode cfg;	/* rk_sched_config.resident */
	enum rk_resident_mode want;	/* rk_sched_resident() */
} rcases[] = {
	{ 0, "auto", RK_RESIDENT_AUTO, RK_RESIDENT_OFF },
	{ 0, "on", RK_RESIDENT_AUTO, RK_RESIDENT_OFF },
	{ 0, "auto", RK_RESIDENT_ON, RK_RESIDENT_OFF },
	{ RK_BACKEND_RESIDENT, "auto", RK_RESIDENT_AUTO, RK_RESIDENT_AUTO },
	{ RK_BACKEND_RESIDENT, "on", RK_RESIDENT_AUTO, RK_RESIDENT_ON },
	{ RK_BACKEND_RESIDENT, "off", RK_RESIDENT_AUTO, RK_RESIDENT_OFF },
	{ RK_BACKEND_RESIDENT, "on", RK_RESIDENT_OFF, RK_RESIDENT_OFF },
	{ RK_BACKEND_RESIDENT, "off", RK_RESIDENT_ON, RK_RESIDENT_ON },
	{ RK_BACKEND_SHARED_EPOCH, "auto", RK_RESIDENT_AUTO, RK_RESIDENT_AUTO },
};

START_TEST(test_resident_needs_consumers)
{
	const struct rcase *c = &rcases[_i];
	struct rk_backend_ops ops = fake_ops;
	struct rk_sched_config sc = { .max_batch = 1, .vocab = VOC, .resident = c->cfg };
	struct rk_sched_stats st;
	struct rk_config cfg;
	struct fake f;
	int pending = 1;

	memset(&f, 0, sizeof(f));
	rk_config_init(&cfg);
	cfg.rank = 0;
	cfg.world_size = 1;
	ck_assert_int_eq(rk_config_set(&cfg, "RK_RESIDENT", c->loop, NULL, 0), 0);
	ops.flags = c->flags;
	ck_assert_int_eq(rk_loop_create(&cfg, &f.loop), 0);
	ck_assert_int_eq(rk_world_create(f.loop, NULL, NULL, &f.world), 0);
	sc.resident = (enum rk_resident_mode)3;
	ck_assert_int_eq(rk_sched_create(f.world, &sc, &ops, &f, &f.sched), -EINVAL);
	sc.resident = c->cfg;
	ck_assert_int_eq(rk_sched_create(f.world, &sc, &ops, &f, &f.sched), 0);
	ck_assert_int_eq(rk_sched_resident(f.sched), c->want);
	g_pending = &pending;
	out_init(&g_a[0], &f, prompts[0], 8);
	ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[0].req), 0);
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	rk_sched_stats(f.sched, &st, sizeof(st));
	ck_assert_uint_eq(st.rounds, 8);
	ck_assert_uint_eq(st.resident_fallbacks, 0);
	if (c->want == RK_RESIDENT_OFF) {
		ck_assert_ptr_null(rk_sched_epoch(f.sched));
		ck_assert_uint_eq(st.published, 0);
	} else {
		ck_assert_ptr_nonnull(rk_sched_epoch(f.sched));
		ck_assert_uint_eq(st.published, st.rounds);
		ck_assert_uint_eq(rk_epoch_current(rk_sched_epoch(f.sched)), st.rounds);
	}
	fake_teardown(&f);
}
END_TEST

#define EP_ROUNDS	2000
#define EP_LEN		256

struct ep_consumer {
	struct rk_epoch *e;
	uint64_t spin_ns;
	uint64_t seen, torn, slept, skipped;
	atomic_uint_fast64_t done;	/* the last epoch consumed */
};

/* Each epoch's descriptor is EP_LEN bytes of (uint8_t)epoch: a torn copy shows. */
static void *ep_consume(void *arg)
{
	struct ep_consumer *c = arg;
	uint8_t buf[EP_LEN];
	uint32_t kicks = rk_epoch_kicks(c->e);
	uint64_t want = 1, ep;
	int64_t n;
	int ret, i;

	while (want <= EP_ROUNDS) {
		ret = rk_epoch_wait(c->e, want, c->spin_ns, &kicks);
		if (ret < 0)
			continue;
		c->slept += ret == 1;
		n = rk_epoch_read(c->e, &ep, NULL, buf, sizeof(buf));
		if (n != EP_LEN || ep < want) {
			c->torn++;
			break;
		}
		for (i = 0; i < EP_LEN; i++)
			if (buf[i] != (uint8_t)ep)
				c->torn++;
		c->skipped += ep - want;
		c->seen++;
		want = ep + 1;
		atomic_store(&c->done, ep);
	}
	return NULL;
}

/*
 * A consumer thread that waits on the epoch sees every descriptor whole. _i:
 * 0 in lock step, spinning; 1 in lock step, never spinning (a sleeping one is
 * woken by each publication); both see every epoch. 2: a publisher that does
 * not wait; the consumer may skip epochs, never tear one.
 */
START_TEST(test_epoch_consumer)
{
	struct ep_consumer c = { .spin_ns = _i == 1 ? 0 : 1000000 };
	uint8_t desc[EP_LEN];
	pthread_t th;
	uint64_t r;

	ck_assert_int_eq(rk_epoch_create(EP_LEN, &c.e), 0);
	atomic_init(&c.done, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, ep_consume, &c), 0);
	for (r = 1; r <= EP_ROUNDS; r++) {
		memset(desc, (int)(uint8_t)r, sizeof(desc));
		ck_assert_int_eq(rk_epoch_publish(c.e, r, 0, desc, sizeof(desc)), 0);
		/* lock step: the next round waits for this one, as a decode's does */
		while (_i < 2 && atomic_load(&c.done) < r)
			sched_yield();
	}
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(c.torn, 0);
	ck_assert_uint_eq(atomic_load(&c.done), EP_ROUNDS);
	ck_assert_uint_eq(c.seen + c.skipped, EP_ROUNDS);
	if (_i < 2)
		ck_assert_uint_eq(c.skipped, 0);
	if (_i == 1)
		ck_assert_uint_gt(c.slept, 0);	/* no spin: it slept for some */
	rk_epoch_release(c.e);
}
END_TEST

static Suite *sched_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("rounds");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_matches_reference, 0, 8);
	tcase_add_loop_test(tc, test_drafted_equals_plain, 0, 2);
	tcase_add_test(tc, test_drafts_are_accepted);
	tcase_add_test(tc, test_stats_gauges);
	tcase_add_test(tc, test_stop_token);
	tcase_add_test(tc, test_submit_errors);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_ngram);
	tcase_add_test(tc, test_trace);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_bad_field_fails_alone, 0, N_BAD);
	tcase_add_test(tc, test_field_turns_bad);
	tcase_add_test(tc, test_backend_fails_one_stream);
	tcase_add_test(tc, test_zeroed_then_init);
	suite_add_tcase(s, tc);

	tc = tcase_create("reentrancy");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_complete_inside_launch);
	tcase_add_loop_test(tc, test_no_callback_inside_submit, 0, 2);
	tcase_add_test(tc, test_stop_from_callback);
	suite_add_tcase(s, tc);

	tc = tcase_create("epoch");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_epoch_publish_read);
	tcase_add_test(tc, test_epoch_view_sees_writer);
	tcase_add_test(tc, test_epoch_view_unsealed);
	tcase_add_loop_test(tc, test_epoch_view_wakes, 0, 4);
	tcase_add_test(tc, test_epoch_view_quiet);
	tcase_add_loop_test(tc, test_epoch_consumer, 0, 3);
	tcase_add_loop_test(tc, test_resident_needs_consumers, 0, ARRAY_SIZE(rcases));
	suite_add_tcase(s, tc);

	tc = tcase_create("teardown");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_teardown_order, 0, TD__COUNT);
	tcase_add_test(tc, test_frames_claimed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sched_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
