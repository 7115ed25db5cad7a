/* SPDX-License-Identifier: MIT */
/*
 * rk-serve --bench (rank 0, loop thread): the decode receipt without HTTP.
 * Every cell (streams x mode x draft) sends closed-loop load straight to the
 * scheduler; request i is rk-load's, so a mode hashes the same in every cell
 * and through rk-load. --bench-policies runs every cell under each wait policy
 * in turn, in this one process pair.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

struct bench_cell {
	uint32_t streams;
	bool sampled, drafted;
};

/* A cell's figures over its runs. */
struct bench_result {
	double tps[BENCH_MAX_RUNS];
	double rounds[BENCH_MAX_RUNS];
	double *cpu;		    /* [BENCH_MAX_RUNS][world size] */
	uint64_t drafted, accepted; /* over every run */
	char hash[17];
	uint32_t runs;
};

/* One closed-loop stream: one request at a time, the next once it is done. */
struct bench_stream {
	struct rk_request req; /* the scheduler's from submit to done */
	uint32_t prompt[BENCH_PROMPT];
	uint32_t *out; /* the request's tokens in the cell's array */
	uint32_t n;
	uint32_t next; /* the request index it runs now */
	bool done;
	int err;
};

struct bench {
	struct server *srv;
	const struct options *o;
	struct bench_stream *st; /* [largest stream count] */
	uint32_t *toks;		 /* [requests * max_tokens], request i at i * max_tokens */
	struct stats_wait sw;
	struct rank_stats *before, *after; /* [world size] */
	struct rk_timer idle_timer;
	bool idle_over;
	uint64_t pass_t0, pass_t1; /* the last pass: first submit, last done (CLOCK_MONOTONIC) */
	uint32_t *ref[2]; /* greedy, sampled: request i's TP1 tokens at i * max_tokens (the
			   * drafter's; NULL without drafted cells or with prompt lookup) */
};

static const char *mode_name(bool sampled)
{
	return sampled ? "sampled" : "greedy";
}

