/* SPDX-License-Identifier: MIT */
/*
 * peers: the ping-pong that rk-pingpong measures, written against other
 * designs, so tests/bench/peers.sh can run them beside rankrt in one run.
 * A server process (forked, pinned to the second CPU) echoes each message; the
 * client (pinned to the first) times each round trip. Over TCP loopback with
 * TCP_NODELAY, 64-byte messages by default.
 *
 *   peers DESIGN [--count N] [--warmup W] [--size B] [--gap-us G] [--cpus A,B]
 *   peers --list       the designs this binary was built with
 *
 * Designs: sock-spin (non-blocking recv() retried on EAGAIN: the floor),
 * sock-block (blocking recv()), sock-nap and sock-napwarm (a server that sleeps
 * until shortly before the next message of a --gap-us run, then spins; the
 * second rehearses a loopback TCP round trip first: see nap_recv()),
 * uring-block (io_uring, one SQE at a time,
 * io_uring_submit_and_wait()), uring-spin (io_uring with COOP_TASKRUN and
 * TASKRUN_FLAG, CQ peeked in a loop), libuv (uv_run(UV_RUN_ONCE)), zmq (ZeroMQ
 * PAIR, blocking zmq_recv()), ucx-busy (UCX ucp tag API, ucp_worker_progress()
 * in a loop), ucx-armed (the same, ucp_worker_arm() and poll() on the worker's
 * event fd when progress finds nothing). UCX uses the transports UCX_TLS names
 * (peers.sh sets tcp, so every design crosses the same loopback).
 *
 * Prints one line: design p50_us p99_us cpu_s_client cpu_s_server round_trips.
 * CPU is each process's user+system time from connection to the last round
 * trip, warmup included. With --gap-us the client sleeps G us before each round
 * trip (PEERS_CLIENT_SPIN=1: spins them), so the RTT is the wake latency of a
 * server idle that long. A benchmark:
 * it asserts nothing about time.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef PEERS_HAVE_URING
#include <liburing.h>
#endif
#ifdef PEERS_HAVE_UV
#include <uv.h>
#endif
#ifdef PEERS_HAVE_ZMQ
#include <zmq.h>
#endif
#ifdef PEERS_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

#define MAX_SIZE	65536

struct cfg {
	unsigned int count, warmup, size, gap_us;
	int cpu[2];
	uint16_t port;
};

/* One side of a connection; each design keeps its state here. */
struct peer {
	const struct cfg *c;
	bool server;
	int fd;
	uint64_t last_arrival;		/* sock-nap*: when the last message came */
	int warm[2];			/* sock-napwarm: a loopback pair of its own */
#ifdef PEERS_HAVE_URING
	struct io_uring ring;
#endif
#ifdef PEERS_HAVE_UV
	uv_loop_t uv;
	uv_tcp_t uv_srv, uv_conn;
	uv_connect_t uv_creq;
	bool uv_up;
	uint8_t *uv_dst;
	size_t uv_want, uv_have;
	int uv_err;
#endif
#ifdef PEERS_HAVE_ZMQ
	void *zctx, *zsock;
#endif
#ifdef PEERS_HAVE_UCX
	ucp_context_h ucp;
	ucp_worker_h worker;
	ucp_listener_h listener;
	ucp_ep_h ep;
	ucp_conn_request_h conn_req;
	int efd;
	bool armed;
#endif
};

/* open: connect (client) or accept (server; it calls ready() once listening). */
struct design {
	const char *name;
	int (*open)(struct peer *p, void (*ready)(void));
	int (*send)(struct peer *p, const void *b, size_t n);
	int (*recv)(struct peer *p, void *b, size_t n);
	void (*close)(struct peer *p);
};

static int ready_fd = -1;

static void say_ready(void)
{
	char c = 1;

	if (write(ready_fd, &c, 1) != 1)
		perror("peers: ready pipe");
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void loopback(struct sockaddr_in *a, uint16_t port)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* ---- plain TCP sockets (also the transport under the io_uring designs) ---- */

static int tcp_open(struct peer *p, void (*ready)(void))
{
	struct sockaddr_in a;
	int one = 1, fd, lfd;

	loopback(&a, p->c->port);
	if (p->server) {
		lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (lfd < 0)
			return -errno;
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 1)) {
			close(lfd);
			return -errno;
		}
		ready();
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		close(lfd);
		if (fd < 0)
			return -errno;
	} else {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
			close(fd);
			return -errno;
		}
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	p->fd = fd;
	return 0;
}

