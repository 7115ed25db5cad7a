// SPDX-License-Identifier: MIT
/*
 * check_toy: the toy model (examples/toy/TOY.md) and its CPU backend's parts.
 *
 * The model tests pin the definition: the golden values below were computed
 * by an independent Python transcription of TOY.md and match this C code bit
 * for bit, so a GPU port can be checked against the same numbers. The table
 * tests drive a rank's round execution directly (positions, drafts on scratch
 * copies, the stream rule). The backend in a world of ranks is
 * check_toy_world's.
 */
#define _GNU_SOURCE
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rankrt.h"
#include "rk_check.h"
#include "rk_test.h"
#include "toy.h"

#define TIMEOUT_S	60

/* Encode, decode and copy a round, as launch() sees it. Return toy_round_copy()'s result. */
static int make_round(struct toy_round *r, uint64_t id, const struct rk_wire_stream *st,
		      uint32_t n, const uint32_t *tok, uint32_t V)
{
	static uint8_t buf[1 << 16];
	struct rk_wire_round view;
	int64_t len;

	len = rk_wire_encode_round(buf, sizeof(buf), id, st, n, tok);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(rk_wire_decode_round(buf, (size_t)len, &view), 0);
	return toy_round_copy(r, &view, V);
}

/* ---- the model ----------------------------------------------------------------------- */

/* Values of the definition, from the Python transcription of TOY.md. */
START_TEST(test_hash_golden)
{
	ck_assert_uint_eq(toy_hash(0, 0, 0), 0xa706dd2f4d197e6full);
	ck_assert_uint_eq(toy_hash(1, 1, 5), 0xcc9c143a25c28764ull);
	ck_assert_uint_eq(toy_hash(42, 3, 7), 0x7cb0357504762aefull);
}
END_TEST

START_TEST(test_logits_golden)
{
	struct toy_model m;
	struct toy_state st;
	int32_t lg[256];
	int64_t sum = 0;
	int v;

	ck_assert_int_eq(toy_model_init(&m, 256, 64, 1, 0, 1), 0);
	ck_assert_int_eq(toy_state_init(&m, &st), 0);
	/* before any token: the state term alone */
	toy_partial_logits(&m, &st, lg);
	ck_assert_int_eq(lg[0], 14669);
	ck_assert_int_eq(lg[1], -16208);
	ck_assert_int_eq(lg[2], -978);
	ck_assert_int_eq(lg[3], 1715);
	for (v = 0; v < 256; v++)
		sum += lg[v];
	ck_assert_int_eq(sum, 122920);
	ck_assert_int_eq(toy_state_feed(&m, &st, 1), 0);
	toy_partial_logits(&m, &st, lg);
	ck_assert_int_eq(lg[0], 80206);
	ck_assert_int_eq(lg[1], 8424);
	ck_assert_int_eq(lg[2], -85873);
	ck_assert_int_eq(lg[3], 2390);
	for (sum = 0, v = 0; v < 256; v++)
		sum += lg[v];
	ck_assert_int_eq(sum, -1312146);
	ck_assert_uint_eq(toy_pick(256, 64, lg, NULL, 0), 9);
	toy_state_fini(&st);
	toy_model_fini(&m);
}
END_TEST

START_TEST(test_model_errors)
{
	struct toy_model m;
	struct toy_state st;

	ck_assert_int_eq(toy_model_init(&m, 256, 1000, 1, 0, 3), -EINVAL);	/* H % T */
	ck_assert_int_eq(toy_model_init(&m, 256, 64, 1, 0, 0), -EINVAL);
	ck_assert_int_eq(toy_model_init(&m, 256, 64, 1, 2, 2), -EINVAL);	/* r >= T */
	ck_assert_int_eq(toy_model_init(&m, 0, 64, 1, 0, 1), -EINVAL);
	ck_assert_int_eq(toy_model_init(&m, TOY_MAX_V + 1, 64, 1, 0, 1), -EINVAL);
	ck_assert_int_eq(toy_model_init(&m, 256, 0, 1, 0, 1), -EINVAL);
	ck_assert_int_eq(toy_model_init(&m, 256, TOY_MAX_H * 2, 1, 0, 1), -EINVAL);
	ck_assert_int_eq(toy_model_init(&m, 16, TOY_MAX_H, 1, 0, 1), 0);
	toy_model_fini(&m);
	ck_assert_int_eq(toy_model_init(&m, 16, 64, 1, 0, 1), 0);
	ck_assert_int_eq(toy_state_init(&m, &st), 0);
	ck_assert_int_eq(toy_state_feed(&m, &st, 16), -EINVAL);
	ck_assert_int_eq(toy_state_feed(&m, &st, 15), 0);
	toy_state_fini(&st);
	toy_model_fini(&m);
}
END_TEST

