/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the wire codec (tests/fuzz_link.c drives the link and
 * world above it). Built by tests/Makefile.inc as tests/fuzz_wire where
 * configure found clang with libFuzzer; tests/fuzz-smoke.sh runs it.
 *
 * The first input byte picks the mode: even runs the receive path on the rest
 * (header, payload CRC, typed payload), odd feeds the rest to one payload decoder
 * alone (type = byte >> 1), with the CRCs fixed up first so the fuzzer need not
 * guess them. Any accepted frame must re-encode to the very same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rk_wire.h"
#include "wire_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                  \
	do {                      \
		if (!(x))         \
			abort();  \
	} while (0)

static uint8_t out[RK_WIRE_HDR_LEN + RK_WIRE_MAX_PAYLOAD];

/* Re-encode a decoded payload; the bytes must match (every field is decoded or zero). */
static void check_canonical(unsigned int type, const uint8_t *p, size_t n)
{
	static struct rk_wire_stream streams[RK_WIRE_MAX_PAYLOAD / RK_WIRE_ROUND_STREAM_LEN];
	static uint32_t tokens[RK_WIRE_MAX_PAYLOAD / 4];
	int64_t len = -1;
	uint32_t i;

	switch (type) {
	case RK_FRAME_HELLO:
	case RK_FRAME_WELCOME: {
		struct rk_wire_hello x;

		CHECK(rk_wire_decode_hello(p, n, &x) == 0);
		len = rk_wire_encode_hello(out, n, &x);
		break;
	}
	case RK_FRAME_HEARTBEAT: {
		struct rk_wire_heartbeat x;

		CHECK(rk_wire_decode_heartbeat(p, n, &x) == 0);
		len = rk_wire_encode_heartbeat(out, n, &x);
		break;
	}
	case RK_FRAME_ROUND: {
		struct rk_wire_round x;

		CHECK(rk_wire_decode_round(p, n, &x) == 0);
		for (i = 0; i < x.n_streams; i++)
			rk_wire_round_stream(&x, i, &streams[i]);
		for (i = 0; i < x.n_tok_total; i++)
			tokens[i] = rk_wire_round_token(&x, i);
		len = rk_wire_encode_round(out, n, x.round_id, streams, x.n_streams, tokens);
		break;
	}
	case RK_FRAME_ROUND_DONE: {
		struct rk_wire_round_done x;

		CHECK(rk_wire_decode_round_done(p, n, &x) == 0);
		len = rk_wire_encode_round_done(out, n, &x);
		break;
	}
	case RK_FRAME_NCCL_ID: {
		uint8_t id[RK_WIRE_NCCL_ID_LEN];

		CHECK(rk_wire_decode_nccl_id(p, n, id) == 0);
		len = rk_wire_encode_nccl_id(out, n, id);
		break;
	}
	case RK_FRAME_USER: {
		struct rk_wire_user x;

		CHECK(rk_wire_decode_user(p, n, &x) == 0);
		len = rk_wire_encode_user(out, n, x.tag, x.data, x.len);
		break;
	}
	case RK_FRAME_BYE: {
		struct rk_wire_bye x;

		CHECK(rk_wire_decode_bye(p, n, &x) == 0);
		len = rk_wire_encode_bye(out, n, &x);
		break;
	}
	case RK_FRAME_ERROR: {
		struct rk_wire_error x;
		char msg[RK_WIRE_ERRMSG_MAX + 1];

		CHECK(rk_wire_decode_error(p, n, &x) == 0);
		if (memchr(x.msg, 0, x.msg_len))
			return;
		memcpy(msg, x.msg, x.msg_len);
		msg[x.msg_len] = '\0';
		len = rk_wire_encode_error(out, n, x.code, x.rank, msg);
		break;
	}
	case RK_FRAME_AUTH: {
		uint8_t mac[RK_WIRE_MAC_LEN];

		CHECK(rk_wire_decode_auth(p, n, mac) == 0);
		len = rk_wire_encode_auth(out, n, mac);
		break;
	}
	case RK_FRAME_SHM_REQUEST: {
		struct rk_wire_shm_request x;

		CHECK(rk_wire_decode_shm_request(p, n, &x) == 0);
		len = rk_wire_encode_shm_request(out, n, &x);
		break;
	}
	case RK_FRAME_SHM_OFFER: {
		struct rk_wire_shm_offer x;

		CHECK(rk_wire_decode_shm_offer(p, n, &x) == 0);
		len = rk_wire_encode_shm_offer(out, n, &x);
		break;
	}
	case RK_FRAME_SHM_ANSWER: {
		struct rk_wire_shm_answer x;

		CHECK(rk_wire_decode_shm_answer(p, n, &x) == 0);
		len = rk_wire_encode_shm_answer(out, n, &x);
		break;
	}
	case RK_FRAME_SHM_SWITCH: {
		struct rk_wire_shm_switch x;

		CHECK(rk_wire_decode_shm_switch(p, n, &x) == 0);
		len = rk_wire_encode_shm_switch(out, n, &x);
		break;
	}
	case RK_FRAME_ROUND_WATCH: {
		struct rk_wire_round_watch x;

		CHECK(rk_wire_decode_round_watch(p, n, &x) == 0);
		len = rk_wire_encode_round_watch(out, n, &x);
		break;
	}
	default:
		abort();	/* a type the decoder takes and this harness does not know */
	}
	CHECK(len >= 0 && (size_t)len == n && memcmp(out, p, n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rk_wire_hdr h;
	unsigned int mode;
	uint8_t *f;
	int64_t ret;
	size_t k;

	if (size < 1)
		return 0;
	mode = data[0];
	data++;
	size--;

	if (mode & 1) {
		unsigned int type = mode >> 1;

		if (rk_wire_decode_payload(type, data, size) == 0)
			check_canonical(type, data, size);
		return 0;
	}

	/* An exact-size copy, so ASan catches a read one past the end. */
	f = malloc(size ? size : 1);
	CHECK(f);
	memcpy(f, data, size);
	if (mode & 2 && size >= RK_WIRE_HDR_LEN) {
		uint32_t len = rk__le32_load(f + 12);

		if (len <= size - RK_WIRE_HDR_LEN)
			rk__le32_store(f + 24, rk_wire_crc32c(0, f + RK_WIRE_HDR_LEN, len));
		rk__le32_store(f + 28, rk_wire_crc32c(0, f, 28));
	}
	for (k = 0; k <= size && k < RK_WIRE_HDR_LEN; k++)	/* a prefix never passes */
		CHECK(rk_wire_decode_hdr(f, k, RK_WIRE_MAX_PAYLOAD, &h) < 0);
	ret = rk_wire_decode_hdr(f, size, RK_WIRE_MAX_PAYLOAD, &h);
	if (ret >= 0) {
		CHECK(ret == RK_WIRE_HDR_LEN + (int64_t)h.len);
		if ((size_t)ret <= size && rk_wire_check_payload(&h, f + RK_WIRE_HDR_LEN) == 0 &&
		    rk_wire_decode_payload(h.type, f + RK_WIRE_HDR_LEN, h.len) == 0) {
			check_canonical(h.type, f + RK_WIRE_HDR_LEN, h.len);
			CHECK(rk_wire_encode_hdr(out, h.type, h.flags, h.src_rank, h.seq,
						 f + RK_WIRE_HDR_LEN, h.len) == RK_WIRE_HDR_LEN);
			CHECK(memcmp(out, f, RK_WIRE_HDR_LEN) == 0);
		}
	}
	free(f);
	return 0;
}
