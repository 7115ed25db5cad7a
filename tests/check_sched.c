// SPDX-License-Identifier: MIT
/*
 * check_sched: the scheduler on a one-rank world with a fake backend
 * (sched_test.h): it checks the stream rules (positions, inputs, drafts), and
 * the scheduler's batching, verification and retirement; errors that belong to
 * one request; calls from inside its own callbacks. Round epochs are
 * check_sched_epoch's, teardown orders in a two-rank world check_sched_world's.
 */
#include <pthread.h>
#include <sched.h>

#include "sched_test.h"

/* Cancel and stop tests call the scheduler from inside its callbacks. */
static struct rk_sched *g_sched;

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

/*
 * A drafter that knows its request: it sees the request it drafts for (its
 * data, sampling and seed, its tokens so far as hist) and, from them, proposes
 * the model's own continuation, so every draft is accepted, sampled too.
 */
static unsigned int g_draft_calls, g_draft_bad;

static uint32_t oracle_draft(void *arg, const struct rk_request *req, const uint32_t *hist,
			     size_t n, uint32_t *out, uint32_t k)
{
	const struct out *o = req->data;
	uint32_t h[2048], len = (uint32_t)n, j;

	g_draft_calls++;
	g_draft_bad += arg != &g_draft_calls || o < g_a || o >= g_a + NPROMPT ||
		       n != req->prompt_len + req->generated || n != 6 + o->n ||
		       memcmp(hist, req->prompt, 6 * sizeof(*hist)) || n + k > 2048;
	if (g_draft_bad)
		return 0;
	memcpy(h, hist, n * sizeof(*h));
	for (j = 0; j < k; j++) {
		out[j] = model(h, len, req->top_k, req->seed);
		h[len++] = out[j];
	}
	return k;
}

/* loop index: sampled */
START_TEST(test_drafter_sees_request)
{
	struct rk_sched_config sc = { .max_batch = 4, .draft_k = 3, .vocab = VOC,
				      .draft = oracle_draft, .draft_arg = &g_draft_calls };
	struct rk_sched_stats st;
	struct rk_config cfg;
	struct fake f;
	int i, pending = NPROMPT;

	memset(&f, 0, sizeof(f));
	rk_config_init(&cfg);
	cfg.rank = 0;
	cfg.world_size = 1;
	ck_assert_int_eq(rk_loop_create(&cfg, &f.loop), 0);
	ck_assert_int_eq(rk_world_create(f.loop, NULL, NULL, &f.world), 0);
	ck_assert_int_eq(rk_sched_create(f.world, &sc, &fake_ops, &f, &f.sched), 0);
	g_pending = &pending;
	for (i = 0; i < NPROMPT; i++) {
		out_init(&g_a[i], &f, prompts[i], 40);
		g_a[i].req.top_k = _i ? 5 : 0;
		g_a[i].req.temperature = _i ? 0.8f : 0.0f;
		g_a[i].req.seed = 1000 + (uint64_t)i;
		ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[i].req), 0);
	}
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	rk_sched_stats(f.sched, &st, sizeof(st));
	ck_assert_uint_gt(g_draft_calls, 0);
	ck_assert_uint_eq(g_draft_bad, 0);
	ck_assert_uint_gt(st.drafted, 0);
	ck_assert_uint_eq(st.accepted, st.drafted);
	ck_assert_int_eq(f.bad, 0);
	fake_teardown(&f);
	check_against_reference(g_a, NPROMPT, _i, 40, -1);
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

	ck_assert_uint_eq(rk_ngram_draft(NULL, NULL, h, 7, out, 3), 3);	/* "1 2 3" -> 4 1 2 */
	ck_assert_uint_eq(out[0], 4);
	ck_assert_uint_eq(out[1], 1);
	ck_assert_uint_eq(out[2], 2);
	ck_assert_uint_eq(rk_ngram_draft(NULL, NULL, h, 7, out, 1), 1);
	{
		uint32_t h2[] = { 5, 6, 7, 8, 9, 5, 6 };

		ck_assert_uint_eq(rk_ngram_draft(NULL, NULL, h2, 7, out, 2), 2);
		ck_assert_uint_eq(out[0], 7);
		ck_assert_uint_eq(out[1], 8);
	}
	{
		uint32_t h3[] = { 1, 2, 3 };

		ck_assert_uint_eq(rk_ngram_draft(NULL, NULL, h3, 3, out, 4), 0);
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
	bool once;			/* run the loop RK_RUN_ONCE at a time */
	uint64_t once_runs;		/* ...runs, and the most rounds one of them launched */
	uint64_t once_rounds_max;
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
	while (!d->done) {
		uint64_t r0 = d->round;

		if (rk_loop_run(d->loop, d->once ? RK_RUN_ONCE : RK_RUN_DEFAULT) < 0)
			D_FAIL(d);
		d->once_runs++;
		if (d->round - r0 > d->once_rounds_max)
			d->once_rounds_max = d->round - r0;
	}
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

/*
 * RK_RUN_ONCE is one iteration: a round that completes inside launch() is
 * taken up by the scheduler's next iteration, so each run launches at most
 * one round (rk_loop_run(3)), and a generation of 200 tokens takes 200 runs.
 */
START_TEST(test_once_one_round)
{
	struct deep *d = calloc(1, sizeof(*d));

	d->tokens_max = 200;
	d->once = true;
	deep_run(d);
	ck_assert_int_eq(d->done, 1);
	ck_assert_int_eq(d->err, 0);
	ck_assert_uint_eq(d->n, 200);
	ck_assert_uint_eq(d->round, 200);
	ck_assert_uint_eq(d->once_rounds_max, 1);
	ck_assert_uint_ge(d->once_runs, 200);
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

static Suite *sched_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc;

	tc = rk_tcase(s, "rounds", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_matches_reference, 0, 8);
	tcase_add_loop_test(tc, test_drafted_equals_plain, 0, 2);
	tcase_add_test(tc, test_drafts_are_accepted);
	tcase_add_loop_test(tc, test_drafter_sees_request, 0, 2);
	tcase_add_test(tc, test_stats_gauges);
	tcase_add_test(tc, test_stop_token);
	tcase_add_test(tc, test_submit_errors);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_ngram);
	tcase_add_test(tc, test_trace);

	tc = rk_tcase(s, "errors", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_bad_field_fails_alone, 0, N_BAD);
	tcase_add_test(tc, test_field_turns_bad);
	tcase_add_test(tc, test_backend_fails_one_stream);
	tcase_add_test(tc, test_zeroed_then_init);

	tc = rk_tcase(s, "reentrancy", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_complete_inside_launch);
	tcase_add_test(tc, test_once_one_round);
	tcase_add_loop_test(tc, test_no_callback_inside_submit, 0, 2);
	tcase_add_test(tc, test_stop_from_callback);
	return s;
}

int main(void)
{
	return rk_check_run(sched_suite());
}