static const char *draft_name(bool drafted)
{
	return drafted ? "drafted" : "plain";
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, uint32_t n)
{
	double t[BENCH_MAX_RUNS];

	memcpy(t, v, n * sizeof(*t));
	qsort(t, n, sizeof(*t), cmp_dbl);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Request @i of a cell, as rk-load sends it and rk-serve's HTTP side maps it. */
static void bench_request(const struct options *o, uint32_t i, bool sampled, bool drafted,
			  uint32_t max_tokens, uint32_t *prompt, struct rk_request *req)
{
	const char *text = o->b_prompts[i % o->b_n_prompts];
	uint32_t j, n = (uint32_t)strlen(text);

	rk_request_init(req);
	for (j = 0; j < n; j++)
		prompt[j] = (uint8_t)text[j] % o->model.V;
	req->prompt = prompt;
	req->prompt_len = n;
	req->max_tokens = max_tokens;
	if (sampled) {
		req->top_k = BENCH_TOP_K;
		req->temperature = BENCH_TEMP;
		req->top_p = BENCH_TOP_P;
	}
	req->seed = BENCH_SEED_BASE + i;
	req->draft_k = drafted ? (int32_t)o->b_draft_k : 0;
}

static void bench_cb(struct rk_request *req, const uint32_t *t, uint32_t n, bool done, int err)
{
	struct bench_stream *st = req->data;

	if (n > req->max_tokens - st->n)
		n = req->max_tokens - st->n;
	if (n)
		memcpy(st->out + st->n, t, n * sizeof(*t));
	st->n += n;
	if (done) {
		st->done = true;
		st->err = err;
	}
}

static int bench_submit(struct bench *bn, struct bench_stream *st, uint32_t i,
			const struct bench_cell *c, uint32_t max_tokens)
{
	bench_request(bn->o, i, c->sampled, c->drafted, max_tokens, st->prompt, &st->req);
	st->req.cb = bench_cb;
	st->req.data = st;
	st->out = bn->toks + (size_t)i * max_tokens;
	st->n = 0;
	st->next = i;
	st->done = false;
	st->err = 0;
	return rk_sched_submit(bn->srv->sched, &st->req);
}

/* draft_ref_fn: a bench request's reference, from its stream's request index. */
static const uint32_t *bench_ref(void *ctx, const struct rk_request *req, uint32_t *n_ref,
				 uint64_t *key)
{
	const struct bench *bn = ctx;
	const struct bench_stream *st = req->data;
	const uint32_t *ref = bn->ref[req->top_k != 0];

	if (!ref)
		return NULL;
	*n_ref = bn->o->b_max_tokens;
	*key = req->seed;
	return ref + (size_t)st->next * bn->o->b_max_tokens;
}

/*
 * The drafter's references: every request of the mode @sampled at TP1 (the
 * warm-up's shorter requests are their prefixes). Return: 0, -ENOMEM, or
 * toy_generate_ref()'s error.
 */
static int bench_refs(struct bench *bn, bool sampled)
{
	const struct options *o = bn->o;
	const uint32_t M = o->b_max_tokens;
	uint32_t prompt[BENCH_PROMPT], i;
	struct rk_request req;
	struct toy_sampling s;
	int ret;

	bn->ref[sampled] = malloc((size_t)o->b_requests * M * sizeof(uint32_t));
	if (!bn->ref[sampled])
		return -ENOMEM;
	for (i = 0; i < o->b_requests; i++) {
		bench_request(o, i, sampled, true, M, prompt, &req);
		s.top_k = req.top_k;
		s.temperature = req.temperature;
		s.top_p = req.top_p;
		s.seed = req.seed;
		ret = toy_generate_ref(o->model.V, o->model.H, o->model.seed, prompt,
				       req.prompt_len, M, &s, bn->ref[sampled] + (size_t)i * M);
		if (ret)
			return ret;
	}
	return 0;
}

/* Every rank's counters into @out, through the collection /v1/stats uses. */
static int bench_collect(struct bench *bn, struct rank_stats *out)
{
	struct server *srv = bn->srv;
	struct stats_wait *w = &bn->sw;
	int ret;

	memset(w, 0, sizeof(*w));
	w->srv = srv;
	w->done = demo_stats_done;
	w->ranks = out;
	w->next = srv->st_next;
	srv->st_next = w;
	stats_start(srv);
	while (!w->finished) {
		ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
		if (ret < 0 && !w->finished) {
			stats_fail_all(srv, ret); /* done() runs: the waiter is ours again */
			return ret;
		}
	}
	return w->err;
}

/*
 * Requests 0..@n-1 of @max_tokens each through @c->streams closed-loop
 * streams: stream s sends requests s, s + C, ..., each once the previous one
 * is done (submitted between loop iterations: the scheduler's callbacks must
 * not submit). Tokens land in bn->toks. *@ns: first submit to last done.
 */
static int bench_pass(struct bench *bn, const struct bench_cell *c, uint32_t n,
		      uint32_t max_tokens, uint64_t *ns)
{
	struct server *srv = bn->srv;
	uint32_t s, C = c->streams < n ? c->streams : n, active = 0;
	uint64_t t0 = now_ns();
	int ret = 0;

	for (s = 0; s < C; s++) {
		ret = bench_submit(bn, &bn->st[s], s, c, max_tokens);
		if (ret)
			goto fail;
		active++;
	}
	while (active) {
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0)
			goto fail; /* a signal, or the ring failed */
		if (job_err(srv)) {
			ret = job_err(srv);
			goto fail;
		}
		for (s = 0; s < C; s++) {
			struct bench_stream *st = &bn->st[s];

			if (!st->done)
				continue;
			st->done = false;
			active--;
			if (st->err) {
				ret = st->err;
				goto fail;
			}
			if (st->next + C < n) {
				ret = bench_submit(bn, st, st->next + C, c, max_tokens);
				if (ret)
					goto fail;
				active++;
			}
		}
	}
	*ns = now_ns() - t0;
	bn->pass_t0 = t0;
	bn->pass_t1 = t0 + *ns;
	return 0;
fail:
	/* the requests still queued or running write into bn: the scheduler fails them now */
	rk_sched_stop(srv->sched);
	return ret;
}

