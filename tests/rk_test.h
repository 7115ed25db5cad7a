/* SPDX-License-Identifier: MIT */
/* Helpers shared by the Check suites that build worlds over loopback TCP. Never installed. */
#ifndef RK_TEST_H
#define RK_TEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
 * Create the loop and world of rank @tmpl->rank in a loopback world whose ranks
 * are threads of this process: the leader takes a free port (another one if a
 * concurrent test took it first) and publishes it in *@port; a follower waits
 * for it until @deadline (rk_test_now_ns()). No Check assertions (threads call
 * it). Return: 0, -ETIMEDOUT, or the error of rk_loop_create/rk_world_create.
 */
static inline int rk_test_join(const struct rk_config *tmpl, atomic_int *port, uint64_t deadline,
			       const struct rk_world_ops *ops, void *arg, struct rk_loop **loop,
			       struct rk_world **w)
{
	struct rk_config c;
	int ret, p = 0, tries = 0;

	for (;;) {
		c = *tmpl;
		if (c.rank == 0) {
			p = rk_test_free_port();
			if (p < 0)
				return p;
		} else {
			while (!(p = atomic_load(port)) && rk_test_now_ns() < deadline)
				usleep(1000);
			if (!p)
				return -ETIMEDOUT;
		}
		snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", p);
		ret = rk_loop_create(&c, loop);
		if (ret)
			return ret;
		ret = rk_world_create(*loop, ops, arg, w);
		if (!ret)
			break;
		rk_loop_destroy(*loop);
		*loop = NULL;
		if (c.rank != 0 || ret != -EADDRINUSE || ++tries == 10)
			return ret;
	}
	if (c.rank == 0)
		atomic_store(port, p);
	return 0;
}

#endif /* RK_TEST_H */
