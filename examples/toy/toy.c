/* SPDX-License-Identifier: MIT */
/*
 * The toy model: weights from a counter-based hash, a per-stream state that
 * shards by hidden index, exact integer logits, host-side picking, and the
 * stream table that runs a round on one rank's shard. TOY.md is the
 * definition; everything here must stay bit-exact with it.
 *
 * Pure compute: no I/O, no threads, no global state. Every function that
 * returns int returns 0 or -errno.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#ifdef RK_HAVE_OPENSSL
#include <openssl/evp.h>
#endif

#include "le.h"
#include "toy.h"

#define GOLDEN		0x9E3779B97F4A7C15ull	/* splitmix64's increment */
#define STATE_MUL	0x9E3779B1u
#define PAD		32u	/* W rows and feature blocks come in multiples of this */
#define BLK		2048u	/* features kept on the stack (int16, 4 KiB) per pass over W */
#define LOGIT_SCALE	1024.0	/* sampling: logits are divided by this * sqrt(H) * T */
#define NO_TOKEN	UINT32_MAX	/* toy_state.last of a state that has folded nothing */

/*
 * gcc -O2 vectorizes only with its "very cheap" cost model, which turns down
 * the widening multiply-add of the portable kernel (10x slower); the dynamic
 * model takes it. This matters where the x86 intrinsics below do not apply.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("vect-cost-model=dynamic")))
#else
#define VECTORIZE
#endif

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* The splitmix64 state of a tensor: value idx is mix64(base + (idx + 1) * GOLDEN). */
static uint64_t tensor_base(uint64_t seed, uint64_t tensor)
{
	return mix64(seed + (tensor + 1) * GOLDEN);
}

uint64_t toy_hash(uint64_t seed, uint64_t tensor, uint64_t index)
{
	return mix64(tensor_base(seed, tensor) + (index + 1) * GOLDEN);
}

uint32_t toy_oracle_draft(struct toy_oracle *o, const uint32_t *ref, uint32_t n_ref, uint32_t gen,
			  uint64_t stream_key, uint32_t *out, uint32_t k)
{
	uint64_t seed = o->seed ^ mix64(stream_key + GOLDEN), h;
	uint32_t j;

	for (j = 0; j < k && gen + j < n_ref; j++) {
		h = toy_hash(seed, TOY_T_DRAFT, gen + j);
		out[j] = ref[gen + j];
		if ((double)(h >> 11) * 0x1p-53 < o->p)
			o->right++;
		else	/* any other token: h's low bits pick one of the V - 1 */
			out[j] = (uint32_t)((ref[gen + j] + 1 + h % (o->V - 1)) % o->V);
	}
	o->proposed += j;
	return j;
}

/* ---- the model ------------------------------------------------------------------- */

int toy_model_init(struct toy_model *m, uint32_t V, uint32_t H, uint64_t seed, uint32_t r,
		   uint32_t T)
{
	uint64_t be, bw, idx;
	uint32_t v, k;
	void *mem;

	memset(m, 0, sizeof(*m));
	if (!V || V > TOY_MAX_V || !H || H > TOY_MAX_H || !T || r >= T || H % T)
		return -EINVAL;
	m->V = V;
	m->H = H;
	m->seed = seed;
	m->rank = r;
	m->tp = T;
	m->n = H / T;
	m->lo = r * m->n;
	m->hi = m->lo + m->n;
	m->n_pad = (m->n + PAD - 1) & ~(PAD - 1);
	m->E = malloc((size_t)V * m->n * sizeof(*m->E));
	/* the padding must stay zero; rows start 32-byte aligned for the vector loads */
	if (!posix_memalign(&mem, 64, (size_t)V * m->n_pad)) {
		memset(mem, 0, (size_t)V * m->n_pad);
		m->W = mem;
	}
	m->h0 = malloc((size_t)m->n * sizeof(*m->h0));
	if (!m->E || !m->W || !m->h0) {
		toy_model_fini(m);
		return -ENOMEM;
	}
	be = tensor_base(seed, TOY_T_EMBED);
	bw = tensor_base(seed, TOY_T_PROJ);
	for (v = 0; v < V; v++) {
		uint16_t *e = m->E + (size_t)v * m->n;
		int8_t *w = m->W + (size_t)v * m->n_pad;

		for (k = 0; k < m->n; k++) {
			idx = (uint64_t)v * H + m->lo + k;
			e[k] = (uint16_t)(mix64(be + (idx + 1) * GOLDEN) & 0xffff);
			w[k] = (int8_t)((int)(mix64(bw + (idx + 1) * GOLDEN) & 0x7f) - 64);
		}
	}
	be = tensor_base(seed, TOY_T_STATE0);
	for (k = 0; k < m->n; k++)
		m->h0[k] = (uint32_t)mix64(be + ((uint64_t)m->lo + k + 1) * GOLDEN);
	return 0;
}

void toy_model_fini(struct toy_model *m)
{
	free(m->E);
	free(m->W);
	free(m->h0);
	m->E = NULL;
	m->W = NULL;
	m->h0 = NULL;
}