static void tcp_close(struct peer *p)
{
	close(p->fd);
}

/* flags: MSG_DONTWAIT to spin on EAGAIN, 0 to block */
static int sock_xfer(int fd, void *b, size_t n, bool out, int flags)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = out ? send(fd, (uint8_t *)b + done, n - done, flags | MSG_NOSIGNAL)
				: recv(fd, (uint8_t *)b + done, n - done, flags);

		if (r > 0) {
			done += (size_t)r;
		} else if (r == 0) {
			return -ECONNRESET;
		} else if (errno != EAGAIN && errno != EINTR) {
			return -errno;
		}
	}
	return 0;
}

static int spin_send(struct peer *p, const void *b, size_t n)
{
	return sock_xfer(p->fd, (void *)b, n, true, MSG_DONTWAIT);
}

static int spin_recv(struct peer *p, void *b, size_t n)
{
	return sock_xfer(p->fd, b, n, false, MSG_DONTWAIT);
}

static int block_send(struct peer *p, const void *b, size_t n)
{
	return sock_xfer(p->fd, (void *)b, n, true, 0);
}

static int block_recv(struct peer *p, void *b, size_t n)
{
	return sock_xfer(p->fd, b, n, false, 0);
}


/*
 * sock-nap: the server sleeps until the next message is due (the last
 * arrival + the gap) less PEERS_NAP_US (default 200) and spins from there, as
 * a wait that knows the gap does; sock-napwarm also sends PEERS_WARM_B bytes
 * (default 64) around a loopback TCP pair of its own every PEERS_WARM_US (default
 * 20) while it spins. An experiment: does a core that slept pay on its next
 * message however early it woke, and does running the same kernel path first
 * buy that back?
 */
static unsigned int env_u(const char *name, unsigned int dflt)
{
	const char *v = getenv(name);

	return v && *v ? (unsigned int)strtoul(v, NULL, 10) : dflt;
}

static int warm_pair(int fds[2])
{
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	int one = 1, ls;

	ls = socket(AF_INET, SOCK_STREAM, 0);
	loopback(&a, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&a, &alen))
		return -errno;
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&a, sizeof(a)))
		return -errno;
	fds[1] = accept(ls, NULL, NULL);
	close(ls);
	if (fds[1] < 0)
		return -errno;
	setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

static int nap_open_any(struct peer *p, void (*ready)(void), bool warm)
{
	const char *k = getenv("PEERS_WARM_KIND");

	p->warm[0] = p->warm[1] = -1;
	if (warm && p->server && k && !strcmp(k, "unix")) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, p->warm))
			return -errno;
	} else if (warm && p->server && k && !strcmp(k, "syscall")) {
		p->warm[0] = p->warm[1] = 1000;	/* no fd: getppid() */
	} else if (warm && p->server && warm_pair(p->warm))
		return -EIO;
	return tcp_open(p, ready);
}

static int nap_open(struct peer *p, void (*ready)(void))
{
	return nap_open_any(p, ready, false);
}

static int napwarm_open(struct peer *p, void (*ready)(void))
{
	return nap_open_any(p, ready, true);
}

static void nap_close(struct peer *p)
{
	if (p->warm[0] == 1000)
		p->warm[0] = p->warm[1] = -1;
	if (p->warm[0] >= 0)
		close(p->warm[0]);
	if (p->warm[1] >= 0)
		close(p->warm[1]);
	tcp_close(p);
}

