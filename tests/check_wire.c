/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of wire/: CRC32C, the frame header, every typed payload, and one
 * crafted frame per documented error. The golden vectors are written by hand from
 * WIRE.md (their CRCs by an independent bit-at-a-time implementation), never
 * produced by the encoder they check.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rk_wire.h"
#include "wire_int.h"
#include "runtime_int.h"	/* the handshake's HMAC (runtime/auth.c) */

#define TIMEOUT_S	60
#define BUF_LEN		4096

/* ---- helpers -------------------------------------------------------------- */

/* Deterministic PRNG (splitmix64) so every failure reproduces. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void rng_fill(uint64_t *s, uint8_t *p, size_t n)
{
	while (n--)
		*p++ = (uint8_t)rng_next(s);
}

/* Bit-at-a-time CRC32C straight from the definition: the reference. */
static uint32_t crc32c_ref(uint32_t crc, const uint8_t *p, size_t n)
{
	int k;

	crc = ~crc;
	while (n--) {
		crc ^= *p++;
		for (k = 0; k < 8; k++)
			crc = crc & 1 ? crc >> 1 ^ 0x82F63B78u : crc >> 1;
	}
	return ~crc;
}

/* Write a header by hand, whatever its fields, so the tests can craft frames the
 * encoder refuses. The header CRC is computed over bytes 0..27 as WIRE.md says. */
static void put_hdr(uint8_t *f, uint32_t magic, uint8_t version, uint8_t type, uint16_t flags,
		    uint32_t src_rank, uint32_t len, uint64_t seq, uint32_t pcrc)
{
	rk__le32_store(f, magic);
	f[4] = version;
	f[5] = type;
	rk__le16_store(f + 6, flags);
	rk__le32_store(f + 8, src_rank);
	rk__le32_store(f + 12, len);
	rk__le64_store(f + 16, seq);
	rk__le32_store(f + 24, pcrc);
	rk__le32_store(f + 28, crc32c_ref(0, f, 28));
}

static void fix_hdr_crc(uint8_t *f)
{
	rk__le32_store(f + 28, crc32c_ref(0, f, 28));
}

static void pattern_bytes(uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 37 + 11);
}

/* ---- golden vectors (WIRE.md) -------------------------------------------- */

/* HEARTBEAT with RK_FRAME_F_REPLY from rank 1, seq 5, time_ns 0x0102030405060708. */
static const uint8_t golden_heartbeat[] = {
	0x52, 0x4b, 0x52, 0x54, 0x02, 0x02, 0x01, 0x00,	/* "RKRT", v2, HEARTBEAT, REPLY */
	0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,	/* src_rank 1, len 8 */
	0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* seq 5 */
	0x1c, 0x02, 0xf9, 0x26, 0x9c, 0x95, 0xde, 0x23,	/* payload CRC, header CRC */
	0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,	/* time_ns */
};

/* HELLO: proto 2, world 4, rank 2, auth HMAC, session 0x1122334455667788, caps
 * VERBS|NCCL, nonce 00 01 .. 1f. */
static const uint8_t golden_hello[] = {
	0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,	/* proto 2, world 4 */
	0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,	/* rank 2, auth 1 */
	0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,	/* session */
	0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* caps */
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,	/* nonce */
	0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
	0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
	0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
};

/* The leader's WELCOME to it: rank 0, caps 0, nonce 20 21 .. 3f. */
static const uint8_t golden_welcome[] = {
	0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
	0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27,
	0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
	0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37,
	0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f,
};

/*
 * With the key "rankrt-test-key-0123456789abcdef" (32 ASCII bytes), the AUTH
 * payloads and the link key of that handshake: HMAC-SHA256(key, label ||
 * golden_hello || golden_welcome), computed with Python's hmac module.
 */
static const char golden_key[] = "rankrt-test-key-0123456789abcdef";
static const uint8_t golden_leader_proof[] = {	/* "rankrt v2 leader proof" */
	0x36, 0x45, 0x3a, 0x8e, 0xac, 0xac, 0x43, 0x59,
	0x19, 0xfd, 0xa5, 0x06, 0x42, 0x6c, 0x09, 0x25,
	0xf1, 0x69, 0x5f, 0xa6, 0x4e, 0x76, 0xdc, 0xc3,
	0x6e, 0x37, 0xb1, 0x6f, 0x98, 0x0a, 0x36, 0x22,
};
static const uint8_t golden_follower_proof[] = {	/* "rankrt v2 follower proof" */
	0x18, 0xb9, 0x6e, 0x7f, 0xad, 0xbf, 0xb0, 0x7c,
	0x26, 0xdf, 0x6b, 0x38, 0x9a, 0x25, 0x3d, 0x81,
	0x0a, 0x5d, 0x43, 0x57, 0x4a, 0x62, 0xd4, 0xe6,
	0x9e, 0xef, 0xe4, 0x4d, 0x73, 0xb1, 0x9e, 0xf3,
};
static const uint8_t golden_link_key[] = {	/* "rankrt v2 link key" */
	0x42, 0xb8, 0xeb, 0x63, 0xa4, 0x9d, 0x35, 0x64,
	0x51, 0x0e, 0x81, 0xb9, 0x79, 0x25, 0x00, 0xe9,
	0xb6, 0x6f, 0xaa, 0x8f, 0x46, 0x68, 0x49, 0xc0,
	0xec, 0x2e, 0x7c, 0xbe, 0x01, 0xcc, 0xaa, 0x7d,
};

/* ROUND 7, two streams: stream 100 decodes one token and verifies two drafts,
 * stream 0x200 prefills three tokens. */
static const uint8_t golden_round[] = {
	0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* round_id 7 */
	0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* n_streams 2, reserved */
	0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* [0] stream_id 100 */
	0x0a, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,	/* position 10, n_tokens 1 */
	0x02, 0x00, 0x00, 0x00, 0x28, 0x00, 0x00, 0x00,	/* n_draft 2, top_k 40 */
	0x00, 0x00, 0x00, 0x3f, 0x66, 0x66, 0x66, 0x3f,	/* temperature 0.5, top_p 0.9f */
	0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* seed 42 */
	0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* [1] stream_id 0x200 */
	0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,	/* position 0, n_tokens 3 */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* n_draft 0, top_k 0 */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f,	/* temperature 0, top_p 1 */
	0xef, 0xbe, 0xad, 0xde, 0x00, 0x00, 0x00, 0x00,	/* seed 0xdeadbeef */
	0x0b, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00,	/* tokens: 11 | drafts 12, */
	0x0d, 0x00, 0x00, 0x00, 0x15, 0x00, 0x00, 0x00,	/* 13 | 21, */
	0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00, 0x00,	/* 22, 23 */
};

static const struct rk_wire_stream golden_streams[2] = {
	{ .stream_id = 100, .position = 10, .n_tokens = 1, .n_draft = 2, .top_k = 40,
	  .temperature = 0.5f, .top_p = 0.9f, .seed = 42 },
	{ .stream_id = 0x200, .position = 0, .n_tokens = 3, .n_draft = 0, .top_k = 0,
	  .temperature = 0.0f, .top_p = 1.0f, .seed = 0xdeadbeef },
};
static const uint32_t golden_tokens[6] = { 11, 12, 13, 21, 22, 23 };

/* ERROR: -ECONNRESET about rank 3, "peer gone". */
static const uint8_t golden_error[] = {
	0x98, 0xff, 0xff, 0xff, 0x03, 0x00, 0x00, 0x00,	/* code -104, rank 3 */
	0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* msg_len 9, reserved */
	0x70, 0x65, 0x65, 0x72, 0x20, 0x67, 0x6f, 0x6e, 0x65,	/* "peer gone" */
};

/* SHM_REQUEST: status 0, pid 0x1234, uid 1000, boot id a0 a1 .. af, net_ns
 * 0xf0000098, pid_ns 0xeffffffc. */
static const uint8_t golden_shm_request[] = {
	0x00, 0x00, 0x00, 0x00, 0x34, 0x12, 0x00, 0x00,	/* status 0, pid 0x1234 */
	0xe8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* uid 1000, reserved */
	0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,	/* boot id */
	0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
	0x98, 0x00, 0x00, 0xf0, 0x00, 0x00, 0x00, 0x00,	/* net_ns */
	0xfc, 0xff, 0xff, 0xef, 0x00, 0x00, 0x00, 0x00,	/* pid_ns */
};

/* SHM_OFFER: status 0, pid 0x1200, name 10 11 .. 1f, rings of 1 MiB. */
static const uint8_t golden_shm_offer[] = {
	0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00,	/* status 0, pid 0x1200 */
	0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,	/* socket name */
	0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
	0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x10, 0x00,	/* ring_size, bcast_size 1 MiB */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* reserved */
};

/* SHM_ANSWER: status -ENOSYS (could not map). */
static const uint8_t golden_shm_answer[] = {
	0xda, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,	/* status -38, reserved */
};

/* SHM_SWITCH: start at byte 4096 of the broadcast ring, frame 7, reader slot 2. */
static const uint8_t golden_shm_switch[] = {
	0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* bcast_pos 4096 */
	0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* bcast_seq 7 */
	0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* slot 2, reserved */
};