int toy_state_init(const struct toy_model *m, struct toy_state *st)
{
	st->h = malloc((size_t)m->n * sizeof(*st->h));
	if (!st->h)
		return -ENOMEM;
	memcpy(st->h, m->h0, (size_t)m->n * sizeof(*st->h));
	st->last = NO_TOKEN;
	return 0;
}

void toy_state_fini(struct toy_state *st)
{
	free(st->h);
	st->h = NULL;
}

void toy_state_copy(const struct toy_model *m, struct toy_state *dst, const struct toy_state *src)
{
	memcpy(dst->h, src->h, (size_t)m->n * sizeof(*dst->h));
	dst->last = src->last;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define TOY_X86 1
#include <immintrin.h>

/* The CPU has AVX2 (cheap: a load of what the runtime probed at start-up). */
static bool have_avx2(void)
{
	return __builtin_cpu_supports("avx2");
}
#endif

VECTORIZE static void feed_c(uint32_t *restrict h, const uint16_t *restrict e, uint32_t n,
			     uint32_t lo)
{
	uint32_t k, x;

	for (k = 0; k < n; k++) {
		x = h[k] * STATE_MUL + e[k] + (lo + k);
		h[k] = x ^ (x >> 15);
	}
}

#ifdef TOY_X86
__attribute__((target("avx2"))) static void feed_avx2(uint32_t *restrict h,
						       const uint16_t *restrict e, uint32_t n,
						       uint32_t lo)
{
	const __m256i mul = _mm256_set1_epi32((int)STATE_MUL);
	const __m256i step = _mm256_set1_epi32(8);
	__m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)lo),
				       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	uint32_t k;

	for (k = 0; k + 8 <= n; k += 8) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(h + k));
		__m256i ek = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(e + k)));

		x = _mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(x, mul), ek), idx);
		x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
		_mm256_storeu_si256((__m256i *)(h + k), x);
		idx = _mm256_add_epi32(idx, step);
	}
	feed_c(h + k, e + k, n - k, lo + k);
}
#endif

int toy_state_feed(const struct toy_model *m, struct toy_state *st, uint32_t token)
{
	const uint16_t *e;

	if (token >= m->V)
		return -EINVAL;
	e = m->E + (size_t)token * m->n;
	st->last = token;
	/* elementwise in the hidden index, so a shard needs nothing from the others */
#ifdef TOY_X86
	if (have_avx2()) {
		feed_avx2(st->h, e, m->n, m->lo);
		return 0;
	}
#endif
	feed_c(st->h, e, m->n, m->lo);
	return 0;
}

/*
 * The kernels below add, for every row v < V, the dot product of @len (a
 * multiple of PAD) signed weights at W + v * stride with the features @f to
 * out[v]. |W| <= 64 and |f| <= 384, so each product is below 2^15 in
 * magnitude and a row of at most 32768 terms stays below 2^30: int32 sums
 * cannot overflow, and every kernel gets the same bits in any order.
 * Features (which do not fit a byte) are int16, so the x86 kernels
 * sign-extend the weights and use pmaddwd (16x16 -> 32-bit pair sums), four
 * rows at a time to reuse the feature loads.
 */
VECTORIZE static void dot_rows_c(const int8_t *W, size_t stride, const int16_t *f, uint32_t len,
				 uint32_t V, int32_t *out)
{
	uint32_t v, x;
	int32_t s;

	for (v = 0; v < V; v++) {
		const int8_t *w = W + v * stride;

		s = 0;
		for (x = 0; x < len; x++)
			s += (int32_t)w[x] * f[x];
		out[v] += s;
	}
}

#ifdef TOY_X86
static int32_t hsum_epi32(__m128i a)
{
	a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
	a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
	return _mm_cvtsi128_si32(a);
}

/* SSE2: the x86-64 baseline, so this one needs no probe. */
static __m128i madd16_sse2(__m128i acc, const int8_t *w, __m128i flo, __m128i fhi)
{
	__m128i x = _mm_loadu_si128((const __m128i *)w);
	__m128i sign = _mm_cmpgt_epi8(_mm_setzero_si128(), x);	/* SSE2 has no pmovsxbw */

	acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_unpacklo_epi8(x, sign), flo));
	return _mm_add_epi32(acc, _mm_madd_epi16(_mm_unpackhi_epi8(x, sign), fhi));
}

static void dot_rows_sse2(const int8_t *W, size_t stride, const int16_t *f, uint32_t len,
			  uint32_t V, int32_t *out)
{
	uint32_t v, c;

	for (v = 0; v + 4 <= V; v += 4) {
		const int8_t *w0 = W + v * stride, *w1 = w0 + stride, *w2 = w1 + stride,
			     *w3 = w2 + stride;
		__m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;

		for (c = 0; c < len; c += 16) {
			__m128i flo = _mm_loadu_si128((const __m128i *)(f + c));
			__m128i fhi = _mm_loadu_si128((const __m128i *)(f + c + 8));

			a0 = madd16_sse2(a0, w0 + c, flo, fhi);
			a1 = madd16_sse2(a1, w1 + c, flo, fhi);
			a2 = madd16_sse2(a2, w2 + c, flo, fhi);
			a3 = madd16_sse2(a3, w3 + c, flo, fhi);
		}
		out[v] += hsum_epi32(a0);
		out[v + 1] += hsum_epi32(a1);
		out[v + 2] += hsum_epi32(a2);
		out[v + 3] += hsum_epi32(a3);
	}
	dot_rows_c(W + v * stride, stride, f, len, V - v, out + v);
}

