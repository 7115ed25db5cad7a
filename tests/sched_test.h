/* SPDX-License-Identifier: MIT */
/*
 * What the scheduler's suites (check_sched, check_sched_epoch,
 * check_sched_world) share: a fake backend whose "model" is a pure function of
 * a stream's history, on a one-rank world, and requests that collect their
 * tokens. Never installed.
 */
#ifndef RK_SCHED_TEST_H
#define RK_SCHED_TEST_H

#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "rk_sched.h"
#include "rk_check.h"
#include "rk_test.h"

#define TIMEOUT_S 60

#define MAXS 64
#define VOC 23

/* A stream as the fake backend keeps it: its committed history. */
struct fstream {
	uint64_t id;
	uint32_t hist[4096];
	uint32_t len;		/* committed (= position of the next input) */
	uint32_t top_k;
	uint64_t seed;
	bool live;
};

/* The fake backend on a one-rank world: its streams and the round in flight. */
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
static inline uint32_t model(const uint32_t *h, uint32_t n, uint32_t top_k, uint64_t seed)
{
	uint32_t a = n ? h[n - 1] : 7, b = n > 1 ? h[n - 2] : 3;
	uint32_t t = (a * 5 + b * 3 + (n % 4)) % VOC;

	if (top_k)
		t = (uint32_t)((t + (seed * 2654435761u + n) % 3) % VOC);
	return t;
}

/* The stream @id, or a new one when @create; NULL when none (or no room). */
static inline struct fstream *find(struct fake *f, uint64_t id, bool create)
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

/*
 * fake_ops: launch() runs the model on each stream and completes the round
 * from a post, as a device would; token() and retire() as the ops say.
 */
static inline enum rk_activity done_cb(struct rk_post *p)
{
	struct fake *f = p->data;

	rk_sched_complete(f->target, f->round_id, 0);
	return RK_BUSY;
}

static inline int f_launch(void *ctx, struct rk_sched *sched, const struct rk_wire_round *r,
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

static inline int f_token(void *ctx, uint32_t i, uint32_t j, uint32_t *tok)
{
	*tok = ((struct fake *)ctx)->out[i][j];
	return 0;
}

static inline void f_retire(void *ctx, uint64_t id)
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

/* A request and the tokens it got; the last done stops the loop (g_pending). */
struct out {
	struct rk_request req;
	uint32_t toks[1024];
	uint32_t n;
	int done, err;
	struct fake *f;
};

static int *g_pending;

static inline void on_tokens(struct rk_request *req, const uint32_t *t, uint32_t n, bool done,
			     int err)
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

/* A loop, a world of one and a scheduler on the fake backend; fake_teardown() undoes it. */
static inline void fake_setup(struct fake *f, uint32_t max_batch, uint32_t draft_k)
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

static inline void fake_teardown(struct fake *f)
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
static inline void out_init(struct out *o, struct fake *f, const uint32_t *prompt,
			    uint32_t max_tokens)
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

/* The requests of a test (unused where a suite has none). */
static struct out g_a[NPROMPT] __attribute__((unused));
static struct out g_b[NPROMPT] __attribute__((unused));

#endif /* RK_SCHED_TEST_H */