/* A valid payload of each type, the base of the crafted frames. */
static size_t sample_payload(unsigned int type, uint8_t *p)
{
	static const uint8_t done[] = {
		0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* round_id 7 */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* status 0, reserved */
		0x40, 0xe2, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,	/* elapsed_ns 123456 */
	};
	static const uint8_t user[] = {
		0x55, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 'h', 'e', 'l', 'l', 'o',
	};
	static const uint8_t bye[] = { 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00 };
	size_t i;

	switch (type) {
	case RK_FRAME_HELLO:
		memcpy(p, golden_hello, sizeof(golden_hello));
		return sizeof(golden_hello);
	case RK_FRAME_WELCOME:
		memcpy(p, golden_welcome, sizeof(golden_welcome));
		return sizeof(golden_welcome);
	case RK_FRAME_HEARTBEAT:
		memcpy(p, golden_heartbeat + RK_WIRE_HDR_LEN, 8);
		return 8;
	case RK_FRAME_ROUND:
		memcpy(p, golden_round, sizeof(golden_round));
		return sizeof(golden_round);
	case RK_FRAME_ROUND_DONE:
		memcpy(p, done, sizeof(done));
		return sizeof(done);
	case RK_FRAME_NCCL_ID:
		for (i = 0; i < RK_WIRE_NCCL_ID_LEN; i++)
			p[i] = (uint8_t)(i * 7 + 1);
		return RK_WIRE_NCCL_ID_LEN;
	case RK_FRAME_USER:
		memcpy(p, user, sizeof(user));
		return sizeof(user);
	case RK_FRAME_BYE:
		memcpy(p, bye, sizeof(bye));
		return sizeof(bye);
	case RK_FRAME_ERROR:
		memcpy(p, golden_error, sizeof(golden_error));
		return sizeof(golden_error);
	case RK_FRAME_AUTH:
		memcpy(p, golden_leader_proof, sizeof(golden_leader_proof));
		return sizeof(golden_leader_proof);
	case RK_FRAME_SHM_REQUEST:
		memcpy(p, golden_shm_request, sizeof(golden_shm_request));
		return sizeof(golden_shm_request);
	case RK_FRAME_SHM_OFFER:
		memcpy(p, golden_shm_offer, sizeof(golden_shm_offer));
		return sizeof(golden_shm_offer);
	case RK_FRAME_SHM_ANSWER:
		memcpy(p, golden_shm_answer, sizeof(golden_shm_answer));
		return sizeof(golden_shm_answer);
	case RK_FRAME_SHM_SWITCH:
		memcpy(p, golden_shm_switch, sizeof(golden_shm_switch));
		return sizeof(golden_shm_switch);
	}
	ck_abort_msg("no sample for type %u", type);
	return 0;
}

/* A valid frame of @type (flags 0 unless the sample needs them); returns its length. */
static size_t sample_frame(unsigned int type, uint8_t *f)
{
	size_t n = sample_payload(type, f + RK_WIRE_HDR_LEN);
	uint16_t flags = type == RK_FRAME_ROUND ? RK_FRAME_F_DRAFTED | RK_FRAME_F_PREFILL : 0;

	put_hdr(f, RK_WIRE_MAGIC, RK_WIRE_VERSION, (uint8_t)type, flags, 1, (uint32_t)n, 9,
		crc32c_ref(0, f + RK_WIRE_HDR_LEN, n));
	return RK_WIRE_HDR_LEN + n;
}

/* The receive path: header, payload CRC, typed payload. 0 when all of it passes. */
static int64_t decode_frame(const uint8_t *f, size_t n, uint32_t max_len)
{
	struct rk_wire_hdr h;
	int64_t ret;
	int err;

	ret = rk_wire_decode_hdr(f, n, max_len, &h);
	if (ret < 0)
		return ret;
	ck_assert_int_eq(ret, RK_WIRE_HDR_LEN + (int64_t)h.len);
	if ((size_t)ret > n)
		return -EAGAIN;
	err = rk_wire_check_payload(&h, f + RK_WIRE_HDR_LEN);
	if (err < 0)
		return err;
	return rk_wire_decode_payload(h.type, f + RK_WIRE_HDR_LEN, h.len);
}

/*
 * Oracle for frames the decoder accepts: re-encode the decoded fields with the
 * encoders and require the very same bytes. Every wire field is either decoded or
 * required zero, so a frame is valid exactly when it is the canonical encoding
 * of what it decodes to.
 */
static void assert_canonical(const uint8_t *f, size_t n)
{
	static struct rk_wire_stream streams[64];
	static uint32_t tokens[1024];
	uint8_t out[BUF_LEN];
	const uint8_t *p = f + RK_WIRE_HDR_LEN;
	struct rk_wire_hdr h;
	int64_t len = -1;
	uint32_t i;

	ck_assert_int_eq(rk_wire_decode_hdr(f, n, RK_WIRE_MAX_PAYLOAD, &h), n);
	ck_assert_uint_le(n, sizeof(out));
	switch (h.type) {
	case RK_FRAME_HELLO:
	case RK_FRAME_WELCOME: {
		struct rk_wire_hello x;

		ck_assert_int_eq(rk_wire_decode_hello(p, h.len, &x), 0);
		len = rk_wire_encode_hello(out + RK_WIRE_HDR_LEN, h.len, &x);
		break;
	}
	case RK_FRAME_HEARTBEAT: {
		struct rk_wire_heartbeat x;

		ck_assert_int_eq(rk_wire_decode_heartbeat(p, h.len, &x), 0);
		len = rk_wire_encode_heartbeat(out + RK_WIRE_HDR_LEN, h.len, &x);
		break;
	}
	case RK_FRAME_ROUND: {
		struct rk_wire_round x;

		ck_assert_int_eq(rk_wire_decode_round(p, h.len, &x), 0);
		ck_assert_uint_le(x.n_streams, ARRAY_SIZE(streams));
		ck_assert_uint_le(x.n_tok_total, ARRAY_SIZE(tokens));
		for (i = 0; i < x.n_streams; i++)
			rk_wire_round_stream(&x, i, &streams[i]);
		for (i = 0; i < x.n_tok_total; i++)
			tokens[i] = rk_wire_round_token(&x, i);
		len = rk_wire_encode_round(out + RK_WIRE_HDR_LEN, h.len, x.round_id, streams,
					   x.n_streams, tokens);
		break;
	}
	case RK_FRAME_ROUND_DONE: {
		struct rk_wire_round_done x;

		ck_assert_int_eq(rk_wire_decode_round_done(p, h.len, &x), 0);
		len = rk_wire_encode_round_done(out + RK_WIRE_HDR_LEN, h.len, &x);
		break;
	}
	case RK_FRAME_NCCL_ID: {
		uint8_t id[RK_WIRE_NCCL_ID_LEN];

		ck_assert_int_eq(rk_wire_decode_nccl_id(p, h.len, id), 0);
		len = rk_wire_encode_nccl_id(out + RK_WIRE_HDR_LEN, h.len, id);
		break;
	}
	case RK_FRAME_USER: {
		struct rk_wire_user x;

		ck_assert_int_eq(rk_wire_decode_user(p, h.len, &x), 0);
		ck_assert_ptr_eq(x.data, p + 8);
		len = rk_wire_encode_user(out + RK_WIRE_HDR_LEN, h.len, x.tag, x.data, x.len);
		break;
	}
	case RK_FRAME_BYE: {
		struct rk_wire_bye x;

		ck_assert_int_eq(rk_wire_decode_bye(p, h.len, &x), 0);
		len = rk_wire_encode_bye(out + RK_WIRE_HDR_LEN, h.len, &x);
		break;
	}
	case RK_FRAME_ERROR: {
		struct rk_wire_error x;
		char msg[RK_WIRE_ERRMSG_MAX + 1];

		ck_assert_int_eq(rk_wire_decode_error(p, h.len, &x), 0);
		if (memchr(x.msg, 0, x.msg_len))
			return;	/* a C string cannot carry it; nothing to compare */
		memcpy(msg, x.msg, x.msg_len);
		msg[x.msg_len] = '\0';
		len = rk_wire_encode_error(out + RK_WIRE_HDR_LEN, h.len, x.code, x.rank, msg);
		break;
	}
	case RK_FRAME_AUTH: {
		uint8_t mac[RK_WIRE_MAC_LEN];

		ck_assert_int_eq(rk_wire_decode_auth(p, h.len, mac), 0);
		len = rk_wire_encode_auth(out + RK_WIRE_HDR_LEN, h.len, mac);
		break;
	}
	case RK_FRAME_SHM_REQUEST: {
		struct rk_wire_shm_request x;

		ck_assert_int_eq(rk_wire_decode_shm_request(p, h.len, &x), 0);
		len = rk_wire_encode_shm_request(out + RK_WIRE_HDR_LEN, h.len, &x);
		break;
	}
	case RK_FRAME_SHM_OFFER: {
		struct rk_wire_shm_offer x;

		ck_assert_int_eq(rk_wire_decode_shm_offer(p, h.len, &x), 0);
		len = rk_wire_encode_shm_offer(out + RK_WIRE_HDR_LEN, h.len, &x);
		break;
	}
	case RK_FRAME_SHM_ANSWER: {
		struct rk_wire_shm_answer x;

		ck_assert_int_eq(rk_wire_decode_shm_answer(p, h.len, &x), 0);
		len = rk_wire_encode_shm_answer(out + RK_WIRE_HDR_LEN, h.len, &x);
		break;
	}
	case RK_FRAME_SHM_SWITCH: {
		struct rk_wire_shm_switch x;

		ck_assert_int_eq(rk_wire_decode_shm_switch(p, h.len, &x), 0);
		len = rk_wire_encode_shm_switch(out + RK_WIRE_HDR_LEN, h.len, &x);
		break;
	}
	default:
		ck_abort_msg("decoded an unknown type %u", h.type);
	}
	ck_assert_int_eq(len, h.len);
	ck_assert_int_eq(rk_wire_encode_hdr(out, h.type, h.flags, h.src_rank, h.seq,
					    out + RK_WIRE_HDR_LEN, h.len), RK_WIRE_HDR_LEN);
	ck_assert_mem_eq(out, f, n);
}

/* ---- CRC32C ---------------------------------------------------------------- */