__attribute__((target("avx2"))) static int32_t hsum256_epi32(__m256i a)
{
	return hsum_epi32(_mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
}

__attribute__((target("avx2"))) static __m256i madd16_avx2(__m256i acc, const int8_t *w,
							   __m256i f)
{
	__m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w));

	return _mm256_add_epi32(acc, _mm256_madd_epi16(x, f));
}

__attribute__((target("avx2"))) static void dot_rows_avx2(const int8_t *W, size_t stride,
							  const int16_t *f, uint32_t len,
							  uint32_t V, int32_t *out)
{
	uint32_t v, c;

	for (v = 0; v + 4 <= V; v += 4) {
		const int8_t *w0 = W + v * stride, *w1 = w0 + stride, *w2 = w1 + stride,
			     *w3 = w2 + stride;
		__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;

		for (c = 0; c < len; c += 16) {
			__m256i fc = _mm256_loadu_si256((const __m256i *)(f + c));

			a0 = madd16_avx2(a0, w0 + c, fc);
			a1 = madd16_avx2(a1, w1 + c, fc);
			a2 = madd16_avx2(a2, w2 + c, fc);
			a3 = madd16_avx2(a3, w3 + c, fc);
		}
		out[v] += hsum256_epi32(a0);
		out[v + 1] += hsum256_epi32(a1);
		out[v + 2] += hsum256_epi32(a2);
		out[v + 3] += hsum256_epi32(a3);
	}
	dot_rows_c(W + v * stride, stride, f, len, V - v, out + v);
}
#endif

/*
 * The features of hidden indices [b0, b0 + n) of the shard: the state's byte
 * and, twice as strong, the last token's embedding byte, both centred
 * (TOY.md).
 */
VECTORIZE static void features(const struct toy_model *m, const struct toy_state *st,
			       uint32_t b0, uint32_t n, int16_t *restrict f)
{
	const uint32_t *restrict h = st->h + b0;
	const uint16_t *restrict e;
	uint32_t k;

	if (st->last == NO_TOKEN) {
		for (k = 0; k < n; k++)
			f[k] = (int16_t)((int32_t)((h[k] >> 16) & 0xff) - 128);
		return;
	}
	e = m->E + (size_t)st->last * m->n + b0;
	for (k = 0; k < n; k++)
		f[k] = (int16_t)((int32_t)((h[k] >> 16) & 0xff) + 2 * (int32_t)(e[k] >> 8) - 384);
}

static void partial_logits(const struct toy_model *m, const struct toy_state *st, int32_t *out,
			   int kernel)
{
	int16_t f[BLK] __attribute__((aligned(64)));
	uint32_t b0, len, valid;

	memset(out, 0, (size_t)m->V * sizeof(*out));
	/*
	 * Features a block at a time so they stay in L1 while the rows of W
	 * stream past; rows are padded to PAD with zero weights, and the
	 * padded features are zeroed too, so the padding adds nothing.
	 */
	for (b0 = 0; b0 < m->n_pad; b0 += BLK) {
		len = m->n_pad - b0 < BLK ? m->n_pad - b0 : BLK;
		valid = m->n - b0 < len ? m->n - b0 : len;
		features(m, st, b0, valid, f);
		memset(f + valid, 0, (len - valid) * sizeof(*f));
		switch (kernel) {
#ifdef TOY_X86
		case TOY_KERNEL_AVX2:
			dot_rows_avx2(m->W + b0, m->n_pad, f, len, m->V, out);
			break;
		case TOY_KERNEL_SSE2:
			dot_rows_sse2(m->W + b0, m->n_pad, f, len, m->V, out);
			break;
#endif
		default:
			dot_rows_c(m->W + b0, m->n_pad, f, len, m->V, out);
			break;
		}
	}
}

int toy_partial_logits_kernel(const struct toy_model *m, const struct toy_state *st,
			      int32_t *out, enum toy_kernel kernel)
{
	switch (kernel) {
	case TOY_KERNEL_C:
		break;
#ifdef TOY_X86
	case TOY_KERNEL_SSE2:
		break;
	case TOY_KERNEL_AVX2:
		if (!have_avx2())
			return -EOPNOTSUPP;
		break;
#endif
	default:
		return -EOPNOTSUPP;
	}
	partial_logits(m, st, out, kernel);
	return 0;
}

void toy_partial_logits(const struct toy_model *m, const struct toy_state *st, int32_t *out)
{
#ifdef TOY_X86
	partial_logits(m, st, out, have_avx2() ? TOY_KERNEL_AVX2 : TOY_KERNEL_SSE2);
#else
	partial_logits(m, st, out, TOY_KERNEL_C);
#endif
}