/* Every request of the pass against toy_generate_ref() at TP1. Return: 0, -EPROTO, -ENOMEM. */
static int bench_check_ref(struct bench *bn, const struct bench_cell *c)
{
	const struct options *o = bn->o;
	const uint32_t M = o->b_max_tokens;
	uint32_t prompt[BENCH_PROMPT], i, bad = 0, *ref = malloc(M * sizeof(*ref));
	struct rk_request req;
	int ret;

	if (!ref)
		return -ENOMEM;
	for (i = 0; i < o->b_requests; i++) {
		struct toy_sampling s;

		bench_request(o, i, c->sampled, c->drafted, M, prompt, &req);
		s.top_k = req.top_k;
		s.temperature = req.temperature;
		s.top_p = req.top_p;
		s.seed = req.seed;
		ret = toy_generate_ref(o->model.V, o->model.H, o->model.seed, prompt,
				       req.prompt_len, M, &s, ref);
		if (ret || memcmp(ref, bn->toks + (size_t)i * M, M * sizeof(*ref))) {
			fprintf(stderr,
				PROG ": bench: request %" PRIu32 " (%" PRIu32 " streams, %s, %s) "
				     "differs from the TP1 reference\n",
				i, c->streams, mode_name(c->sampled), draft_name(c->drafted));
			bad++;
		}
	}
	free(ref);
	return bad ? -EPROTO : 0;
}

/*
 * One run of a cell: counters around a pass. Return: 0; 3 when the run hashes
 * differently from the cell's first, 4 when a request differs from the TP1
 * reference (--bench-check-ref, first run); < 0 when the pass failed.
 */
static int bench_cell_run(struct bench *bn, const struct bench_cell *c, struct bench_result *cr)
{
	struct server *srv = bn->srv;
	const struct options *o = bn->o;
	const size_t ntok = (size_t)o->b_requests * o->b_max_tokens;
	struct rk_sched_stats s0, s1;
	uint64_t ns;
	char hex[17];
	int r, ret;

	ret = bench_collect(bn, bn->before);
	if (ret)
		return ret;
	rk_sched_stats(srv->sched, &s0, sizeof(s0));
	ret = bench_pass(bn, c, o->b_requests, o->b_max_tokens, &ns);
	if (ret)
		return ret;
	rk_sched_stats(srv->sched, &s1, sizeof(s1));
	ret = bench_collect(bn, bn->after);
	if (ret)
		return ret;
	if (toy_hash_tokens(bn->toks, ntok, hex) || !hex[0])
		snprintf(hex, sizeof(hex), "-");
	if (cr->runs && strcmp(hex, cr->hash)) {
		fprintf(stderr, PROG ": bench: %" PRIu32 " streams, %s, %s: run %" PRIu32
				     " hashes %s, run 1 %s\n",
			c->streams, mode_name(c->sampled), draft_name(c->drafted), cr->runs + 1,
			hex, cr->hash);
		return 3;
	}
	memcpy(cr->hash, hex, sizeof(hex));
	cr->tps[cr->runs] = (double)ntok / ((double)ns / 1e9);
	cr->rounds[cr->runs] = (double)(s1.rounds - s0.rounds);
	cr->drafted += s1.drafted - s0.drafted;
	cr->accepted += s1.accepted - s0.accepted;
	for (r = 0; r < srv->size; r++)
		cr->cpu[cr->runs * (uint32_t)srv->size + (uint32_t)r] =
			bn->after[r].user_s + bn->after[r].sys_s -
			(bn->before[r].user_s + bn->before[r].sys_s);
	cr->runs++;
	if (o->b_check_ref && cr->runs == 1) {
		ret = bench_check_ref(bn, c);
		return ret == -EPROTO ? 4 : ret;
	}
	return 0;
}