static int nap_recv(struct peer *p, void *b, size_t n)
{
	uint64_t margin = (uint64_t)env_u("PEERS_NAP_US", 200) * 1000;
	uint64_t every = (uint64_t)env_u("PEERS_WARM_US", 20) * 1000;
	size_t wb = env_u("PEERS_WARM_B", 64);
	uint64_t due, next_warm = 0;
	char junk[MAX_SIZE];
	size_t done = 0;

	if (!p->server || !p->c->gap_us || !p->last_arrival)
		goto spin;
	due = p->last_arrival + (uint64_t)p->c->gap_us * 1000;
	if (due > now_ns() + margin) {
		struct timespec ts;
		uint64_t at = due - margin;

		ts.tv_sec = (time_t)(at / 1000000000ull);
		ts.tv_nsec = (long)(at % 1000000000ull);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
spin:
	while (done < n) {
		ssize_t r = recv(p->fd, (uint8_t *)b + done, n - done, MSG_DONTWAIT);

		if (r > 0) {
			done += (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		if (p->warm[0] >= 0 && !done && wb && wb <= sizeof(junk)) {
			uint64_t t = now_ns();

			if (t >= next_warm && p->warm[0] == 1000) {
				(void)getppid();
				next_warm = t + every;
			} else if (t >= next_warm) {
				if (sock_xfer(p->warm[0], junk, wb, true, 0) ||
				    sock_xfer(p->warm[1], junk, wb, false, 0))
					return -EIO;
				next_warm = t + every;
			}
		}
	}
	p->last_arrival = now_ns();
	return 0;
}

/* ---- io_uring: one SQE per send or receive ---- */
#ifdef PEERS_HAVE_URING
static int uring_open_flags(struct peer *p, void (*ready)(void), unsigned int flags)
{
	int ret = tcp_open(p, ready);

	if (ret)
		return ret;
	ret = io_uring_queue_init(8, &p->ring, flags);
	if (ret)
		close(p->fd);
	return ret;
}

static int uring_block_open(struct peer *p, void (*ready)(void))
{
	return uring_open_flags(p, ready, 0);
}

static int uring_spin_open(struct peer *p, void (*ready)(void))
{
	return uring_open_flags(p, ready, IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
}

static void uring_close(struct peer *p)
{
	io_uring_queue_exit(&p->ring);
	tcp_close(p);
}

/* One SQE, then its CQE: waited for in the kernel, or peeked for while spinning. */
static int uring_xfer(struct peer *p, void *b, size_t n, bool out, bool spin)
{
	size_t done = 0;

	while (done < n) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);
		struct io_uring_cqe *cqe;
		int ret, res;

		if (!sqe)
			return -EBUSY;
		if (out)
			io_uring_prep_send(sqe, p->fd, (uint8_t *)b + done, n - done, MSG_NOSIGNAL);
		else
			io_uring_prep_recv(sqe, p->fd, (uint8_t *)b + done, n - done, 0);
		if (spin) {
			ret = io_uring_submit(&p->ring);
			if (ret < 0)
				return ret;
			while (io_uring_peek_cqe(&p->ring, &cqe)) {
				if (IO_URING_READ_ONCE(*p->ring.sq.kflags) & IORING_SQ_TASKRUN)
					io_uring_get_events(&p->ring);
			}
		} else {
			ret = io_uring_submit_and_wait(&p->ring, 1);
			if (ret < 0)
				return ret;
			ret = io_uring_peek_cqe(&p->ring, &cqe);
			if (ret)
				return ret;
		}
		res = cqe->res;
		io_uring_cqe_seen(&p->ring, cqe);
		if (res < 0)
			return res;
		if (res == 0)
			return -ECONNRESET;
		done += (size_t)res;
	}
	return 0;
}

static int uring_block_send(struct peer *p, const void *b, size_t n)
{
	return uring_xfer(p, (void *)b, n, true, false);
}

static int uring_block_recv(struct peer *p, void *b, size_t n)
{
	return uring_xfer(p, b, n, false, false);
}

static int uring_spin_send(struct peer *p, const void *b, size_t n)
{
	return uring_xfer(p, (void *)b, n, true, true);
}

static int uring_spin_recv(struct peer *p, void *b, size_t n)
{
	return uring_xfer(p, b, n, false, true);
}
#endif

/* ---- libuv: reads delivered by the loop, writes tried first ---- */
#ifdef PEERS_HAVE_UV
static void uv_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct peer *p = h->data;

	(void)hint;
	if (p->uv_dst && p->uv_have < p->uv_want) {
		*buf = uv_buf_init((char *)p->uv_dst + p->uv_have,
				   (unsigned int)(p->uv_want - p->uv_have));
	} else {
		*buf = uv_buf_init(NULL, 0);	/* UV_ENOBUFS: read nothing until asked */
	}
}

static void uv_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct peer *p = s->data;

	(void)buf;
	if (n > 0)
		p->uv_have += (size_t)n;
	else if (n < 0 && n != UV_ENOBUFS)
		p->uv_err = (int)n;
	if (p->uv_have >= p->uv_want)
		uv_read_stop(s);
}