/* ---- picking ---------------------------------------------------------------------- */

/*
 * 2^-x for x >= 0 with IEEE basic operations only (a degree-7 Taylor
 * polynomial of 2^-f on [0, 1), then an exact scaling), so every IEEE-754
 * host gets the same bits; libm's exp() differs between libraries. The build
 * compiles this file with -ffp-contract=off so no FMA changes a rounding.
 */
static double exp2_neg(double x)
{
	static const double c[8] = {
		0x1.0000000000000p+0,  -0x1.62e42fefa39efp-1, 0x1.ebfbdff82c58ep-3,
		-0x1.c6b08d704a0bfp-5, 0x1.3b2ab6fba4e77p-7,  -0x1.5d87fe78a6730p-10,
		0x1.430912f86c786p-13, -0x1.ffcbfc588b0c5p-17,
	};
	double f, p;
	int n, i;

	if (!(x < 1000.0))
		return 0.0;
	n = (int)x;
	f = x - (double)n;
	p = c[7];
	for (i = 6; i >= 0; i--)
		p = p * f + c[i];
	return ldexp(p, -n);
}

/*
 * A greedy pick scans a whole row of logits on the leader every round. In
 * blocks of PICK_BLOCK: a block's maximum is a fixed-length loop the compiler
 * vectorizes, and most blocks need nothing more.
 */
#define PICK_BLOCK 64

static int32_t block_max(const int32_t *x)
{
	int32_t m = INT32_MIN;
	unsigned int i;

	for (i = 0; i < PICK_BLOCK; i++)
		m = x[i] > m ? x[i] : m;
	return m;
}

/* The first index of the largest logit. */
static uint32_t argmax_first(const int32_t *x, uint32_t n)
{
	uint32_t best = 0, b, v;

	for (b = 0; b + PICK_BLOCK <= n; b += PICK_BLOCK) {
		int32_t m = block_max(x + b);

		if (m > x[best]) {
			for (v = b; x[v] != m; v++)
				;
			best = v;
		}
	}
	for (v = b; v < n; v++)
		if (x[v] > x[best])
			best = v;
	return best;
}

uint32_t toy_pick(uint32_t V, uint32_t H, const int32_t *logits, const struct toy_sampling *s,
		  uint64_t abs_pos)
{
	uint32_t idx[TOY_TOPK_MAX];
	int32_t lg[TOY_TOPK_MAX];
	double w[TOY_TOPK_MAX];
	uint32_t k, cnt = 0, v, j, pos, n;
	double scale, total, cut, c, u, target;

	if (!s || !s->top_k || !(s->temperature > 0.0f))
		return argmax_first(logits, V);
	k = s->top_k < V ? s->top_k : V;
	if (k > TOY_TOPK_MAX)
		k = TOY_TOPK_MAX;
	/*
	 * The top k by (logit descending, v ascending): v is visited in
	 * ascending order, so an equal logit never displaces an earlier one.
	 */
	for (v = 0; v < V; v++) {
		if (cnt == k && logits[v] <= lg[cnt - 1])
			continue;
		pos = cnt < k ? cnt++ : cnt - 1;
		while (pos > 0 && logits[v] > lg[pos - 1]) {
			lg[pos] = lg[pos - 1];
			idx[pos] = idx[pos - 1];
			pos--;
		}
		lg[pos] = logits[v];
		idx[pos] = v;
	}
	if (k == 1)
		return idx[0];
	scale = LOGIT_SCALE * sqrt((double)H) * (double)s->temperature;
	for (j = 0; j < k; j++)
		w[j] = exp2_neg((double)((int64_t)lg[0] - lg[j]) / scale);
	n = k;
	if (s->top_p > 0.0f && s->top_p < 1.0f) {
		total = 0.0;
		for (j = 0; j < k; j++)
			total += w[j];
		cut = (double)s->top_p * total;
		c = 0.0;
		for (j = 0; j < k; j++) {
			c += w[j];
			if (c >= cut) {
				n = j + 1;
				break;
			}
		}
	}
	total = 0.0;
	for (j = 0; j < n; j++)
		total += w[j];
	u = (double)(toy_hash(s->seed, TOY_T_SAMPLE, abs_pos) >> 11) * 0x1p-53;
	target = u * total;
	c = 0.0;
	for (j = 0; j < n; j++) {
		c += w[j];
		if (target < c)
			return idx[j];
	}
	return idx[n - 1];
}

