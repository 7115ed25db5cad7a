/* SPDX-License-Identifier: MIT */
/*
 * http-burst: N HTTP clients at once against one server, each a raw TCP
 * connection (one epoll thread, so a burst is a burst: every connect() is
 * issued before any answer is read): each sends one POST with
 * "Connection: close" and reads until the server closes. Prints the answers
 * by status, and the clients that got no answer at all (none: refused, reset
 * or closed before a status line, or nothing by the deadline). An error
 * answer (>= 400) must be OpenAI's shape (application/json,
 * {"error":{"message"...) and a 429 or 503 must carry Retry-After; a 200
 * stream must end with "data: [DONE]". Exit 0 when every client got an
 * answer and every answer is whole, 1 otherwise, 2 on a usage error.
 *
 *   http-burst HOST PORT N BODY [PATH]    (PATH: /v1/completions)
 *   http-burst --raw HOST PORT < request  (stdin as-is; prints the answer)
 *
 * Used by tests/serve-full.sh and tests/bench/http-burst.sh.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define KEEP	    (64u * 1024u) /* bytes of each answer kept: its head, or its tail */
#define DEADLINE_MS 120000

enum none_why { WHY_CONNECT, WHY_RESET, WHY_EOF, WHY_TIMEOUT, WHY__COUNT };
static const char *const why_names[WHY__COUNT] = { "connect", "reset", "eof", "timeout" };

#define HEAD 4096u /* bytes of each answer's start kept: status, headers, the body's start */

struct client {
	int fd;
	size_t sent;
	char head[HEAD];
	size_t head_len;
	char *in; /* the last KEEP bytes */
	size_t len;
	bool done;
	int err; /* errno of a failed connect, send or recv */
};

static const char *g_req;
static size_t g_req_len;

static int dial(const struct addrinfo *ai)
{
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Send what is left of the request, then read what the server has. */
static void client_io(struct client *c, uint32_t ev)
{
	char buf[16384];
	ssize_t n;

	while (c->sent < g_req_len) {
		n = send(c->fd, g_req + c->sent, g_req_len - c->sent, MSG_NOSIGNAL);
		if (n < 0 && errno == EAGAIN)
			break;
		if (n < 0) {
			/* the server may have answered and closed before reading it all */
			c->sent = g_req_len;
			break;
		}
		c->sent += (size_t)n;
	}
	if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		return;
	for (;;) {
		n = recv(c->fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			c->err = n < 0 ? errno : 0;
			c->done = true;
			return;
		}
		if (c->head_len < HEAD - 1) {
			size_t h = HEAD - 1 - c->head_len < (size_t)n ? HEAD - 1 - c->head_len
								       : (size_t)n;

			memcpy(c->head + c->head_len, buf, h);
			c->head_len += h;
		}
		if (c->len + (size_t)n > KEEP) { /* keep the tail: [DONE] is there */
			size_t drop = c->len + (size_t)n - KEEP; /* <= c->len: sizeof(buf) < KEEP */

			memmove(c->in, c->in + drop, c->len - drop);
			c->len -= drop;
		}
		memcpy(c->in + c->len, buf, (size_t)n);
		c->len += (size_t)n;
	}
}

/* The value of header @name in the head @h (up to the blank line), or NULL. */
static const char *header(const char *h, const char *name)
{
	size_t n = strlen(name);
	const char *p = strstr(h, "\r\n");

	while (p && p[2] != '\r') {
		p += 2;
		if (!strncasecmp(p, name, n) && p[n] == ':')
			return p + n + 1;
		p = strstr(p, "\r\n");
	}
	return NULL;
}

struct tally {
	unsigned int by_status[5]; /* 200, 429, 503, other, none */
	unsigned int why[WHY__COUNT];
	unsigned int cut, no_retry, not_openai;
};

static void classify(struct client *c, bool timed_out, struct tally *t)
{
	const char *ct, *body;
	int status;

	c->head[c->head_len] = '\0';
	if (c->len)
		c->in[c->len < KEEP ? c->len : KEEP - 1] = '\0';
	if (!c->head_len || sscanf(c->head, "HTTP/1.%*d %d", &status) != 1) {
		t->by_status[4]++;
		t->why[timed_out ? WHY_TIMEOUT : c->err == ECONNREFUSED || c->err == ETIMEDOUT ?
			WHY_CONNECT : c->err ? WHY_RESET : WHY_EOF]++;
		return;
	}
	body = strstr(c->head, "\r\n\r\n");
	t->by_status[status == 200 ? 0 : status == 429 ? 1 : status == 503 ? 2 : 3]++;
	if (status == 200) {
		if (timed_out || (strstr(c->head, "text/event-stream") &&
				  !strstr(c->in, "data: [DONE]")))
			t->cut++;
		return;
	}
	ct = header(c->head, "Content-Type");
	if (!ct || !strstr(ct, "application/json") || !body || strncmp(body + 4, "{\"error\":{", 10))
		t->not_openai++;
	if ((status == 429 || status == 503) && !header(c->head, "Retry-After"))
		t->no_retry++;
}

static int resolve(const char *host, const char *port, struct addrinfo **ai)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	int ret = getaddrinfo(host, port, &hints, ai);

	if (ret)
		fprintf(stderr, "http-burst: %s:%s: %s\n", host, port, gai_strerror(ret));
	return ret ? -1 : 0;
}

