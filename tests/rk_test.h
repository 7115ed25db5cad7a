/* SPDX-License-Identifier: MIT */
/*
 * What every test program of the tree shares, Check or not (tests/bench/ uses it
 * too): time units and deadlines that scale on slow machines, a reproducible
 * generator, free ports, loops and worlds made over loopback, and the idiom of
 * a rank thread that cannot call Check. Never installed.
 */
#ifndef RK_TEST_H
#define RK_TEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rk_runtime.h"
#include "util_int.h"
#include "config_int.h"	/* rk__config_tuning(): tests set tuning knobs directly */

/*
 * The wait policy's tuning of a live loop, for a test that changes a tuning
 * knob while the loop runs (a program sets them by name before
 * rk_loop_create(); rk_loop_set_wait() changes the stable part only).
 */
static inline struct rk__wait_tuning *rk_test_wait_tuning(struct rk_loop *loop)
{
	return &rk__config_tuning((struct rk_config *)rk_loop_config(loop))->wait;
}

#define US		((uint64_t)1000)
#define MS		((uint64_t)1000000)
#define SEC		((uint64_t)1000000000)

static inline uint64_t rk_test_now_ns(void)
{
	return rk__now_ns();
}

/*
 * The multiplier of every wait that ends when something happens (the bound only
 * stops a hung test): CK_TIMEOUT_MULTIPLIER, Check's own knob for slow machines,
 * which scales the tcase timeouts too (the Soft-RoCE guest, emulated, sets 10).
 */
static inline uint64_t rk_test_slow(void)
{
	static uint64_t m;
	const char *e;

	if (!m) {
		e = getenv("CK_TIMEOUT_MULTIPLIER");
		m = e && strtoull(e, NULL, 10) > 1 ? strtoull(e, NULL, 10) : 1;
	}
	return m;
}

/* A deadline @ms from now, for a wait that ends when something happens. */
static inline uint64_t rk_test_deadline_ms(uint64_t ms)
{
	return rk_test_now_ns() + ms * rk_test_slow() * 1000000ull;
}

/* Deterministic PRNG (splitmix64): the same seed, the same data, so every failure reproduces. */
static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * A log handler that stays quiet unless the environment variable named by @arg
 * (a string) is set, or the line is an error: for suites that count no line.
 */
static inline void log_quiet(int level, int rank, const char *msg, void *arg)
{
	if (getenv((const char *)arg) || level == RK_LOG_ERROR)
		fprintf(stderr, "    [%d] r%d %s\n", level, rank, msg);
}

/* A TCP port on 127.0.0.1 that was free a moment ago; or -errno. */
static inline int rk_test_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd, port = -EADDRNOTAVAIL;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (!bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/*
 * Create a loop and its world from @tmpl. A leader (rank 0) whose address ends
 * in ":0" takes a port that was free a moment ago instead, and another one if a
 * concurrent test took it first. No Check assertions (threads and forked
 * children call it). Return: 0, or the error of rk_loop_create/rk_world_create.
 */
static inline int rk_test_create(const struct rk_config *tmpl, const struct rk_world_ops *ops,
				 void *arg, struct rk_loop **loop, struct rk_world **w)
{
	struct rk_config c = *tmpl;
	char *zero = strrchr(c.leader, ':');
	bool pick = c.rank == 0 && zero && !strcmp(zero, ":0");
	int ret, port, tries = 0;

	for (;;) {
		if (pick) {
			port = rk_test_free_port();
			if (port < 0)
				return port;
			snprintf(zero, sizeof(c.leader) - (size_t)(zero - c.leader), ":%d", port);
		}
		ret = rk_loop_create(&c, loop);
		if (ret)
			return ret;
		ret = rk_world_create(*loop, ops, arg, w);
		if (!ret)
			return 0;
		rk_loop_destroy(*loop);
		*loop = NULL;
		*w = NULL;
		if (!pick || ret != -EADDRINUSE || ++tries == 10)
			return ret;
	}
}

/*
 * Create the loop and world of rank @tmpl->rank in a loopback world whose ranks
 * are threads of this process: the leader takes a free port and publishes it in
 * *@port; a follower waits for it until @deadline (rk_test_now_ns()). No Check
 * assertions (threads call it). Return: 0, -ETIMEDOUT, or the error of
 * rk_test_create().
 */
static inline int rk_test_join(const struct rk_config *tmpl, atomic_int *port, uint64_t deadline,
			       const struct rk_world_ops *ops, void *arg, struct rk_loop **loop,
			       struct rk_world **w)
{
	struct rk_config c = *tmpl;
	int ret, p = 0;

	if (c.rank != 0) {
		while (!(p = atomic_load(port)) && rk_test_now_ns() < deadline)
			usleep(1000);
		if (!p)
			return -ETIMEDOUT;
	}
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", p);
	ret = rk_test_create(&c, ops, arg, loop, w);
	if (!ret && c.rank == 0)
		atomic_store(port, rk_world_port(*w));
	return ret;
}

/*
 * A rank thread makes no Check assertion (Check's are for the test's process):
 * it records where and why it failed in its (t)->line and (t)->err and leaves
 * by its "out" label, and the test asserts once it joined the thread.
 */
#define T_FAIL(t, e) do { (t)->line = __LINE__; (t)->err = (e); goto out; } while (0)

/* Run (t)->loop, one RK_RUN_ONCE at a time, until @cond or @deadline; the value of @cond. */
#define RUN_UNTIL(t, deadline, cond)						\
	({									\
		while (!(cond) && rk_test_now_ns() < (deadline))		\
			if (rk_loop_run((t)->loop, RK_RUN_ONCE) < 0)		\
				break;						\
		(bool)(cond);							\
	})

#endif /* RK_TEST_H */