START_TEST(test_crc32c_known)
{
	uint8_t buf[32];
	size_t i;

	ck_assert_uint_eq(rk_wire_crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(rk__crc32c_sw(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(crc32c_ref(0, (const uint8_t *)"123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(rk_wire_crc32c(0, NULL, 0), 0);
	ck_assert_uint_eq(rk_wire_crc32c(0x12345678, NULL, 0), 0x12345678);
	/* RFC 3720 (iSCSI) B.4 vectors. */
	memset(buf, 0, sizeof(buf));
	ck_assert_uint_eq(rk_wire_crc32c(0, buf, 32), 0x8a9136aau);
	memset(buf, 0xff, sizeof(buf));
	ck_assert_uint_eq(rk_wire_crc32c(0, buf, 32), 0x62a8ab43u);
	for (i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	ck_assert_uint_eq(rk_wire_crc32c(0, buf, 32), 0x46dd794eu);
	for (i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	ck_assert_uint_eq(rk_wire_crc32c(0, buf, 32), 0x113fdb5cu);
	ck_assert_uint_eq(rk__crc32c_sw(0, buf, 32), 0x113fdb5cu);
}
END_TEST

START_TEST(test_crc32c_chaining)
{
	uint8_t buf[1000];
	uint64_t s = 1;
	uint32_t whole;
	size_t k;

	rng_fill(&s, buf, sizeof(buf));
	whole = rk_wire_crc32c(0, buf, sizeof(buf));
	for (k = 0; k <= sizeof(buf); k++) {
		ck_assert_uint_eq(rk_wire_crc32c(rk_wire_crc32c(0, buf, k), buf + k,
						 sizeof(buf) - k), whole);
		ck_assert_uint_eq(rk__crc32c_sw(rk__crc32c_sw(0, buf, k), buf + k,
						sizeof(buf) - k), whole);
	}
}
END_TEST

/* Every path (hardware lanes, hardware tail, slicing-by-8, bytewise) against the
 * bit-at-a-time reference, at every small length, odd alignments and lengths that
 * exercise the 3 x 8192 and 3 x 256 lane blocks with all kinds of remainders. */
START_TEST(test_crc32c_paths)
{
	static const size_t big[] = { 767, 768, 769, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1,
				      3 * 8192 + 768 + 13, 2 * 3 * 8192 + 5 * 768 + 7, 100000 };
	const size_t max = 100000 + 8;
	uint8_t *buf = malloc(max);
	bool hw = rk__crc32c_have_hw();
	uint64_t s = 2;
	size_t n, off, i;

	ck_assert_ptr_nonnull(buf);
	rng_fill(&s, buf, max);
	for (n = 0; n <= 1100; n++) {
		for (off = 0; off < 8; off += 3) {
			uint32_t seed = (uint32_t)rng_next(&s);
			uint32_t ref = crc32c_ref(seed, buf + off, n);

			ck_assert_uint_eq(rk__crc32c_sw(seed, buf + off, n), ref);
			ck_assert_uint_eq(rk_wire_crc32c(seed, buf + off, n), ref);
			if (hw)
				ck_assert_uint_eq(rk__crc32c_hw(seed, buf + off, n), ref);
		}
	}
	for (off = 0; off < 1000; off++) {	/* the header's own, unrolled */
		uint32_t ref = crc32c_ref(0, buf + off, RK__CRC32C_HDR);

		ck_assert_uint_eq(rk__crc32c_hdr(buf + off), ref);
	}
	for (i = 0; i < ARRAY_SIZE(big); i++) {
		for (off = 0; off < 8; off += 7) {
			uint32_t ref = crc32c_ref(0, buf + off, big[i]);

			ck_assert_uint_eq(rk__crc32c_sw(0, buf + off, big[i]), ref);
			ck_assert_uint_eq(rk_wire_crc32c(0, buf + off, big[i]), ref);
			if (hw)
				ck_assert_uint_eq(rk__crc32c_hw(0, buf + off, big[i]), ref);
		}
	}
	free(buf);
}
END_TEST

/* ---- golden vectors -------------------------------------------------------- */

START_TEST(test_golden_heartbeat)
{
	const struct rk_wire_heartbeat hb = { .time_ns = 0x0102030405060708ull };
	struct rk_wire_heartbeat got;
	struct rk_wire_hdr h;
	uint8_t f[64];

	ck_assert_int_eq(rk_wire_encode_heartbeat(f + RK_WIRE_HDR_LEN, sizeof(f) - 32, &hb), 8);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, RK_FRAME_F_REPLY, 1, 5,
					    f + RK_WIRE_HDR_LEN, 8), RK_WIRE_HDR_LEN);
	ck_assert_mem_eq(f, golden_heartbeat, sizeof(golden_heartbeat));

	ck_assert_int_eq(rk_wire_decode_hdr(golden_heartbeat, sizeof(golden_heartbeat),
					    RK_WIRE_MAX_PAYLOAD, &h), 40);
	ck_assert_uint_eq(h.magic, RK_WIRE_MAGIC);
	ck_assert_uint_eq(h.version, 2);
	ck_assert_uint_eq(h.type, RK_FRAME_HEARTBEAT);
	ck_assert_uint_eq(h.flags, RK_FRAME_F_REPLY);
	ck_assert_uint_eq(h.src_rank, 1);
	ck_assert_uint_eq(h.len, 8);
	ck_assert_uint_eq(h.seq, 5);
	ck_assert_uint_eq(h.payload_crc, 0x26f9021cu);
	ck_assert_uint_eq(h.hdr_crc, 0x23de959cu);
	ck_assert_int_eq(rk_wire_check_payload(&h, golden_heartbeat + 32), 0);
	ck_assert_int_eq(rk_wire_decode_heartbeat(golden_heartbeat + 32, 8, &got), 0);
	ck_assert_uint_eq(got.time_ns, 0x0102030405060708ull);
}
END_TEST

START_TEST(test_golden_hello)
{
	struct rk_wire_hello in = { .proto_version = 2, .world_size = 4, .rank = 2,
				    .auth = RK_WIRE_AUTH_HMAC,
				    .session_id = 0x1122334455667788ull,
				    .caps = RK_CAP_VERBS | RK_CAP_NCCL };
	struct rk_wire_hello got;
	uint8_t out[RK_WIRE_HELLO_LEN];
	unsigned int i;

	for (i = 0; i < RK_WIRE_NONCE_LEN; i++)
		in.nonce[i] = (uint8_t)i;
	ck_assert_int_eq(rk_wire_encode_hello(out, sizeof(out), &in), RK_WIRE_HELLO_LEN);
	ck_assert_mem_eq(out, golden_hello, sizeof(golden_hello));
	ck_assert_int_eq(rk_wire_decode_hello(golden_hello, sizeof(golden_hello), &got), 0);
	ck_assert_uint_eq(got.proto_version, 2);
	ck_assert_uint_eq(got.world_size, 4);
	ck_assert_uint_eq(got.rank, 2);
	ck_assert_uint_eq(got.auth, RK_WIRE_AUTH_HMAC);
	ck_assert_uint_eq(got.session_id, 0x1122334455667788ull);
	ck_assert_uint_eq(got.caps, RK_CAP_VERBS | RK_CAP_NCCL);
	ck_assert_mem_eq(got.nonce, in.nonce, RK_WIRE_NONCE_LEN);
}
END_TEST

/* The proofs of WIRE.md's worked example, from the library's HMAC (OpenSSL). */
START_TEST(test_golden_auth)
{
	uint8_t t[RK__TRANSCRIPT_LEN], mac[RK_WIRE_MAC_LEN], f[RK_WIRE_HDR_LEN + RK_WIRE_MAC_LEN];
	const uint8_t *key = (const uint8_t *)golden_key;
	size_t klen = strlen(golden_key);

	if (!rk__auth_available()) {
		ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_LEADER, t, mac), -EOPNOTSUPP);
		return;
	}
	memcpy(t, golden_hello, RK_WIRE_HELLO_LEN);
	memcpy(t + RK_WIRE_HELLO_LEN, golden_welcome, RK_WIRE_HELLO_LEN);
	ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_LEADER, t, mac), 0);
	ck_assert_mem_eq(mac, golden_leader_proof, sizeof(mac));
	ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_FOLLOWER, t, mac), 0);
	ck_assert_mem_eq(mac, golden_follower_proof, sizeof(mac));
	ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_LINK_KEY, t, mac), 0);
	ck_assert_mem_eq(mac, golden_link_key, sizeof(mac));
	/* any bit of the transcript or the key changes the proof */
	t[RK_WIRE_HELLO_LEN + 40] ^= 1;
	ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_LEADER, t, mac), 0);
	ck_assert(!rk__auth_equal(mac, golden_leader_proof, sizeof(mac)));
	t[RK_WIRE_HELLO_LEN + 40] ^= 1;
	ck_assert_int_eq(rk__auth_mac(key, klen - 1, RK__AUTH_LEADER, t, mac), 0);
	ck_assert(!rk__auth_equal(mac, golden_leader_proof, sizeof(mac)));
	/* the AUTH frame: 32 bytes, no flags */
	ck_assert_int_eq(rk_wire_encode_auth(f + RK_WIRE_HDR_LEN, RK_WIRE_MAC_LEN,
					     golden_leader_proof), RK_WIRE_MAC_LEN);
	ck_assert_int_eq(rk_wire_encode_auth(f + RK_WIRE_HDR_LEN, RK_WIRE_MAC_LEN - 1,
					     golden_leader_proof), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_AUTH, 0, 0, 1, f + RK_WIRE_HDR_LEN,
					    RK_WIRE_MAC_LEN), RK_WIRE_HDR_LEN);
	ck_assert_int_eq(rk_wire_decode_auth(f + RK_WIRE_HDR_LEN, RK_WIRE_MAC_LEN, mac), 0);
	ck_assert_mem_eq(mac, golden_leader_proof, sizeof(mac));
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME_AUTH), "AUTH");
}
END_TEST

START_TEST(test_golden_round)
{
	struct rk_wire_stream st;
	struct rk_wire_round r;
	uint8_t out[256];
	uint32_t i;

	ck_assert_int_eq(rk_wire_round_size(2, 6), sizeof(golden_round));
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 7, golden_streams, 2,
					      golden_tokens), sizeof(golden_round));
	ck_assert_mem_eq(out, golden_round, sizeof(golden_round));
	/* exactly enough room, then one byte short */
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(golden_round), 7, golden_streams, 2,
					      golden_tokens), sizeof(golden_round));
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(golden_round) - 1, 7, golden_streams,
					      2, golden_tokens), -ENOSPC);

	ck_assert_int_eq(rk_wire_decode_round(golden_round, sizeof(golden_round), &r), 0);
	ck_assert_uint_eq(r.round_id, 7);
	ck_assert_uint_eq(r.n_streams, 2);
	ck_assert_uint_eq(r.n_tok_total, 6);
	ck_assert_uint_eq(r.n_draft_total, 2);
	ck_assert_ptr_eq(r.streams, golden_round + 16);
	ck_assert_ptr_eq(r.tokens, golden_round + 96);
	for (i = 0; i < 2; i++) {
		rk_wire_round_stream(&r, i, &st);
		ck_assert_uint_eq(st.stream_id, golden_streams[i].stream_id);
		ck_assert_uint_eq(st.position, golden_streams[i].position);
		ck_assert_uint_eq(st.n_tokens, golden_streams[i].n_tokens);
		ck_assert_uint_eq(st.n_draft, golden_streams[i].n_draft);
		ck_assert_uint_eq(st.top_k, golden_streams[i].top_k);
		ck_assert(st.temperature == golden_streams[i].temperature);
		ck_assert(st.top_p == golden_streams[i].top_p);
		ck_assert_uint_eq(st.seed, golden_streams[i].seed);
	}
	for (i = 0; i < 6; i++)
		ck_assert_uint_eq(rk_wire_round_token(&r, i), golden_tokens[i]);
}
END_TEST

