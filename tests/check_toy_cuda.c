// SPDX-License-Identifier: MIT
/*
 * check_toy_cuda: the toy model's CUDA backend (examples/toy/toy_cuda.*)
 * against the CPU model: every logit of random rounds (new streams, drafts,
 * absent streams) at TP1, the golden values, launch errors; then rk_sched
 * worlds at TP1 and TP2, 1 and 8 streams, plain and drafted, greedy and
 * sampled, in every notify mode: every token equals toy_generate_ref() and
 * the TOY.md receipts.
 *
 * Exits 77 without a GPU (probed in a child: CUDA must not be initialised in
 * the parent, whose forks run the tests) or without CUDA and NCCL in the
 * build. Threads never call Check assertions: they record the failing line
 * and error, and the test body asserts after joining them.
 */
#define _GNU_SOURCE
#include "config.h"

#include "gpu_test.h"

#ifdef HAVE_TOY_CUDA
/* Before a launch without a scheduler: the reports so far. */
static void mark_reports(struct grank *t)
{
	t->completions = toy_cuda_reports(t->b, NULL, NULL);
}

/* That round was reported (its id and status in done_id, done_status). */
static bool reported(struct grank *t)
{
	return toy_cuda_reports(t->b, &t->done_id, &t->done_status) > t->completions;
}

/* Encode and launch one round on the backend; return launch()'s result. */
static int launch_round(struct toy_cuda *b, uint64_t id, const struct rk_wire_stream *st,
			uint32_t n, const uint32_t *tok, struct toy_round *copy, uint32_t V)
{
	static uint8_t buf[1 << 16];
	struct rk_wire_round view;
	int64_t len;

	len = rk_wire_encode_round(buf, sizeof(buf), id, st, n, tok);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(rk_wire_decode_round(buf, (size_t)len, &view), 0);
	if (copy)
		ck_assert_int_eq(toy_round_copy(copy, &view, V), 0);
	return toy_cuda_ops.launch(b, NULL, &view, 0);
}

/*
 * TP1: random rounds through the CUDA backend and through the CPU stream table
 * (toy_table_exec: at TP1 its partials are the logits); every logit must match.
 */
