/* SPDX-License-Identifier: MIT */
/*
 * hello-flood: strangers who know a job's session id (which is not a secret)
 * but not its key. Each of THREADS threads loops until SECONDS have passed:
 * connect to the leader, send a valid HELLO (the session, RANK of a world of
 * SIZE, claiming the secret), never send the proof, hold the socket until the
 * leader closes it, connect again. At the end it prints the connections made
 * and how long the leader held them (hello-flood.sh).
 *
 *   hello-flood HOST PORT SECONDS [THREADS [SESSION [RANK [SIZE]]]]
 *
 * THREADS 0: no flood, SECONDS of waiting (the joins' baseline).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rankrt.h"

static struct sockaddr_in g_addr;
static uint64_t g_session, g_deadline;
static uint32_t g_rank, g_size;
static atomic_ullong g_conns, g_refused, g_failed, g_held_ns, g_closed;
static atomic_int g_errno;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One valid HELLO frame into @f (RK_WIRE_HDR_LEN + RK_WIRE_HELLO_LEN bytes). */
static int hello_frame(uint8_t *f, unsigned int *seed)
{
	struct rk_wire_hello h = {
		.proto_version = RK_WIRE_VERSION,
		.world_size = g_size,
		.rank = g_rank,
		.auth = RK_WIRE_AUTH_HMAC,
		.session_id = g_session,
	};
	size_t i;

	for (i = 0; i < sizeof(h.nonce); i++)
		h.nonce[i] = (uint8_t)rand_r(seed);
	if (rk_wire_encode_hello(f + RK_WIRE_HDR_LEN, RK_WIRE_HELLO_LEN, &h) < 0 ||
	    rk_wire_encode_hdr(f, RK_FRAME_HELLO, 0, g_rank, 0, f + RK_WIRE_HDR_LEN,
			       RK_WIRE_HELLO_LEN) < 0)
		return -1;
	return RK_WIRE_HDR_LEN + RK_WIRE_HELLO_LEN;
}

static void *flood(void *arg)
{
	/* no leader listens (between jobs): try again soon, but not so often that
	 * 200 threads' refused connects take the CPUs the next leader starts on */
	const struct timespec pause = { .tv_nsec = 10000000 };
	const struct timeval rcv = { .tv_usec = 100000 };
	unsigned int seed = (unsigned int)(uintptr_t)arg * 2654435761u;
	uint8_t f[RK_WIRE_HDR_LEN + RK_WIRE_HELLO_LEN], buf[512];
	uint64_t t0;
	ssize_t r;
	int fd, n;

	while (now_ns() < g_deadline) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			nanosleep(&pause, NULL);
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof(rcv));
		if (connect(fd, (struct sockaddr *)&g_addr, sizeof(g_addr)) < 0) {
			if (errno == ECONNREFUSED) {
				g_refused++;
			} else {
				g_failed++;
				g_errno = errno;
			}
			close(fd);
			nanosleep(&pause, NULL);
			continue;
		}
		n = hello_frame(f, &seed);
		if (n < 0 || send(fd, f, (size_t)n, MSG_NOSIGNAL) != n) {
			g_failed++;
			g_errno = errno;
			close(fd);
			continue;
		}
		g_conns++;
		t0 = now_ns();
		for (;;) {
			r = recv(fd, buf, sizeof(buf), 0);	/* the leader's WELCOME and AUTH */
			if (r > 0 || (r < 0 && (errno == EINTR || errno == EAGAIN))) {
				if (now_ns() >= g_deadline)
					break;
				continue;
			}
			g_closed++;
			break;
		}
		g_held_ns += now_ns() - t0;
		close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned int threads = 200, i;
	pthread_t *th;
	double secs;

	if (argc < 4) {
		fprintf(stderr, "usage: hello-flood HOST PORT SECONDS [THREADS [SESSION [RANK "
			"[SIZE]]]]\n");
		return 2;
	}
	g_addr.sin_family = AF_INET;
	g_addr.sin_port = htons((uint16_t)atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &g_addr.sin_addr) != 1) {
		fprintf(stderr, "hello-flood: %s is not an IPv4 address\n", argv[1]);
		return 2;
	}
	secs = atof(argv[3]);
	if (argc > 4)
		threads = (unsigned int)strtoul(argv[4], NULL, 0);
	g_session = argc > 5 ? strtoull(argv[5], NULL, 0) : 0;
	g_rank = argc > 6 ? (uint32_t)strtoul(argv[6], NULL, 0) : 1;
	g_size = argc > 7 ? (uint32_t)strtoul(argv[7], NULL, 0) : 2;
	th = calloc(threads ? threads : 1, sizeof(*th));
	if (!th)
		return 2;
	g_deadline = now_ns() + (uint64_t)(secs * 1e9);
	if (!threads)		/* no flood: the joins' baseline */
		while (now_ns() < g_deadline)
			usleep(100000);
	for (i = 0; i < threads; i++)
		if (pthread_create(&th[i], NULL, flood, (void *)(uintptr_t)(i + 1))) {
			fprintf(stderr, "hello-flood: only %u threads\n", i);
			threads = i;
			break;
		}
	for (i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	printf("hello-flood: %u threads, %.1f s: %llu HELLOs, %llu closed by the leader, "
	       "held %.1f ms on average, %llu connects refused, %llu failed%s%s\n", threads, secs,
	       (unsigned long long)g_conns, (unsigned long long)g_closed,
	       g_conns ? (double)g_held_ns / (double)g_conns / 1e6 : 0.0,
	       (unsigned long long)g_refused, (unsigned long long)g_failed,
	       g_failed ? ": " : "", g_failed ? strerror(g_errno) : "");
	free(th);
	return 0;
}