/* The sum of T shards' partials equals the TP1 logits, state after state. */
START_TEST(test_shards_sum)
{
	const uint32_t T = 1u << _i, V = 256, H = 256;
	struct toy_model m1, m[4];
	struct toy_state s1, s[4];
	int32_t l1[256], part[256], sum[256];
	uint64_t rs = 7 + _i;
	uint32_t r, v, k, seq, t, tok;

	ck_assert_int_eq(toy_model_init(&m1, V, H, 99, 0, 1), 0);
	for (r = 0; r < T; r++) {
		ck_assert_int_eq(toy_model_init(&m[r], V, H, 99, r, T), 0);
		ck_assert_uint_eq(m[r].lo, r * (H / T));
		ck_assert_uint_eq(m[r].hi - m[r].lo, H / T);
		/* each shard generated just its columns, identical to TP1's */
		for (v = 0; v < V; v++)
			for (k = 0; k < m[r].n; k++) {
				ck_assert_uint_eq(m[r].E[v * m[r].n + k],
						  m1.E[v * m1.n + m[r].lo + k]);
				ck_assert_uint_eq(m[r].W[v * m[r].n_pad + k],
						  m1.W[v * m1.n_pad + m[r].lo + k]);
				ck_assert_int_ge(m[r].W[v * m[r].n_pad + k], -64);
				ck_assert_int_le(m[r].W[v * m[r].n_pad + k], 63);
			}
	}
	for (seq = 0; seq < 12; seq++) {
		ck_assert_int_eq(toy_state_init(&m1, &s1), 0);
		for (r = 0; r < T; r++)
			ck_assert_int_eq(toy_state_init(&m[r], &s[r]), 0);
		for (t = 0; t < 24; t++) {
			tok = (uint32_t)(rng_next(&rs) % V);
			ck_assert_int_eq(toy_state_feed(&m1, &s1, tok), 0);
			toy_partial_logits(&m1, &s1, l1);
			memset(sum, 0, sizeof(sum));
			for (r = 0; r < T; r++) {
				ck_assert_int_eq(toy_state_feed(&m[r], &s[r], tok), 0);
				ck_assert_mem_eq(s[r].h, s1.h + m[r].lo, m[r].n * 4);
				ck_assert_uint_eq(s[r].last, tok);
				toy_partial_logits(&m[r], &s[r], part);
				for (v = 0; v < V; v++)
					sum[v] += part[v];
			}
			ck_assert_mem_eq(sum, l1, sizeof(l1));
		}
		toy_state_fini(&s1);
		for (r = 0; r < T; r++)
			toy_state_fini(&s[r]);
	}
	toy_model_fini(&m1);
	for (r = 0; r < T; r++)
		toy_model_fini(&m[r]);
}
END_TEST

/* Every kernel equals a plain loop, across padding, blocks and V % 4 tails. */
START_TEST(test_kernels)
{
	static const uint32_t shapes[][2] = {
		{ 256, 64 }, { 7, 100 }, { 33, 5000 }, { 256, 4096 }
	};
	const uint32_t V = shapes[_i][0], H = shapes[_i][1];
	struct toy_model m;
	struct toy_state st;
	int32_t *want = malloc(V * 4), *got = malloc(V * 4);
	uint64_t rs = 3;
	uint32_t v, k, t;
	uint32_t *h = malloc(H * 4), x, tok = 0;
	int32_t *f = malloc(H * 4);
	int kern, ret, ran = 0;

	ck_assert_int_eq(toy_model_init(&m, V, H, 5, 0, 1), 0);
	ck_assert_int_eq(toy_state_init(&m, &st), 0);
	ck_assert_uint_eq(st.last, UINT32_MAX);
	memcpy(h, m.h0, H * 4);
	for (t = 0; t < 7; t++) {
		/* the state update, written out (the library's may be vectorized) */
		if (t) {
			tok = (uint32_t)(rng_next(&rs) % V);
			ck_assert_int_eq(toy_state_feed(&m, &st, tok), 0);
			ck_assert_uint_eq(st.last, tok);
			for (k = 0; k < H; k++) {
				x = h[k] * 0x9E3779B1u + m.E[(size_t)tok * H + k] + k;
				h[k] = x ^ (x >> 15);
			}
		}
		ck_assert_mem_eq(st.h, h, H * 4);
		/* the features, written out; t == 0 is the fresh state (no last token) */
		for (k = 0; k < H; k++) {
			f[k] = (int32_t)((h[k] >> 16) & 0xff) - 128;
			if (t)
				f[k] += 2 * ((int32_t)(m.E[(size_t)tok * H + k] >> 8) - 128);
			ck_assert(f[k] >= -384 && f[k] <= 381);
		}
		for (v = 0; v < V; v++) {
			int64_t s = 0;

			for (k = 0; k < m.n; k++)
				s += (int64_t)m.W[(size_t)v * m.n_pad + k] * f[k];
			ck_assert(s > -(1 << 30) && s < (1 << 30));
			want[v] = (int32_t)s;
		}
		toy_partial_logits(&m, &st, got);
		ck_assert_mem_eq(got, want, V * 4);
		for (kern = TOY_KERNEL_C; kern <= TOY_KERNEL_AVX2; kern++) {
			ret = toy_partial_logits_kernel(&m, &st, got, kern);
			if (ret == -EOPNOTSUPP)
				continue;
			ck_assert_int_eq(ret, 0);
			ck_assert_mem_eq(got, want, V * 4);
			ran++;
		}
	}
	ck_assert_int_ge(ran, 7);	/* the portable kernel at least */
	ck_assert_int_eq(toy_partial_logits_kernel(&m, &st, got, (enum toy_kernel)9), -EOPNOTSUPP);
	toy_state_fini(&st);
	toy_model_fini(&m);
	free(want);
	free(got);
	free(h);
	free(f);
}
END_TEST