START_TEST(test_toy_logits)
{
	const uint32_t V = 256, H = _i ? 1024 : 64;
	struct gworld *gw = calloc(1, sizeof(*gw));
	struct grank *t = &gw->r[0];
	struct toy_params p = { .V = V, .H = H, .seed = 1 };
	struct toy_model m;
	struct toy_table tab;
	struct toy_round r = { 0 };
	struct rk_wire_stream st[6];
	uint32_t tok[512], ids_live[6], n_live = 0, pos[6] = { 0 }, x;
	uint64_t rs = 99 + (uint64_t)_i, deadline = rk_test_now_ns() + 60000 * MS, round;
	int32_t *cpu;
	uint32_t i, j, ntok, n;

	gw->size = 1;
	t->gw = gw;
	ck_assert_int_eq(node_create(t, deadline), 0);
	ck_assert_int_eq(rk_world_wait_ready(t->w), 0);
	ck_assert_int_eq(toy_cuda_create(NULL, &p, 0, RK_GPU_NOTIFY_AUTO, &t->b), -EINVAL);
	p.H = 100;
	p.V = 0;
	ck_assert_int_eq(toy_cuda_create(t->w, &p, 0, RK_GPU_NOTIFY_AUTO, &t->b), -EINVAL);
	p.V = V;
	p.H = H;
	ck_assert_int_eq(toy_cuda_create(t->w, &p, 99, RK_GPU_NOTIFY_AUTO, &t->b), -ENODEV);
	ck_assert_int_eq(toy_cuda_create(t->w, &p, -1, (enum rk_gpu_notify_mode)(_i % 3), &t->b),
			 0);
	toy_cuda_set_graphs(t->b, true);
	ck_assert_int_eq(toy_cuda_ready(t->b), 1);
	ck_assert_int_eq(toy_model_init(&m, V, H, 1, 0, 1), 0);
	ck_assert_int_eq(toy_table_init(&tab, &m), 0);
	cpu = malloc(sizeof(int32_t) * V * 64);

	/* the golden values of TOY.md (H = 64): a fresh stream fed token 1 */
	st[0] = (struct rk_wire_stream){ .stream_id = 5, .position = 0, .n_tokens = 1 };
	tok[0] = 1;
	mark_reports(t);
	ck_assert_int_eq(launch_round(t->b, 1, st, 1, tok, &r, V), 0);
	ck_assert(toy_cuda_busy(t->b));
	ck_assert_int_eq(toy_cuda_destroy(t->b), -EBUSY);
	ck_assert(RUN_UNTIL(t, deadline, reported(t)));
	ck_assert_int_eq(t->done_status, 0);
	ck_assert_uint_eq(t->done_id, 1);
	ck_assert_int_eq(toy_table_exec(&tab, &r, cpu), 0);
	ck_assert_mem_eq(toy_cuda_logits(t->b, 0), cpu, V * 4);
	if (H == 64) {
		const int32_t *lg = toy_cuda_logits(t->b, 0);

		ck_assert_int_eq(lg[0], 80206);
		ck_assert_int_eq(lg[1], 8424);
		ck_assert_int_eq(lg[2], -85873);
		ck_assert_int_eq(lg[3], 2390);
		ck_assert_int_eq(toy_cuda_ops.token(t->b, 0, 0, &x), 0);
		ck_assert_uint_eq(x, 9);
	}
	ck_assert_ptr_null(toy_cuda_logits(t->b, 1));
	ck_assert_int_eq(toy_cuda_ops.token(t->b, 1, 0, &x), -EINVAL);
	ck_assert_int_eq(toy_cuda_ops.token(t->b, 0, 1, &x), -EINVAL);

	/* errors: launch refuses, nothing changes */
	st[0] = (struct rk_wire_stream){ .stream_id = 5, .position = 3, .n_tokens = 1 };
	ck_assert_int_eq(launch_round(t->b, 2, st, 1, tok, NULL, V), -EPROTO);
	st[1] = st[0] = (struct rk_wire_stream){ .stream_id = 8, .position = 0, .n_tokens = 1 };
	tok[1] = 2;
	ck_assert_int_eq(launch_round(t->b, 2, st, 2, tok, NULL, V), -EINVAL);	/* twice */
	tok[0] = V;
	ck_assert_int_eq(launch_round(t->b, 2, st, 1, tok, NULL, V), -EINVAL);	/* token >= V */
	ck_assert(!toy_cuda_busy(t->b));
	ck_assert_uint_eq(toy_cuda_streams(t->b), 1);
	ck_assert_int_eq(toy_cuda_ops.token(t->b, 0, 0, &x), -EAGAIN);	/* the launch dropped it */

	/* random rounds: streams come (prefill), go (absent), draft (scratch only) */
	ids_live[n_live++] = 5;
	pos[0] = 1;
	for (round = 3; round < 60; round++) {
		n = 0;
		ntok = 0;
		for (i = 0; i < n_live; i++) {
			uint32_t k = (uint32_t)(rng_next(&rs) % 4), d = (uint32_t)(rng_next(&rs) % 5);

			if (rng_next(&rs) % 9 == 0) {	/* ends: absent from now on */
				ids_live[i] = ids_live[--n_live];
				pos[i] = pos[n_live];
				i--;
				continue;
			}
			k = k ? k : 1;
			st[n] = (struct rk_wire_stream){ .stream_id = ids_live[i], .position = pos[i],
							 .n_tokens = k, .n_draft = d };
			for (j = 0; j < k + d; j++)
				tok[ntok++] = (uint32_t)(rng_next(&rs) % V);
			pos[i] += k;
			n++;
		}
		if (n_live < 5 && rng_next(&rs) % 2) {	/* a new stream with a prompt */
			uint32_t k = 1 + (uint32_t)(rng_next(&rs) % 20);

			ids_live[n_live] = 1000 + round;
			pos[n_live] = k;
			st[n++] = (struct rk_wire_stream){ .stream_id = 1000 + round, .position = 0,
							   .n_tokens = k, .n_draft = 2 };
			for (j = 0; j < k + 2; j++)
				tok[ntok++] = (uint32_t)(rng_next(&rs) % V);
			n_live++;
		}
		if (!n)
			continue;
		mark_reports(t);
		ck_assert_int_eq(launch_round(t->b, round, st, n, tok, &r, V), 0);
		ck_assert(RUN_UNTIL(t, deadline, reported(t)));
		ck_assert_int_eq(t->done_status, 0);
		ck_assert_uint_le(r.n_out, 64);
		ck_assert_int_eq(toy_table_exec(&tab, &r, cpu), 0);
		for (j = 0; j < r.n_out; j++)
			ck_assert_msg(!memcmp(toy_cuda_logits(t->b, j), cpu + (size_t)j * V, V * 4),
				      "round %llu output %u differs", (unsigned long long)round, j);
		ck_assert_uint_eq(toy_cuda_streams(t->b), tab.count);
	}
	/*
	 * Steady decode: three new streams, then rounds of one shape (3 streams,
	 * 9 outputs), which run as a CUDA graph from their second round on.
	 */
	for (round = 100; round < 116; round++) {
		ntok = 0;
		for (i = 0; i < 3; i++) {
			uint32_t k = round == 100 ? 4 : 1;

			st[i] = (struct rk_wire_stream){ .stream_id = 7000 + i,
							 .position = round == 100 ? 0 : 4 + (uint32_t)(round - 101),
							 .n_tokens = k, .n_draft = 2 };
			for (j = 0; j < k + 2; j++)
				tok[ntok++] = (uint32_t)(rng_next(&rs) % V);
		}
		mark_reports(t);
		ck_assert_int_eq(launch_round(t->b, round, st, 3, tok, &r, V), 0);
		ck_assert(RUN_UNTIL(t, deadline, reported(t)));
		ck_assert_int_eq(t->done_status, 0);
		ck_assert_uint_eq(r.n_out, 9);
		ck_assert_int_eq(toy_table_exec(&tab, &r, cpu), 0);
		for (j = 0; j < r.n_out; j++)
			ck_assert_msg(!memcmp(toy_cuda_logits(t->b, j), cpu + (size_t)j * V, V * 4),
				      "steady round %llu output %u differs", (unsigned long long)round, j);
	}
	toy_cuda_ops.retire(t->b, 7000);
	ck_assert_uint_eq(toy_cuda_streams(t->b), 2);
	toy_cuda_stats(t->b, &t->stats);
	ck_assert_uint_gt(t->stats.rounds, 20);
	ck_assert_uint_eq(t->stats.notify.marks, t->stats.rounds);
	/* the last 14 steady rounds at least: one capture, then launches */
	ck_assert_uint_ge(t->stats.graph_captures, 1);
	ck_assert_uint_ge(t->stats.graph_launches, 14);

	ck_assert_int_eq(toy_cuda_destroy(t->b), 0);
	t->b = NULL;
	toy_round_fini(&r);
	toy_table_fini(&tab);
	toy_model_fini(&m);
	free(cpu);
	node_destroy(t);
	ck_assert_int_eq(t->line, 0);
	free(gw);
}
END_TEST

