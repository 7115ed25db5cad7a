/* SPDX-License-Identifier: MIT */
/*
 * check_wire_codec: every frame type encoded and decoded back (rounds up to
 * their largest, USER data that overlaps its output), and decoded
 * incrementally, one byte more at a time, from any prefix of the magic.
 */
#include "wire_test.h"

/* ---- round trips ----------------------------------------------------------- */

/* Encode a payload of @type with the encoder, frame it, decode it back. */
START_TEST(test_roundtrip)
{
	const unsigned int type = (unsigned int)_i;
	uint8_t f[BUF_LEN], *p = f + RK_WIRE_HDR_LEN;
	const size_t cap = sizeof(f) - RK_WIRE_HDR_LEN;
	unsigned int flags = 0;
	struct rk_wire_hdr h;
	int64_t len = -1;
	size_t i;

	switch (type) {
	case RK_FRAME_HELLO:
	case RK_FRAME_WELCOME: {
		struct rk_wire_hello a = { 7, 8, 7, RK_WIRE_AUTH_HMAC, 0xfedcba9876543210ull, ~0ull,
					   { 0xff, 1, 2, 3 } }, b;

		len = rk_wire_encode_hello(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_hello(p, (size_t)len, &b), 0);
		ck_assert(a.proto_version == b.proto_version && a.world_size == b.world_size &&
			  a.rank == b.rank && a.auth == b.auth && a.session_id == b.session_id &&
			  a.caps == b.caps && !memcmp(a.nonce, b.nonce, sizeof(a.nonce)));
		a.auth = RK_WIRE_AUTH_TAGS;	/* the frame tags' agreement, WIRE.md */
		ck_assert_int_eq(rk_wire_encode_hello(p, cap, &a), len);
		ck_assert_int_eq(rk_wire_decode_hello(p, (size_t)len, &b), 0);
		ck_assert_uint_eq(b.auth, RK_WIRE_AUTH_TAGS);
		ck_assert_uint_eq(rk__le32_load(p + 12), 2);
		a.auth = RK_WIRE_AUTH_HMAC;
		ck_assert_int_eq(rk_wire_encode_hello(p, cap, &a), len);
		break;
	}
	case RK_FRAME_HEARTBEAT: {
		struct rk_wire_heartbeat a = { UINT64_MAX - 1 }, b;

		flags = RK_FRAME_F_REPLY;
		len = rk_wire_encode_heartbeat(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_heartbeat(p, (size_t)len, &b), 0);
		ck_assert_uint_eq(a.time_ns, b.time_ns);
		break;
	}
	case RK_FRAME_ROUND: {
		struct rk_wire_stream st[3] = {
			{ 1, 2, 1, 0, 0, 0.0f, 0.0f, 3 },
			{ UINT64_MAX, UINT32_MAX, 4, 3, 50, 1.25f, 0.5f, UINT64_MAX },
			{ 5, 6, 2, 1, 1, 1e30f, 1.0f, 7 },
		};
		uint32_t tok[11], j;
		struct rk_wire_stream g;
		struct rk_wire_round r;

		for (j = 0; j < 11; j++)
			tok[j] = UINT32_MAX - j;
		flags = RK_FRAME_F_DRAFTED | RK_FRAME_F_PREFILL;
		len = rk_wire_encode_round(p, cap, 99, st, 3, tok);
		ck_assert_int_eq(len, rk_wire_round_size(3, 11));
		ck_assert_int_eq(rk_wire_decode_round(p, (size_t)len, &r), 0);
		ck_assert_uint_eq(r.round_id, 99);
		ck_assert_uint_eq(r.n_streams, 3);
		ck_assert_uint_eq(r.n_tok_total, 11);
		ck_assert_uint_eq(r.n_draft_total, 4);
		for (j = 0; j < 3; j++) {
			rk_wire_round_stream(&r, j, &g);
			ck_assert_mem_eq(&g, &st[j], sizeof(g));	/* no padding in it */
		}
		for (j = 0; j < 11; j++)
			ck_assert_uint_eq(rk_wire_round_token(&r, j), tok[j]);
		break;
	}
	case RK_FRAME_ROUND_DONE: {
		struct rk_wire_round_done a = { 12, -RK_EPEERDEAD, 34 }, b;

		len = rk_wire_encode_round_done(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_round_done(p, (size_t)len, &b), 0);
		ck_assert(a.round_id == b.round_id && a.status == b.status &&
			  a.elapsed_ns == b.elapsed_ns);
		break;
	}
	case RK_FRAME_ROUND_WATCH: {
		struct rk_wire_round_watch a = { 9, 3, -RK_EROUNDTIMEOUT, 100000000 }, b;

		/* the golden bytes (WIRE.md's ROUND_WATCH table) */
		len = rk_wire_encode_round_watch(p, cap, &a);
		ck_assert_int_eq(len, sizeof(golden_round_watch));
		ck_assert_mem_eq(p, golden_round_watch, sizeof(golden_round_watch));
		ck_assert_int_eq(rk_wire_decode_round_watch(p, (size_t)len, &b), 0);
		ck_assert(a.round_id == b.round_id && a.rank == b.rank && a.status == b.status &&
			  a.elapsed_ns == b.elapsed_ns);
		/* progress: status 0, any rank */
		a.status = 0;
		a.rank = UINT32_MAX;
		len = rk_wire_encode_round_watch(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_round_watch(p, (size_t)len, &b), 0);
		ck_assert(b.status == 0 && b.rank == UINT32_MAX);
		break;
	}
	case RK_FRAME_NCCL_ID: {
		uint8_t a[RK_WIRE_NCCL_ID_LEN], b[RK_WIRE_NCCL_ID_LEN];

		for (i = 0; i < sizeof(a); i++)
			a[i] = (uint8_t)(255 - i);
		len = rk_wire_encode_nccl_id(p, cap, a);
		ck_assert_int_eq(rk_wire_decode_nccl_id(p, (size_t)len, b), 0);
		ck_assert_mem_eq(a, b, sizeof(a));
		break;
	}
	case RK_FRAME_USER: {
		struct rk_wire_user b;
		uint8_t data[300];

		for (i = 0; i < sizeof(data); i++)
			data[i] = (uint8_t)i;
		len = rk_wire_encode_user(p, cap, 0xabcdef01u, data, sizeof(data));
		ck_assert_int_eq(len, 8 + sizeof(data));
		ck_assert_int_eq(rk_wire_decode_user(p, (size_t)len, &b), 0);
		ck_assert_uint_eq(b.tag, 0xabcdef01u);
		ck_assert_uint_eq(b.len, sizeof(data));
		ck_assert_mem_eq(b.data, data, sizeof(data));
		/* empty data, NULL pointer */
		ck_assert_int_eq(rk_wire_encode_user(p, cap, 1, NULL, 0), 8);
		ck_assert_int_eq(rk_wire_decode_user(p, 8, &b), 0);
		ck_assert_uint_eq(b.len, 0);
		len = rk_wire_encode_user(p, cap, 0xabcdef01u, data, sizeof(data));
		break;
	}
	case RK_FRAME_BYE: {
		struct rk_wire_bye a = { 2 }, b;

		len = rk_wire_encode_bye(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_bye(p, (size_t)len, &b), 0);
		ck_assert_uint_eq(b.reason, 2);
		break;
	}
	case RK_FRAME_AUTH: {
		uint8_t a[RK_WIRE_MAC_LEN], b[RK_WIRE_MAC_LEN];

		pattern_bytes(a, sizeof(a));
		len = rk_wire_encode_auth(p, cap, a);
		ck_assert_int_eq(len, RK_WIRE_MAC_LEN);
		ck_assert_int_eq(rk_wire_decode_auth(p, (size_t)len, b), 0);
		ck_assert_mem_eq(a, b, sizeof(a));
		break;
	}
	case RK_FRAME_SHM_REQUEST: {
		struct rk_wire_shm_request a = { -RK_ENOSHM, UINT32_MAX, 0, { 0xff, 1 },
						 UINT64_MAX, 1 }, b;

		len = rk_wire_encode_shm_request(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_shm_request(p, (size_t)len, &b), 0);
		ck_assert(a.status == b.status && a.pid == b.pid && a.uid == b.uid &&
			  a.net_ns == b.net_ns && a.pid_ns == b.pid_ns &&
			  !memcmp(a.boot_id, b.boot_id, sizeof(a.boot_id)));
		break;
	}
	case RK_FRAME_SHM_OFFER: {
		struct rk_wire_shm_offer a = { 0, 77, { 9, 8, 7 }, RK_WIRE_SHM_RING_MAX,
					       RK_WIRE_SHM_RING_MIN }, b;

		len = rk_wire_encode_shm_offer(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_shm_offer(p, (size_t)len, &b), 0);
		ck_assert_mem_eq(&a, &b, sizeof(a));
		break;
	}
	case RK_FRAME_SHM_ANSWER: {
		struct rk_wire_shm_answer a = { INT32_MIN }, b;

		len = rk_wire_encode_shm_answer(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_shm_answer(p, (size_t)len, &b), 0);
		ck_assert_int_eq(b.status, INT32_MIN);
		break;
	}
	case RK_FRAME_SHM_SWITCH: {
		struct rk_wire_shm_switch a = { UINT64_MAX - 7, UINT64_MAX, RK_WIRE_SHM_SLOTS - 1 }, b;

		len = rk_wire_encode_shm_switch(p, cap, &a);
		ck_assert_int_eq(rk_wire_decode_shm_switch(p, (size_t)len, &b), 0);
		ck_assert(a.bcast_pos == b.bcast_pos && a.bcast_seq == b.bcast_seq &&
			  a.slot == b.slot);
		break;
	}
	case RK_FRAME_ERROR: {
		struct rk_wire_error b;

		len = rk_wire_encode_error(p, cap, -RK_EFIELD, RK_WIRE_RANK_NONE, "");
		ck_assert_int_eq(len, 16);
		ck_assert_int_eq(rk_wire_decode_error(p, (size_t)len, &b), 0);
		ck_assert_int_eq(b.code, -RK_EFIELD);
		ck_assert_uint_eq(b.rank, RK_WIRE_RANK_NONE);
		ck_assert_uint_eq(b.msg_len, 0);
		len = rk_wire_encode_error(p, cap, INT32_MIN, 0, "x");
		ck_assert_int_eq(rk_wire_decode_error(p, (size_t)len, &b), 0);
		ck_assert_int_eq(b.code, INT32_MIN);
		break;
	}
	default:
		ck_abort();
	}
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(rk_wire_encode_hdr(f, type, flags, 3, UINT64_MAX, p, (uint32_t)len),
			 RK_WIRE_HDR_LEN);
	ck_assert_int_eq(rk_wire_decode_hdr(f, sizeof(f), RK_WIRE_MAX_PAYLOAD, &h), 32 + len);
	ck_assert_uint_eq(h.type, type);
	ck_assert_uint_eq(h.flags, flags);
	ck_assert_uint_eq(h.src_rank, 3);
	ck_assert_uint_eq(h.seq, UINT64_MAX);
	ck_assert_uint_eq(h.len, len);
	ck_assert_int_eq(rk_wire_check_payload(&h, p), 0);
	ck_assert_int_eq(rk_wire_decode_payload(type, p, h.len), 0);
	assert_canonical(f, (size_t)(32 + len));
}
END_TEST