static void uv_on_conn(uv_stream_t *srv, int status)
{
	struct peer *p = srv->data;

	if (status < 0 || uv_tcp_init(&p->uv, &p->uv_conn) ||
	    uv_accept(srv, (uv_stream_t *)&p->uv_conn)) {
		p->uv_err = status < 0 ? status : UV_EIO;
		return;
	}
	p->uv_up = true;
}

static void uv_on_connect(uv_connect_t *req, int status)
{
	struct peer *p = req->data;

	if (status < 0)
		p->uv_err = status;
	else
		p->uv_up = true;
}

static int uvp_open(struct peer *p, void (*ready)(void))
{
	struct sockaddr_in a;
	int ret;

	loopback(&a, p->c->port);
	ret = uv_loop_init(&p->uv);
	if (ret)
		return ret;
	if (p->server) {
		uv_tcp_init(&p->uv, &p->uv_srv);
		p->uv_srv.data = p;
		ret = uv_tcp_bind(&p->uv_srv, (struct sockaddr *)&a, 0);
		if (!ret)
			ret = uv_listen((uv_stream_t *)&p->uv_srv, 1, uv_on_conn);
		if (ret)
			return ret;
		ready();
	} else {
		uv_tcp_init(&p->uv, &p->uv_conn);
		p->uv_creq.data = p;
		ret = uv_tcp_connect(&p->uv_creq, &p->uv_conn, (struct sockaddr *)&a,
				     uv_on_connect);
		if (ret)
			return ret;
	}
	while (!p->uv_up && !p->uv_err)
		uv_run(&p->uv, UV_RUN_ONCE);
	if (p->uv_err)
		return p->uv_err;
	p->uv_conn.data = p;
	uv_tcp_nodelay(&p->uv_conn, 1);
	return 0;
}

static int uvp_send(struct peer *p, const void *b, size_t n)
{
	uv_buf_t buf = uv_buf_init((char *)b, (unsigned int)n);

	while (buf.len) {
		int r = uv_try_write((uv_stream_t *)&p->uv_conn, &buf, 1);

		if (r > 0) {
			buf.base += r;
			buf.len -= (unsigned int)r;
		} else if (r != UV_EAGAIN) {
			return r;
		}
	}
	return 0;
}

static int uvp_recv(struct peer *p, void *b, size_t n)
{
	int ret;

	p->uv_dst = b;
	p->uv_want = n;
	p->uv_have = 0;
	ret = uv_read_start((uv_stream_t *)&p->uv_conn, uv_alloc, uv_on_read);
	if (ret)
		return ret;
	while (p->uv_have < n && !p->uv_err)
		uv_run(&p->uv, UV_RUN_ONCE);
	p->uv_dst = NULL;
	return p->uv_err;
}

static void uvp_close(struct peer *p)
{
	uv_close((uv_handle_t *)&p->uv_conn, NULL);
	if (p->server)
		uv_close((uv_handle_t *)&p->uv_srv, NULL);
	uv_run(&p->uv, UV_RUN_DEFAULT);
	uv_loop_close(&p->uv);
}
#endif

/* ---- ZeroMQ PAIR ---- */
#ifdef PEERS_HAVE_ZMQ
static int zmqp_open(struct peer *p, void (*ready)(void))
{
	char ep[64];
	int one = 1;

	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", p->c->port);
	p->zctx = zmq_ctx_new();
	if (!p->zctx)
		return -errno;
	p->zsock = zmq_socket(p->zctx, ZMQ_PAIR);
	if (!p->zsock)
		return -errno;
	zmq_setsockopt(p->zsock, ZMQ_IMMEDIATE, &one, sizeof(one));
	if (p->server) {
		if (zmq_bind(p->zsock, ep))
			return -errno;
		ready();
	} else if (zmq_connect(p->zsock, ep)) {
		return -errno;
	}
	return 0;
}