/* A drafter that knows the answers: the reference's next tokens, some spoiled. */
static uint32_t ref_draft(void *arg, const struct rk_request *req, const uint32_t *hist,
			  size_t n, uint32_t *out, uint32_t k)
{
	struct gworld *gw = arg;
	uint32_t i, j, gen;

	(void)req;
	for (i = 0; i < (uint32_t)gw->nstreams; i++) {
		struct gstream *s = &gw->s[i];

		if (n < s->n_prompt || memcmp(hist, s->prompt, s->n_prompt * 4))
			continue;
		gen = (uint32_t)n - s->n_prompt;
		for (j = 0; j < k && gen + j < s->n_gen; j++) {
			out[j] = s->ref[gen + j];
			if ((gen + j) % 5 == 3)
				out[j] = (out[j] + 1) % gw->p.V;	/* rejected, and the rest */
		}
		gw->drafts_proposed += j;
		return j;
	}
	return 0;
}

static void req_cb(struct rk_request *req, const uint32_t *tokens, uint32_t n, bool done, int err)
{
	struct gstream *s = req->data;

	if (n && s->n_got + n <= GEN_MAX) {	/* tokens is NULL when n is 0 */
		memcpy(s->got + s->n_got, tokens, n * 4);
		s->n_got += n;
	}
	if (done) {
		s->n_done++;
		s->done_err = err;
	}
}