int toy_generate_ref(uint32_t V, uint32_t H, uint64_t model_seed, const uint32_t *prompt,
		     uint32_t n_prompt, uint32_t n_gen, const struct toy_sampling *s,
		     uint32_t *out)
{
	struct toy_model m;
	struct toy_state st = { NULL };
	int32_t *logits = NULL;
	uint32_t i;
	int ret;

	if (!n_prompt)
		return -EINVAL;
	ret = toy_model_init(&m, V, H, model_seed, 0, 1);
	if (ret)
		return ret;
	logits = malloc((size_t)V * sizeof(*logits));
	ret = logits ? toy_state_init(&m, &st) : -ENOMEM;
	if (ret)
		goto out;
	for (i = 0; i < n_prompt; i++) {
		ret = toy_state_feed(&m, &st, prompt[i]);
		if (ret)
			goto out;
	}
	for (i = 0; i < n_gen; i++) {
		toy_partial_logits(&m, &st, logits);
		out[i] = toy_pick(V, H, logits, s, (uint64_t)n_prompt + i);
		if (i + 1 < n_gen)
			toy_state_feed(&m, &st, out[i]);
	}
out:
	toy_state_fini(&st);
	free(logits);
	toy_model_fini(&m);
	return ret;
}

/* ---- receipts --------------------------------------------------------------------- */

static void to_hex(const uint8_t *b, char hex[17])
{
	static const char digits[] = "0123456789abcdef";
	int i;

	for (i = 0; i < 8; i++) {
		hex[2 * i] = digits[b[i] >> 4];
		hex[2 * i + 1] = digits[b[i] & 15];
	}
	hex[16] = '\0';
}

#ifdef RK_HAVE_OPENSSL
int toy_hash_tokens(const uint32_t *t, size_t n, char hex[17])
{
	uint8_t buf[1024], md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx;
	size_t i, c;
	int ok;

	hex[0] = '\0';
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	/* byte order fixed on the wire's little-endian, whatever the host */
	for (i = 0; ok && i < n; i += c) {
		c = n - i < sizeof(buf) / 4 ? n - i : sizeof(buf) / 4;
		for (size_t j = 0; j < c; j++)
			put32(buf + 4 * j, t[i + j]);
		ok = EVP_DigestUpdate(ctx, buf, c * 4);
	}
	ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen >= 8;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -EIO;
	to_hex(md, hex);
	return 0;
}
#else
int toy_hash_tokens(const uint32_t *t, size_t n, char hex[17])
{
	uint64_t hsh = 0xcbf29ce484222325ull;
	uint8_t b[8];
	size_t i;
	int j;

	for (i = 0; i < n; i++) {
		put32(b, t[i]);
		for (j = 0; j < 4; j++) {
			hsh ^= b[j];
			hsh *= 0x100000001b3ull;
		}
	}
	/* big-endian digits, as the SHA-256 variant prints its first bytes */
	for (j = 0; j < 8; j++)
		b[j] = (uint8_t)(hsh >> (56 - 8 * j));
	to_hex(b, hex);
	return 0;
}
#endif