/* ---- picking -------------------------------------------------------------------------- */

START_TEST(test_pick_greedy)
{
	int32_t lg[8] = { 5, 9, 3, 9, -1, 9, 0, 2 };
	struct toy_sampling s = { 0 };

	ck_assert_uint_eq(toy_pick(8, 64, lg, NULL, 0), 1);	/* lowest v of the ties */
	ck_assert_uint_eq(toy_pick(8, 64, lg, &s, 0), 1);
	s.top_k = 4;
	s.temperature = 0.0f;					/* no temperature: greedy */
	ck_assert_uint_eq(toy_pick(8, 64, lg, &s, 3), 1);
	s.temperature = -1.0f;
	ck_assert_uint_eq(toy_pick(8, 64, lg, &s, 3), 1);
	s.temperature = NAN;
	ck_assert_uint_eq(toy_pick(8, 64, lg, &s, 3), 1);
	s.temperature = 1.0f;
	s.top_k = 1;						/* top-1 is greedy too */
	ck_assert_uint_eq(toy_pick(8, 64, lg, &s, 3), 1);
}
END_TEST

/* Greedy over long rows (the pick works in blocks): against a plain scan. */
START_TEST(test_pick_greedy_rows)
{
	static const uint32_t lens[] = { 1, 63, 64, 65, 127, 128, 129, 200, 4096, 4099 };
	int32_t *lg = malloc(4099 * sizeof(*lg));
	uint64_t rs = 99;
	uint32_t i, j, v, best, n;

	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		n = lens[i];
		for (j = 0; j < 64; j++) {
			/* few distinct values: ties within and across blocks; j % 4 == 0:
			 * all equal; j % 4 == 1: the maximum only in the tail, or last */
			for (v = 0; v < n; v++)
				lg[v] = j % 4 == 0 ? -7 : (int32_t)(rng_next(&rs) % 5) - 2 - (j % 4 == 1) * 10;
			if (j % 4 == 1)
				lg[n - 1 - (uint32_t)(rng_next(&rs) % (n % 64 ? n % 64 : 1))] = INT32_MAX;
			if (j % 4 == 2)
				lg[rng_next(&rs) % n] = INT32_MIN;
			for (v = 1, best = 0; v < n; v++)
				if (lg[v] > lg[best])
					best = v;
			ck_assert_msg(toy_pick(n, 64, lg, NULL, 0) == best, "V %u row %u", n, j);
		}
	}
	free(lg);
}
END_TEST

START_TEST(test_pick_sampled)
{
	static const uint32_t golden1[12] = { 9, 9, 44, 52, 9, 9, 9, 9, 52, 9, 52, 9 };
	static const uint32_t golden2[12] = {
		246, 0, 9, 102, 42, 65, 23, 52, 102, 52, 118, 118
	};
	struct toy_sampling s = { 40, 0.8f, 0.95f, 1234 }, s2 = { 256, 2.0f, 0.0f, 5 };
	struct toy_sampling s3 = { 40, 0.8f, 0.0f, 1234 };
	struct toy_model m;
	struct toy_state st;
	int32_t lg[256], sorted[256], kth;
	uint32_t i, j, tok, seen = 0, count[256] = { 0 }, best;
	bool hit[256] = { false };

	ck_assert_int_eq(toy_model_init(&m, 256, 64, 1, 0, 1), 0);
	ck_assert_int_eq(toy_state_init(&m, &st), 0);
	ck_assert_int_eq(toy_state_feed(&m, &st, 1), 0);
	toy_partial_logits(&m, &st, lg);
	for (i = 0; i < 12; i++) {
		ck_assert_uint_eq(toy_pick(256, 64, lg, &s, i), golden1[i]);
		ck_assert_uint_eq(toy_pick(256, 64, lg, &s2, i), golden2[i]);
	}
	/*
	 * The scale gives a peaked but not degenerate distribution (Python:
	 * 1142 of 2000 draws are the argmax, 31 tokens are drawn).
	 */
	best = toy_pick(256, 64, lg, NULL, 0);
	for (i = 0; i < 2000; i++)
		count[toy_pick(256, 64, lg, &s3, i)]++;
	ck_assert_uint_eq(count[best], 1142);
	for (i = 0, seen = 0; i < 256; i++)
		seen += count[i] != 0;
	ck_assert_uint_eq(seen, 31);
	seen = 0;
	/* every pick is among the top k; a function of its arguments only */
	memcpy(sorted, lg, sizeof(lg));
	for (i = 0; i < 256; i++)
		for (j = i + 1; j < 256; j++)
			if (sorted[j] > sorted[i]) {
				int32_t x = sorted[i];

				sorted[i] = sorted[j];
				sorted[j] = x;
			}
	s.top_k = 10;
	s.top_p = 1.0f;
	kth = sorted[9];
	for (i = 0; i < 2000; i++) {
		tok = toy_pick(256, 64, lg, &s, i);
		ck_assert_int_ge(lg[tok], kth);
		ck_assert_uint_eq(tok, toy_pick(256, 64, lg, &s, i));
		if (!hit[tok]) {
			hit[tok] = true;
			seen++;
		}
	}
	ck_assert_uint_ge(seen, 3);
	/* a tiny top_p keeps only the best */
	s.top_p = 1e-9f;
	for (i = 0; i < 200; i++)
		ck_assert_uint_eq(toy_pick(256, 64, lg, &s, i), toy_pick(256, 64, lg, NULL, 0));
	/* top_k above V (and above TOY_TOPK_MAX) is clamped */
	s.top_k = 100000;
	s.top_p = 0.5f;
	for (i = 0; i < 50; i++)
		ck_assert_uint_lt(toy_pick(256, 64, lg, &s, i), 256);
	toy_state_fini(&st);
	toy_model_fini(&m);
}
END_TEST