static void *toy_rank(void *arg)
{
	struct grank *t = arg;
	struct gworld *gw = t->gw;
	struct rk_sched_config sc = { .max_batch = 8, .draft_k = gw->draft_k,
				      .draft = gw->draft_k ? ref_draft : NULL, .draft_arg = gw };
	uint64_t deadline = rk_test_now_ns() + 100000 * MS;
	uint8_t quit[8];
	int ret, i, done;

	ret = node_create(t, deadline);
	if (ret)
		T_FAIL(t, ret);
	/* backend and scheduler before the world is ready (a frame may come with WELCOME) */
	ret = toy_cuda_create(t->w, &gw->p, -1, gw->mode, &t->b);
	if (ret)
		T_FAIL(t, ret);
	/* CHECK_GPU_GRAPHS=1: these rounds as CUDA graphs too (rk-serve's default) */
	if (getenv("CHECK_GPU_GRAPHS") && !strcmp(getenv("CHECK_GPU_GRAPHS"), "1"))
		toy_cuda_set_graphs(t->b, true);
	ret = rk_sched_create(t->w, &sc, &toy_cuda_ops, t->b, &t->sched);
	if (ret)
		T_FAIL(t, ret);
	t->abort_on_peer_error = false;
	ret = rk_world_wait_ready(t->w);
	if (ret)
		T_FAIL(t, ret);
	if (t->rank == 0) {
		/* submitted at once: rounds wait inside the backend for NCCL */
		for (i = 0; i < gw->nstreams; i++) {
			struct gstream *s = &gw->s[i];

			rk_request_init(&s->req);
			s->req.prompt = s->prompt;
			s->req.prompt_len = s->n_prompt;
			s->req.max_tokens = s->n_gen;
			s->req.top_k = s->s.top_k;
			s->req.temperature = s->s.temperature;
			s->req.top_p = s->s.top_p;
			s->req.seed = s->s.seed;
			s->req.cb = req_cb;
			s->req.data = s;
			ret = rk_sched_submit(t->sched, &s->req);
			if (ret)
				T_FAIL(t, ret);
		}
		for (;;) {
			for (i = 0, done = 0; i < gw->nstreams; i++)
				done += gw->s[i].n_done;
			if (done == gw->nstreams)
				break;
			if (rk_test_now_ns() > deadline)
				T_FAIL(t, -ETIMEDOUT);
			if (rk_loop_run(t->loop, RK_RUN_ONCE) < 0)
				T_FAIL(t, -EIO);
		}
		if (!RUN_UNTIL(t, deadline, !toy_cuda_busy(t->b)))
			T_FAIL(t, -ETIMEDOUT);
		if (gw->size > 1) {
			ret = rk_wire_encode_user(quit, sizeof(quit), TAG_QUIT, NULL, 0);
			ret = rk_world_broadcast(t->w, RK_FRAME_USER, 0, quit, (uint32_t)ret);
			if (ret)
				T_FAIL(t, ret);
			rk_loop_run(t->loop, RK_RUN_NOWAIT);	/* QUIT leaves before we finalize */
		}
	} else {
		if (!RUN_UNTIL(t, deadline, t->quit))
			T_FAIL(t, -ETIMEDOUT);
	}
	/* the rounds and the NCCL id went to the scheduler and the bootstrap */
	if (t->foreign)
		T_FAIL(t, -EPROTO);
out:
	if (t->b) {
		RUN_UNTIL(t, rk_test_now_ns() + 10000 * MS, !toy_cuda_busy(t->b));
		toy_cuda_stats(t->b, &t->stats);
		ret = toy_cuda_destroy(t->b);
		if (ret && !t->line) {
			t->line = __LINE__;
			t->err = ret;
		}
		t->b = NULL;
	}
	if (t->sched)
		rk_sched_destroy(t->sched);
	t->sched = NULL;
	if (t->rank == 0 && gw->size > 1 && !t->line)
		RUN_UNTIL(t, rk_test_now_ns() + 10000 * MS, t->peer_errs == gw->size - 1);	/* BYE */
	node_destroy(t);
	return NULL;
}

/*
 * A peer dies after rounds ran as CUDA graphs that hold NCCL collectives.
 * NCCL's abort waits until every graph that captured a collective of the
 * communicator has been destroyed, so without rk_nccl's release hook (the
 * backend drops its graphs there) toy_cuda_abort() never returned. Rank 1
 * aborts and leaves; rank 0 aborts from peer_error. Both must come back.
 */