START_TEST(test_golden_error)
{
	struct rk_wire_error e;
	uint8_t out[RK_WIRE_ERRMSG_MAX + 16];

	ck_assert_int_eq(rk_wire_encode_error(out, sizeof(out), -ECONNRESET, 3, "peer gone"),
			 sizeof(golden_error));
	ck_assert_mem_eq(out, golden_error, sizeof(golden_error));
	ck_assert_int_eq(rk_wire_decode_error(golden_error, sizeof(golden_error), &e), 0);
	ck_assert_int_eq(e.code, -ECONNRESET);
	ck_assert_uint_eq(e.rank, 3);
	ck_assert_uint_eq(e.msg_len, 9);
	ck_assert_ptr_eq(e.msg, (const char *)golden_error + 16);
	ck_assert_mem_eq(e.msg, "peer gone", 9);
}
END_TEST

/* The same-host frames, byte for byte, both ways. */
START_TEST(test_golden_shm)
{
	struct rk_wire_shm_request rq = { .status = 0, .pid = 0x1234, .uid = 1000,
					  .net_ns = 0xf0000098, .pid_ns = 0xeffffffc }, grq;
	struct rk_wire_shm_offer of = { .status = 0, .pid = 0x1200, .ring_size = 1u << 20,
					.bcast_size = 1u << 20 }, gof;
	struct rk_wire_shm_answer an = { .status = -ENOSYS }, gan;
	struct rk_wire_shm_switch sw = { .bcast_pos = 4096, .bcast_seq = 7, .slot = 2 }, gsw;
	uint8_t out[64];
	int i;

	for (i = 0; i < RK_WIRE_BOOT_ID_LEN; i++)
		rq.boot_id[i] = (uint8_t)(0xa0 + i);
	for (i = 0; i < RK_WIRE_SHM_NAME_LEN; i++)
		of.name[i] = (uint8_t)(0x10 + i);

	ck_assert_int_eq(rk_wire_encode_shm_request(out, sizeof(out), &rq), RK_WIRE_SHM_REQUEST_LEN);
	ck_assert_mem_eq(out, golden_shm_request, sizeof(golden_shm_request));
	ck_assert_int_eq(rk_wire_encode_shm_request(out, RK_WIRE_SHM_REQUEST_LEN - 1, &rq), -ENOSPC);
	ck_assert_int_eq(rk_wire_decode_shm_request(golden_shm_request, sizeof(golden_shm_request),
						    &grq), 0);
	ck_assert(grq.status == 0 && grq.pid == 0x1234 && grq.uid == 1000 &&
		  grq.net_ns == 0xf0000098 && grq.pid_ns == 0xeffffffc &&
		  !memcmp(grq.boot_id, rq.boot_id, sizeof(rq.boot_id)));

	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), RK_WIRE_SHM_OFFER_LEN);
	ck_assert_mem_eq(out, golden_shm_offer, sizeof(golden_shm_offer));
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, RK_WIRE_SHM_OFFER_LEN - 1, &of), -ENOSPC);
	ck_assert_int_eq(rk_wire_decode_shm_offer(golden_shm_offer, sizeof(golden_shm_offer), &gof),
			 0);
	ck_assert(gof.status == 0 && gof.pid == 0x1200 && gof.ring_size == 1u << 20 &&
		  gof.bcast_size == 1u << 20 && !memcmp(gof.name, of.name, sizeof(of.name)));

	ck_assert_int_eq(rk_wire_encode_shm_answer(out, sizeof(out), &an), RK_WIRE_SHM_ANSWER_LEN);
	ck_assert_mem_eq(out, golden_shm_answer, sizeof(golden_shm_answer));
	ck_assert_int_eq(rk_wire_decode_shm_answer(golden_shm_answer, sizeof(golden_shm_answer),
						   &gan), 0);
	ck_assert_int_eq(gan.status, -ENOSYS);

	ck_assert_int_eq(rk_wire_encode_shm_switch(out, sizeof(out), &sw), RK_WIRE_SHM_SWITCH_LEN);
	ck_assert_mem_eq(out, golden_shm_switch, sizeof(golden_shm_switch));
	ck_assert_int_eq(rk_wire_decode_shm_switch(golden_shm_switch, sizeof(golden_shm_switch),
						   &gsw), 0);
	ck_assert(gsw.bcast_pos == 4096 && gsw.bcast_seq == 7 && gsw.slot == 2);

	/* the encoders refuse what the decoders refuse */
	rq.status = 1;
	ck_assert_int_eq(rk_wire_encode_shm_request(out, sizeof(out), &rq), -RK_EFIELD);
	of.ring_size = 3u << 20;
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), -RK_EFIELD);
	of.ring_size = 1u << 20;
	of.bcast_size = 2048;
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), -RK_EFIELD);
	of.bcast_size = 0;	/* no broadcast ring */
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), RK_WIRE_SHM_OFFER_LEN);
	of.status = -RK_ENOSHM;	/* a refusal names nothing else */
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), -RK_EFIELD);
	memset(&of, 0, sizeof(of));
	of.status = -RK_ENOSHM;
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), RK_WIRE_SHM_OFFER_LEN);
	an.status = 5;
	ck_assert_int_eq(rk_wire_encode_shm_answer(out, sizeof(out), &an), -RK_EFIELD);
	sw.slot = RK_WIRE_SHM_SLOTS;
	ck_assert_int_eq(rk_wire_encode_shm_switch(out, sizeof(out), &sw), -RK_EFIELD);
	sw.slot = RK_WIRE_SHM_NO_SLOT;
	ck_assert_int_eq(rk_wire_encode_shm_switch(out, sizeof(out), &sw), RK_WIRE_SHM_SWITCH_LEN);
	sw.bcast_pos = 4097;
	ck_assert_int_eq(rk_wire_encode_shm_switch(out, sizeof(out), &sw), -RK_EFIELD);
}
END_TEST

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

/* ---- every documented error, by a crafted frame ---------------------------- */

struct patch {
	uint8_t off, width;	/* width 0: no patch */
	uint64_t val;
};

#define C_HDR_BYTE	0x1u	/* flip a header bit after its CRC was computed */
#define C_HDR_CRC	0x2u	/* flip a bit of the header CRC itself */
#define C_PAY_BYTE	0x4u	/* flip a payload bit after its CRC was computed */

struct bad_frame {
	const char *name;
	uint8_t type;		/* the sample to start from */
	uint16_t flags;
	struct patch pay[4];	/* payload patches, before the payload CRC */
	int len_delta;		/* zero bytes appended (> 0) or bytes cut (< 0) */
	struct patch hdr;	/* header patch, before the header CRC */
	unsigned int corrupt;
	size_t feed;		/* bytes given to the decoder; 0: the whole frame */
	uint32_t max_len;	/* 0: RK_WIRE_MAX_PAYLOAD */
	int expect;
};

#define P(o, w, v) { (o), (w), (v) }
#define NAN_F	0x7fc00000u
#define NNAN_F	0xffc00000u
#define INF_F	0x7f800000u
#define NINF_F	0xff800000u