/* Equal logits: weights are equal, so the draws are uniform over the top k. */
START_TEST(test_pick_uniform)
{
	int32_t lg[16] = { 0 };
	struct toy_sampling s = { 4, 1.0f, 0.0f, 77 };
	uint32_t count[16] = { 0 }, i;

	lg[3] = lg[5] = lg[9] = lg[12] = lg[14] = 1000;
	for (i = 0; i < 8000; i++)
		count[toy_pick(16, 1024, lg, &s, i)]++;
	/* the top 4 by (logit, lower v) are 3, 5, 9, 12; 14 loses the tie */
	ck_assert_uint_eq(count[14], 0);
	ck_assert_uint_eq(count[3] + count[5] + count[9] + count[12], 8000);
	for (i = 0; i < 16; i++)
		if (count[i])
			ck_assert(count[i] > 1700 && count[i] < 2300);
}
END_TEST

/* ---- the reference generator --------------------------------------------------------------- */

START_TEST(test_ref_golden)
{
	static const uint32_t greedy64[16] = { 9, 17, 142, 6, 100, 245, 107, 218,
					       142, 230, 40, 64, 234, 198, 26, 153 };
	static const uint32_t sampled64[16] = { 9, 180, 122, 211, 148, 27, 91, 221,
						101, 255, 2, 45, 175, 17, 246, 247 };
	static const uint32_t greedy[8] = { 33, 2, 171, 215, 213, 172, 62, 228 };
	static const uint32_t sampled[8] = { 12, 178, 86, 146, 217, 14, 60, 232 };
	const uint32_t p5[5] = { 1, 2, 3, 4, 5 }, p8[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct toy_sampling g = { 0 }, s = { 40, 0.8f, 0.95f, 1234 };
	uint32_t out[32], again[32];
	char hex[17];

	ck_assert_int_eq(toy_generate_ref(256, 64, 1, p5, 5, 16, &g, out), 0);
	ck_assert_mem_eq(out, greedy64, sizeof(greedy64));
	ck_assert_int_eq(toy_generate_ref(256, 64, 1, p5, 5, 16, &s, out), 0);
	ck_assert_mem_eq(out, sampled64, sizeof(sampled64));

	/* the default size (V 256, H 1024, seed 1): the port's reference receipts */
	ck_assert_int_eq(toy_generate_ref(256, 1024, 1, p8, 8, 32, &g, out), 0);
	ck_assert_mem_eq(out, greedy, sizeof(greedy));
	ck_assert_int_eq(toy_generate_ref(256, 1024, 1, p8, 8, 32, &g, again), 0);
	ck_assert_mem_eq(out, again, sizeof(out));
	ck_assert_int_eq(toy_hash_tokens(out, 32, hex), 0);
#ifdef RK_HAVE_OPENSSL
	ck_assert_str_eq(hex, "580208bbe9f726d2");
#else
	ck_assert_str_eq(hex, "953b82ad5cb652c2");
#endif
	ck_assert_int_eq(toy_generate_ref(256, 1024, 1, p8, 8, 32, &s, out), 0);
	ck_assert_mem_eq(out, sampled, sizeof(sampled));
	ck_assert_int_eq(toy_hash_tokens(out, 32, hex), 0);
#ifdef RK_HAVE_OPENSSL
	ck_assert_str_eq(hex, "74085fd6e1e26755");
#else
	ck_assert_str_eq(hex, "072ca5397e51f06c");
#endif
	/* a different sampling seed gives a different stream */
	s.seed++;
	ck_assert_int_eq(toy_generate_ref(256, 1024, 1, p8, 8, 32, &s, again), 0);
	ck_assert(memcmp(out, again, sizeof(out)) != 0);
}
END_TEST

START_TEST(test_ref_errors)
{
	const uint32_t bad[2] = { 1, 256 };
	uint32_t out[4];

	ck_assert_int_eq(toy_generate_ref(256, 64, 1, bad, 0, 4, NULL, out), -EINVAL);
	ck_assert_int_eq(toy_generate_ref(256, 64, 1, bad, 2, 4, NULL, out), -EINVAL);
	ck_assert_int_eq(toy_generate_ref(256, 63, 1, bad, 1, 4, NULL, out), 0);
	ck_assert_int_eq(toy_generate_ref(256, 0, 1, bad, 1, 4, NULL, out), -EINVAL);
}
END_TEST

START_TEST(test_hash_tokens)
{
	const uint32_t t[3] = { 1, 2, 3 };
	char hex[17];

	ck_assert_int_eq(toy_hash_tokens(NULL, 0, hex), 0);
#ifdef RK_HAVE_OPENSSL
	ck_assert_str_eq(hex, "e3b0c44298fc1c14");	/* SHA-256 of nothing */
	ck_assert_int_eq(toy_hash_tokens(t, 3, hex), 0);
	ck_assert_str_eq(hex, "4636993d3e1da4e9");
#else
	ck_assert_str_eq(hex, "cbf29ce484222325");	/* the FNV-1a 64 basis */
	ck_assert_int_eq(toy_hash_tokens(t, 3, hex), 0);
	ck_assert_str_eq(hex, "fd1f0f4381eb0395");
#endif
}
END_TEST

/* ---- the stream table ------------------------------------------------------------------------ */

#define TV 256
#define TH 128

struct tbl {
	struct toy_model m;
	struct toy_table t;
	struct toy_round r;
	int32_t out[32 * TV];
};

static void tbl_init(struct tbl *x, uint32_t rank, uint32_t T)
{
	memset(x, 0, sizeof(*x));
	ck_assert_int_eq(toy_model_init(&x->m, TV, TH, 11, rank, T), 0);
	ck_assert_int_eq(toy_table_init(&x->t, &x->m), 0);
}

static void tbl_fini(struct tbl *x)
{
	toy_round_fini(&x->r);
	toy_table_fini(&x->t);
	toy_model_fini(&x->m);
}

static struct rk_wire_stream wst(uint64_t id, uint32_t pos, uint32_t n, uint32_t d)
{
	return (struct rk_wire_stream){ .stream_id = id, .position = pos, .n_tokens = n,
					.n_draft = d };
}

/* TP1 partials after feeding @n tokens from scratch. */
static void logits_after(const struct toy_model *m, const uint32_t *tok, uint32_t n, int32_t *out)
{
	struct toy_state st;
	uint32_t i;

	ck_assert_int_eq(toy_state_init(m, &st), 0);
	for (i = 0; i < n; i++)
		ck_assert_int_eq(toy_state_feed(m, &st, tok[i]), 0);
	toy_partial_logits(m, &st, out);
	toy_state_fini(&st);
}

START_TEST(test_table_rounds)
{
	/* A: prompt 1 2 3 4 5; B: prompt 9 */
	const uint32_t seqA[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
	struct rk_wire_stream st[2] = { wst(100, 0, 5, 0), wst(200, 0, 1, 3) };
	uint32_t tok[16] = { 1, 2, 3, 4, 5, 9, 40, 41, 42 };
	uint32_t B[4] = { 9, 40, 41, 42 };
	int32_t want[TV];
	struct tbl x;
	uint32_t j;

	tbl_init(&x, 0, 1);
	ck_assert_int_eq(make_round(&x.r, 1, st, 2, tok, TV), 0);
	ck_assert_uint_eq(x.r.n_out, 1 + 4);
	ck_assert_uint_eq(x.r.st[1].out_off, 1);
	ck_assert_uint_eq(x.r.st[1].tok_off, 5);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), 0);
	ck_assert_uint_eq(x.t.count, 2);
	ck_assert_int_eq(toy_table_position(&x.t, 100), 5);
	/* drafts never commit: B's position counts its input only */
	ck_assert_int_eq(toy_table_position(&x.t, 200), 1);
	logits_after(&x.m, seqA, 5, want);
	ck_assert_mem_eq(x.out, want, sizeof(want));
	for (j = 0; j <= 3; j++) {
		logits_after(&x.m, B, 1 + j, want);
		ck_assert_mem_eq(x.out + (1 + j) * TV, want, sizeof(want));
	}

	/* round 2: A decodes one token; B had 2 drafts accepted plus the next: 3 inputs */
	st[0] = wst(100, 5, 1, 2);
	st[1] = wst(200, 1, 3, 0);
	tok[0] = 6;
	tok[1] = 7;
	tok[2] = 8;
	tok[3] = 40;
	tok[4] = 41;
	tok[5] = 77;
	ck_assert_int_eq(make_round(&x.r, 2, st, 2, tok, TV), 0);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), 0);
	ck_assert_int_eq(toy_table_position(&x.t, 100), 6);
	ck_assert_int_eq(toy_table_position(&x.t, 200), 4);
	for (j = 0; j <= 2; j++) {
		logits_after(&x.m, seqA, 6 + j, want);
		ck_assert_mem_eq(x.out + j * TV, want, sizeof(want));
	}
	B[3] = 77;
	logits_after(&x.m, B, 4, want);
	ck_assert_mem_eq(x.out + 3 * TV, want, sizeof(want));

	/* round 3: B alone; A is absent, so it is retired (the stream rule) */
	st[0] = wst(200, 4, 1, 0);
	tok[0] = 5;
	ck_assert_int_eq(make_round(&x.r, 3, st, 1, tok, TV), 0);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), 0);
	ck_assert_uint_eq(x.t.count, 1);
	ck_assert_int_eq(toy_table_position(&x.t, 100), -ENOENT);
	ck_assert_int_eq(toy_table_position(&x.t, 200), 5);
	/* A again at position 0 starts fresh */
	st[0] = wst(100, 0, 2, 0);
	st[1] = wst(200, 5, 1, 0);
	tok[0] = 1;
	tok[1] = 2;
	tok[2] = 6;
	ck_assert_int_eq(make_round(&x.r, 4, st, 2, tok, TV), 0);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), 0);
	logits_after(&x.m, seqA, 2, want);
	ck_assert_mem_eq(x.out, want, sizeof(want));
	/* explicit retire, twice */
	ck_assert_int_eq(toy_table_retire(&x.t, 100), 0);
	ck_assert_int_eq(toy_table_retire(&x.t, 100), -ENOENT);
	ck_assert_uint_eq(x.t.count, 1);
	tbl_fini(&x);
}
END_TEST