/* A 64k-token and a ~1 MiB prefill round; the link's max_len of 1 MiB admits both. */
START_TEST(test_round_big)
{
	static const uint32_t counts[] = { 65536, 262000 };
	const uint32_t n_tok = counts[_i];
	struct rk_wire_stream st = { .stream_id = 1, .n_tokens = n_tok, .top_p = 1.0f };
	const size_t len = 16 + 40 + 4 * (size_t)n_tok;
	uint32_t *tok = malloc(4 * (size_t)n_tok);
	uint8_t *f = malloc(RK_WIRE_HDR_LEN + len);
	struct rk_wire_round r;
	struct rk_wire_hdr h;
	uint32_t i;

	ck_assert(tok && f);
	ck_assert_uint_le(len, 1u << 20);
	for (i = 0; i < n_tok; i++)
		tok[i] = i * 2654435761u;
	ck_assert_int_eq(rk_wire_round_size(1, n_tok), len);
	ck_assert_int_eq(rk_wire_encode_round(f + 32, len, 5, &st, 1, tok), len);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_ROUND, RK_FRAME_F_PREFILL, 0, 1, f + 32,
					    (uint32_t)len), RK_WIRE_HDR_LEN);
	ck_assert_int_eq(rk_wire_decode_hdr(f, 32, 1u << 20, &h), 32 + (int64_t)len);
	ck_assert_int_eq(rk_wire_check_payload(&h, f + 32), 0);
	ck_assert_int_eq(rk_wire_decode_round(f + 32, len, &r), 0);
	ck_assert_uint_eq(r.n_tok_total, n_tok);
	for (i = 0; i < n_tok; i++)
		ck_assert_uint_eq(rk_wire_round_token(&r, i), tok[i]);
	/* one token more than a 1 MiB link takes */
	ck_assert_int_eq(rk_wire_decode_hdr(f, 32, (uint32_t)len - 1, &h), -RK_ETOOBIG);
	free(tok);
	free(f);
}
END_TEST