static const struct bad_frame bad_frames[] = {
	/* header: magic, CRC, version, type */
	{ "magic byte 0", RK_FRAME_HEARTBEAT, .hdr = P(0, 1, 'S'), .expect = -RK_EMAGIC },
	{ "magic byte 3", RK_FRAME_HEARTBEAT, .hdr = P(3, 1, 't'), .expect = -RK_EMAGIC },
	{ "magic big-endian", RK_FRAME_HEARTBEAT, .hdr = P(0, 4, 0x524b5254),
	  .expect = -RK_EMAGIC },
	{ "header bit flip", RK_FRAME_HEARTBEAT, .corrupt = C_HDR_BYTE, .expect = -RK_EHDRCRC },
	{ "header CRC flip", RK_FRAME_ROUND, .flags = 3, .corrupt = C_HDR_CRC,
	  .expect = -RK_EHDRCRC },
	{ "header CRC first", RK_FRAME_HEARTBEAT, .hdr = P(4, 1, 9), .corrupt = C_HDR_CRC,
	  .expect = -RK_EHDRCRC },
	{ "version 0", RK_FRAME_HEARTBEAT, .hdr = P(4, 1, 0), .expect = -RK_EVERSION },
	{ "version 1", RK_FRAME_HEARTBEAT, .hdr = P(4, 1, 1), .expect = -RK_EVERSION },
	{ "version 3", RK_FRAME_HEARTBEAT, .hdr = P(4, 1, 3), .expect = -RK_EVERSION },
	{ "version before type", RK_FRAME_HEARTBEAT, .hdr = P(4, 2, 0xff03),
	  .expect = -RK_EVERSION },
	{ "type 14", RK_FRAME_HEARTBEAT, .hdr = P(5, 1, RK_FRAME__COUNT), .expect = -RK_ETYPE },
	{ "type 255", RK_FRAME_HEARTBEAT, .hdr = P(5, 1, 255), .expect = -RK_ETYPE },
	{ "type before flags", RK_FRAME_HEARTBEAT, .hdr = P(5, 3, 0xffff00 | RK_FRAME__COUNT),
	  .expect = -RK_ETYPE },

	/* fixed-size types: exact length */
	{ "HELLO short", RK_FRAME_HELLO, .len_delta = -1, .expect = -RK_ESHORT },
	{ "HELLO long", RK_FRAME_HELLO, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "WELCOME short", RK_FRAME_WELCOME, .len_delta = -8, .expect = -RK_ESHORT },
	{ "WELCOME long", RK_FRAME_WELCOME, .len_delta = 32, .expect = -RK_ETRAILING },
	{ "HEARTBEAT short", RK_FRAME_HEARTBEAT, .len_delta = -1, .expect = -RK_ESHORT },
	{ "HEARTBEAT empty", RK_FRAME_HEARTBEAT, .len_delta = -8, .expect = -RK_ESHORT },
	{ "HEARTBEAT long", RK_FRAME_HEARTBEAT, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "ROUND_DONE short", RK_FRAME_ROUND_DONE, .len_delta = -1, .expect = -RK_ESHORT },
	{ "ROUND_DONE long", RK_FRAME_ROUND_DONE, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "NCCL_ID short", RK_FRAME_NCCL_ID, .len_delta = -1, .expect = -RK_ESHORT },
	{ "NCCL_ID long", RK_FRAME_NCCL_ID, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "AUTH short", RK_FRAME_AUTH, .len_delta = -1, .expect = -RK_ESHORT },
	{ "AUTH long", RK_FRAME_AUTH, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "BYE short", RK_FRAME_BYE, .len_delta = -1, .expect = -RK_ESHORT },
	{ "BYE long", RK_FRAME_BYE, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "SHM_REQUEST short", RK_FRAME_SHM_REQUEST, .len_delta = -1, .expect = -RK_ESHORT },
	{ "SHM_REQUEST long", RK_FRAME_SHM_REQUEST, .len_delta = 8, .expect = -RK_ETRAILING },
	{ "SHM_OFFER short", RK_FRAME_SHM_OFFER, .len_delta = -8, .expect = -RK_ESHORT },
	{ "SHM_OFFER long", RK_FRAME_SHM_OFFER, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "SHM_ANSWER short", RK_FRAME_SHM_ANSWER, .len_delta = -4, .expect = -RK_ESHORT },
	{ "SHM_ANSWER long", RK_FRAME_SHM_ANSWER, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "SHM_SWITCH short", RK_FRAME_SHM_SWITCH, .len_delta = -1, .expect = -RK_ESHORT },
	{ "SHM_SWITCH long", RK_FRAME_SHM_SWITCH, .len_delta = 8, .expect = -RK_ETRAILING },
	{ "fixed len 4G", RK_FRAME_BYE, .hdr = P(12, 4, 0xffffffff), .feed = 32,
	  .expect = -RK_ETRAILING },
	{ "length before flags", RK_FRAME_HEARTBEAT, .flags = 0x8000, .len_delta = -1,
	  .expect = -RK_ESHORT },
	/* variable types: minimum and maximum */
	{ "ROUND below fixed part", RK_FRAME_ROUND, .flags = 3, .len_delta = -105,
	  .expect = -RK_ESHORT },
	{ "USER below tag", RK_FRAME_USER, .len_delta = -6, .expect = -RK_ESHORT },
	{ "ERROR below fixed part", RK_FRAME_ERROR, .len_delta = -10, .expect = -RK_ESHORT },
	{ "ERROR past type max", RK_FRAME_ERROR, .hdr = P(12, 4, 16 + RK_WIRE_ERRMSG_MAX + 1),
	  .feed = 32, .expect = -RK_ETOOBIG },

	/* flags the type does not define */
	{ "HELLO flag", RK_FRAME_HELLO, .flags = 1, .expect = -RK_EFLAGS },
	{ "WELCOME flag", RK_FRAME_WELCOME, .flags = 1, .expect = -RK_EFLAGS },
	{ "AUTH flag", RK_FRAME_AUTH, .flags = 1, .expect = -RK_EFLAGS },
	{ "HEARTBEAT flag 2", RK_FRAME_HEARTBEAT, .flags = 2, .expect = -RK_EFLAGS },
	{ "HEARTBEAT flag 0x8000", RK_FRAME_HEARTBEAT, .flags = 0x8001, .expect = -RK_EFLAGS },
	{ "ROUND flag 4", RK_FRAME_ROUND, .flags = 7, .expect = -RK_EFLAGS },
	{ "ROUND flag 0x8000", RK_FRAME_ROUND, .flags = 0x8000, .expect = -RK_EFLAGS },
	{ "ROUND_DONE flag", RK_FRAME_ROUND_DONE, .flags = 1, .expect = -RK_EFLAGS },
	{ "NCCL_ID flag", RK_FRAME_NCCL_ID, .flags = 2, .expect = -RK_EFLAGS },
	{ "USER flag", RK_FRAME_USER, .flags = 1, .expect = -RK_EFLAGS },
	{ "BYE flag", RK_FRAME_BYE, .flags = 1, .expect = -RK_EFLAGS },
	{ "ERROR flag", RK_FRAME_ERROR, .flags = 0x100, .expect = -RK_EFLAGS },
	{ "flags before max_len", RK_FRAME_USER, .flags = 1, .max_len = 1, .expect = -RK_EFLAGS },
	{ "HEARTBEAT REPLY ok", RK_FRAME_HEARTBEAT, .flags = RK_FRAME_F_REPLY, .expect = 0 },
	{ "ROUND no flags ok", RK_FRAME_ROUND, .flags = 0, .expect = 0 },

	/* size limits */
	{ "USER over max_len", RK_FRAME_USER, .max_len = 12, .expect = -RK_ETOOBIG },
	{ "USER at max_len", RK_FRAME_USER, .max_len = 13, .expect = 0 },
	{ "USER over MAX_PAYLOAD", RK_FRAME_USER, .hdr = P(12, 4, RK_WIRE_MAX_PAYLOAD + 1),
	  .feed = 32, .max_len = UINT32_MAX, .expect = -RK_ETOOBIG },
	{ "ROUND over MAX_PAYLOAD", RK_FRAME_ROUND, .hdr = P(12, 4, RK_WIRE_MAX_PAYLOAD + 1),
	  .feed = 32, .max_len = UINT32_MAX, .expect = -RK_ETOOBIG },
	{ "USER len 4G", RK_FRAME_USER, .hdr = P(12, 4, 0xffffffff), .feed = 32,
	  .max_len = UINT32_MAX, .expect = -RK_ETOOBIG },

	/* payload CRC */
	{ "payload bit flip", RK_FRAME_HEARTBEAT, .corrupt = C_PAY_BYTE, .expect = -RK_EPAYCRC },
	{ "ROUND payload bit flip", RK_FRAME_ROUND, .flags = 3, .corrupt = C_PAY_BYTE,
	  .expect = -RK_EPAYCRC },
	{ "payload CRC field", RK_FRAME_USER, .hdr = P(24, 4, 0xdeadbeef), .expect = -RK_EPAYCRC },

	/* ROUND: stream 0 at 16, stream 1 at 56, tokens at 96 */
	{ "ROUND draft count past end", RK_FRAME_ROUND, .flags = 3, .pay = { P(32, 4, 3) },
	  .expect = -RK_ESHORT },
	{ "ROUND token count past end", RK_FRAME_ROUND, .flags = 3, .pay = { P(68, 4, 4) },
	  .expect = -RK_ESHORT },
	{ "ROUND cut token", RK_FRAME_ROUND, .flags = 3, .len_delta = -4, .expect = -RK_ESHORT },
	{ "ROUND cut byte", RK_FRAME_ROUND, .flags = 3, .len_delta = -1, .expect = -RK_ESHORT },
	{ "ROUND trailing token", RK_FRAME_ROUND, .flags = 3, .len_delta = 4,
	  .expect = -RK_ETRAILING },
	{ "ROUND trailing byte", RK_FRAME_ROUND, .flags = 3, .len_delta = 1,
	  .expect = -RK_ETRAILING },
	{ "ROUND fewer streams than sent", RK_FRAME_ROUND, .flags = 3, .pay = { P(8, 4, 1) },
	  .expect = -RK_ETRAILING },
	{ "ROUND streams past end", RK_FRAME_ROUND, .flags = 3, .pay = { P(8, 4, 3) },
	  .expect = -RK_ESHORT },
	{ "ROUND n_streams 4G", RK_FRAME_ROUND, .flags = 3, .pay = { P(8, 4, 0xffffffff) },
	  .expect = -RK_ESHORT },
	{ "ROUND n_streams 0", RK_FRAME_ROUND, .flags = 3, .pay = { P(8, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "ROUND n_tokens 0", RK_FRAME_ROUND, .flags = 3, .pay = { P(28, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "ROUND stream 1 n_tokens 0", RK_FRAME_ROUND, .flags = 3, .pay = { P(68, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature NaN", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, NAN_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature -NaN", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, NNAN_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature Inf", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, INF_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature -1", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, 0xbf800000) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature -0 ok", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, 0x80000000) },
	  .expect = 0 },
	{ "ROUND stream 1 temperature NaN", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(80, 4, 0x7f800001) }, .expect = -RK_EFIELD },
	{ "ROUND top_p NaN", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, NAN_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p -Inf", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, NINF_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p 1.5", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, 0x3fc00000) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p just over 1", RK_FRAME_ROUND, .flags = 3, .pay = { P(84, 4, 0x3f800001) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p -0.5", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, 0xbf000000) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p 0 ok", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, 0) }, .expect = 0 },
	{ "ROUND reserved", RK_FRAME_ROUND, .flags = 3, .pay = { P(12, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "ROUND reserved high bit", RK_FRAME_ROUND, .flags = 3, .pay = { P(15, 1, 0x80) },
	  .expect = -RK_ERESERVED },
	{ "ROUND reserved before count", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(12, 4, 1), P(8, 4, 0) }, .expect = -RK_ERESERVED },
	{ "ROUND n_tokens 0xffffffff", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(28, 4, 0xffffffff) }, .expect = -RK_ESHORT },
	{ "ROUND all counts 0xffffffff", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(28, 4, 0xffffffff), P(32, 4, 0xffffffff), P(68, 4, 0xffffffff),
		   P(72, 4, 0xffffffff) }, .expect = -RK_ESHORT },
	{ "ROUND count wraps 32 bits", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(28, 4, 0xfffffffe), P(32, 4, 0), P(68, 4, 0xfffffffe), P(72, 4, 10) },
	  .expect = -RK_ESHORT },

	/* ROUND_DONE, USER, BYE */
	{ "ROUND_DONE reserved", RK_FRAME_ROUND_DONE, .pay = { P(12, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "ROUND_DONE status > 0", RK_FRAME_ROUND_DONE, .pay = { P(8, 4, 1) },
	  .expect = -RK_EFIELD },
	{ "ROUND_DONE status INT32_MIN ok", RK_FRAME_ROUND_DONE, .pay = { P(8, 4, 0x80000000) },
	  .expect = 0 },
	{ "USER reserved", RK_FRAME_USER, .pay = { P(4, 4, 0x100) }, .expect = -RK_ERESERVED },
	{ "USER tag only ok", RK_FRAME_USER, .len_delta = -5, .expect = 0 },
	{ "BYE reason 3", RK_FRAME_BYE, .pay = { P(0, 4, 3) }, .expect = -RK_EFIELD },
	{ "BYE reason 4G", RK_FRAME_BYE, .pay = { P(0, 4, 0xffffffff) }, .expect = -RK_EFIELD },
	{ "BYE reserved", RK_FRAME_BYE, .pay = { P(4, 4, 1) }, .expect = -RK_ERESERVED },
	{ "BYE reason 2 ok", RK_FRAME_BYE, .pay = { P(0, 4, 2) }, .expect = 0 },

	/* the same-host frames */
	{ "SHM_REQUEST flag", RK_FRAME_SHM_REQUEST, .flags = 1, .expect = -RK_EFLAGS },
	{ "SHM_REQUEST status > 0", RK_FRAME_SHM_REQUEST, .pay = { P(0, 4, 1) },
	  .expect = -RK_EFIELD },
	{ "SHM_REQUEST reserved", RK_FRAME_SHM_REQUEST, .pay = { P(12, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "SHM_REQUEST reserved before status", RK_FRAME_SHM_REQUEST,
	  .pay = { P(12, 4, 1), P(0, 4, 1) }, .expect = -RK_ERESERVED },
	{ "SHM_REQUEST refusal ok", RK_FRAME_SHM_REQUEST, .pay = { P(0, 4, 0xffffffda) },
	  .expect = 0 },
	{ "SHM_OFFER flag", RK_FRAME_SHM_OFFER, .flags = 0x8000, .expect = -RK_EFLAGS },
	{ "SHM_OFFER reserved", RK_FRAME_SHM_OFFER, .pay = { P(39, 1, 1) },
	  .expect = -RK_ERESERVED },
	{ "SHM_OFFER status > 0", RK_FRAME_SHM_OFFER, .pay = { P(0, 4, 1) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER ring not a power of two", RK_FRAME_SHM_OFFER, .pay = { P(24, 4, 0x180000) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER ring below 4096", RK_FRAME_SHM_OFFER, .pay = { P(24, 4, 2048) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER ring past 1 GiB", RK_FRAME_SHM_OFFER, .pay = { P(24, 4, 0x80000000) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER ring 0", RK_FRAME_SHM_OFFER, .pay = { P(24, 4, 0) }, .expect = -RK_EFIELD },
	{ "SHM_OFFER broadcast ring odd", RK_FRAME_SHM_OFFER, .pay = { P(28, 4, 4097) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER no broadcast ring ok", RK_FRAME_SHM_OFFER, .pay = { P(28, 4, 0) },
	  .expect = 0 },
	{ "SHM_OFFER refusal with a name", RK_FRAME_SHM_OFFER,
	  .pay = { P(0, 4, 0xffffffda), P(4, 4, 0), P(24, 4, 0), P(28, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "SHM_ANSWER flag", RK_FRAME_SHM_ANSWER, .flags = 2, .expect = -RK_EFLAGS },
	{ "SHM_ANSWER status > 0", RK_FRAME_SHM_ANSWER, .pay = { P(0, 4, 0x7fffffff) },
	  .expect = -RK_EFIELD },
	{ "SHM_ANSWER reserved", RK_FRAME_SHM_ANSWER, .pay = { P(4, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "SHM_ANSWER accepted ok", RK_FRAME_SHM_ANSWER, .pay = { P(0, 4, 0) }, .expect = 0 },
	{ "SHM_SWITCH flag", RK_FRAME_SHM_SWITCH, .flags = 1, .expect = -RK_EFLAGS },
	{ "SHM_SWITCH reserved", RK_FRAME_SHM_SWITCH, .pay = { P(20, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "SHM_SWITCH slot 64", RK_FRAME_SHM_SWITCH, .pay = { P(16, 4, RK_WIRE_SHM_SLOTS) },
	  .expect = -RK_EFIELD },
	{ "SHM_SWITCH no slot ok", RK_FRAME_SHM_SWITCH, .pay = { P(16, 4, 0xffffffff) },
	  .expect = 0 },
	{ "SHM_SWITCH position not 8-aligned", RK_FRAME_SHM_SWITCH, .pay = { P(0, 8, 4100) },
	  .expect = -RK_EFIELD },

	/* ERROR */
	{ "ERROR msg_len past max", RK_FRAME_ERROR, .pay = { P(8, 4, RK_WIRE_ERRMSG_MAX + 1) },
	  .expect = -RK_EFIELD },
	{ "ERROR msg_len 4G", RK_FRAME_ERROR, .pay = { P(8, 4, 0xffffffff) },
	  .expect = -RK_EFIELD },
	{ "ERROR msg_len past end", RK_FRAME_ERROR, .pay = { P(8, 4, 10) },
	  .expect = -RK_ESHORT },
	{ "ERROR msg_len short of end", RK_FRAME_ERROR, .pay = { P(8, 4, 8) },
	  .expect = -RK_ETRAILING },
	{ "ERROR trailing byte", RK_FRAME_ERROR, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "ERROR code 0", RK_FRAME_ERROR, .pay = { P(0, 4, 0) }, .expect = -RK_EFIELD },
	{ "ERROR code positive", RK_FRAME_ERROR, .pay = { P(0, 4, RK_EPEERDEAD) },
	  .expect = -RK_EFIELD },
	{ "ERROR reserved", RK_FRAME_ERROR, .pay = { P(12, 4, 1), P(0, 4, 0) },
	  .expect = -RK_ERESERVED },

	/* HELLO / WELCOME */
	/* ranks are the link's to judge (RK_ERANK): any value decodes */
	{ "HELLO rank == world ok", RK_FRAME_HELLO, .pay = { P(8, 4, 4) }, .expect = 0 },
	{ "HELLO rank 4G ok", RK_FRAME_HELLO, .pay = { P(8, 4, 0xffffffff) }, .expect = 0 },
	{ "HELLO auth 2", RK_FRAME_HELLO, .pay = { P(12, 4, 2) }, .expect = -RK_EFIELD },
	{ "HELLO auth 4G", RK_FRAME_HELLO, .pay = { P(12, 4, 0xffffffff) }, .expect = -RK_EFIELD },
	{ "HELLO auth none ok", RK_FRAME_HELLO, .pay = { P(12, 4, 0) }, .expect = 0 },
	{ "HELLO world 0", RK_FRAME_HELLO, .pay = { P(4, 4, 0), P(8, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "HELLO last rank ok", RK_FRAME_HELLO, .pay = { P(8, 4, 3) }, .expect = 0 },
	{ "HELLO any version ok", RK_FRAME_HELLO, .pay = { P(0, 4, 99) }, .expect = 0 },
	{ "WELCOME rank > world ok", RK_FRAME_WELCOME, .pay = { P(8, 4, 5) }, .expect = 0 },
	{ "WELCOME auth 2", RK_FRAME_WELCOME, .pay = { P(12, 4, 2) }, .expect = -RK_EFIELD },
};

static void apply_patch(uint8_t *p, const struct patch *pt)
{
	switch (pt->width) {
	case 0:
		break;
	case 1:
		p[pt->off] = (uint8_t)pt->val;
		break;
	case 2:
		rk__le16_store(p + pt->off, (uint16_t)pt->val);
		break;
	case 3:
		rk__le16_store(p + pt->off, (uint16_t)pt->val);
		p[pt->off + 2] = (uint8_t)(pt->val >> 16);
		break;
	case 4:
		rk__le32_store(p + pt->off, (uint32_t)pt->val);
		break;
	case 8:
		rk__le64_store(p + pt->off, pt->val);
		break;
	default:
		ck_abort_msg("bad patch width %u", pt->width);
	}
}

START_TEST(test_bad_frame)
{
	const struct bad_frame *c = &bad_frames[_i];
	uint8_t f[BUF_LEN];
	uint8_t *p = f + RK_WIRE_HDR_LEN;
	size_t plen, i;
	int64_t ret;

	memset(f, 0, sizeof(f));
	plen = sample_payload(c->type, p);
	for (i = 0; i < ARRAY_SIZE(c->pay); i++)
		apply_patch(p, &c->pay[i]);
	if (c->len_delta > 0)
		memset(p + plen, 0, (size_t)c->len_delta);
	plen = (size_t)((ptrdiff_t)plen + c->len_delta);
	put_hdr(f, RK_WIRE_MAGIC, RK_WIRE_VERSION, c->type, c->flags, 2, (uint32_t)plen, 77,
		crc32c_ref(0, p, plen));
	if (c->hdr.width) {
		apply_patch(f, &c->hdr);
		fix_hdr_crc(f);
	}
	if (c->corrupt & C_HDR_BYTE)
		f[9] ^= 0x10;
	if (c->corrupt & C_HDR_CRC)
		f[30] ^= 0x01;
	if (c->corrupt & C_PAY_BYTE)
		p[plen - 1] ^= 0x80;

	ret = decode_frame(f, c->feed ? c->feed : RK_WIRE_HDR_LEN + plen,
			   c->max_len ? c->max_len : RK_WIRE_MAX_PAYLOAD);
	ck_assert_msg(ret == c->expect, "%s: got %s (%lld), want %s", c->name,
		      rk_errname((int)ret), (long long)ret, rk_errname(c->expect));
	if (ret == 0)
		assert_canonical(f, RK_WIRE_HDR_LEN + plen);
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

/* Payload decoders called alone check the fixed lengths again. */
START_TEST(test_payload_alone)
{
	static const size_t fixed[RK_FRAME__COUNT] = {
		[RK_FRAME_HELLO] = 64, [RK_FRAME_WELCOME] = 64, [RK_FRAME_HEARTBEAT] = 8,
		[RK_FRAME_ROUND_DONE] = 24, [RK_FRAME_NCCL_ID] = 128, [RK_FRAME_BYE] = 8,
		[RK_FRAME_AUTH] = 32, [RK_FRAME_SHM_REQUEST] = 48, [RK_FRAME_SHM_OFFER] = 40,
		[RK_FRAME_SHM_ANSWER] = 8, [RK_FRAME_SHM_SWITCH] = 24,
	};
	static const size_t min[RK_FRAME__COUNT] = {
		[RK_FRAME_ROUND] = 16, [RK_FRAME_USER] = 8, [RK_FRAME_ERROR] = 16,
	};
	const unsigned int type = (unsigned int)_i;
	uint8_t p[BUF_LEN];
	size_t n = sample_payload(type, p);

	memset(p + n, 0, sizeof(p) - n);
	ck_assert_int_eq(rk_wire_decode_payload(type, p, n), 0);
	if (fixed[type]) {
		ck_assert_uint_eq(n, fixed[type]);
		ck_assert_int_eq(rk_wire_decode_payload(type, p, n - 1), -RK_ESHORT);
		ck_assert_int_eq(rk_wire_decode_payload(type, p, 0), -RK_ESHORT);
		ck_assert_int_eq(rk_wire_decode_payload(type, p, n + 1), -RK_ETRAILING);
	} else {
		ck_assert_int_eq(rk_wire_decode_payload(type, p, min[type] - 1), -RK_ESHORT);
		ck_assert_int_eq(rk_wire_decode_payload(type, p, 0), -RK_ESHORT);
		if (type != RK_FRAME_USER)
			ck_assert_int_eq(rk_wire_decode_payload(type, p, n + 1), -RK_ETRAILING);
	}
	ck_assert_int_eq(rk_wire_decode_payload(RK_FRAME__COUNT, p, n), -RK_ETYPE);
	ck_assert_int_eq(rk_wire_decode_payload(UINT_MAX, p, n), -RK_ETYPE);
}
END_TEST

/* ---- encoders refuse what decoders refuse ---------------------------------- */

START_TEST(test_encode_hdr_errors)
{
	uint8_t f[64], pay[RK_WIRE_NCCL_ID_LEN] = { 0 };

	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME__COUNT, 0, 0, 0, pay, 8), -RK_ETYPE);
	ck_assert_int_eq(rk_wire_encode_hdr(f, UINT_MAX, 0, 0, 0, pay, 8), -RK_ETYPE);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, 2, 0, 0, pay, 8), -RK_EFLAGS);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, 0x10001, 0, 0, pay, 8),
			 -RK_EFLAGS);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_ROUND, 4, 0, 0, pay, 16), -RK_EFLAGS);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_BYE, 1, 0, 0, pay, 8), -RK_EFLAGS);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, 0, 0, 0, pay, 7), -RK_ESHORT);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, 0, 0, 0, pay, 9),
			 -RK_ETRAILING);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_USER, 0, 0, 0, NULL, 0), -RK_ESHORT);
	/* the length is refused before the payload is read */
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_USER, 0, 0, 0, pay,
					    RK_WIRE_MAX_PAYLOAD + 1), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_ERROR, 0, 0, 0, pay,
					    16 + RK_WIRE_ERRMSG_MAX + 1), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_NCCL_ID, 0, 7, 8, pay,
					    RK_WIRE_NCCL_ID_LEN), RK_WIRE_HDR_LEN);
}
END_TEST