/* A bad round changes nothing: no state advances, no stream is created or retired. */
START_TEST(test_table_errors)
{
	struct rk_wire_stream st[3] = { wst(1, 0, 2, 0), wst(2, 0, 1, 0) };
	uint32_t tok[8] = { 3, 4, 5, 6, 7 };
	struct toy_state before;
	struct tbl x;

	tbl_init(&x, 0, 1);
	ck_assert_int_eq(make_round(&x.r, 1, st, 2, tok, TV), 0);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), 0);
	ck_assert_int_eq(toy_state_init(&x.m, &before), 0);
	toy_state_copy(&x.m, &before, &toy_table_find(&x.t, 1)->st);

	/* stream 1 at the wrong position; stream 2 absent (must not be retired) */
	st[0] = wst(1, 3, 1, 0);
	ck_assert_int_eq(make_round(&x.r, 2, st, 1, tok, TV), 0);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), -EPROTO);
	/* an unknown stream that claims earlier tokens */
	st[0] = wst(1, 2, 1, 0);
	st[1] = wst(2, 1, 1, 0);
	st[2] = wst(3, 4, 1, 0);
	ck_assert_int_eq(make_round(&x.r, 3, st, 3, tok, TV), 0);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), -EPROTO);
	/* a known stream twice */
	st[2] = wst(1, 2, 1, 0);
	ck_assert_int_eq(make_round(&x.r, 4, st, 3, tok, TV), 0);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), -EINVAL);
	/* a new stream twice: the first copy, created in the same round, is undone */
	st[1] = wst(9, 0, 1, 0);
	st[2] = wst(9, 0, 1, 0);
	ck_assert_int_eq(make_round(&x.r, 5, st, 3, tok, TV), 0);
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), -EINVAL);
	ck_assert_int_eq(toy_table_position(&x.t, 9), -ENOENT);

	ck_assert_uint_eq(x.t.count, 2);
	ck_assert_int_eq(toy_table_position(&x.t, 1), 2);
	ck_assert_int_eq(toy_table_position(&x.t, 2), 1);
	ck_assert_mem_eq(toy_table_find(&x.t, 1)->st.h, before.h, x.m.n * 4);

	/* a token outside the vocabulary is refused when the round is copied */
	tok[0] = TV;
	st[0] = wst(1, 2, 1, 0);
	ck_assert_int_eq(make_round(&x.r, 6, st, 1, tok, TV), -EINVAL);
	/* ... and by exec for a hand-made round */
	tok[0] = 3;
	ck_assert_int_eq(make_round(&x.r, 6, st, 1, tok, TV), 0);
	x.r.tok[0] = TV;
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), -EINVAL);
	x.r.tok[0] = 3;
	ck_assert_int_eq(toy_table_exec(&x.t, &x.r, x.out), 0);
	ck_assert_int_eq(toy_table_position(&x.t, 1), 3);
	ck_assert_int_eq(toy_table_position(&x.t, 2), -ENOENT);	/* absent: retired now */
	toy_state_fini(&before);
	tbl_fini(&x);
}
END_TEST