/* The largest ROUND there is, and one token past it. */
START_TEST(test_round_max)
{
	const uint64_t max_tok = (RK_WIRE_MAX_PAYLOAD - 16 - 40) / 4;
	struct rk_wire_stream st = { .n_tokens = (uint32_t)max_tok };
	uint8_t *p = calloc(1, RK_WIRE_MAX_PAYLOAD + 1);
	uint32_t *tok = calloc(max_tok + 1, 4);
	struct rk_wire_round r;

	ck_assert(p && tok);
	ck_assert_int_eq(rk_wire_round_size(1, max_tok), RK_WIRE_MAX_PAYLOAD);
	ck_assert_int_eq(rk_wire_round_size(1, max_tok + 1), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_round(p, RK_WIRE_MAX_PAYLOAD, 1, &st, 1, tok),
			 RK_WIRE_MAX_PAYLOAD);
	ck_assert_int_eq(rk_wire_decode_round(p, RK_WIRE_MAX_PAYLOAD, &r), 0);
	ck_assert_uint_eq(r.n_tok_total, max_tok);
	/* payload decoders alone refuse what no header could announce */
	ck_assert_int_eq(rk_wire_decode_round(p, RK_WIRE_MAX_PAYLOAD + 1, &r), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_decode_payload(RK_FRAME_USER, p, RK_WIRE_MAX_PAYLOAD + 1),
			 -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_decode_payload(RK_FRAME_ERROR, p, RK_WIRE_MAX_PAYLOAD + 1),
			 -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_decode_payload(RK_FRAME_USER, p, RK_WIRE_MAX_PAYLOAD), 0);
	st.n_tokens++;
	ck_assert_int_eq(rk_wire_encode_round(p, RK_WIRE_MAX_PAYLOAD + 1, 1, &st, 1, tok),
			 -RK_ETOOBIG);
	free(p);
	free(tok);
}
END_TEST

