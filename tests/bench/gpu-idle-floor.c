/* SPDX-License-Identifier: MIT */
/*
 * The idle floor of a process that holds a CUDA context (and NCCL
 * communicators), without rankrt: what each of its threads spends on a CPU
 * while the process sleeps. A rank's idle CPU can go no lower than this.
 *
 *   tests/bench/gpu-idle-floor SECONDS MODE
 *
 * MODE: bare (a context only), hostfn (plus a non-blocking stream, mapped host
 * memory and one host function, as the notifier has), nccl1 (plus a
 * one-rank communicator), nccl2 (two ranks in this process, on devices 0 and 1).
 * Prints one line per thread (CPU seconds from schedstat, voluntary context
 * switches: its wake-ups) and the total, also scaled to 60 s. Exit 77 without
 * a GPU (two for nccl2), 2 on bad arguments.
 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#ifdef RK_HAVE_NCCL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"	/* nccl.h's (void)-less declarations */
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

#define MAX_THREADS 128

struct thread_cpu {
	int tid;
	char comm[32];
	unsigned long long ns;
	long wakes;
};

static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	if (f && fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = '\0';
	if (f)
		fclose(f);
}

static int snapshot(struct thread_cpu *t)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	char path[300], line[256];
	FILE *f;
	int n = 0;

	while (d && (e = readdir(d)) && n < MAX_THREADS) {
		if (e->d_name[0] == '.')
			continue;
		t[n].tid = atoi(e->d_name);
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		read_line(path, t[n].comm, sizeof(t[n].comm));
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
		read_line(path, line, sizeof(line));
		t[n].ns = strtoull(line, NULL, 10);
		t[n].wakes = 0;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f))
			sscanf(line, "voluntary_ctxt_switches: %ld", &t[n].wakes);
		if (f)
			fclose(f);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

static void CUDART_CB host_fn(void *arg)
{
	(void)arg;
}

int main(int argc, char **argv)
{
	static struct thread_cpu a[MAX_THREADS], b[MAX_THREADS];
	int secs = argc > 1 ? atoi(argv[1]) : 0, ndev = 0, na, nb, i, j;
	const char *mode = argc > 2 ? argv[2] : "";
	double total = 0;

	if (secs <= 0 || (strcmp(mode, "bare") && strcmp(mode, "hostfn") && strcmp(mode, "nccl1") &&
			  strcmp(mode, "nccl2"))) {
		fprintf(stderr, "usage: %s SECONDS bare|hostfn|nccl1|nccl2\n", argv[0]);
		return 2;
	}
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 ||
	    (!strcmp(mode, "nccl2") && ndev < 2)) {
		printf("gpu-idle-floor: skipped (%d GPU)\n", ndev);
		return 77;
	}
	if (cudaSetDevice(0) != cudaSuccess || cudaFree(NULL) != cudaSuccess)
		return 1;
	if (strcmp(mode, "bare")) {
		cudaStream_t s;
		void *h;

		if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
		    cudaHostAlloc(&h, 4096, cudaHostAllocMapped) != cudaSuccess ||
		    cudaLaunchHostFunc(s, host_fn, NULL) != cudaSuccess ||
		    cudaStreamSynchronize(s) != cudaSuccess)
			return 1;
	}
	if (!strncmp(mode, "nccl", 4)) {
#ifdef RK_HAVE_NCCL
		ncclComm_t comms[2];
		int devs[2] = { 0, 1 };

		if (ncclCommInitAll(comms, mode[4] - '0', devs) != ncclSuccess)
			return 1;
#else
		printf("gpu-idle-floor: skipped (built without NCCL)\n");
		return 77;
#endif
	}
	sleep(2);	/* let start-up work settle */
	na = snapshot(a);
	sleep((unsigned int)secs);
	nb = snapshot(b);
	for (j = 0; j < nb; j++) {
		unsigned long long ns0 = 0;
		long w0 = 0;

		for (i = 0; i < na; i++) {
			if (a[i].tid == b[j].tid) {
				ns0 = a[i].ns;
				w0 = a[i].wakes;
			}
		}
		total += (double)(b[j].ns - ns0) / 1e9;
		printf("idle-floor %s %d s: %-18s tid %7d cpu_s %.4f wakes %ld\n", mode, secs,
		       b[j].comm, b[j].tid, (double)(b[j].ns - ns0) / 1e9, b[j].wakes - w0);
	}
	printf("idle-floor %s %d s: TOTAL cpu_s %.4f (per 60 s %.4f)\n", mode, secs, total,
	       total * 60 / secs);
	return 0;
}