static void *toy_abort_rank(void *arg)
{
	struct grank *t = arg;
	struct gworld *gw = t->gw;
	uint64_t deadline = rk_test_now_ns() + 90000 * MS, round;
	struct rk_wire_stream st;
	struct rk_wire_round view;
	uint8_t buf[512];
	uint32_t tok[4], j;
	int64_t len;
	int ret;

	ret = node_create(t, deadline);
	if (ret)
		T_FAIL(t, ret);
	ret = toy_cuda_create(t->w, &gw->p, -1, RK_GPU_NOTIFY_AUTO, &t->b);
	if (ret)
		T_FAIL(t, ret);
	toy_cuda_set_graphs(t->b, true);
	ret = rk_world_wait_ready(t->w);
	if (ret)
		T_FAIL(t, ret);
	if (!RUN_UNTIL(t, deadline, toy_cuda_ready(t->b) != 0) || toy_cuda_ready(t->b) != 1)
		T_FAIL(t, toy_cuda_ready(t->b) ? toy_cuda_ready(t->b) : -ETIMEDOUT);
	/* one stream: a 3-token prompt, then 5 decode rounds; one shape (1 stream, 2 outputs) */
	for (round = 1; round <= 6; round++) {
		st = (struct rk_wire_stream){ .stream_id = 9,
					      .position = round == 1 ? 0 : (uint32_t)round + 1,
					      .n_tokens = round == 1 ? 3 : 1, .n_draft = 1 };
		for (j = 0; j < st.n_tokens + st.n_draft; j++)
			tok[j] = (uint32_t)(round * 7 + j) % gw->p.V;
		len = rk_wire_encode_round(buf, sizeof(buf), round, &st, 1, tok);
		if (len <= 0 || rk_wire_decode_round(buf, (size_t)len, &view))
			T_FAIL(t, -EPROTO);
		mark_reports(t);
		ret = toy_cuda_ops.launch(t->b, NULL, &view, 0);
		if (ret)
			T_FAIL(t, ret);
		if (!RUN_UNTIL(t, deadline, reported(t)))
			T_FAIL(t, -ETIMEDOUT);
		if (t->done_status)
			T_FAIL(t, t->done_status);
	}
	toy_cuda_stats(t->b, &t->stats);
	if (t->stats.graph_captures < 1 || t->stats.graph_launches < 5)
		T_FAIL(t, -EPROTO);	/* rounds 2-6 ran as a graph */
	atomic_fetch_add(&gw->stage, 1);
	wait_stage(gw, 2, deadline);
	if (t->rank == 1) {
		toy_cuda_abort(t->b);	/* this rank "dies": its communicator, then its links */
	} else {
		t->abort_on_peer_error = true;
		if (!RUN_UNTIL(t, deadline, t->peer_errs > 0))
			T_FAIL(t, -ETIMEDOUT);
	}
	if (toy_cuda_ready(t->b) != -ECONNRESET)
		T_FAIL(t, -EPROTO);
out:
	if (t->b && toy_cuda_destroy(t->b) && !t->line)
		t->line = __LINE__;
	t->b = NULL;
	node_destroy(t);
	return NULL;
}

START_TEST(test_toy_abort_graphs)
{
	struct gworld *gw;

	if (g_ndev < 2) {
		printf("test_toy_abort_graphs: skipped (%d GPU)\n", g_ndev);
		return;
	}
	gw = calloc(1, sizeof(*gw));
	gw->size = 2;
	toy_params_init(&gw->p);
	run_ranks(gw, toy_abort_rank);
	free(gw);
}
END_TEST

/*
 * _i bits: 0: TP2, 1: 8 streams, 2: drafted, 3: stream 0 sampled, 4: RK_RESIDENT=on
 * (the backend has no resident rounds: it launches every one). Stream 0 is
 * TOY.md's receipt stream (prompt 1..8, 32 tokens, H 1024); the others mix
 * greedy and sampled. The notify mode rotates with _i.
 */