/* Many streams come and go: the open-addressed table keeps every position right. */
START_TEST(test_table_churn)
{
	enum { N = 300 };
	static struct rk_wire_stream st[N];
	static uint32_t tok[N], pos[N];
	static bool live[N];
	uint64_t rs = 1234;
	uint32_t round, i, n;
	struct toy_model m;
	struct toy_table t;
	struct toy_round r = { 0 };
	int32_t *out = malloc((size_t)N * 16 * sizeof(*out));

	ck_assert_int_eq(toy_model_init(&m, 16, 32, 1, 0, 1), 0);
	ck_assert_int_eq(toy_table_init(&t, &m), 0);
	for (round = 1; round <= 60; round++) {
		/* about a third of the streams change state each round */
		for (i = 0; i < N; i++)
			if (rng_next(&rs) % 3 == 0) {
				live[i] = !live[i];
				pos[i] = 0;
			}
		n = 0;
		for (i = 0; i < N; i++) {
			if (!live[i])
				continue;
			st[n] = wst(((uint64_t)i << 40) | 0x5a5a, pos[i], 1, 0);
			tok[n++] = i % 16;
		}
		ck_assert_int_eq(make_round(&r, round, st, n, tok, 16), 0);
		ck_assert_int_eq(toy_table_exec(&t, &r, out), 0);
		ck_assert_uint_eq(t.count, n);
		for (i = 0; i < N; i++) {
			if (live[i])
				pos[i]++;
			ck_assert_int_eq(toy_table_position(&t, ((uint64_t)i << 40) | 0x5a5a),
					 live[i] ? (int64_t)pos[i] : -ENOENT);
		}
	}
	toy_round_fini(&r);
	toy_table_fini(&t);
	toy_model_fini(&m);
	free(out);
}
END_TEST