/* ---- rounds ------------------------------------------------------------------------- */

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
	void *q;
	uint32_t c;

	if (need <= *cap)
		return 0;
	c = need < 16 ? 16 : need;
	q = realloc(*p, (size_t)c * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

int toy_round_copy(struct toy_round *dst, const struct rk_wire_round *src, uint32_t V)
{
	struct rk_wire_stream ws;
	uint64_t tok = 0, out = 0;
	uint32_t i;
	int ret;

	ret = grow((void **)&dst->st, &dst->st_cap, src->n_streams, sizeof(*dst->st));
	if (!ret)
		ret = grow((void **)&dst->tok, &dst->tok_cap, src->n_tok_total, sizeof(*dst->tok));
	if (ret)
		return ret;
	for (i = 0; i < src->n_streams; i++) {
		struct toy_rstream *s = &dst->st[i];

		rk_wire_round_stream(src, i, &ws);
		s->id = ws.stream_id;
		s->position = ws.position;
		s->n_tokens = ws.n_tokens;
		s->n_draft = ws.n_draft;
		s->tok_off = (uint32_t)tok;
		s->out_off = (uint32_t)out;
		s->s.top_k = ws.top_k;
		s->s.temperature = ws.temperature;
		s->s.top_p = ws.top_p;
		s->s.seed = ws.seed;
		tok += (uint64_t)ws.n_tokens + ws.n_draft;
		out += (uint64_t)ws.n_draft + 1;
		if (tok > src->n_tok_total || out > UINT32_MAX)
			return -EINVAL;
	}
	if (tok != src->n_tok_total)
		return -EINVAL;
	for (i = 0; i < src->n_tok_total; i++) {
		dst->tok[i] = rk_wire_round_token(src, i);
		if (dst->tok[i] >= V)
			return -EINVAL;
	}
	dst->round_id = src->round_id;
	dst->n_streams = src->n_streams;
	dst->n_tok = src->n_tok_total;
	dst->n_out = (uint32_t)out;
	return 0;
}

void toy_round_fini(struct toy_round *r)
{
	free(r->st);
	free(r->tok);
	memset(r, 0, sizeof(*r));
}

int toy_round_token(const struct toy_round *r, const int32_t *logits, uint32_t V, uint32_t H,
		    uint32_t i, uint32_t j, uint32_t *tok)
{
	const struct toy_rstream *s;

	if (i >= r->n_streams || j > r->st[i].n_draft)
		return -EINVAL;
	s = &r->st[i];
	/* output j predicts the token at index position + n_tokens + j of the stream */
	*tok = toy_pick(V, H, logits + (size_t)(s->out_off + j) * V, &s->s,
			(uint64_t)s->position + s->n_tokens + j);
	return 0;
}

/* ---- the stream table ----------------------------------------------------------------- */

static uint32_t home(const struct toy_table *t, uint64_t id)
{
	return (uint32_t)mix64(id) & (t->cap - 1);
}

static int64_t slot_of(const struct toy_table *t, uint64_t id)
{
	uint32_t i;

	for (i = home(t, id); t->slot[i].used; i = (i + 1) & (t->cap - 1))
		if (t->slot[i].id == id)
			return i;
	return -1;
}

int toy_table_init_rows(struct toy_table *t, uint32_t V)
{
	memset(t, 0, sizeof(*t));
	if (!V)
		return -EINVAL;
	t->V = V;
	t->cap = 16;
	t->slot = calloc(t->cap, sizeof(*t->slot));
	return t->slot ? 0 : -ENOMEM;
}

int toy_table_init(struct toy_table *t, const struct toy_model *m)
{
	int ret;

	ret = toy_table_init_rows(t, m->V);
	if (ret)
		return ret;
	t->m = m;
	ret = toy_state_init(m, &t->scratch);
	if (ret)
		toy_table_fini(t);
	return ret;
}

void toy_table_fini(struct toy_table *t)
{
	uint32_t i;

	for (i = 0; t->slot && i < t->cap; i++)
		if (t->slot[i].used)
			toy_state_fini(&t->slot[i].st);
	free(t->slot);
	free(t->free_rows);
	toy_state_fini(&t->scratch);
	memset(t, 0, sizeof(*t));
}

/* A row for a new stream: an ended stream's, else a new one. */
static int row_take(struct toy_table *t, uint32_t *row)
{
	if (t->n_free) {
		*row = t->free_rows[--t->n_free];
		return 0;
	}
	/* every row is held or free, so the free list never needs more than t->rows */
	if (t->rows == t->free_cap &&
	    grow((void **)&t->free_rows, &t->free_cap, t->rows ? 2 * t->rows : 16,
		 sizeof(*t->free_rows)))
		return -ENOMEM;
	*row = t->rows++;
	return 0;
}

/* Keep the load at most 1/2 so probe chains stay short and never fill the table. */
static int table_reserve(struct toy_table *t)
{
	struct toy_entry *old = t->slot, *e;
	uint32_t oldcap = t->cap, i, j;

	if ((t->count + 1) * 2 <= t->cap)
		return 0;
	e = calloc((size_t)oldcap * 2, sizeof(*e));
	if (!e)
		return -ENOMEM;
	t->slot = e;
	t->cap = oldcap * 2;
	for (i = 0; i < oldcap; i++) {
		if (!old[i].used)
			continue;
		for (j = home(t, old[i].id); t->slot[j].used; j = (j + 1) & (t->cap - 1))
			;
		t->slot[j] = old[i];
	}
	free(old);
	return 0;
}

/* Backward-shift deletion: no tombstones, so lookups never slow down. */
static void remove_at(struct toy_table *t, uint32_t i)
{
	uint32_t mask = t->cap - 1, j = i, k;

	t->free_rows[t->n_free++] = t->slot[i].row;
	toy_state_fini(&t->slot[i].st);
	for (;;) {
		j = (j + 1) & mask;
		if (!t->slot[j].used)
			break;
		k = home(t, t->slot[j].id);
		/* move j into the hole at i unless its home lies cyclically in (i, j] */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		t->slot[i] = t->slot[j];
		i = j;
	}
	memset(&t->slot[i], 0, sizeof(t->slot[i]));
	t->count--;
}

int toy_table_retire(struct toy_table *t, uint64_t id)
{
	int64_t i = slot_of(t, id);

	if (i < 0)
		return -ENOENT;
	remove_at(t, (uint32_t)i);
	return 0;
}

const struct toy_entry *toy_table_find(const struct toy_table *t, uint64_t id)
{
	int64_t i = slot_of(t, id);

	return i < 0 ? NULL : &t->slot[i];
}

struct toy_entry *toy_table_get(struct toy_table *t, uint64_t id)
{
	int64_t i = slot_of(t, id);

	return i < 0 ? NULL : &t->slot[i];
}

int64_t toy_table_position(const struct toy_table *t, uint64_t id)
{
	const struct toy_entry *e = toy_table_find(t, id);

	return e ? (int64_t)e->pos : -ENOENT;
}

static void rollback(struct toy_table *t, const struct toy_round *r, uint64_t seq)
{
	uint32_t i;
	int64_t x;

	for (i = 0; i < r->n_streams; i++) {
		x = slot_of(t, r->st[i].id);
		if (x >= 0 && t->slot[x].born == seq)
			remove_at(t, (uint32_t)x);
	}
}

int toy_table_admit(struct toy_table *t, const struct toy_round *r)
{
	uint64_t seq = ++t->seq;
	uint32_t i, j, row;
	int64_t x;
	int ret;

	/*
	 * One pass: each stream is checked and found, or made (born = seq); a
	 * failure undoes the streams this round made. Marks say "in this round"
	 * only for this seq, so a refused round leaves none that count.
	 */
	for (i = 0; i < r->n_streams; i++) {
		const struct toy_rstream *s = &r->st[i];
		struct toy_state st = { NULL, NO_TOKEN };
		struct toy_entry *e;

		ret = -EINVAL;
		if ((uint64_t)s->tok_off + s->n_tokens + s->n_draft > r->n_tok ||
		    (uint64_t)s->out_off + s->n_draft + 1 > r->n_out ||
		    (uint64_t)s->position + s->n_tokens > UINT32_MAX)
			goto undo;
		for (j = 0; j < s->n_tokens + s->n_draft; j++)
			if (r->tok[s->tok_off + j] >= t->V)
				goto undo;
		x = slot_of(t, s->id);
		if (x >= 0) {
			if (t->slot[x].mark == seq)
				goto undo;	/* twice in this round */
			ret = -EPROTO;
			if (t->slot[x].pos != s->position)
				goto undo;
			t->slot[x].mark = seq;
			continue;
		}
		ret = -EPROTO;
		if (s->position)
			goto undo;	/* this rank never saw its earlier tokens */
		ret = table_reserve(t);
		if (!ret)
			ret = row_take(t, &row);
		if (!ret && t->m) {
			ret = toy_state_init(t->m, &st);
			if (ret)
				t->free_rows[t->n_free++] = row;
		}
		if (ret)
			goto undo;
		for (j = home(t, s->id); t->slot[j].used; j = (j + 1) & (t->cap - 1))
			;
		e = &t->slot[j];
		e->st = st;
		e->id = s->id;
		e->pos = 0;
		e->row = row;
		e->mark = seq;
		e->born = seq;
		e->used = true;
		t->count++;
	}
	/* the stream rule: a stream absent from this round has ended */
	for (i = 0; i < t->cap;) {
		if (t->slot[i].used && t->slot[i].mark != seq)
			remove_at(t, i);	/* slot i may now hold a shifted entry */
		else
			i++;
	}
	return 0;
undo:
	rollback(t, r, seq);
	return ret;
}

int toy_table_exec(struct toy_table *t, const struct toy_round *r, int32_t *out)
{
	const struct toy_model *m = t->m;
	uint32_t i, j;
	int ret;

	if (!m)
		return -EINVAL;
	ret = toy_table_admit(t, r);
	if (ret)
		return ret;
	/* 4: inputs commit; drafts run on a scratch copy and never do */
	for (i = 0; i < r->n_streams; i++) {
		const struct toy_rstream *s = &r->st[i];
		const uint32_t *tok = r->tok + s->tok_off;
		struct toy_entry *e = toy_table_get(t, s->id);
		int32_t *o = out + (size_t)s->out_off * m->V;

		for (j = 0; j < s->n_tokens; j++)
			toy_state_feed(m, &e->st, tok[j]);
		e->pos += s->n_tokens;
		toy_partial_logits(m, &e->st, o);
		if (!s->n_draft)
			continue;
		toy_state_copy(m, &t->scratch, &e->st);
		for (j = 0; j < s->n_draft; j++) {
			o += m->V;
			toy_state_feed(m, &t->scratch, tok[s->n_tokens + j]);
			toy_partial_logits(m, &t->scratch, o);
		}
	}
	return 0;
}

void toy_report(struct toy_reports *r, struct rk_sched *s, uint64_t round_id, int status)
{
	r->n++;
	r->last_id = round_id;
	r->last_status = status;
	if (s)
		rk_sched_complete(s, round_id, status);
}

uint64_t toy_reports_get(const struct toy_reports *r, uint64_t *round_id, int *status)
{
	if (round_id)
		*round_id = r->last_id;
	if (status)
		*status = r->last_status;
	return r->n;
}

/* ---- RK_RESIDENT=auto (toy.h) ---------------------------------------------------------- */

/*
 * The rule (docs/BENCH.md, "Resident rounds"): auto runs a backend's
 * resident rounds, on the machines of a kind, once a receipt there (all
 * decode cells: sizes x 1/4/8 streams x plain and drafted, RK_RESIDENT=off
 * against on interleaved run by run) has the tokens/s ratio's median over the
 * cells >= 1.05x, no cell below 0.90x, and the ranks' summed CPU per cell <=
 * 1.05x, on every machine kind measured. The CPU backend meets it at TP2 and
 * TP4 where each rank has two CPUs and may spin (its worker spins on the
 * epoch, toy_cpu_resident.c); with fewer, its armed worker sleeps and every
 * round pays a futex wake; at TP1 it is level. The CUDA backend has no
 * resident path: pre-armed rounds did not meet the rule on the H200.
 */
bool toy_cpus_spare(uint32_t size, enum rk_wait_mode mode)
{
	cpu_set_t set;

	if (mode == RK_WAIT_BLOCK || sched_getaffinity(0, sizeof(set), &set))
		return false;
	return (uint64_t)CPU_COUNT(&set) >= 2ull * size;
}

bool toy_resident_on(enum rk_resident_mode mode, uint32_t size, enum rk_wait_mode wait)
{
	if (mode == RK_RESIDENT_ON)
		return true;
	return mode == RK_RESIDENT_AUTO && size >= 2 && toy_cpus_spare(size, wait);
}

/* ---- emulated device time ----------------------------------------------------------- */

/*
 * The presets, each with the figures it comes from (TOY.md, "Emulated device
 * time", says the same). Decode at small batch is memory-bound: a round reads
 * every weight once, so base ~ weight bytes / HBM bandwidth plus launch and
 * synchronisation overheads; a stream adds its KV-cache reads; a token adds
 * its FLOPs (2 x parameters), mostly hidden under the weight reads while the
 * round is memory-bound, so the linear term overstates small batches a little.
 */
static const struct {
	const char *name;
	uint64_t base_us, per_stream_us, per_token_us;
} device_presets[] = {
	/*
	 * An 8B model (Llama-3-8B class) in BF16 on one H200: 16 GB of weights at
	 * 4.8 TB/s is 3.3 ms; public batch-1 figures are 3-6 ms a token, so base
	 * 3.5 ms. A stream: ~128 KB of KV per token of context (32 layers x 8 KV
	 * heads x 128 x 2 x 2 bytes), ~1k tokens -> 128 MB -> ~25 us. A token:
	 * 16 GFLOP at ~1000 TFLOPS dense BF16 -> ~15 us. Batch 1: ~3.54 ms.
	 */
	{ "8b-h200", 3500, 25, 15 },
	/*
	 * A 70B model at TP8 (8 x H100/H200): public figures ~10 ms a round at
	 * small batch. Per GPU 17.5 GB of weights (3.6 ms at 4.8 TB/s) plus two
	 * all-reduces per layer over 80 layers (~5 ms) and overheads: base
	 * 9.5 ms. A stream: ~40 KB of KV per token per GPU, ~1k tokens -> ~10 us.
	 * A token: 17.5 GFLOP per GPU -> ~20 us.
	 */
	{ "70b-tp8", 9500, 10, 20 },
	/* fixed device times, whatever the round's shape */
	{ "1ms", 1000, 0, 0 },
	{ "5ms", 5000, 0, 0 },
	{ "10ms", 10000, 0, 0 },
};

int toy_device_preset(const char *name, struct toy_device_model *m)
{
	size_t i;

	if (!name || !m)
		return -EINVAL;
	for (i = 0; i < sizeof(device_presets) / sizeof(device_presets[0]); i++) {
		if (strcmp(name, device_presets[i].name))
			continue;
		m->on = true;
		m->base_ns = device_presets[i].base_us * 1000;
		m->per_stream_ns = device_presets[i].per_stream_us * 1000;
		m->per_token_ns = device_presets[i].per_token_us * 1000;
		m->wake_ns = RK_GPU_EMU_WAKE_NS;
		return 0;
	}
	return -EINVAL;
}

#define DEVICE_MAX_US 1e7	/* 10 s: a term above it is a typo */

/* One microsecond figure of @s up to @end (exclusive): 0 and *@ns, or -EINVAL. */
static int parse_us(const char *s, const char *end, uint64_t *ns)
{
	char buf[32], *e;
	size_t n = (size_t)(end - s);
	double v;

	if (!n || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n);
	buf[n] = '\0';
	if (buf[0] == '-' || buf[0] == '+' || buf[0] == ' ')
		return -EINVAL;
	errno = 0;
	v = strtod(buf, &e);
	if (errno || *e || !(v >= 0) || v > DEVICE_MAX_US)
		return -EINVAL;
	*ns = (uint64_t)(v * 1000 + 0.5);
	return 0;
}

int toy_device_parse(const char *spec, struct toy_device_model *m)
{
	struct toy_device_model t;
	const char *c1, *c2;

	if (!spec || !m)
		return -EINVAL;
	t = *m;
	if (!toy_device_preset(spec, &t)) {
		if (m->on)
			t.wake_ns = m->wake_ns;
		*m = t;
		return 0;
	}
	if (!t.on)
		t.wake_ns = RK_GPU_EMU_WAKE_NS;
	t.on = true;
	t.per_stream_ns = 0;
	t.per_token_ns = 0;
	c1 = strchr(spec, ',');
	if (!c1) {
		if (parse_us(spec, spec + strlen(spec), &t.base_ns))
			return -EINVAL;
	} else {
		c2 = strchr(c1 + 1, ',');
		if (!c2 || strchr(c2 + 1, ','))
			return -EINVAL;	/* one figure or three */
		if (parse_us(spec, c1, &t.base_ns) || parse_us(c1 + 1, c2, &t.per_stream_ns) ||
		    parse_us(c2 + 1, c2 + 1 + strlen(c2 + 1), &t.per_token_ns))
			return -EINVAL;
	}
	*m = t;
	return 0;
}

uint64_t toy_device_round_ns(const struct toy_device_model *m, uint32_t streams, uint32_t tokens)
{
	return m->base_ns + m->per_stream_ns * streams + m->per_token_ns * tokens;
}
