/* SPDX-License-Identifier: MIT */
/*
 * Sockets, as every transport class and the world use them: resolving an
 * address, the leader's listener (one multishot accept on the loop's ring,
 * re-armed when the kernel ends it), and peer addresses for log lines and
 * for the loopback checks of the authentication and same-host policies.
 *
 * Lifetime: a listener holds a loop reference from rk__sock_listen() until
 * its memory is freed, which rk__sock_listener_close() does at once when no
 * accept is in flight, else at the cancelled accept's last completion.
 */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime_int.h"
#include "sock_int.h"

struct rk__listener {
	struct rk_loop *loop;
	int fd;
	struct rk__op accept_op;
	bool armed;
	bool closing;
	void (*cb)(struct rk__listener *ls, int fd);
	void *arg;
	bool *gone;			/* set when freed after a close */
};

int rk__sock_resolve(const struct rk__addr *a, bool passive, struct sockaddr_storage *ss,
		     socklen_t *len)
{
	struct addrinfo hints, *res;
	char port[8];
	int ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	snprintf(port, sizeof(port), "%u", a->port);
	ret = getaddrinfo(a->host[0] ? a->host : NULL, port, &hints, &res);
	if (ret) {
		rk__err(-1, "cannot resolve '%s': %s", a->host, gai_strerror(ret));
		return -RK_ECONFIG;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

void rk__sock_addr_str(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN];
	const void *a;
	unsigned int port;

	if (ss->ss_family == AF_INET) {
		a = &((const struct sockaddr_in *)ss)->sin_addr;
		port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
		port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	} else {
		snprintf(buf, len, "?");
		return;
	}
	if (!inet_ntop(ss->ss_family, a, host, sizeof(host)))
		snprintf(host, sizeof(host), "?");
	snprintf(buf, len, ss->ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, port);
}

bool rk__sock_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a))
			return a->s6_addr[12] == 127;
		return IN6_IS_ADDR_LOOPBACK(a);
	}
	return false;
}

/* ---- listen / accept -------------------------------------------------------------- */

static void listener_free(struct rk__listener *ls)
{
	close(ls->fd);
	rk__loop_unref(ls->loop);
	if (ls->gone)
		*ls->gone = true;
	free(ls);
}

static void accept_arm(struct rk__listener *ls);

static void accept_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__listener *ls = rk__container_of(op, struct rk__listener, accept_op);

	if (!(flags & IORING_CQE_F_MORE))
		ls->armed = false;
	if (ls->closing) {
		if (res >= 0)
			close(res);
		if (!ls->armed)
			listener_free(ls);
		return;
	}
	if (res >= 0)
		ls->cb(ls, res);
	else if (res != -ECANCELED)
		rk__warn(-1, "accept: %s", rk_strerror(res));
	if (!ls->armed)
		accept_arm(ls);
}

static void accept_arm(struct rk__listener *ls)
{
	struct io_uring_sqe *sqe = rk__loop_sqe(ls->loop);

	if (!sqe)
		return;
	io_uring_prep_multishot_accept(sqe, ls->fd, NULL, NULL, SOCK_CLOEXEC);
	rk__sqe_set_op(sqe, &ls->accept_op);
	ls->armed = true;
}

int rk__sock_listen(struct rk_loop *loop, const struct rk__addr *a,
		    void (*cb)(struct rk__listener *ls, int fd), void *arg,
		    struct rk__listener **out)
{
	struct sockaddr_storage ss;
	struct rk__listener *ls;
	socklen_t len;
	int one = 1, ret;

	ret = rk__sock_resolve(a, true, &ss, &len);
	if (ret)
		return ret;
	ls = calloc(1, sizeof(*ls));
	if (!ls)
		return -ENOMEM;
	ls->loop = loop;
	ls->cb = cb;
	ls->arg = arg;
	ls->accept_op.fn = accept_done;
	ls->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls->fd < 0) {
		ret = -errno;
		goto err_free;
	}
	setsockopt(ls->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* As deep as the kernel allows: a flood that fills a shallow accept queue
	 * before the loop drains it drops a real rank's SYN, and its connect then
	 * waits for the retransmission (1 s, then 3 s), whatever the world admits. */
	if (bind(ls->fd, (struct sockaddr *)&ss, len) < 0 || listen(ls->fd, SOMAXCONN) < 0) {
		ret = -errno;
		goto err_close;
	}
	rk__loop_ref(loop);
	accept_arm(ls);
	*out = ls;
	return 0;

err_close:
	close(ls->fd);
err_free:
	free(ls);
	return ret;
}

void *rk__sock_listener_arg(struct rk__listener *ls)
{
	return ls->arg;
}

int rk__sock_listener_port(struct rk__listener *ls)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(ls->fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

void rk__sock_listener_close(struct rk__listener *ls, bool *gone)
{
	struct io_uring_sqe *sqe;

	ls->closing = true;
	ls->gone = gone;
	if (!ls->armed) {
		listener_free(ls);
		return;
	}
	/* shutdown() on a listening socket ends a pending accept in io_uring. */
	sqe = rk__loop_sqe(ls->loop);
	if (sqe) {
		io_uring_prep_cancel(sqe, &ls->accept_op, 0);
		io_uring_sqe_set_data64(sqe, RK_UDATA_INTERNAL);
	}
	shutdown(ls->fd, SHUT_RDWR);
}