/*
 * A table without states (toy_table_init_rows(), the CUDA backend's mirror)
 * admits and refuses exactly the rounds toy_table_exec() does, and keeps the
 * same positions and last tokens when its owner advances the entries. Every
 * live stream holds a row of its own below t.rows, and an ended stream's row
 * (a refused round's too) is handed out again: rows never outgrow the most
 * streams a round held before its absent ones were retired.
 */
START_TEST(test_table_rows)
{
	enum { N = 48 };
	static struct rk_wire_stream st[N + 1];
	static uint32_t tok[3 * N + 3], pos[N], ntk[N];
	static bool live[N];
	uint64_t rs = 4321;
	uint32_t round, i, n, ntok, n_new, bound = 0, before;
	struct toy_model m;
	struct toy_table t, rt;
	struct toy_round r = { 0 };
	int32_t *out = malloc((size_t)(2 * N + 2) * 16 * sizeof(*out));
	bool *held;
	int bad;

	ck_assert_int_eq(toy_table_init_rows(&rt, 0), -EINVAL);
	ck_assert_int_eq(toy_model_init(&m, 16, 32, 1, 0, 1), 0);
	ck_assert_int_eq(toy_table_init(&t, &m), 0);
	ck_assert_int_eq(toy_table_init_rows(&rt, 16), 0);
	for (round = 1; round <= 120; round++) {
		for (i = 0; i < N; i++)
			if (rng_next(&rs) % 4 == 0) {
				live[i] = !live[i];
				pos[i] = 0;
			}
		n = ntok = n_new = 0;
		for (i = 0; i < N; i++) {
			if (!live[i])
				continue;
			ntk[i] = 1 + (uint32_t)(rng_next(&rs) % 2);
			st[n++] = wst(1000 + i, pos[i], ntk[i], 1);
			tok[ntok++] = (uint32_t)(rng_next(&rs) % 16);
			tok[ntok++] = (uint32_t)(rng_next(&rs) % 16);
			if (ntk[i] == 2)
				tok[ntok++] = (uint32_t)(rng_next(&rs) % 16);
			n_new += !toy_table_find(&t, 1000 + i);
		}
		/* every fifth round first comes bad: a stream ahead of its state, or the
		 * last one twice (tokens from an earlier round); both tables refuse it
		 * alike, and the rows its new streams took go back */
		for (bad = round % 5 == 0 && n ? 1 : 0; bad && bad <= 2; bad++) {
			struct rk_wire_stream keep = st[0];

			if (bad == 1)
				st[0].position++;
			else
				st[n] = st[n - 1];
			ck_assert_int_eq(make_round(&r, round, st, n + (bad == 2), tok, 16), 0);
			ck_assert_int_eq(toy_table_exec(&t, &r, out), bad == 1 ? -EPROTO : -EINVAL);
			ck_assert_int_eq(toy_table_admit(&rt, &r), bad == 1 ? -EPROTO : -EINVAL);
			ck_assert_uint_eq(rt.count, t.count);
			ck_assert_uint_eq(rt.count + rt.n_free, rt.rows);
			st[0] = keep;
		}
		ck_assert_int_eq(make_round(&r, round, st, n, tok, 16), 0);
		before = t.count;
		ck_assert_int_eq(toy_table_exec(&t, &r, out), 0);
		ck_assert_int_eq(toy_table_admit(&rt, &r), 0);
		if (before + n_new > bound)
			bound = before + n_new;
		for (i = 0; i < r.n_streams; i++) {
			const struct toy_rstream *s = &r.st[i];
			struct toy_entry *e = toy_table_get(&rt, s->id);

			ck_assert_ptr_nonnull(e);
			ck_assert_uint_eq(e->pos, s->position);
			ck_assert_uint_eq(e->born == rt.seq, s->position == 0);
			e->pos += s->n_tokens;
			e->st.last = r.tok[s->tok_off + s->n_tokens - 1];
		}
		for (i = 0; i < N; i++) {
			const struct toy_entry *a = toy_table_find(&t, 1000 + i);
			const struct toy_entry *b = toy_table_find(&rt, 1000 + i);

			ck_assert_int_eq(!a, !live[i]);
			ck_assert_int_eq(!b, !live[i]);
			if (!live[i])
				continue;
			pos[i] += ntk[i];
			ck_assert_uint_eq(a->pos, pos[i]);
			ck_assert_uint_eq(b->pos, pos[i]);
			ck_assert_uint_eq(b->st.last, a->st.last);
		}
		ck_assert_uint_eq(rt.count, t.count);
		ck_assert_uint_eq(rt.count + rt.n_free, rt.rows);
		ck_assert_uint_le(rt.rows, bound);
		held = calloc(rt.rows + 1, sizeof(*held));
		for (i = 0; i < rt.cap; i++) {
			if (!rt.slot[i].used)
				continue;
			ck_assert_uint_lt(rt.slot[i].row, rt.rows);
			ck_assert(!held[rt.slot[i].row]);
			held[rt.slot[i].row] = true;
		}
		free(held);
	}
	ck_assert_uint_gt(rt.rows, 0);
	/* no model, no compute */
	ck_assert_int_eq(toy_table_exec(&rt, &r, out), -EINVAL);
	toy_round_fini(&r);
	toy_table_fini(&rt);
	toy_table_fini(&t);
	toy_model_fini(&m);
	free(out);
}
END_TEST

