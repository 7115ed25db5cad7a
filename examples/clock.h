/* SPDX-License-Identifier: MIT */
/*
 * The example programs' monotonic clock, in ns: one copy for every program
 * and the toy backends (the library's own is private, and rk-launch links no
 * library at all).
 */
#ifndef RK_EXAMPLES_CLOCK_H
#define RK_EXAMPLES_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* RK_EXAMPLES_CLOCK_H */