START_TEST(test_toy_sched)
{
	/* TOY.md's receipts: greedy, sampled (FNV-1a without OpenSSL) */
	static const char *const golden[2] = {
#ifdef RK_HAVE_OPENSSL
		"580208bbe9f726d2", "74085fd6e1e26755",
#else
		"953b82ad5cb652c2", "072ca5397e51f06c",
#endif
	};
	const struct toy_sampling sampled = { 40, 0.8f, 0.95f, 1234 };
	const int v = _i;
	struct gworld *gw;
	uint64_t rs = 7 + (uint64_t)_i;
	char hex[17];
	int i;
	uint32_t j;

	if ((v & 1) && g_ndev < 2) {
		printf("test_toy_sched %d: TP2 skipped (%d GPU)\n", _i, g_ndev);
		return;
	}
	gw = calloc(1, sizeof(*gw));
	gw->size = (v & 1) ? 2 : 1;
	gw->nstreams = (v & 2) ? 8 : 1;
	gw->draft_k = (v & 4) ? 3 : 0;
	gw->mode = (enum rk_gpu_notify_mode)(_i % 3);
	gw->resident = (v & 16) ? RK_RESIDENT_ON : RK_RESIDENT_AUTO;
	toy_params_init(&gw->p);		/* V 256, H 1024, seed 1 */
	for (i = 0; i < gw->nstreams; i++) {
		struct gstream *s = &gw->s[i];

		if (i == 0) {
			for (j = 0; j < 8; j++)
				s->prompt[j] = j + 1;
			s->n_prompt = 8;
			s->n_gen = 32;
			if (v & 8)
				s->s = sampled;
		} else {
			s->n_prompt = 1 + (uint32_t)(rng_next(&rs) % 8);
			for (j = 0; j < s->n_prompt; j++)
				s->prompt[j] = (uint32_t)(rng_next(&rs) % 256);
			s->prompt[0] = 100 + (uint32_t)i;	/* distinct: the drafter finds it */
			s->n_gen = 12 + (uint32_t)(rng_next(&rs) % 20);
			if (i % 2)
				s->s = (struct toy_sampling){ 5 + (uint32_t)i, 1.2f, 0.9f,
							      (uint64_t)i * 77 };
		}
		ck_assert_int_eq(toy_generate_ref(gw->p.V, gw->p.H, gw->p.seed, s->prompt,
						  s->n_prompt, s->n_gen, &s->s, s->ref), 0);
	}
	run_ranks(gw, toy_rank);
	for (i = 0; i < gw->nstreams; i++) {
		struct gstream *s = &gw->s[i];

		ck_assert_int_eq(s->n_done, 1);
		ck_assert_int_eq(s->done_err, 0);
		ck_assert_uint_eq(s->n_got, s->n_gen);
		ck_assert_msg(!memcmp(s->got, s->ref, s->n_gen * 4), "stream %d differs", i);
	}
	ck_assert_int_eq(toy_hash_tokens(gw->s[0].got, gw->s[0].n_got, hex), 0);
	ck_assert_str_eq(hex, golden[(v & 8) ? 1 : 0]);
	ck_assert_uint_gt(gw->r[0].stats.rounds, 0);
	if (gw->size > 1)
		ck_assert_uint_eq(gw->r[1].stats.rounds, gw->r[0].stats.rounds);
	if (gw->draft_k)
		ck_assert_uint_gt(gw->drafts_proposed, 0);
	/* every round launched, and enqueued by its launch (or when NCCL came up) */
	for (i = 0; i < gw->size; i++)
		ck_assert_uint_eq(gw->r[i].stats.enqueues, gw->r[i].stats.rounds);
	if (getenv("CHECK_GPU_VERBOSE"))
		printf("toy %d: TP%d %d streams draft %u %s resident %s: %llu rounds (%llu as a "
		       "graph), poll %llu wake %llu\n",
		       _i, gw->size, gw->nstreams, gw->draft_k, rk_gpu_notify_mode_name(gw->mode),
		       (v & 16) ? "on" : "auto", (unsigned long long)gw->r[0].stats.rounds,
		       (unsigned long long)gw->r[0].stats.graph_launches,
		       (unsigned long long)gw->r[0].stats.notify.via_poll,
		       (unsigned long long)gw->r[0].stats.notify.via_wake);
	free(gw);
}
END_TEST
#endif /* HAVE_TOY_CUDA */

#ifdef HAVE_TOY_CUDA
static Suite *toy_cuda_suite(void)
{
	Suite *s = suite_create("toy_cuda");
	TCase *tc;

	tc = rk_tcase(s, "toy", 180, NULL, NULL);
	tcase_add_loop_test(tc, test_toy_logits, 0, 2);
	tcase_add_loop_test(tc, test_toy_sched, 0, 32);
	tcase_add_test(tc, test_toy_abort_graphs);
	return s;
}
#endif

int main(void)
{
	gpu_test_setup();
#ifndef HAVE_TOY_CUDA
	/* the stubs answer -EOPNOTSUPP, and that is all there is to test */
	if (toy_cuda_create(NULL, NULL, 0, RK_GPU_NOTIFY_AUTO, NULL) != -EOPNOTSUPP) {
		fprintf(stderr, "check_toy_cuda: a stub did not return -EOPNOTSUPP\n");
		return EXIT_FAILURE;
	}
	printf("SKIP: rankrt was built without CUDA and NCCL\n");
	return 77;
#else
	if (gpu_test_probe())
		return 77;
	printf("check_toy_cuda: %d CUDA device(s)\n", g_ndev);
	return rk_check_run(toy_cuda_suite());
#endif
}