/*
 * Leader: every rank to policy @p of bench_policies: MSG_POLICY to the
 * followers (they answer the next stats request once it is in effect), then
 * this rank, once its own last marks are in (bounded).
 */
static int bench_policy(struct bench *bn, uint32_t p)
{
	struct server *srv = bn->srv;
	uint8_t msg[POLICY_LEN] = { 0 };
	uint64_t deadline = now_ns() + 5000000000ull;
	int ret;

	srv->pol = p;
	if (srv->size > 1) {
		put32(msg, MSG_POLICY);
		put64(msg + 8, p);
		put32(msg + 16, (uint32_t)bench_policies[p].wait);
		put32(msg + 20, (uint32_t)bench_policies[p].notify);
		ret = send_msg(srv, -1, msg, sizeof(msg));
		if (ret)
			return ret;
	}
	while ((ret = policy_apply(srv)) == -EBUSY && now_ns() < deadline) {
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0)
			return ret;
		if (job_err(srv))
			return job_err(srv);
	}
	return ret;
}

/* One line per cell (medians over its runs); --bench-policies: "pcell POLICY ...". */
static void bench_print_cell(const struct server *srv, const struct bench_cell *c,
			     const struct bench_result *cr, const char *policy)
{
	double v[BENCH_MAX_RUNS];
	uint32_t q;
	int r;

	if (policy)
		printf("pcell %-7s ", policy);
	else
		printf("cell ");
	printf("%7" PRIu32 "  %-7s  %-7s  %7" PRIu64 "  %10.1f  %7.0f  ", c->streams,
	       mode_name(c->sampled), draft_name(c->drafted),
	       (uint64_t)srv->opt.b_requests * srv->opt.b_max_tokens, median(cr->tps, cr->runs),
	       median(cr->rounds, cr->runs));
	if (cr->drafted)
		printf("%5.1f%%", 100.0 * (double)cr->accepted / (double)cr->drafted);
	else
		printf("%6s", "-");
	printf("  %-16s", cr->hash);
	for (r = 0; r < srv->size; r++) {
		for (q = 0; q < cr->runs; q++)
			v[q] = cr->cpu[q * (uint32_t)srv->size + (uint32_t)r];
		printf("  %9.4f", median(v, cr->runs));
	}
	printf("\n");
	fflush(stdout);
}

/*
 * --bench-policies: the run just done, "prun POLICY streams mode draft tok/s
 * cpu_r0.. hash", then "pwin POLICY streams mode draft t0_ns t1_ns": when its
 * pass ran (CLOCK_MONOTONIC, as --trace-rounds stamps), to find its rounds.
 */
static void bench_print_run(const struct bench *bn, const struct bench_cell *c,
			    const struct bench_result *cr, const char *policy)
{
	const struct server *srv = bn->srv;
	uint32_t q = cr->runs - 1;
	int r;

	printf("prun %-7s %7" PRIu32 "  %-7s  %-7s  %10.1f", policy, c->streams,
	       mode_name(c->sampled), draft_name(c->drafted), cr->tps[q]);
	for (r = 0; r < srv->size; r++)
		printf("  %9.4f", cr->cpu[q * (uint32_t)srv->size + (uint32_t)r]);
	printf("  %s\n", cr->hash);
	printf("pwin %-7s %7" PRIu32 "  %-7s  %-7s  %" PRIu64 "  %" PRIu64 "\n", policy, c->streams,
	       mode_name(c->sampled), draft_name(c->drafted), bn->pass_t0, bn->pass_t1);
	fflush(stdout);
}

static enum rk_activity bench_idle_cb(struct rk_timer *t, uint64_t now)
{
	struct bench *bn = t->data;

	(void)now;
	bn->idle_over = true;
	rk_loop_stop(bn->srv->loop);
	return RK_IDLE;
}

