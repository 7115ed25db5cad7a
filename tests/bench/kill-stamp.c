/* SPDX-License-Identifier: MIT */
/*
 * kill-stamp PID: print CLOCK_MONOTONIC in ns, then send PID SIGKILL at once,
 * so a script can time what follows a death on the clock rk-serve's
 * --trace-rounds uses (tests/bench/bench-kill.sh). Exit 0, 1 if the kill
 * failed, 2 on usage.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	struct timespec ts;
	char *end;
	long pid;

	if (argc != 2 || (pid = strtol(argv[1], &end, 10)) <= 0 || *end) {
		fprintf(stderr, "usage: kill-stamp PID\n");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (kill((pid_t)pid, SIGKILL)) {
		perror("kill-stamp: kill");
		return 1;
	}
	printf("%llu\n", (unsigned long long)ts.tv_sec * 1000000000ull +
				 (unsigned long long)ts.tv_nsec);
	return 0;
}