static int zmqp_send(struct peer *p, const void *b, size_t n)
{
	return zmq_send(p->zsock, b, n, 0) == (int)n ? 0 : -errno;
}

static int zmqp_recv(struct peer *p, void *b, size_t n)
{
	return zmq_recv(p->zsock, b, n, 0) == (int)n ? 0 : -EPROTO;
}

static void zmqp_close(struct peer *p)
{
	int zero = 0;

	zmq_setsockopt(p->zsock, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_close(p->zsock);
	zmq_ctx_term(p->zctx);
}
#endif

/* ---- UCX ucp, tag API; client-server connection over a ucp listener ---- */
#ifdef PEERS_HAVE_UCX
static void ucx_on_conn(ucp_conn_request_h req, void *arg)
{
	struct peer *p = arg;

	p->conn_req = req;
}

static int ucx_open(struct peer *p, void (*ready)(void), bool armed)
{
	ucp_params_t params = {
		.field_mask = UCP_PARAM_FIELD_FEATURES,
		.features = UCP_FEATURE_TAG | (armed ? UCP_FEATURE_WAKEUP : 0),
	};
	ucp_worker_params_t wp = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SINGLE,
	};
	struct sockaddr_in a;
	ucp_ep_params_t ep = { 0 };
	ucs_status_t st;

	loopback(&a, p->c->port);
	p->armed = armed;
	st = ucp_init(&params, NULL, &p->ucp);
	if (st != UCS_OK)
		return -EIO;
	st = ucp_worker_create(p->ucp, &wp, &p->worker);
	if (st != UCS_OK)
		return -EIO;
	if (armed && ucp_worker_get_efd(p->worker, &p->efd) != UCS_OK)
		return -EIO;
	if (p->server) {
		ucp_listener_params_t lp = {
			.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
				      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
			.sockaddr = { .addr = (struct sockaddr *)&a, .addrlen = sizeof(a) },
			.conn_handler = { .cb = ucx_on_conn, .arg = p },
		};

		if (ucp_listener_create(p->worker, &lp, &p->listener) != UCS_OK)
			return -EIO;
		ready();
		while (!p->conn_req)
			ucp_worker_progress(p->worker);
		ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
		ep.conn_request = p->conn_req;
	} else {
		ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
		ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
		ep.sockaddr.addr = (struct sockaddr *)&a;
		ep.sockaddr.addrlen = sizeof(a);
	}
	if (ucp_ep_create(p->worker, &ep, &p->ep) != UCS_OK)
		return -EIO;
	return 0;
}

static int ucx_busy_open(struct peer *p, void (*ready)(void))
{
	return ucx_open(p, ready, false);
}

static int ucx_armed_open(struct peer *p, void (*ready)(void))
{
	return ucx_open(p, ready, true);
}

/* Drive the worker until @req completes: progress only, or sleep on the fd when armed. */
static int ucx_wait(struct peer *p, void *req)
{
	ucs_status_t st;

	if (UCS_PTR_IS_ERR(req))
		return -EIO;
	if (!req)
		return 0;
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
		if (ucp_worker_progress(p->worker) || !p->armed)
			continue;
		st = ucp_worker_arm(p->worker);
		if (st == UCS_OK) {
			struct pollfd pfd = { .fd = p->efd, .events = POLLIN };

			poll(&pfd, 1, -1);
		} else if (st != UCS_ERR_BUSY) {
			break;
		}
	}
	ucp_request_free(req);
	return st == UCS_OK ? 0 : -EIO;
}

static int ucx_send(struct peer *p, const void *b, size_t n)
{
	ucp_request_param_t rp = { 0 };

	return ucx_wait(p, ucp_tag_send_nbx(p->ep, b, n, 1, &rp));
}

static int ucx_recv(struct peer *p, void *b, size_t n)
{
	ucp_request_param_t rp = { 0 };

	return ucx_wait(p, ucp_tag_recv_nbx(p->worker, b, n, 1, ~0ull, &rp));
}

