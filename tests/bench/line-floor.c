/* SPDX-License-Identifier: MIT */
/*
 * line-floor: the floor of a same-host round trip between two CPUs. Two
 * threads, pinned to CPUs A and B, pass a counter back and forth on two
 * cache lines (one each way, each written by one side only), so a round trip
 * is two line transfers and nothing else. Prints the p50 and p99 round trip
 * in ns over N round trips. A shared-memory link's round trip between the
 * same two CPUs cannot go under it (docs/BENCH.md compares the two in one run).
 *
 *   line-floor [CPU_A CPU_B [N]]        (defaults 0 1 50000)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Alignas(128) _Atomic uint64_t ping;
static _Alignas(128) _Atomic uint64_t pong;
static uint64_t rounds = 50000;
static int cpu_b = 1;

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *peer(void *arg)
{
	uint64_t i;

	(void)arg;
	if (pin(cpu_b))
		fprintf(stderr, "line-floor: cannot pin to CPU %d\n", cpu_b);
	for (i = 1; i <= rounds; i++) {
		while (atomic_load_explicit(&ping, memory_order_acquire) != i)
			relax();
		atomic_store_explicit(&pong, i, memory_order_release);
	}
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int cpu_a = 0, ret;
	uint64_t i, t0, *rtt;
	pthread_t t;

	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: line-floor [CPU_A CPU_B [N]]\n");
		return 0;
	}
	if (argc > 2) {
		cpu_a = atoi(argv[1]);
		cpu_b = atoi(argv[2]);
	}
	if (argc > 3)
		rounds = strtoull(argv[3], NULL, 10);
	if (!rounds)
		return 2;
	rtt = malloc(sizeof(*rtt) * rounds);
	if (!rtt)
		return 1;
	ret = pthread_create(&t, NULL, peer, NULL);
	if (ret) {
		fprintf(stderr, "line-floor: pthread_create: %s\n", strerror(ret));
		return 1;
	}
	if (pin(cpu_a))
		fprintf(stderr, "line-floor: cannot pin to CPU %d\n", cpu_a);
	for (i = 1; i <= rounds; i++) {
		t0 = now_ns();
		atomic_store_explicit(&ping, i, memory_order_release);
		while (atomic_load_explicit(&pong, memory_order_acquire) != i)
			relax();
		rtt[i - 1] = now_ns() - t0;
	}
	pthread_join(t, NULL);
	qsort(rtt, rounds, sizeof(*rtt), cmp);
	printf("line-floor: cpus %d,%d p50 %llu ns p99 %llu ns (%llu round trips)\n", cpu_a, cpu_b,
	       (unsigned long long)rtt[rounds / 2], (unsigned long long)rtt[rounds * 99 / 100],
	       (unsigned long long)rounds);
	free(rtt);
	return 0;
}