/* --raw: stdin to the server as-is, the answer to stdout. */
static int raw(const char *host, const char *port)
{
	static char req[4 << 20];
	struct client c = { 0 };
	struct epoll_event ev;
	struct addrinfo *ai;
	long long end = now_ms() + 10000;
	int ep;

	g_req_len = fread(req, 1, sizeof(req), stdin);
	g_req = req;
	if (resolve(host, port, &ai))
		return 2;
	c.in = malloc(KEEP);
	c.fd = dial(ai);
	freeaddrinfo(ai);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (!c.in || c.fd < 0 || ep < 0)
		return 1;
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.ptr = &c };
	epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
	while (!c.done && now_ms() < end)
		if (epoll_wait(ep, &ev, 1, 100) == 1)
			client_io(&c, ev.events);
	fwrite(c.head, 1, c.head_len, stdout); /* an error's answer is short */
	free(c.in);
	close(ep);
	return c.head_len ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct epoll_event ev, evs[256];
	struct addrinfo *ai;
	struct client *cl;
	struct tally t = { 0 };
	unsigned int n, i, left;
	long long end;
	char *req;
	int ep, k, got;

	if (argc == 4 && !strcmp(argv[1], "--raw"))
		return raw(argv[2], argv[3]);
	if (argc < 5 || argc > 6 || !(n = (unsigned int)strtoul(argv[3], NULL, 10))) {
		fprintf(stderr, "usage: http-burst HOST PORT N BODY [PATH] | "
			"http-burst --raw HOST PORT < request\n");
		return 2;
	}
	if (asprintf(&req, "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
		     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		     argc == 6 ? argv[5] : "/v1/completions", argv[1], argv[2], strlen(argv[4]),
		     argv[4]) < 0)
		return 1;
	g_req = req;
	g_req_len = strlen(req);
	if (resolve(argv[1], argv[2], &ai))
		return 2;
	cl = calloc(n, sizeof(*cl));
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (!cl || ep < 0)
		return 1;
	for (i = 0; i < n; i++) { /* every connect first: the burst */
		cl[i].fd = dial(ai);
		cl[i].in = malloc(KEEP);
		if (!cl[i].in)
			return 1;
		if (cl[i].fd < 0) {
			cl[i].err = -cl[i].fd;
			cl[i].done = true;
			continue;
		}
		ev = (struct epoll_event){ .events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP,
					   .data.ptr = &cl[i] };
		epoll_ctl(ep, EPOLL_CTL_ADD, cl[i].fd, &ev);
	}
	freeaddrinfo(ai);
	end = now_ms() + DEADLINE_MS;
	for (left = n, i = 0; i < n; i++)
		left -= cl[i].done;
	while (left && now_ms() < end) {
		got = epoll_wait(ep, evs, 256, 100);
		for (k = 0; k < got; k++) {
			struct client *c = evs[k].data.ptr;

			if (c->done)
				continue;
			client_io(c, evs[k].events);
			if (c->done) {
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				close(c->fd);
				left--;
			}
		}
	}
	for (i = 0; i < n; i++)
		classify(&cl[i], !cl[i].done, &t);
	printf("clients %u\n200 %u\n429 %u\n503 %u\nother %u\nnone %u", n, t.by_status[0],
	       t.by_status[1], t.by_status[2], t.by_status[3], t.by_status[4]);
	for (k = 0; k < WHY__COUNT; k++)
		if (t.why[k])
			printf(" %s:%u", why_names[k], t.why[k]);
	printf("\ncut %u\nno-retry-after %u\nnot-openai %u\n", t.cut, t.no_retry, t.not_openai);
	for (i = 0; i < n; i++) {
		if (!cl[i].done && cl[i].fd >= 0)
			close(cl[i].fd);
		free(cl[i].in);
	}
	free(cl);
	free(req);
	close(ep);
	return t.by_status[4] || t.by_status[3] || t.cut || t.no_retry || t.not_openai ? 1 : 0;
}