START_TEST(test_encode_payload_errors)
{
	struct rk_wire_hello hello = { .proto_version = 1, .world_size = 4, .rank = 4,
				       .auth = 2 };
	struct rk_wire_heartbeat hb = { 1 };
	struct rk_wire_round_done done = { 1, 1, 1 };
	struct rk_wire_bye bye = { 3 };
	struct rk_wire_stream st[2] = { golden_streams[0], golden_streams[1] };
	uint8_t id[RK_WIRE_NCCL_ID_LEN] = { 0 };
	uint8_t out[BUF_LEN];
	char longmsg[400];
	struct rk_wire_error e;

	/* -RK_EFIELD for values the decoder would refuse */
	ck_assert_int_eq(rk_wire_encode_hello(out, sizeof(out), &hello), -RK_EFIELD);
	hello.auth = RK_WIRE_AUTH_HMAC;
	hello.world_size = 0;
	hello.rank = 0;
	ck_assert_int_eq(rk_wire_encode_hello(out, sizeof(out), &hello), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_round_done(out, sizeof(out), &done), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_bye(out, sizeof(out), &bye), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_error(out, sizeof(out), 0, 0, "x"), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_error(out, sizeof(out), 5, 0, "x"), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 0, golden_tokens),
			 -RK_EFIELD);
	st[1].n_tokens = 0;
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	st[1] = golden_streams[1];
	st[0].temperature = -0.5f;
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	memcpy(&st[0].temperature, &(uint32_t){ NAN_F }, 4);
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	st[0] = golden_streams[0];
	st[0].top_p = 1.0001f;
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	memcpy(&st[0].top_p, &(uint32_t){ INF_F }, 4);
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	st[0] = golden_streams[0];

	/* -RK_ETOOBIG before any token is read */
	st[0].n_tokens = UINT32_MAX;
	st[0].n_draft = UINT32_MAX;
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, NULL), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, UINT32_MAX, NULL),
			 -RK_ETOOBIG);
	st[0] = golden_streams[0];
	ck_assert_int_eq(rk_wire_round_size(0, 0), 16);
	ck_assert_int_eq(rk_wire_round_size(UINT32_MAX, 0), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_round_size(1, UINT64_MAX), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_round_size(1, UINT64_MAX / 4 + 1), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_round_size((RK_WIRE_MAX_PAYLOAD - 16) / 40, 0),
			 16 + (RK_WIRE_MAX_PAYLOAD - 16) / 40 * 40);
	ck_assert_int_eq(rk_wire_encode_user(out, sizeof(out), 1, out, RK_WIRE_MAX_PAYLOAD - 7),
			 -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_user(out, sizeof(out), 1, out, UINT32_MAX),
			 -RK_ETOOBIG);

	/* -ENOSPC one byte short, exact fit succeeds */
	hello.world_size = 1;
	ck_assert_int_eq(rk_wire_encode_hello(out, 63, &hello), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_hello(out, 64, &hello), 64);
	ck_assert_int_eq(rk_wire_encode_heartbeat(out, 7, &hb), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_heartbeat(out, 8, &hb), 8);
	done.status = 0;
	ck_assert_int_eq(rk_wire_encode_round_done(out, 23, &done), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_round_done(out, 24, &done), 24);
	ck_assert_int_eq(rk_wire_encode_nccl_id(out, 127, id), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_nccl_id(out, 128, id), 128);
	ck_assert_int_eq(rk_wire_encode_user(out, 12, 1, "abcde", 5), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_user(out, 13, 1, "abcde", 5), 13);
	bye.reason = 0;
	ck_assert_int_eq(rk_wire_encode_bye(out, 7, &bye), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_bye(out, 8, &bye), 8);
	ck_assert_int_eq(rk_wire_encode_error(out, 16 + 8, -1, 0, "peer gone"), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_error(out, 16 + 9, -1, 0, "peer gone"), 25);
	ck_assert_int_eq(rk_wire_encode_error(out, 15, -1, 0, NULL), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_error(out, 16, -1, 0, NULL), 16);

	/* ERROR text is cut at RK_WIRE_ERRMSG_MAX */
	memset(longmsg, 'm', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	ck_assert_int_eq(rk_wire_encode_error(out, sizeof(out), -EIO, 1, longmsg),
			 16 + RK_WIRE_ERRMSG_MAX);
	ck_assert_int_eq(rk_wire_decode_error(out, 16 + RK_WIRE_ERRMSG_MAX, &e), 0);
	ck_assert_uint_eq(e.msg_len, RK_WIRE_ERRMSG_MAX);
	ck_assert_mem_eq(e.msg, longmsg, RK_WIRE_ERRMSG_MAX);
	ck_assert_int_eq(rk_wire_encode_error(out, 16 + RK_WIRE_ERRMSG_MAX - 1, -EIO, 1, longmsg),
			 -ENOSPC);
}
END_TEST

