/* SPDX-License-Identifier: MIT */
/*
 * What the wire suites (check_wire, check_wire_codec, check_wire_errors)
 * share: a reference CRC32C, headers written by hand whatever their fields,
 * the golden vectors (written by hand from WIRE.md, their CRCs by the
 * bit-at-a-time reference, never produced by the encoder they check), a valid
 * sample frame of each type built on them, and the check that what decodes is
 * the canonical encoding of what it decodes to. Never installed.
 */
#ifndef RK_WIRE_TEST_H
#define RK_WIRE_TEST_H

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
#include "rk_check.h"
#include "rk_test.h"

#define TIMEOUT_S	60
#define BUF_LEN		4096

/* ---- helpers -------------------------------------------------------------- */

/* @n bytes of rng_next() from the seed in *@s. */
static inline void rng_fill(uint64_t *s, uint8_t *p, size_t n)
{
	while (n--)
		*p++ = (uint8_t)rng_next(s);
}

/* Bit-at-a-time CRC32C straight from the definition: the reference. */
static inline uint32_t crc32c_ref(uint32_t crc, const uint8_t *p, size_t n)
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
static inline void put_hdr(uint8_t *f, uint32_t magic, uint8_t version, uint8_t type,
			   uint16_t flags, uint32_t src_rank, uint32_t len, uint64_t seq,
			   uint32_t pcrc)
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

/* Rewrite the header CRC after a header byte was changed. */
static inline void fix_hdr_crc(uint8_t *f)
{
	rk__le32_store(f + 28, crc32c_ref(0, f, 28));
}

/* A fixed, non-repeating-looking fill. */
static inline void pattern_bytes(uint8_t *p, size_t n)
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

/* That handshake's frame keys (HMAC-SHA256 as above, Python's hmac module) and
 * the tag of golden_heartbeat (seq 5) under the follower's, computed with
 * OpenSSL's EVP AES-256-GCM, the frame as associated data, nonce 05 00 .. 00. */
static const uint8_t golden_leader_frame_key[] = {	/* "rankrt v2 leader frame key" */
	0x60, 0x42, 0x11, 0x91, 0x49, 0x05, 0xef, 0x9b,
	0xd8, 0x4d, 0x1e, 0x8c, 0x25, 0x88, 0xf5, 0xfb,
	0x92, 0xb8, 0xd9, 0xfb, 0x91, 0x6b, 0xe7, 0xaa,
	0x6b, 0xd1, 0x4c, 0x81, 0x46, 0xb7, 0x1e, 0x42,
};
static const uint8_t golden_follower_frame_key[] = {	/* "rankrt v2 follower frame key" */
	0x64, 0x89, 0xdc, 0x95, 0x94, 0x73, 0x66, 0x3d,
	0xd5, 0x25, 0x9d, 0x4f, 0x34, 0xf4, 0x4b, 0x83,
	0xe9, 0x13, 0x17, 0x3a, 0xba, 0x4b, 0x3b, 0x4f,
	0xeb, 0xd4, 0x6d, 0x9e, 0x55, 0x37, 0x1e, 0x6b,
};
static const uint8_t golden_heartbeat_tag[] = {
	0xbf, 0xc9, 0xd8, 0xd3, 0x11, 0x75, 0x20, 0x06,
	0x51, 0x60, 0x97, 0x01, 0xe1, 0x14, 0x65, 0x42,
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

/* ROUND_WATCH: round 9 failed because rank 3 did not finish it (-RK_EROUNDTIMEOUT). */
static const uint8_t golden_round_watch[] = {
	0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* round_id 9 */
	0x03, 0x00, 0x00, 0x00,				/* rank 3 */
	(uint8_t)-RK_EROUNDTIMEOUT, (uint8_t)(-RK_EROUNDTIMEOUT >> 8),	/* status */
	(uint8_t)(-RK_EROUNDTIMEOUT >> 16), (uint8_t)(-RK_EROUNDTIMEOUT >> 24),
	0x00, 0xe1, 0xf5, 0x05, 0x00, 0x00, 0x00, 0x00,	/* elapsed_ns 100000000 */
};

/* A valid payload of each type, the base of the crafted frames. */
static inline size_t sample_payload(unsigned int type, uint8_t *p)
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
	case RK_FRAME_ROUND_WATCH:
		memcpy(p, golden_round_watch, sizeof(golden_round_watch));
		return sizeof(golden_round_watch);
	}
	ck_abort_msg("no sample for type %u", type);
	return 0;
}

/* A valid frame of @type (flags 0 unless the sample needs them); returns its length. */
static inline size_t sample_frame(unsigned int type, uint8_t *f)
{
	size_t n = sample_payload(type, f + RK_WIRE_HDR_LEN);
	uint16_t flags = type == RK_FRAME_ROUND ? RK_FRAME_F_DRAFTED | RK_FRAME_F_PREFILL : 0;

	put_hdr(f, RK_WIRE_MAGIC, RK_WIRE_VERSION, (uint8_t)type, flags, 1, (uint32_t)n, 9,
		crc32c_ref(0, f + RK_WIRE_HDR_LEN, n));
	return RK_WIRE_HDR_LEN + n;
}

/* The receive path: header, payload CRC, typed payload. 0 when all of it passes. */
static inline int64_t decode_frame(const uint8_t *f, size_t n, uint32_t max_len)
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
static inline void assert_canonical(const uint8_t *f, size_t n)
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
	case RK_FRAME_ROUND_WATCH: {
		struct rk_wire_round_watch x;

		ck_assert_int_eq(rk_wire_decode_round_watch(p, h.len, &x), 0);
		len = rk_wire_encode_round_watch(out + RK_WIRE_HDR_LEN, h.len, &x);
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

#endif /* RK_WIRE_TEST_H */