static void ucx_close(struct peer *p)
{
	ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				   .flags = UCP_EP_CLOSE_FLAG_FORCE };
	void *req = ucp_ep_close_nbx(p->ep, &rp);

	if (req && !UCS_PTR_IS_ERR(req)) {
		while (ucp_request_check_status(req) == UCS_INPROGRESS)
			ucp_worker_progress(p->worker);
		ucp_request_free(req);
	}
	if (p->listener)
		ucp_listener_destroy(p->listener);
	ucp_worker_destroy(p->worker);
	ucp_cleanup(p->ucp);
}
#endif

static const struct design designs[] = {
	{ "sock-spin", tcp_open, spin_send, spin_recv, tcp_close },
	{ "sock-block", tcp_open, block_send, block_recv, tcp_close },
	{ "sock-nap", nap_open, spin_send, nap_recv, nap_close },
	{ "sock-napwarm", napwarm_open, spin_send, nap_recv, nap_close },
#ifdef PEERS_HAVE_URING
	{ "uring-block", uring_block_open, uring_block_send, uring_block_recv, uring_close },
	{ "uring-spin", uring_spin_open, uring_spin_send, uring_spin_recv, uring_close },
#endif
#ifdef PEERS_HAVE_UV
	{ "libuv", uvp_open, uvp_send, uvp_recv, uvp_close },
#endif
#ifdef PEERS_HAVE_ZMQ
	{ "zmq", zmqp_open, zmqp_send, zmqp_recv, zmqp_close },
#endif
#ifdef PEERS_HAVE_UCX
	{ "ucx-busy", ucx_busy_open, ucx_send, ucx_recv, ucx_close },
	{ "ucx-armed", ucx_armed_open, ucx_send, ucx_recv, ucx_close },
#endif
};

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("peers: sched_setaffinity");
}

/* Echo every message back; report CPU seconds on @out_fd. Exit status 0 on success. */
static int run_server(const struct design *d, const struct cfg *c, int out_fd)
{
	struct peer p = { .c = c, .server = true, .fd = -1 };
	uint8_t *buf = calloc(1, c->size);
	unsigned int i, total = c->count + c->warmup;
	double cpu;
	int ret;

	pin(c->cpu[1]);
	if (!buf)
		return 1;
	ret = d->open(&p, say_ready);
	if (ret) {
		fprintf(stderr, "peers[%s server]: open: %s\n", d->name, strerror(-ret));
		return 1;
	}
	cpu = cpu_seconds();
	for (i = 0; i < total; i++) {
		ret = d->recv(&p, buf, c->size);
		if (!ret)
			ret = d->send(&p, buf, c->size);
		if (ret) {
			fprintf(stderr, "peers[%s server]: round trip %u: %d\n", d->name, i, ret);
			return 1;
		}
	}
	cpu = cpu_seconds() - cpu;
	/* the client's last recv already returned: closing now cannot cut it */
	if (write(out_fd, &cpu, sizeof(cpu)) != sizeof(cpu))
		return 1;
	d->close(&p);
	free(buf);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int run_client(const struct design *d, const struct cfg *c, double *cpu, uint64_t *rtt)
{
	struct peer p = { .c = c, .server = false, .fd = -1 };
	struct timespec gap = { .tv_sec = c->gap_us / 1000000,
				.tv_nsec = (long)(c->gap_us % 1000000) * 1000 };
	uint8_t *out = calloc(1, c->size), *in = calloc(1, c->size);
	unsigned int i, total = c->count + c->warmup;
	bool client_spin = env_u("PEERS_CLIENT_SPIN", 0);
	int ret;

	if (!out || !in)
		return -ENOMEM;
	ret = d->open(&p, NULL);
	if (ret)
		return ret;
	*cpu = cpu_seconds();
	for (i = 0; i < total; i++) {
		uint64_t t0;

		if (c->gap_us && client_spin) {
			uint64_t until = now_ns() + (uint64_t)c->gap_us * 1000;

			while (now_ns() < until)
				;
		} else if (c->gap_us) {
			nanosleep(&gap, NULL);
		}
		memcpy(out, &i, sizeof(i) < c->size ? sizeof(i) : c->size);
		t0 = now_ns();
		ret = d->send(&p, out, c->size);
		if (!ret)
			ret = d->recv(&p, in, c->size);
		if (ret)
			break;
		if (memcmp(in, out, c->size)) {
			ret = -EPROTO;
			break;
		}
		if (i >= c->warmup)
			rtt[i - c->warmup] = now_ns() - t0;
	}
	*cpu = cpu_seconds() - *cpu;
	if (!ret)
		d->close(&p);
	free(out);
	free(in);
	return ret;
}

static uint16_t free_port(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint16_t port = 0;

	loopback(&a, 0);
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int run(const struct design *d, struct cfg *c)
{
	int rp[2], cp[2], status, ret;
	double ccpu = 0, scpu = 0;
	uint64_t *rtt = calloc(c->count, sizeof(*rtt));
	char ch;
	pid_t pid;

	c->port = free_port();
	if (!rtt || !c->port || pipe2(rp, O_CLOEXEC) || pipe2(cp, O_CLOEXEC)) {
		fprintf(stderr, "peers: setup failed\n");
		return 1;
	}
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(rp[0]);
		close(cp[0]);
		ready_fd = rp[1];
		_exit(run_server(d, c, cp[1]));
	}
	close(rp[1]);
	close(cp[1]);
	pin(c->cpu[0]);
	if (read(rp[0], &ch, 1) != 1) {
		fprintf(stderr, "peers[%s]: the server never listened\n", d->name);
		waitpid(pid, NULL, 0);
		return 1;
	}
	ret = run_client(d, c, &ccpu, rtt);
	if (ret) {
		fprintf(stderr, "peers[%s client]: %s\n", d->name, strerror(-ret));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 1;
	}
	if (read(cp[0], &scpu, sizeof(scpu)) != sizeof(scpu))
		scpu = -1;
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "peers[%s]: the server failed\n", d->name);
		return 1;
	}
	qsort(rtt, c->count, sizeof(*rtt), cmp_u64);
	printf("%-11s %9.2f %9.2f %9.4f %9.4f %u\n", d->name, rtt[c->count / 2] / 1e3,
	       rtt[(size_t)((c->count - 1) * 0.99)] / 1e3, ccpu, scpu, c->count + c->warmup);
	free(rtt);
	close(rp[0]);
	close(cp[0]);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: peers DESIGN [--count N] [--warmup W] [--size B] [--gap-us G] "
		   "[--cpus A,B]\n       peers --list\n");
}

