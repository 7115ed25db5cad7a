/* SPDX-License-Identifier: MIT */
/*
 * Small helpers every module of the library shares: container_of, the stats
 * getters' sized copy and the monotonic clock. runtime_int.h includes this
 * header, so runtime/, rdma/ and gpu/ (and the unit tests) have it; wire/,
 * below runtime/, needs none of them.
 * Never installed.
 */
#ifndef RK_UTIL_INT_H
#define RK_UTIL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/*
 * The @type that holds *@ptr as its @member. A compile-time check refuses a
 * @ptr whose type is not the member's (qualifiers aside), so a wrong member
 * name or a pointer to something else does not compile.
 */
#define rk__container_of(ptr, type, member)                                                \
	({                                                                                 \
		_Static_assert(__builtin_types_compatible_p(__typeof__(*(ptr)),            \
							    __typeof__(((type *)0)->member)), \
			       "rk__container_of: *" #ptr " is not " #type "." #member);   \
		(type *)(void *)((char *)(ptr) - offsetof(type, member));                  \
	})

/*
 * A stats getter's copy into the caller's @out of @size bytes, which may be
 * another release's struct: the library's @n bytes at @src as far as both
 * reach, the rest of @out zeroed (a counter this library does not have
 * reads 0). Return: the bytes copied, min(@size, @n).
 */
static inline size_t rk__stats_copy(void *out, size_t size, const void *src, size_t n)
{
	size_t c = size < n ? size : n;

	if (!size)
		return 0;
	memcpy(out, src, c);
	memset((char *)out + c, 0, size - c);
	return c;
}

/* CLOCK_MONOTONIC in ns: the clock of every time the library takes or compares. */
static inline uint64_t rk__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* RK_UTIL_INT_H */
