/* SPDX-License-Identifier: MIT */
/*
 * The TCP transport's own entry points (tcp.c), beside its class (tcp://):
 * links made straight from sockets, for the tests and for classes that carry
 * their links on TCP without a class of their own. Never installed.
 */
#ifndef RK_TCP_INT_H
#define RK_TCP_INT_H

#include "link_int.h"

/* Wrap a connected socket in a link in @state (starts receiving). It owns @fd
 * on success only. Return: 0 or -ENOMEM. Loop thread. */
int rk__tcp_link_from_fd(struct rk_loop *loop, int fd, const struct rk__link_owner_ops *oops,
			 void *owner, enum rk__link_state state, struct rk_link **out);
/* Connect to @a; on success the link starts the handshake; on failure
 * oops->failed() reports the connect error (e.g. -ECONNREFUSED). Return: 0,
 * -RK_ECONFIG (@a does not resolve), -EBUSY (no SQE) or -errno. Loop thread. */
int rk__tcp_connect(struct rk_loop *loop, const struct rk__addr *a,
		    const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out);

#endif /* RK_TCP_INT_H */
