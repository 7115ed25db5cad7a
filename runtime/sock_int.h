/* SPDX-License-Identifier: MIT */
/*
 * The socket helpers (sock.c): name resolution, a listener with a multishot
 * accept on the loop's ring, and printing and classifying peer addresses. The
 * leader's listener is every transport class's way in (for roce:// its sockets
 * are the side channels), so the world calls these without naming a
 * transport; the transports use them to connect. Never installed.
 */
#ifndef RK_SOCK_INT_H
#define RK_SOCK_INT_H

#include <stdbool.h>
#include <sys/socket.h>

#include "runtime_int.h"

struct rk__listener;

/* getaddrinfo() for @a (passive: for bind). Return: 0 or -RK_ECONFIG (logged). */
int rk__sock_resolve(const struct rk__addr *a, bool passive, struct sockaddr_storage *ss,
		     socklen_t *len);
/* Listen on @a and keep a multishot accept in flight; @cb gets each new fd
 * (the callee owns it). Holds a loop reference until it is freed. Return: 0,
 * -RK_ECONFIG (@a does not resolve) or -errno. Loop thread. */
int rk__sock_listen(struct rk_loop *loop, const struct rk__addr *a,
		    void (*cb)(struct rk__listener *ls, int fd), void *arg,
		    struct rk__listener **out);
/* The @arg given to rk__sock_listen(). */
void *rk__sock_listener_arg(struct rk__listener *ls);
/* The port it listens on, or -errno. */
int rk__sock_listener_port(struct rk__listener *ls);
/* Close; *@gone becomes true once its memory is freed (a later iteration). */
void rk__sock_listener_close(struct rk__listener *ls, bool *gone);
/* "host:port" of @ss into @buf (for peer_addr). */
void rk__sock_addr_str(const struct sockaddr_storage *ss, char *buf, size_t len);
/* 127.0.0.0/8, ::1 or ::ffff:127.x.y.z. */
bool rk__sock_loopback(const struct sockaddr_storage *ss);

#endif /* RK_SOCK_INT_H */