/* ---- garbage ----------------------------------------------------------------- */

/*
 * 10k seeded buffers in four shapes: pure noise, noise behind the magic, random
 * headers with correct CRCs over random payloads, and valid frames with a few
 * bytes changed (CRCs then fixed). Nothing may crash or read out of bounds
 * (ASan/valgrind watch that), and whatever passes the whole receive path must be
 * the canonical encoding of what it decodes to.
 */
START_TEST(test_garbage)
{
	unsigned int valid[4] = { 0 }, i;
	uint64_t s = 0x5eed;

	for (i = 0; i < 10000; i++) {
		unsigned int shape = i % 4;
		uint8_t *f = calloc(1, BUF_LEN);	/* exact-size copy below, for ASan */
		uint8_t *g;
		size_t n = 0, k;

		ck_assert_ptr_nonnull(f);
		switch (shape) {
		case 0:
			n = rng_next(&s) % 200;
			rng_fill(&s, f, n);
			break;
		case 1:
			n = 4 + rng_next(&s) % 200;
			rng_fill(&s, f, n);
			rk__le32_store(f, RK_WIRE_MAGIC);
			break;
		case 2: {
			uint64_t r = rng_next(&s);
			uint32_t len = (uint32_t)(rng_next(&s) % 300);

			if (r & 1)	/* often an exact fixed size */
				len = (uint32_t)(r >> 8) % 2 ? 8 : 32;
			rng_fill(&s, f + 32, len);
			put_hdr(f, RK_WIRE_MAGIC, r % 16 ? RK_WIRE_VERSION : 1,
				(uint8_t)(r >> 16) % 11,
				(r >> 24) % 4 ? 0 : (uint16_t)(r >> 32) & 7, (uint32_t)r,
				r % 8 ? len : len + 1, r, crc32c_ref(0, f + 32, len));
			n = 32 + len + (r >> 40) % 3;
			break;
		}
		case 3: {
			unsigned int type = (unsigned int)(rng_next(&s) % RK_FRAME__COUNT);
			unsigned int m = 1 + (unsigned int)(rng_next(&s) % 3);
			size_t plen;

			n = sample_frame(type, f);
			plen = n - 32;
			while (m--) {
				uint64_t r = rng_next(&s);
				size_t at = (size_t)(r >> 8) % plen;

				/* small values and boundary bytes hit the checks */
				f[32 + at] = (uint8_t)(r >> 32);
				if (!(r & 3))
					f[32 + at] &= 3;
			}
			if (rng_next(&s) % 4 == 0) {
				k = rng_next(&s) % 9;
				if (rng_next(&s) & 1 && k < plen) {
					plen -= k;
				} else {
					rng_fill(&s, f + n, k);
					plen += k;
				}
				rk__le32_store(f + 12, (uint32_t)plen);
			}
			rk__le32_store(f + 24, crc32c_ref(0, f + 32, plen));
			fix_hdr_crc(f);
			n = 32 + plen;
			break;
		}
		}
		g = malloc(n ? n : 1);
		ck_assert_ptr_nonnull(g);
		memcpy(g, f, n);
		free(f);
		for (k = 0; k <= n; k += n / 5 + 1)	/* prefixes too */
			(void)decode_frame(g, k, RK_WIRE_MAX_PAYLOAD);
		if (decode_frame(g, n, RK_WIRE_MAX_PAYLOAD) == 0) {
			struct rk_wire_hdr h;
			int64_t len = rk_wire_decode_hdr(g, n, RK_WIRE_MAX_PAYLOAD, &h);

			ck_assert_int_ge(len, RK_WIRE_HDR_LEN);
			ck_assert_uint_le((size_t)len, n);
			assert_canonical(g, (size_t)len);
			valid[shape]++;
		}
		/* payload decoders must survive any bytes on their own as well */
		for (k = 0; k < RK_FRAME__COUNT; k++)
			(void)rk_wire_decode_payload((unsigned int)k, n > 32 ? g + 32 : g,
						     n > 32 ? n - 32 : n);
		free(g);
	}
	ck_assert_uint_eq(valid[0], 0);
	ck_assert_uint_eq(valid[1], 0);
	ck_assert_uint_gt(valid[2], 20);	/* the deep paths were reached */
	ck_assert_uint_gt(valid[3], 100);
}
END_TEST

