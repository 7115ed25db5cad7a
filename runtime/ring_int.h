/* SPDX-License-Identifier: MIT */
/*
 * The loop's io_uring set up (ring.c): the ring's flags from the wait
 * policy, the provided-buffer ring for TCP receive, enabling a one-issuer
 * ring on its thread. For loop.c only. Never installed.
 */
#ifndef RK_RING_INT_H
#define RK_RING_INT_H

#include "runtime_int.h"

/*
 * RK_SQPOLL=auto: decide @cfg's RK_SQPOLL from this thread's affinity mask
 * (one log line as @cfg's rank).
 */
void rk__ring_sqpoll_auto(struct rk_config *cfg);
/*
 * Make @ring of RK_RING_ENTRIES with the flags @cfg's tuning asks for, the
 * ones this kernel refuses left out (one log line each, and @cfg then says
 * what was made). *@bind: a SINGLE_ISSUER ring, created disabled
 * (rk__ring_enable()). Return: 0 or io_uring_setup's -errno.
 */
int rk__ring_setup(struct io_uring *ring, struct rk_config *cfg, bool *bind);
/* Enable a ring rk__ring_setup() made disabled, for the calling thread. 0 or -errno. */
int rk__ring_enable(struct io_uring *ring);
/*
 * Register @r, @count buffers of @size bytes, on @ring. Return: 0, -ENOMEM,
 * or the kernel's refusal (-EINVAL: no provided-buffer rings; links then use
 * plain receives).
 */
int rk__bufring_setup(struct io_uring *ring, struct rk__bufring *r, unsigned int size,
		      unsigned int count);
void rk__bufring_teardown(struct io_uring *ring, struct rk__bufring *r);

#endif /* RK_RING_INT_H */
