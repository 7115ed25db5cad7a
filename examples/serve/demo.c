/* SPDX-License-Identifier: MIT */
/*
 * rk-serve --demo (rank 0, loop thread): every built-in prompt in one batch,
 * each request's tokens, text and hash checked against the model's one-rank
 * reference, then a receipt (tokens/s, rounds, drafted/accepted, CPU seconds
 * per rank).
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

/* ---- the demo --------------------------------------------------------------------- */

struct demo_prompt {
	const char *text; /* NULL: the token ids 1..8 */
	uint32_t max_tokens;
	uint32_t top_k; /* 0: greedy */
	float temperature, top_p;
	uint64_t seed;
	int32_t draft_k;
};

static const struct demo_prompt demo_prompts[] = {
	{ "The quick brown fox", 32, 0, 0, 0, 0, 0 },
	{ "The quick brown fox", 32, 0, 0, 0, 0, 4 },
	{ "Once upon a time, in a land far away,", 40, 40, 0.8f, 0.95f, 7, 0 },
	{ "Once upon a time, in a land far away,", 40, 40, 0.8f, 0.95f, 7, 4 },
	{ "abcabcabcabcabcabcabcabc", 32, 0, 0, 0, 0, 8 },
	{ "To be, or not to be, that is the question", 32, 100, 1.2f, 1.0f, 42, 4 },
	{ NULL, 32, 0, 0, 0, 0, 0 },
	{ NULL, 32, 40, 0.8f, 0.95f, 1234, 0 },
};

#define N_DEMO (sizeof(demo_prompts) / sizeof(demo_prompts[0]))

struct demo_req {
	struct rk_request req;
	struct server *srv;
	uint32_t prompt[64];
	uint32_t n_prompt;
	uint32_t toks[64];
	uint32_t n_toks;
	uint32_t ref[64]; /* the same request at TP1, one token at a time, no scheduler */
	int ref_err;
	bool done;
	int err;
};

struct demo {
	struct demo_req r[N_DEMO];
	unsigned int left;
	struct stats_wait sw;
	bool stats_done;
};

static void demo_cb(struct rk_request *req, const uint32_t *t, uint32_t n, bool done, int err)
{
	struct demo_req *r = req->data;

	if (n > req->max_tokens - r->n_toks)
		n = req->max_tokens - r->n_toks;
	memcpy(r->toks + r->n_toks, t, n * sizeof(*t));
	r->n_toks += n;
	if (!done)
		return;
	r->done = true;
	r->err = err;
}

/* draft_ref_fn: a demo request's reference, computed before it was submitted. */
static const uint32_t *demo_ref(void *ctx, const struct rk_request *req, uint32_t *n_ref,
				uint64_t *key)
{
	const struct demo_req *r = req->data;

	if (r->ref_err)
		return NULL;
	*n_ref = req->max_tokens;
	*key = (uint64_t)(r - ((const struct demo *)ctx)->r);
	return r->ref;
}

void demo_stats_done(struct stats_wait *w)
{
	w->finished = true;
	rk_loop_stop(w->srv->loop);
}

/* @s between double quotes, with the quotes and backslashes in it escaped */
static void print_quoted(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		putchar(*s);
	}
	putchar('"');
}

static void print_tokens(const uint32_t *t, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		printf("%s%" PRIu32, i ? " " : "", t[i]);
}

