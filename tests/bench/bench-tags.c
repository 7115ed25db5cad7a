// SPDX-License-Identifier: MIT
/*
 * bench-tags: what a frame tag costs (WIRE.md, "Frame tags"). Per frame size
 * (header and payload: 64 B, 256 B, 4 KiB by default), ns per frame of the
 * untagged path a link runs on each frame (encode the header with both CRCs,
 * decode it, check the payload CRC), and of the same with the tag sealed and
 * opened: AES-256-GCM through the library's own rk__tag_seal()/rk__tag_open(),
 * and, for comparison, AES-256-GCM and ChaCha20-Poly1305 through EVP's AEAD
 * interface in the same shape (associated data only). Medians
 * of --runs runs of --iters frames each, the three interleaved per run, in
 * the thread's CPU time.
 *
 *   tests/bench/bench-tags [--runs 9] [--iters 200000] [SIZE...]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime_int.h"
#include "rk_test.h"

#ifdef RK_HAVE_OPENSSL
#include <openssl/evp.h>
#endif

/* This thread's CPU time: a shared machine's preemptions are not the frame's. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint8_t frame[RK_WIRE_HDR_LEN + (1 << 20) + RK__TAG_LEN];
static volatile uint64_t sink;

/* The untagged path: encode (CRCs), decode the header, check the payload. */
static void plain_once(uint32_t len, uint64_t seq)
{
	struct rk_wire_hdr h;

	if (rk_wire_encode_hdr(frame, RK_FRAME_USER, 0, 1, seq, frame + RK_WIRE_HDR_LEN, len) < 0 ||
	    rk_wire_decode_hdr(frame, RK_WIRE_HDR_LEN + len, RK_WIRE_MAX_PAYLOAD, &h) < 0 ||
	    rk_wire_check_payload(&h, frame + RK_WIRE_HDR_LEN))
		abort();
	sink += h.seq;
}

static uint64_t run_plain(uint32_t len, unsigned int iters)
{
	uint64_t t0 = cpu_ns();
	unsigned int i;

	for (i = 0; i < iters; i++)
		plain_once(len, i);
	return cpu_ns() - t0;
}

static uint64_t run_gcm(uint32_t len, unsigned int iters, struct rk__tagger *s,
			struct rk__tagger *o)
{
	size_t n = RK_WIRE_HDR_LEN + (size_t)len;
	uint64_t t0 = cpu_ns();
	unsigned int i;

	for (i = 0; i < iters; i++) {
		plain_once(len, i);
		if (rk__tag_seal(s, i, frame, n, frame + n) || rk__tag_open(o, i, frame, n, frame + n))
			abort();
	}
	return cpu_ns() - t0;
}

#ifdef RK_HAVE_OPENSSL
static uint64_t run_evp(uint32_t len, unsigned int iters, EVP_CIPHER_CTX *s,
			   EVP_CIPHER_CTX *o)
{
	size_t n = RK_WIRE_HDR_LEN + (size_t)len;
	uint64_t t0 = cpu_ns();
	uint8_t iv[12] = { 0 }, none[16];
	unsigned int i;
	int l;

	for (i = 0; i < iters; i++) {
		plain_once(len, i);
		memcpy(iv, &i, sizeof(i));
		if (EVP_EncryptInit_ex(s, NULL, NULL, NULL, iv) != 1 ||
		    EVP_EncryptUpdate(s, NULL, &l, frame, (int)n) != 1 ||
		    EVP_EncryptFinal_ex(s, none, &l) != 1 ||
		    EVP_CIPHER_CTX_ctrl(s, EVP_CTRL_AEAD_GET_TAG, 16, frame + n) != 1)
			abort();
		if (EVP_DecryptInit_ex(o, NULL, NULL, NULL, iv) != 1 ||
		    EVP_CIPHER_CTX_ctrl(o, EVP_CTRL_AEAD_SET_TAG, 16, frame + n) != 1 ||
		    EVP_DecryptUpdate(o, NULL, &l, frame, (int)n) != 1 ||
		    EVP_DecryptFinal_ex(o, none, &l) != 1)
			abort();
	}
	return cpu_ns() - t0;
}
#endif

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double median_ns(uint64_t *v, unsigned int n, unsigned int iters)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (double)v[n / 2] / iters;
}