/* T shards' tables, fed the same rounds, sum to TP1's outputs. */
START_TEST(test_table_tp)
{
	const uint32_t T = 2u << _i;
	struct rk_wire_stream st[2] = { wst(5, 0, 3, 2), wst(6, 0, 2, 1) };
	uint32_t tok[8] = { 10, 20, 30, 31, 32, 7, 8, 9 };
	static struct tbl one, sh[4];
	static int32_t sum[32 * TV];
	uint32_t r, k, round;

	tbl_init(&one, 0, 1);
	for (r = 0; r < T; r++)
		tbl_init(&sh[r], r, T);
	for (round = 1; round <= 3; round++) {
		ck_assert_int_eq(make_round(&one.r, round, st, 2, tok, TV), 0);
		ck_assert_int_eq(toy_table_exec(&one.t, &one.r, one.out), 0);
		memset(sum, 0, sizeof(sum));
		for (r = 0; r < T; r++) {
			ck_assert_int_eq(make_round(&sh[r].r, round, st, 2, tok, TV), 0);
			ck_assert_int_eq(toy_table_exec(&sh[r].t, &sh[r].r, sh[r].out), 0);
			for (k = 0; k < one.r.n_out * TV; k++)
				sum[k] += sh[r].out[k];
		}
		ck_assert_mem_eq(sum, one.out, one.r.n_out * TV * 4);
		/* next round: 1 accepted draft + 1 new token for stream 5, 1 for stream 6 */
		st[0] = wst(5, st[0].position + st[0].n_tokens, 2, 2);
		st[1] = wst(6, st[1].position + st[1].n_tokens, 1, 1);
		for (k = 0; k < 7; k++)
			tok[k] = (tok[k] * 7 + round) % TV;
	}
	tbl_fini(&one);
	for (r = 0; r < T; r++)
		tbl_fini(&sh[r]);
}
END_TEST

/* ---- the set-acceptance drafter ---------------------------------------------- */

/*
 * toy_oracle_draft(): over a seeded run of 400 streams x 100 positions each
 * proposal is the reference token with the set probability (measured within
 * 0.02 of p), any other token otherwise, the same on every call; p 0 and 1 are
 * never and always; nothing past the reference.
 */
START_TEST(test_oracle_rate)
{
	static const double ps[] = { TOY_ORACLE_DEF_P, 0.0, 1.0, 0.3 };
	struct toy_oracle o = { .p = ps[_i], .seed = 5, .V = 256 }, again;
	uint32_t ref[100], out[4], out2[4], gen, j, n, right = 0;
	uint64_t key;
	double rate;

	for (j = 0; j < 100; j++)
		ref[j] = (j * 37 + 11) % 256;
	for (key = 0; key < 400; key++) {
		for (gen = 0; gen < 100; gen += 3) {
			n = toy_oracle_draft(&o, ref, 100, gen, key, out, 4);
			ck_assert_uint_eq(n, gen + 4 <= 100 ? 4 : 100 - gen);
			again = o;
			ck_assert_uint_eq(toy_oracle_draft(&again, ref, 100, gen, key, out2, 4), n);
			ck_assert_mem_eq(out, out2, n * sizeof(*out));
			for (j = 0; j < n; j++) {
				ck_assert_uint_lt(out[j], 256);
				right += out[j] == ref[gen + j];
			}
		}
	}
	ck_assert_uint_eq(o.right, right);
	rate = (double)o.right / (double)o.proposed;
	ck_assert_msg(fabs(rate - ps[_i]) <= 0.02, "p %.2f: measured %.4f over %llu", ps[_i], rate,
		      (unsigned long long)o.proposed);
	if (ps[_i] == 0.0)
		ck_assert_uint_eq(o.right, 0);
	if (ps[_i] == 1.0)
		ck_assert_uint_eq(o.right, o.proposed);
	ck_assert_uint_eq(toy_oracle_draft(&o, ref, 100, 100, 1, out, 4), 0);
}
END_TEST

static Suite *toy_suite(void)
{
	Suite *s = suite_create("toy");
	TCase *tc;

	tc = rk_tcase(s, "model", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_hash_golden);
	tcase_add_test(tc, test_logits_golden);
	tcase_add_test(tc, test_model_errors);
	tcase_add_loop_test(tc, test_shards_sum, 0, 3);
	tcase_add_loop_test(tc, test_kernels, 0, 4);

	tc = rk_tcase(s, "pick", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_pick_greedy);
	tcase_add_test(tc, test_pick_greedy_rows);
	tcase_add_test(tc, test_pick_sampled);
	tcase_add_test(tc, test_pick_uniform);
	tcase_add_test(tc, test_ref_golden);
	tcase_add_test(tc, test_ref_errors);
	tcase_add_test(tc, test_hash_tokens);
	tcase_add_loop_test(tc, test_oracle_rate, 0, 4);

	tc = rk_tcase(s, "table", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_table_rounds);
	tcase_add_test(tc, test_table_errors);
	tcase_add_test(tc, test_table_churn);
	tcase_add_test(tc, test_table_rows);
	tcase_add_loop_test(tc, test_table_tp, 0, 2);
	return s;
}

int main(void)
{
	/* followers leaving with BYE are logged as warnings; CHECK_TOY_VERBOSE=1 shows them */
	rk_log_set_handler(log_quiet, "CHECK_TOY_VERBOSE");
	return rk_check_run(toy_suite());
}
