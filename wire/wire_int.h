/* SPDX-License-Identifier: MIT */
/*
 * rankrt wire: private helpers shared by the library's modules (never installed).
 *
 * Every multi-byte value that crosses a link or a file is little-endian and is
 * read and written with these helpers: no cast of a buffer to a struct, no
 * alignment assumption, no dependence on the host's byte order. On a
 * little-endian host each is a memcpy of the value's bytes (one unaligned load
 * or store: compilers do not always merge the byte-at-a-time form, e.g. around
 * a call), elsewhere it goes one byte at a time.
 */
#ifndef RK_WIRE_INT_H
#define RK_WIRE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rk_wire.h"

#ifndef ARRAY_SIZE
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define RK__LE_HOST 1	/* the bytes are the value: one (unaligned) load or store */
#else
#define RK__LE_HOST 0
#endif

static inline uint16_t rk__le16_load(const uint8_t *p)
{
	uint16_t v;

	if (RK__LE_HOST) {
		memcpy(&v, p, sizeof(v));
		return v;
	}
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t rk__le32_load(const uint8_t *p)
{
	uint32_t v;

	if (RK__LE_HOST) {
		memcpy(&v, p, sizeof(v));
		return v;
	}
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t rk__le64_load(const uint8_t *p)
{
	uint64_t v;

	if (RK__LE_HOST) {
		memcpy(&v, p, sizeof(v));
		return v;
	}
	return (uint64_t)rk__le32_load(p) | (uint64_t)rk__le32_load(p + 4) << 32;
}

static inline void rk__le16_store(uint8_t *p, uint16_t v)
{
	if (RK__LE_HOST) {
		memcpy(p, &v, sizeof(v));
		return;
	}
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void rk__le32_store(uint8_t *p, uint32_t v)
{
	if (RK__LE_HOST) {
		memcpy(p, &v, sizeof(v));
		return;
	}
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void rk__le64_store(uint8_t *p, uint64_t v)
{
	if (RK__LE_HOST) {
		memcpy(p, &v, sizeof(v));
		return;
	}
	rk__le32_store(p, (uint32_t)v);
	rk__le32_store(p + 4, (uint32_t)(v >> 32));
}

/* IEEE-754 binary32 travels as its u32 bit pattern; memcpy is the defined way to
 * reinterpret it (a union or pointer cast would break strict aliasing). */
static inline float rk__lef32_load(const uint8_t *p)
{
	uint32_t u = rk__le32_load(p);
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline void rk__lef32_store(uint8_t *p, float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	rk__le32_store(p, u);
}

/*
 * CRC32C back ends, exposed so the tests can prove the hardware path equals the
 * portable one. Same contract as rk_wire_crc32c(): @crc is 0 or a previous result.
 * rk__crc32c_hw() may only be called when rk__crc32c_have_hw() returns true.
 */
uint32_t rk__crc32c_sw(uint32_t crc, const void *p, size_t n);
uint32_t rk__crc32c_hw(uint32_t crc, const void *p, size_t n);
int rk__crc32c_have_hw(void);

/* rk_wire_crc32c(0, p, RK__CRC32C_HDR): a frame header's check, every frame
 * twice a hop, unrolled for its one length. Any thread. */
#define RK__CRC32C_HDR	28
uint32_t rk__crc32c_hdr(const uint8_t *p);

/*
 * A payload decoded by its frame type: the member of that type, its views
 * pointing into the payload. A link decodes each frame it receives once, into
 * this, and hands it on with the frame, so nothing above decodes it again.
 */
union rk__wire_payload {
	struct rk_wire_hello hello;		/* HELLO, WELCOME */
	struct rk_wire_heartbeat hb;
	struct rk_wire_round round;
	struct rk_wire_round_done done;
	struct rk_wire_round_watch watch;
	uint8_t nccl_id[RK_WIRE_NCCL_ID_LEN];
	struct rk_wire_user user;
	struct rk_wire_bye bye;
	struct rk_wire_error error;
	uint8_t mac[RK_WIRE_MAC_LEN];		/* AUTH */
	struct rk_wire_shm_request shm_request;
	struct rk_wire_shm_offer shm_offer;
	struct rk_wire_shm_answer shm_answer;
	struct rk_wire_shm_switch shm_switch;
};

/*
 * rk__wire_decode() - rk_wire_decode_payload() that keeps the result: the
 * payload @p (@n bytes) of a frame of @type, validated and decoded into @out.
 * Return: as rk_wire_decode_payload(); @out is meaningful only on success.
 */
int rk__wire_decode(unsigned int type, const uint8_t *p, size_t n, union rk__wire_payload *out);

#endif /* RK_WIRE_INT_H */
