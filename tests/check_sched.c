/* SPDX-License-Identifier: MIT */
/*
 * Scheduler tests on a one-rank world with a fake backend whose "model" is a
 * pure function of a stream's history: it checks the stream rules (positions,
 * inputs, drafts), and the scheduler's batching, verification and retirement.
 */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "rk_sched.h"

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
	struct fstream st[MAXS];
	uint32_t out[MAXS][16];	/* per round index: outputs */
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

	rk_sched_complete(f->sched, f->round_id, 0);
	return RK_BUSY;
}

static int f_launch(void *ctx, const struct rk_wire_round *r, unsigned int flags)
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
	f->done.cb = done_cb;
	f->done.data = f;
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

static void fake_setup(struct fake *f, uint32_t max_batch, uint32_t draft_k)
{
	struct rk_sched_config sc = { .max_batch = max_batch, .draft_k = draft_k };
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
	rk_sched_destroy(f->sched);
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
	o->req.prompt = prompt;
	o->req.prompt_len = 6;
	o->req.max_tokens = max_tokens;
	o->req.stop_token = -1;
	o->req.draft_k = -1;
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
	rk_sched_stats(f.sched, &st);
	ck_assert_uint_eq(st.tokens, 200);
	ck_assert_uint_gt(st.drafted, 0);
	ck_assert_uint_gt(st.accepted, 0);
	ck_assert_uint_lt(st.rounds, 200);	/* accepted drafts save rounds */
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
	r.prompt = prompts[0];
	r.prompt_len = 6;
	r.max_tokens = 1;
	ck_assert_int_eq(rk_sched_submit(f.sched, &r), -EINVAL);	/* no callback */
	r.cb = on_tokens;
	r.draft_k = RK_SCHED_MAX_DRAFT + 1;
	ck_assert_int_eq(rk_sched_submit(f.sched, &r), -EINVAL);
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
static struct rk_sched *g_sched;
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
		g_a[i].req.prompt = prompts[i];
		g_a[i].req.prompt_len = 6;
		g_a[i].req.max_tokens = 30;
		g_a[i].req.stop_token = -1;
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
	rk_sched_stats(f.sched, &st);
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
	rk_sched_destroy(f.sched);
	ck_assert_int_eq(rk_sched_create(f.world, &sc, &fake_ops, &f, &f.sched), 0);
	g_pending = &pending;
	out_init(o, &f, prompts[0], 20);
	ck_assert_int_eq(rk_sched_submit(f.sched, &o->req), 0);
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	rk_sched_stats(f.sched, &st);
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

static Suite *sched_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("rounds");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_matches_reference, 0, 8);
	tcase_add_loop_test(tc, test_drafted_equals_plain, 0, 2);
	tcase_add_test(tc, test_drafts_are_accepted);
	tcase_add_test(tc, test_stop_token);
	tcase_add_test(tc, test_submit_errors);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_ngram);
	tcase_add_test(tc, test_trace);
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