/* ---- names --------------------------------------------------------------------- */

START_TEST(test_errnames)
{
	static const struct {
		int e;
		const char *name;
	} errnos[] = {
		{ EAGAIN, "EAGAIN" }, { ENOMEM, "ENOMEM" }, { EINVAL, "EINVAL" },
		{ ECONNRESET, "ECONNRESET" }, { ECONNREFUSED, "ECONNREFUSED" },
		{ EPIPE, "EPIPE" }, { ETIMEDOUT, "ETIMEDOUT" }, { ENOSPC, "ENOSPC" },
		{ EOPNOTSUPP, "EOPNOTSUPP" }, { EBUSY, "EBUSY" }, { EPROTO, "EPROTO" },
		{ EBADMSG, "EBADMSG" }, { EIO, "EIO" }, { ENOENT, "ENOENT" }, { EINTR, "EINTR" },
		{ EALREADY, "EALREADY" }, { ENOTCONN, "ENOTCONN" },
		{ EHOSTUNREACH, "EHOSTUNREACH" }, { ENETUNREACH, "ENETUNREACH" },
		{ EADDRINUSE, "EADDRINUSE" }, { ENODEV, "ENODEV" }, { ECANCELED, "ECANCELED" },
		{ ENOBUFS, "ENOBUFS" }, { EMSGSIZE, "EMSGSIZE" }, { ETIME, "ETIME" },
		{ EPERM, "EPERM" }, { EACCES, "EACCES" }, { EEXIST, "EEXIST" },
		{ E2BIG, "E2BIG" }, { ERANGE, "ERANGE" }, { ENOSYS, "ENOSYS" },
	};
	static const int odd[] = { 0, 1000, 4095, RK_E__END, RK_E__END + 1, 100000,
				   INT_MAX, INT_MIN, -INT_MAX };
	int a, b;
	size_t i;

	for (a = RK_E_BASE; a < RK_E__END; a++) {
		const char *s = rk_strerror(-a), *name = rk_errname(-a);

		ck_assert_ptr_nonnull(s);
		ck_assert_ptr_nonnull(name);
		ck_assert_str_eq(s, rk_strerror(a));
		ck_assert_str_eq(name, rk_errname(a));
		ck_assert_int_eq(strncmp(name, "RK_E", 4), 0);
		/* "RK_EMAGIC: bad frame magic" */
		ck_assert_int_eq(strncmp(s, name, strlen(name)), 0);
		ck_assert_int_eq(strncmp(s + strlen(name), ": ", 2), 0);
		ck_assert_uint_gt(strlen(s), strlen(name) + 4);
		for (b = RK_E_BASE; b < a; b++) {
			ck_assert_str_ne(s, rk_strerror(-b));
			ck_assert_str_ne(name, rk_errname(-b));
		}
	}
	ck_assert_str_eq(rk_errname(-RK_EMAGIC), "RK_EMAGIC");
	ck_assert_str_eq(rk_errname(-RK_ESTOPPED), "RK_ESTOPPED");
	ck_assert_str_eq(rk_strerror(-RK_EMAGIC), "RK_EMAGIC: bad frame magic");

	for (i = 0; i < ARRAY_SIZE(errnos); i++) {
		ck_assert_str_eq(rk_errname(-errnos[i].e), errnos[i].name);
		ck_assert_str_eq(rk_errname(errnos[i].e), errnos[i].name);
		ck_assert_str_eq(rk_strerror(-errnos[i].e), strerror(errnos[i].e));
	}
	ck_assert_str_eq(rk_errname(-EWOULDBLOCK), "EAGAIN");
	ck_assert_ptr_nonnull(rk_errname(-ENOTSOCK));	/* not in our table */
	ck_assert_str_ne(rk_strerror(-ENOTSOCK), "");

	for (i = 0; i < ARRAY_SIZE(odd); i++) {
		const char *s = rk_strerror(odd[i]), *name = rk_errname(odd[i]);

		ck_assert_ptr_nonnull(s);
		ck_assert_ptr_nonnull(name);
		ck_assert_uint_gt(strlen(s), 0);
		ck_assert_uint_gt(strlen(name), 0);
	}
	ck_assert_str_eq(rk_errname(0), "OK");
	ck_assert_str_ne(rk_errname(-RK_E__END), rk_errname(-RK_ESTOPPED));
}
END_TEST

START_TEST(test_frame_names)
{
	unsigned int a, b;

	for (a = 0; a < RK_FRAME__COUNT; a++) {
		ck_assert_ptr_nonnull(rk_wire_frame_name(a));
		ck_assert_str_ne(rk_wire_frame_name(a), "UNKNOWN");
		for (b = 0; b < a; b++)
			ck_assert_str_ne(rk_wire_frame_name(a), rk_wire_frame_name(b));
	}
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME_HEARTBEAT), "HEARTBEAT");
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME_ROUND_DONE), "ROUND_DONE");
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME__COUNT), "UNKNOWN");
	ck_assert_str_eq(rk_wire_frame_name(UINT_MAX), "UNKNOWN");
}
END_TEST

/* The LE helpers are byte-exact whatever the host order. */
START_TEST(test_le_helpers)
{
	uint8_t b[8];

	rk__le64_store(b, 0x0807060504030201ull);
	ck_assert_mem_eq(b, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	ck_assert_uint_eq(rk__le64_load(b), 0x0807060504030201ull);
	ck_assert_uint_eq(rk__le32_load(b + 1), 0x05040302u);
	ck_assert_uint_eq(rk__le16_load(b + 3), 0x0504u);
	rk__le32_store(b, 0xdeadbeefu);
	ck_assert_mem_eq(b, "\xef\xbe\xad\xde", 4);
	rk__le16_store(b, 0xcafe);
	ck_assert_mem_eq(b, "\xfe\xca", 2);
	rk__lef32_store(b, 1.0f);
	ck_assert_mem_eq(b, "\x00\x00\x80\x3f", 4);
	ck_assert(rk__lef32_load(b) == 1.0f);
}
END_TEST

/* ---- runner ---------------------------------------------------------------- */

static TCase *tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, TIMEOUT_S);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc;

	tc = tcase(s, "crc32c");
	tcase_add_test(tc, test_crc32c_known);
	tcase_add_test(tc, test_crc32c_chaining);
	tcase_add_test(tc, test_crc32c_paths);
	tcase_add_test(tc, test_le_helpers);

	tc = tcase(s, "golden");
	tcase_add_test(tc, test_golden_heartbeat);
	tcase_add_test(tc, test_golden_hello);
	tcase_add_test(tc, test_golden_auth);
	tcase_add_test(tc, test_golden_round);
	tcase_add_test(tc, test_golden_error);
	tcase_add_test(tc, test_golden_shm);

	tc = tcase(s, "roundtrip");
	tcase_add_loop_test(tc, test_roundtrip, 0, RK_FRAME__COUNT);
	tcase_add_loop_test(tc, test_round_big, 0, 2);
	tcase_add_test(tc, test_round_max);
	tcase_add_test(tc, test_user_overlap);

	tc = tcase(s, "incremental");
	tcase_add_loop_test(tc, test_incremental, 0, RK_FRAME__COUNT);
	tcase_add_loop_test(tc, test_magic_prefix, 0, 4);

	tc = tcase(s, "errors");
	tcase_add_loop_test(tc, test_bad_frame, 0, (int)ARRAY_SIZE(bad_frames));
	tcase_add_loop_test(tc, test_payload_alone, 0, RK_FRAME__COUNT);
	tcase_add_test(tc, test_encode_hdr_errors);
	tcase_add_test(tc, test_encode_payload_errors);

	tc = tcase(s, "garbage");
	tcase_add_test(tc, test_garbage);

	tc = tcase(s, "names");
	tcase_add_test(tc, test_errnames);
	tcase_add_test(tc, test_frame_names);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(wire_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
