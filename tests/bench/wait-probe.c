/* SPDX-License-Identifier: MIT */
/*
 * An LD_PRELOAD module that counts, per thread name, the waits a process
 * makes through libc (poll, ppoll, epoll_wait, select, nanosleep,
 * clock_nanosleep) with their timeouts, and how poll and ppoll ended (a
 * timeout, or a descriptor ready). At exit it prints one line per thread and
 * call to stderr:
 *
 *   WAITS <thread> <call> n=<calls> [<timeout bucket>:<count> ...]
 *
 * What it is for: seeing why an idle process wakes, e.g. the CUDA driver's
 * event thread (docs/GPU.md, "The idle floor of a CUDA process"):
 *
 *   LD_PRELOAD=tests/bench/.libs/wait-probe.so tests/bench/gpu-idle-floor 10 bare
 *
 * A diagnostic, not a test: built with the checks (a libtool module), never
 * run by make check. Why not strace or perf trace: neither is on the GPU
 * machine, and both would add their own wake-ups to the figure.
 * Waits made by raw syscalls (io_uring_enter, futex) are not seen.
 */
#include "config.h"

#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <time.h>

#define MAX_NAMES	64
#define NO_TIMEOUT	(-1ll)

enum call { C_POLL, C_PPOLL, C_EPOLL, C_SELECT, C_NANOSLEEP, C_CLOCK_NANOSLEEP,
	    C_POLL_TIMEOUT, C_POLL_READY, C__COUNT };

static const char *const call_name[C__COUNT] = {
	"poll", "ppoll", "epoll_wait", "select", "nanosleep", "clock_nanosleep",
	"poll->timeout", "poll->ready",
};

/* timeout buckets, in us: 0, <1 ms, <5, <20, <50, <200, >= 200 ms, none */
enum { N_BUCKETS = 8 };
static const char *const bucket_name[N_BUCKETS] = {
	"0", "<1ms", "1-5ms", "5-20ms", "20-50ms", "50-200ms", ">=200ms", "none",
};

struct per_name {
	char name[16];
	long n[C__COUNT][N_BUCKETS];
};

static struct per_name names[MAX_NAMES];
static int n_names;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int bucket(long long us)
{
	static const long long upper_ms[] = { 1, 5, 20, 50, 200 };
	int i;

	if (us < 0)
		return N_BUCKETS - 1;
	if (us == 0)
		return 0;
	for (i = 0; i < 5; i++)
		if (us < upper_ms[i] * 1000)
			return i + 1;
	return 6;
}

static void count(enum call c, long long timeout_us)
{
	char name[16] = { 0 };
	int i;

	prctl(PR_GET_NAME, name, 0, 0, 0);
	pthread_mutex_lock(&mu);
	for (i = 0; i < n_names && strcmp(names[i].name, name); i++)
		;
	if (i == n_names && n_names < MAX_NAMES)
		memcpy(names[n_names++].name, name, sizeof(name));
	if (i < MAX_NAMES)
		names[i].n[c][bucket(timeout_us)]++;
	pthread_mutex_unlock(&mu);
}

static long long ts_us(const struct timespec *t)
{
	return t ? (long long)t->tv_sec * 1000000 + t->tv_nsec / 1000 : NO_TIMEOUT;
}

/* The next definition of @name (libc's), looked up once. */
#define REAL(fn)                                                   \
	static __typeof__(fn) *real_##fn;                          \
	if (!real_##fn)                                            \
		real_##fn = (__typeof__(fn) *)dlsym(RTLD_NEXT, #fn)

int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	long long us = timeout < 0 ? NO_TIMEOUT : (long long)timeout * 1000;
	int r;

	REAL(poll);
	count(C_POLL, us);
	r = real_poll(fds, nfds, timeout);
	if (r >= 0)
		count(r ? C_POLL_READY : C_POLL_TIMEOUT, us);
	return r;
}

int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *t, const sigset_t *mask)
{
	long long us = ts_us(t);
	int r;

	REAL(ppoll);
	count(C_PPOLL, us);
	r = real_ppoll(fds, nfds, t, mask);
	if (r >= 0)
		count(r ? C_POLL_READY : C_POLL_TIMEOUT, us);
	return r;
}

int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	REAL(epoll_wait);
	count(C_EPOLL, timeout < 0 ? NO_TIMEOUT : (long long)timeout * 1000);
	return real_epoll_wait(epfd, ev, max, timeout);
}

int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
	REAL(select);
	count(C_SELECT, t ? (long long)t->tv_sec * 1000000 + t->tv_usec : NO_TIMEOUT);
	return real_select(nfds, r, w, e, t);
}

int nanosleep(const struct timespec *t, struct timespec *rem)
{
	REAL(nanosleep);
	count(C_NANOSLEEP, ts_us(t));
	return real_nanosleep(t, rem);
}

int clock_nanosleep(clockid_t clk, int flags, const struct timespec *t, struct timespec *rem)
{
	struct timespec now;
	long long us = ts_us(t);

	REAL(clock_nanosleep);
	if (flags & TIMER_ABSTIME) {
		clock_gettime(clk, &now);
		us -= ts_us(&now);
		if (us < 0)
			us = 0;
	}
	count(C_CLOCK_NANOSLEEP, us);
	return real_clock_nanosleep(clk, flags, t, rem);
}

__attribute__((destructor)) static void report(void)
{
	int i, c, b;

	pthread_mutex_lock(&mu);
	for (i = 0; i < n_names; i++) {
		for (c = 0; c < C__COUNT; c++) {
			long total = 0;

			for (b = 0; b < N_BUCKETS; b++)
				total += names[i].n[c][b];
			if (!total)
				continue;
			fprintf(stderr, "WAITS %-16s %-16s n=%ld", names[i].name, call_name[c],
				total);
			for (b = 0; b < N_BUCKETS; b++) {
				long v = names[i].n[c][b];

				if (v)
					fprintf(stderr, " %s:%ld", bucket_name[b], v);
			}
			fprintf(stderr, "\n");
		}
	}
	pthread_mutex_unlock(&mu);
}