int demo_run(struct server *srv)
{
	const struct toy_params *mp = &srv->opt.model;
	struct demo *d = calloc(1, sizeof(*d));
	struct rk_sched_stats ss;
	struct toy_sampling s;
	uint32_t i, j, total = 0, n_ok = 0;
	uint64_t t0, t1, proposed0, right0;
	char hex[17], text[70];
	int ret = 0;
	bool all_done;

	if (!d)
		return -ENOMEM;
	/* drafted requests draft from their references (draft.c), computed here */
	draft_refs(srv, demo_ref, d);
	proposed0 = srv->oracle.proposed;
	right0 = srv->oracle.right;
	t0 = now_ns();
	for (i = 0; i < N_DEMO; i++) {
		const struct demo_prompt *dp = &demo_prompts[i];
		struct demo_req *r = &d->r[i];

		r->srv = srv;
		if (dp->text) {
			r->n_prompt = (uint32_t)strlen(dp->text);
			for (j = 0; j < r->n_prompt; j++)
				r->prompt[j] = (uint8_t)dp->text[j] % mp->V;
		} else {
			r->n_prompt = 8;
			for (j = 0; j < 8; j++)
				r->prompt[j] = (j + 1) % mp->V;
		}
		s.top_k = dp->top_k;
		s.temperature = dp->temperature;
		s.top_p = dp->top_p;
		s.seed = dp->seed;
		r->ref_err = toy_generate_ref(mp->V, mp->H, mp->seed, r->prompt, r->n_prompt,
					      dp->max_tokens, &s, r->ref);
		rk_request_init(&r->req);
		r->req.prompt = r->prompt;
		r->req.prompt_len = r->n_prompt;
		r->req.max_tokens = dp->max_tokens;
		r->req.top_k = dp->top_k;
		r->req.temperature = dp->temperature;
		r->req.top_p = dp->top_p;
		r->req.seed = dp->seed;
		r->req.draft_k = dp->draft_k;
		r->req.cb = demo_cb;
		r->req.data = r;
		ret = rk_sched_submit(srv->sched, &r->req);
		if (ret) {
			fprintf(stderr, PROG ": submit: %s\n", rk_strerror(ret));
			goto out;
		}
	}
	/* every request is in the batch at once: continuous batching does the rest */
	for (;;) {
		for (i = 0, all_done = true; i < N_DEMO; i++)
			all_done &= d->r[i].done;
		if (all_done || job_err(srv))
			break;
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0)
			goto out;
	}
	t1 = now_ns();
	if (job_err(srv)) {
		ret = job_err(srv);
		goto out;
	}
	/* every rank's CPU time, through the same collection /v1/stats uses */
	d->sw.srv = srv;
	d->sw.done = demo_stats_done;
	d->sw.ranks = calloc((size_t)srv->size, sizeof(*d->sw.ranks));
	if (!d->sw.ranks) {
		ret = -ENOMEM;
		goto out;
	}
	srv->st_next = &d->sw;
	stats_start(srv);
	while (!d->sw.finished) {
		ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
		if (ret < 0)
			goto out;
	}

	printf("rk-serve demo: TP%d (%d rank%s), toy model V=%" PRIu32 " H=%" PRIu32
	       " seed=%" PRIu64 ", %u requests batched together\n",
	       srv->size, srv->size, srv->size > 1 ? "s" : "", mp->V, mp->H, mp->seed,
	       (unsigned int)N_DEMO);
	for (i = 0; i < N_DEMO; i++) {
		const struct demo_prompt *dp = &demo_prompts[i];
		struct demo_req *r = &d->r[i];
		bool match;

		if (r->err) {
			printf("[%u] failed: %s\n", i + 1, rk_strerror(r->err));
			ret = r->err;
			continue;
		}
		ret = r->ref_err;
		match = !ret && r->n_toks == dp->max_tokens &&
			!memcmp(r->ref, r->toks, r->n_toks * sizeof(*r->ref));
		n_ok += match;
		total += r->n_toks;
		toy_hash_tokens(r->toks, r->n_toks, hex);
		printf("\n[%u] %s", i + 1, dp->top_k ? "sampled" : "greedy");
		if (dp->top_k)
			printf(" (top_k %" PRIu32 ", temperature %.2g, top_p %.2g, seed %" PRIu64
			       ")",
			       dp->top_k, (double)dp->temperature, (double)dp->top_p, dp->seed);
		if (dp->draft_k)
			printf(", drafted (draft_k %" PRId32 ")", dp->draft_k);
		else
			printf(", plain");
		printf("\n    prompt: ");
		if (dp->text)
			print_quoted(dp->text);
		else
			print_tokens(r->prompt, r->n_prompt);
		printf("\n    tokens: ");
		print_tokens(r->toks, r->n_toks);
		tokens_text(r->toks, r->n_toks, text);
		printf("\n    text:   ");
		print_quoted(text);
		printf("\n    hash:   %s  (%s the TP1 reference)\n", hex,
		       match ? "equals" : "DIFFERS FROM");
	}
	rk_sched_stats(srv->sched, &ss, sizeof(ss));
	printf("\nreceipt: %u requests, %" PRIu32 " tokens in %.3f s = %.0f tokens/s; "
	       "%" PRIu64 " rounds; drafted %" PRIu64 ", accepted %" PRIu64 "\n",
	       (unsigned int)N_DEMO, total, (double)(t1 - t0) / 1e9,
	       total / ((double)(t1 - t0) / 1e9), ss.rounds, ss.drafted, ss.accepted);
	draft_print(srv, proposed0, right0);
	printf("the toy's text is random by design (its weights are hashes): what matters is that "
	       "its tokens are exact\n");
	if (!d->sw.err) {
		printf("cpu_s:");
		for (i = 0; i < (uint32_t)srv->size; i++)
			printf(" r%u=%.3f", i, d->sw.ranks[i].user_s + d->sw.ranks[i].sys_s);
		printf("\n");
	}
	printf("%u of %u requests equal the TP1 reference\n", n_ok, (unsigned int)N_DEMO);
	fflush(stdout);
	ret = n_ok == N_DEMO ? 0 : -EPROTO;
out:
	draft_refs(srv, NULL, NULL);
	if (ret) {
		/* requests and the stats waiter may still be the loop's: take them back */
		rk_sched_stop(srv->sched);
		stats_fail_all(srv, ret);
	}
	free(d->sw.ranks);
	free(d);
	return ret;
}