/* USER data may overlap the output: already in place after the header, or where the header goes. */
START_TEST(test_user_overlap)
{
	static const size_t at[] = { 8, 0, 3 }; /* in place; moved up by 8; by 5 */
	uint8_t p[8 + 300 + 8], want[300];
	struct rk_wire_user u;
	size_t i, k;

	for (i = 0; i < sizeof(want); i++)
		want[i] = (uint8_t)(i * 7 + 1);
	for (k = 0; k < ARRAY_SIZE(at); k++) {
		memset(p, 0, sizeof(p));
		memcpy(p + at[k], want, sizeof(want));
		ck_assert_int_eq(rk_wire_encode_user(p, sizeof(p), 0x55u, p + at[k], sizeof(want)),
				 8 + (int)sizeof(want));
		ck_assert_int_eq(rk_wire_decode_user(p, 8 + sizeof(want), &u), 0);
		ck_assert_uint_eq(u.tag, 0x55u);
		ck_assert_uint_eq(u.len, sizeof(want));
		ck_assert_mem_eq(u.data, want, sizeof(want));
	}
}
END_TEST

/* ---- incremental decoding -------------------------------------------------- */

/* Feed every prefix of a valid frame (followed by the start of another): -EAGAIN
 * before the header is whole, then the frame's total length, never more. */