int main(int argc, char **argv)
{
	static const unsigned int def_sizes[] = { 64, 256, 4096 };
	unsigned int runs = 9, iters = 200000, sizes[16], nsizes = 0, i, r;
	uint8_t key[RK_WIRE_MAC_LEN];
	struct rk__tagger s = { 0 }, o = { 0 };
#ifdef RK_HAVE_OPENSSL
	EVP_CIPHER_CTX *cs, *co, *gs, *go;
#endif

	for (i = 1; i < (unsigned int)argc; i++) {
		if (!strcmp(argv[i], "--runs") && i + 1 < (unsigned int)argc)
			runs = (unsigned int)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--iters") && i + 1 < (unsigned int)argc)
			iters = (unsigned int)atoi(argv[++i]);
		else if (nsizes < 16 && atoi(argv[i]) >= RK_WIRE_HDR_LEN + 8 &&
			 atoi(argv[i]) <= RK_WIRE_HDR_LEN + (1 << 20))
			sizes[nsizes++] = (unsigned int)atoi(argv[i]);
		else {
			fprintf(stderr, "usage: %s [--runs N] [--iters N] [SIZE 40..%d ...]\n",
				argv[0], RK_WIRE_HDR_LEN + (1 << 20));
			return 2;
		}
	}
	if (!nsizes) {
		memcpy(sizes, def_sizes, sizeof(def_sizes));
		nsizes = ARRAY_SIZE(def_sizes);
	}
	if (!runs || runs > 99 || !iters) {
		fprintf(stderr, "bench-tags: --runs 1..99, --iters > 0\n");
		return 2;
	}
	if (!rk__auth_available()) {
		fprintf(stderr, "bench-tags: built without OpenSSL\n");
		return 77;
	}
	memset(key, 0x5c, sizeof(key));
	if (rk__tagger_init(&s, key) || rk__tagger_init(&o, key))
		return 1;
#ifdef RK_HAVE_OPENSSL
	cs = EVP_CIPHER_CTX_new();
	co = EVP_CIPHER_CTX_new();
	gs = EVP_CIPHER_CTX_new();
	go = EVP_CIPHER_CTX_new();
	if (!cs || !co || !gs || !go ||
	    EVP_EncryptInit_ex(cs, EVP_chacha20_poly1305(), NULL, key, NULL) != 1 ||
	    EVP_DecryptInit_ex(co, EVP_chacha20_poly1305(), NULL, key, NULL) != 1 ||
	    EVP_EncryptInit_ex(gs, EVP_aes_256_gcm(), NULL, key, NULL) != 1 ||
	    EVP_DecryptInit_ex(go, EVP_aes_256_gcm(), NULL, key, NULL) != 1)
		return 1;
#endif
	printf("bench-tags: CPU ns per frame (header + payload), medians of %u runs of %u frames\n",
	       runs, iters);
	printf("%8s %9s %9s %9s %9s %9s %9s %9s\n", "frame_B", "untagged", "tagged", "evp_gcm",
	       "evp_chacha", "tag_ns", "evp_gcm+", "chacha+");
	for (i = 0; i < nsizes; i++) {
		uint32_t len = sizes[i] - RK_WIRE_HDR_LEN;
		uint64_t p[99], g[99], e[99], c[99];
		double mp, mg, me, mc;

		memset(frame + RK_WIRE_HDR_LEN, 0xa5, len);
		memset(frame + RK_WIRE_HDR_LEN + 4, 0, 4);	/* USER's reserved field */
		run_plain(len, iters / 10);	/* warm */
		for (r = 0; r < runs; r++) {
			p[r] = run_plain(len, iters);
			g[r] = run_gcm(len, iters, &s, &o);
#ifdef RK_HAVE_OPENSSL
			e[r] = run_evp(len, iters, gs, go);
			c[r] = run_evp(len, iters, cs, co);
#else
			e[r] = c[r] = 0;
#endif
		}
		mp = median_ns(p, runs, iters);
		mg = median_ns(g, runs, iters);
		me = median_ns(e, runs, iters);
		mc = median_ns(c, runs, iters);
		printf("%8u %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", sizes[i], mp, mg, me, mc,
		       mg - mp, me - mp, mc - mp);
	}
#ifdef RK_HAVE_OPENSSL
	EVP_CIPHER_CTX_free(cs);
	EVP_CIPHER_CTX_free(co);
	EVP_CIPHER_CTX_free(gs);
	EVP_CIPHER_CTX_free(go);
#endif
	rk__tagger_fini(&s);
	rk__tagger_fini(&o);
	return 0;
}