/* Stay idle @o->b_idle seconds under the loop's policy; print each rank's CPU seconds. */
static int bench_idle(struct bench *bn)
{
	struct server *srv = bn->srv;
	int r, ret;

	ret = bench_collect(bn, bn->before);
	if (ret)
		return ret;
	bn->idle_over = false;
	rk_timer_init(&bn->idle_timer, bench_idle_cb, bn);
	rk_timer_start(srv->loop, &bn->idle_timer, (uint64_t)bn->o->b_idle * 1000000000ull, 0);
	while (!bn->idle_over) {
		ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
		if (ret < 0 || job_err(srv)) {
			rk_timer_stop(&bn->idle_timer);
			return ret < 0 ? ret : job_err(srv);
		}
	}
	ret = bench_collect(bn, bn->after);
	if (ret)
		return ret;
	printf("idle %" PRIu32 " s: cpu_s", bn->o->b_idle);
	for (r = 0; r < srv->size; r++)
		printf(" r%d=%.4f", r,
		       bn->after[r].user_s + bn->after[r].sys_s -
			       (bn->before[r].user_s + bn->before[r].sys_s));
	printf("\n");
	fflush(stdout);
	return 0;
}

/* CUDA: wait for the NCCL bootstrap, then one untimed pass (connections, buffers). */
static int bench_warmup(struct bench *bn, uint32_t max_streams)
{
	struct server *srv = bn->srv;
	const struct options *o = bn->o;
	struct bench_cell c = { max_streams, false, o->b_drafts[1] };
	uint32_t m = o->b_max_tokens < BENCH_WARM_TOK ? o->b_max_tokens : BENCH_WARM_TOK;
	uint64_t t0 = now_ns(), ns;
	int ret = 0;

	while (srv->cuda && (ret = srv->cm->ready(srv->cuda)) == 0) {
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0)
			return ret;
		if (job_err(srv))
			return job_err(srv);
	}
	if (ret < 0)
		return ret;
	ret = bench_pass(bn, &c, max_streams < o->b_requests ? max_streams : o->b_requests, m,
			 &ns);
	if (ret)
		return ret;
	printf("# warm-up: ready after %.3f s, %" PRIu32 " streams x %" PRIu32
	       " tokens in %.3f s\n",
	       (double)(now_ns() - t0 - ns) / 1e9, c.streams, m, (double)ns / 1e9);
	fflush(stdout);
	return 0;
}

/*
 * One run of @c into @cr, under bench_policies[@pol] (every rank switched
 * first; -1: the configured policy, no switch); with a policy, its "prun"
 * line. Return: 0, bench_cell_run()'s exit status (> 0), or an error (said).
 */
static int bench_cell_policy(struct bench *bn, const struct bench_cell *c,
			     struct bench_result *cr, int pol)
{
	int ret = 0;

	if (pol >= 0)
		ret = bench_policy(bn, (uint32_t)pol);
	if (ret) {
		fprintf(stderr, PROG ": bench: policy %s: %s\n", bench_policies[pol].name,
			rk_strerror(ret));
		return ret;
	}
	ret = bench_cell_run(bn, c, cr);
	if (ret < 0)
		fprintf(stderr, PROG ": bench: %" PRIu32 " streams, %s, %s: %s\n", c->streams,
			mode_name(c->sampled), draft_name(c->drafted), rk_strerror(ret));
	else if (!ret && pol >= 0)
		bench_print_run(bn, c, cr, bench_policies[pol].name);
	return ret;
}

/*
 * The receipt: every cell (streams x mode x draft) run o->b_runs times,
 * interleaved (a slow spell of the machine spreads over every cell), medians
 * printed one line per cell; the hashes of a mode must agree (exit 3), and
 * with --bench-check-ref every request must equal the TP1 reference (exit 4).
 * --bench-policies: every run of a cell runs under each policy in turn, the
 * order rotating by cell and run, one "prun" line each; the medians follow as
 * "pcell" lines per policy; the hashes must agree across policies too.
 */