START_TEST(test_incremental)
{
	const unsigned int type = (unsigned int)_i;
	uint8_t f[2 * BUF_LEN];
	struct rk_wire_hdr h;
	size_t len, n;

	len = sample_frame(type, f);
	sample_frame(RK_FRAME_HEARTBEAT, f + len);
	for (n = 0; n <= len + 40; n++) {
		int64_t ret = rk_wire_decode_hdr(f, n, RK_WIRE_MAX_PAYLOAD, &h);

		if (n < RK_WIRE_HDR_LEN)
			ck_assert_int_eq(ret, -EAGAIN);
		else
			ck_assert_int_eq(ret, len);
		ck_assert_int_eq(decode_frame(f, n, RK_WIRE_MAX_PAYLOAD),
				 n < len ? -EAGAIN : 0);
	}
	ck_assert_int_eq(decode_frame(f + len, 40, RK_WIRE_MAX_PAYLOAD), 0);
}
END_TEST

/* A wrong magic byte is refused as soon as it is present, whatever follows. */
START_TEST(test_magic_prefix)
{
	const size_t bad = (size_t)_i;	/* which magic byte is wrong */
	uint8_t f[BUF_LEN];
	struct rk_wire_hdr h;
	size_t len, n;

	len = sample_frame(RK_FRAME_HEARTBEAT, f);
	f[bad] ^= 0x20;		/* "rKRT", "RkRT", ... */
	for (n = 0; n <= len; n++)
		ck_assert_int_eq(rk_wire_decode_hdr(f, n, RK_WIRE_MAX_PAYLOAD, &h),
				 n <= bad ? -EAGAIN : -RK_EMAGIC);
	/* garbage at the first byte: one byte is enough to refuse it */
	f[0] = 'G';
	ck_assert_int_eq(rk_wire_decode_hdr(f, 1, RK_WIRE_MAX_PAYLOAD, &h), -RK_EMAGIC);
	f[0] = 'R';
	/* HTTP, TLS and a zero byte are refused at once too */
	ck_assert_int_eq(rk_wire_decode_hdr((const uint8_t *)"GET /", 1, 1024, &h), -RK_EMAGIC);
	ck_assert_int_eq(rk_wire_decode_hdr((const uint8_t *)"\x16\x03\x01", 1, 1024, &h),
			 -RK_EMAGIC);
	ck_assert_int_eq(rk_wire_decode_hdr((const uint8_t *)"", 1, 1024, &h), -RK_EMAGIC);
	ck_assert_int_eq(rk_wire_decode_hdr((const uint8_t *)"RKR", 3, 1024, &h), -EAGAIN);
}
END_TEST

static Suite *wire_codec_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc;

	tc = rk_tcase(s, "roundtrip", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_roundtrip, 0, RK_FRAME__COUNT);
	tcase_add_loop_test(tc, test_round_big, 0, 2);
	tcase_add_test(tc, test_round_max);
	tcase_add_test(tc, test_user_overlap);

	tc = rk_tcase(s, "incremental", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_incremental, 0, RK_FRAME__COUNT);
	tcase_add_loop_test(tc, test_magic_prefix, 0, 4);
	return s;
}

int main(void)
{
	return rk_check_run(wire_codec_suite());
}