static bool num(const char *s, unsigned int max, unsigned int *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > max)
		return false;
	*out = (unsigned int)v;
	return true;
}

int main(int argc, char **argv)
{
	struct cfg c = { .count = 20000, .warmup = 1000, .size = 64, .cpu = { 0, 1 } };
	const struct design *d = NULL;
	size_t k;
	int i;

	if (argc == 2 && !strcmp(argv[1], "--list")) {
		for (k = 0; k < sizeof(designs) / sizeof(designs[0]); k++)
			printf("%s\n", designs[k].name);
		return 0;
	}
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	for (k = 0; k < sizeof(designs) / sizeof(designs[0]); k++)
		if (!strcmp(argv[1], designs[k].name))
			d = &designs[k];
	if (!d) {
		fprintf(stderr, "peers: '%s' is not a design of this build (peers --list)\n",
			argv[1]);
		return 2;
	}
	for (i = 2; i + 1 < argc; i += 2) {
		const char *o = argv[i], *v = argv[i + 1];
		bool ok;

		if (!strcmp(o, "--count"))
			ok = num(v, 10000000, &c.count) && c.count;
		else if (!strcmp(o, "--warmup"))
			ok = num(v, 10000000, &c.warmup);
		else if (!strcmp(o, "--size"))
			ok = num(v, MAX_SIZE, &c.size) && c.size >= 4;
		else if (!strcmp(o, "--gap-us"))
			ok = num(v, 10000000, &c.gap_us);
		else if (!strcmp(o, "--cpus"))
			ok = sscanf(v, "%d,%d", &c.cpu[0], &c.cpu[1]) == 2;
		else
			ok = false;
		if (!ok) {
			fprintf(stderr, "peers: bad option '%s %s'\n", o, v);
			usage(stderr);
			return 2;
		}
	}
	if (i != argc) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	return run(d, &c);
}
