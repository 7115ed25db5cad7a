/* SPDX-License-Identifier: MIT */
/*
 * hold-conns: idle HTTP clients for tests/serve-idle.sh. Opens N TCP
 * connections to HOST:PORT and sends nothing on them.
 *
 *   hold-conns HOST PORT N [until-closed]
 *
 * Prints "open N" once every connect() has returned (the kernel's backlog may
 * hold some that the server has not accepted yet), then holds them: until
 * killed, or with until-closed until the server has closed every one, when it
 * prints "closed N" and exits 0. Exit 1 when a connect or poll fails, 2 on
 * usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int dial(const struct addrinfo *ai)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	struct pollfd *pfd;
	bool until_closed;
	char buf[256];
	long n;
	int i, closed = 0, ret;

	if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "until-closed"))) {
		fprintf(stderr, "usage: hold-conns HOST PORT N [until-closed]\n");
		return 2;
	}
	n = strtol(argv[3], NULL, 10);
	if (n < 1 || n > 4096) {
		fprintf(stderr, "hold-conns: N: 1..4096\n");
		return 2;
	}
	until_closed = argc == 5;
	ret = getaddrinfo(argv[1], argv[2], &hints, &ai);
	if (ret) {
		fprintf(stderr, "hold-conns: %s:%s: %s\n", argv[1], argv[2], gai_strerror(ret));
		return 1;
	}
	pfd = calloc((size_t)n, sizeof(*pfd));
	if (!pfd)
		return 1;
	for (i = 0; i < n; i++) {
		pfd[i].fd = dial(ai);
		if (pfd[i].fd < 0) {
			fprintf(stderr, "hold-conns: connect: %s\n", strerror(-pfd[i].fd));
			return 1;
		}
		pfd[i].events = POLLIN | POLLRDHUP;
	}
	freeaddrinfo(ai);
	printf("open %ld\n", n);
	fflush(stdout);
	while (closed < n) {
		if (poll(pfd, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "hold-conns: poll: %s\n", strerror(errno));
			return 1;
		}
		for (i = 0; i < n; i++) {
			if (pfd[i].fd < 0 || !pfd[i].revents)
				continue;
			if (read(pfd[i].fd, buf, sizeof(buf)) > 0)
				continue; /* the server said something (a 408?): keep reading */
			close(pfd[i].fd);
			pfd[i].fd = -1;
			closed++;
		}
	}
	while (!until_closed)
		pause(); /* every one closed by the server: wait to be killed all the same */
	printf("closed %d\n", closed);
	free(pfd);
	return 0;
}
