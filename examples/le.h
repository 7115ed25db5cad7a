/* SPDX-License-Identifier: MIT */
/*
 * Little-endian loads and stores for the example programs' own payloads (the
 * toy backends' USER frames, rk-serve's frames and receipts). The library has
 * its own in wire/, not installed.
 */
#ifndef RK_EXAMPLES_LE_H
#define RK_EXAMPLES_LE_H

#include <stdint.h>

static inline void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint64_t get64(const uint8_t *p)
{
	return get32(p) | (uint64_t)get32(p + 4) << 32;
}

#endif /* RK_EXAMPLES_LE_H */