int bench_run(struct server *srv)
{
	const struct options *o = &srv->opt;
	struct bench_cell cells[BENCH_MAX_LIST * 4];
	struct bench_result *cr = NULL;
	struct bench *bn = calloc(1, sizeof(*bn));
	uint32_t n_cells = 0, max_streams = 0, i, s, m, d, run, k, q;
	uint32_t n_pol = o->b_n_pol ? o->b_n_pol : 1, n_res = 0;
	uint64_t proposed0 = 0, right0 = 0;
	int r, ret = -ENOMEM;

	if (!bn)
		return -ENOMEM;
	bn->srv = srv;
	bn->o = o;
	for (m = 0; m < 2; m++)
		for (d = 0; d < 2; d++)
			for (s = 0; s < o->b_n_streams; s++)
				if (o->b_modes[m] && o->b_drafts[d])
					cells[n_cells++] = (struct bench_cell){ o->b_streams[s],
										m == 1, d == 1 };
	for (s = 0; s < o->b_n_streams; s++)
		if (o->b_streams[s] > max_streams)
			max_streams = o->b_streams[s];
	bn->st = calloc(max_streams, sizeof(*bn->st));
	bn->toks = calloc((size_t)o->b_requests * o->b_max_tokens, sizeof(*bn->toks));
	bn->before = calloc((size_t)srv->size, sizeof(*bn->before));
	bn->after = calloc((size_t)srv->size, sizeof(*bn->after));
	n_res = n_cells * n_pol;
	cr = calloc(n_res, sizeof(*cr));
	if (!bn->st || !bn->toks || !bn->before || !bn->after || !cr)
		goto out;
	for (i = 0; i < n_res; i++) {
		cr[i].cpu = calloc((size_t)BENCH_MAX_RUNS * (size_t)srv->size, sizeof(double));
		if (!cr[i].cpu)
			goto out;
	}
	/* drafted cells draft from the requests' references (draft.c) */
	for (m = 0; o->b_drafts[1] && o->draft_p >= 0 && m < 2; m++) {
		if (!o->b_modes[m])
			continue;
		ret = bench_refs(bn, m == 1);
		if (ret) {
			fprintf(stderr, PROG ": bench: references: %s\n", rk_strerror(ret));
			goto out;
		}
	}
	draft_refs(srv, bench_ref, bn);
	proposed0 = srv->oracle.proposed;
	right0 = srv->oracle.right;
	ret = -ENOMEM;

	printf("rk-serve bench: TP%d, backend %s", srv->size, backend_name(o->backend));
	if (o->backend == BACKEND_CUDA)
		printf(" (notify %s, graphs %s, device %d on r0)",
		       rk_gpu_notify_mode_name(o->notify), o->graphs ? "on" : "off",
		       srv->cm->device(srv->cuda));
	printf(", wait %s (spin_us %" PRIu64 "), toy model V=%" PRIu32 " H=%" PRIu32
	       " seed=%" PRIu64 ", max_batch %" PRIu32 ", %" PRIu32 " requests x %" PRIu32
	       " tokens per cell, prompt set %s, draft_k %" PRIu32 ", %" PRIu32 " run%s\n",
	       rk_wait_mode_name(srv->cfg.wait.mode), srv->cfg.wait.spin_ns / 1000, o->model.V,
	       o->model.H, o->model.seed, o->max_batch, o->b_requests, o->b_max_tokens,
	       o->b_prompt_set, o->b_draft_k, o->b_runs, o->b_runs > 1 ? "s (medians)" : "");
	if (o->b_n_pol) {
		printf("# policies, each run of a cell under each in turn:");
		for (q = 0; q < o->b_n_pol; q++)
			printf(" %s", bench_policies[o->b_pol[q]].name);
		printf("\n");
	}
	fflush(stdout);
	if (o->b_warmup) {
		ret = bench_warmup(bn, max_streams);
		if (ret) {
			fprintf(stderr, PROG ": bench: warm-up: %s\n", rk_strerror(ret));
			goto out;
		}
	}
	printf("#    %7s  %-7s  %-7s  %7s  %10s  %7s  %6s  %-16s", "streams", "mode", "draft",
	       "tokens", "tok/s", "rounds", "accept", "hash");
	for (r = 0; r < srv->size; r++) {
		char name[24];

		snprintf(name, sizeof(name), "cpu_s_r%d", r);
		printf("  %9s", name);
	}
	printf("\n");
	fflush(stdout);
	for (run = 0; run < o->b_runs; run++) {
		for (i = 0; i < n_cells; i++) {
			for (k = 0; k < n_pol; k++) {
				/* no policy always goes first (or always follows the same one) */
				q = (k + i + run) % n_pol;
				ret = bench_cell_policy(bn, &cells[i], &cr[q * n_cells + i],
							o->b_n_pol ? (int)o->b_pol[q] : -1);
				if (ret > 0) {
					srv->exit_rc = ret;
					ret = 0;
				}
				if (ret || srv->exit_rc)
					goto out;
				if (!o->b_n_pol && run + 1 == o->b_runs)
					bench_print_cell(srv, &cells[i], &cr[i], NULL);
			}
		}
	}
	for (q = 0; o->b_n_pol && q < n_pol; q++)
		for (i = 0; i < n_cells; i++)
			bench_print_cell(srv, &cells[i], &cr[q * n_cells + i],
					 bench_policies[o->b_pol[q]].name);
	/* a mode's tokens depend neither on concurrency nor on drafting: its cells agree */
	for (m = 0; m < 2; m++) {
		const char *h0 = NULL;
		uint32_t n = 0;
		bool agree = true;

		for (i = 0; i < n_res; i++) {
			if (cells[i % n_cells].sampled != (m == 1))
				continue;
			if (!h0)
				h0 = cr[i].hash;
			agree &= !strcmp(h0, cr[i].hash);
			n++;
		}
		if (!n)
			continue;
		printf("hash %s %s: %s\n", mode_name(m == 1), h0,
		       agree ? (n > 1 ? "every cell agrees" : "one cell") : "CELLS DISAGREE");
		if (!agree)
			srv->exit_rc = 3;
	}
	if (o->b_check_ref && !srv->exit_rc)
		printf("reference: every request equals toy_generate_ref at TP1\n");
	if (o->b_drafts[1])
		draft_print(srv, proposed0, right0);
	/* how each rank waited over the whole bench (the predictive wait's counters) */
	if (!bench_collect(bn, bn->after)) {
		for (r = 0; r < srv->size; r++) {
			const struct rk_loop_stats *l = &bn->after[r].loop;

			printf("loop r%d: spin_s %.3f blocked_s %.3f run_s %.3f blocks %" PRIu64
			       " wakeups %" PRIu64 " predict waits %" PRIu64 " early %" PRIu64
			       " late %" PRIu64 " cut %" PRIu64
			       " oversleep avg %.1f us margin %.1f us\n",
			       r, l->ns_spin / 1e9, l->ns_blocked / 1e9, l->ns_run / 1e9, l->blocks,
			       l->wakeups, l->predict_waits, l->predict_early, l->predict_late,
			       l->predict_cut,
			       l->predict_waits ?
				       l->ns_oversleep / 1e3 / (double)l->predict_waits : 0.0,
			       l->predict_margin_ns / 1e3);
		}
	}
	fflush(stdout);
	ret = 0;
	if (o->b_idle && !srv->exit_rc) {
		/* idle under the default policy */
		if (o->b_n_pol) {
			ret = bench_policy(bn, 0);
			if (ret)
				goto out;
		}
		ret = bench_idle(bn);
		if (ret)
			fprintf(stderr, PROG ": bench: idle: %s\n", rk_strerror(ret));
	}
out:
	draft_refs(srv, NULL, NULL);
	free(bn->ref[0]);
	free(bn->ref[1]);
	if (cr)
		for (i = 0; i < n_res; i++)
			free(cr[i].cpu);
	free(cr);
	free(bn->st);
	free(bn->toks);
	free(bn->before);
	free(bn->after);
	free(bn);
	return ret;
}
