/* SPDX-License-Identifier: MIT */
/*
 * mitm-relay: a man in the middle for tests/decode-mitm.sh. Listens on
 * 127.0.0.1 (an ephemeral port, printed as "port N"), takes one connection (a
 * follower's), connects it to the leader at 127.0.0.1:LEADER_PORT and relays
 * both ways frame by frame. With --tags, every frame after the first two each
 * way (HELLO/WELCOME and AUTH) is read with its 16-byte tag (WIRE.md, "Frame
 * tags"). After SIGUSR1 it flips bit 0 of the last token of the leader's next
 * ROUND and rewrites both CRCs, as an attacker on the wire would, and prints
 * "flipped ROUND seq S". Prints "rounds N" when either side closes, then
 * exits 0. Exit 1 on a socket error or a frame it cannot parse, 2 on usage.
 *
 *   mitm-relay [--tags] LEADER_PORT
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rk_wire.h"

#define TAG_LEN		16
#define HS_FRAMES	2	/* untagged handshake frames each way */

struct dir {
	int from, to;
	uint8_t *buf;
	size_t len, cap;
	unsigned long frames;
};

static volatile sig_atomic_t g_armed;
static bool g_tags;
static unsigned long g_rounds;

static void on_usr1(int sig)
{
	(void)sig;
	g_armed = 1;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
	ssize_t w;

	while (n) {
		w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read what is there and forward whole frames. Return: 0, 1 (closed), -1 (error). */
static int pass(struct dir *d, bool leader_side)
{
	struct rk_wire_hdr h;
	int64_t total;
	size_t off = 0, n;
	ssize_t got;
	uint8_t *f;

	if (d->len == d->cap) {
		d->cap = d->cap ? 2 * d->cap : 1 << 16;
		d->buf = realloc(d->buf, d->cap);
		if (!d->buf)
			return -1;
	}
	got = recv(d->from, d->buf + d->len, d->cap - d->len, 0);
	if (got == 0)
		return 1;
	if (got < 0)
		return errno == EINTR ? 0 : 1;
	d->len += (size_t)got;
	while (d->len - off >= RK_WIRE_HDR_LEN) {
		f = d->buf + off;
		total = rk_wire_decode_hdr(f, d->len - off, RK_WIRE_MAX_PAYLOAD, &h);
		if (total < 0) {
			fprintf(stderr, "mitm-relay: a frame it cannot parse: %s\n",
				rk_errname((int)total));
			return -1;
		}
		n = (size_t)total + (g_tags && d->frames >= HS_FRAMES ? TAG_LEN : 0);
		if (d->len - off < n)
			break;
		d->frames++;
		if (leader_side && h.type == RK_FRAME_ROUND) {
			g_rounds++;
			if (g_armed && h.len >= 4) {
				uint8_t *pl = f + RK_WIRE_HDR_LEN;

				pl[h.len - 4] ^= 0x01;
				put32(f + 24, rk_wire_crc32c(0, pl, h.len));
				put32(f + 28, rk_wire_crc32c(0, f, 28));
				g_armed = 0;
				printf("flipped ROUND seq %llu\n", (unsigned long long)h.seq);
				fflush(stdout);
			}
		}
		if (send_all(d->to, f, n))
			return 1;
		off += n;
	}
	memmove(d->buf, d->buf + off, d->len - off);
	d->len -= off;
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	struct dir up = { 0 }, down = { 0 };	/* follower -> leader, leader -> follower */
	struct pollfd pf[2];
	int ls, fc, lc, i = 1, r = 0;

	if (argc > 1 && !strcmp(argv[1], "--tags")) {
		g_tags = true;
		i++;
	}
	if (argc != i + 1 || atoi(argv[i]) <= 0 || atoi(argv[i]) > 65535) {
		fprintf(stderr, "usage: mitm-relay [--tags] LEADER_PORT\n");
		return 2;
	}
	signal(SIGUSR1, on_usr1);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&a, &al)) {
		perror("mitm-relay: listen");
		return 1;
	}
	printf("port %d\n", ntohs(a.sin_port));
	fflush(stdout);
	do
		fc = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	while (fc < 0 && errno == EINTR);
	a.sin_port = htons((uint16_t)atoi(argv[i]));
	lc = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fc < 0 || lc < 0 || connect(lc, (struct sockaddr *)&a, sizeof(a))) {
		perror("mitm-relay: connect");
		return 1;
	}
	up = (struct dir){ .from = fc, .to = lc };
	down = (struct dir){ .from = lc, .to = fc };
	while (!r) {
		pf[0] = (struct pollfd){ .fd = fc, .events = POLLIN };
		pf[1] = (struct pollfd){ .fd = lc, .events = POLLIN };
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (pf[0].revents)
			r = pass(&up, false);
		if (!r && pf[1].revents)
			r = pass(&down, true);
	}
	printf("rounds %lu\n", g_rounds);
	close(fc);
	close(lc);
	close(ls);
	free(up.buf);
	free(down.buf);
	return r < 0;
}
