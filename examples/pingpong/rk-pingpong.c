/* SPDX-License-Identifier: MIT */
/*
 * rk-pingpong: two ranks exchange control frames over a rankrt world and
 * report round-trip latency, frame rate and CPU time per wait policy.
 *
 *   rk-pingpong --local                 both ranks on this host (forks rank 1)
 *   RK_RANK=0 RK_WORLD_SIZE=2 RK_LEADER=host:port rk-pingpong   (and rank 1)
 *   rk-pingpong --leader='roce://10.91.1.1:18000?dev=rxeA&gid=1'  (RDMA; rank 1 on
 *       another device also sets RK_RDMA_DEV=rxeB RK_RDMA_GID=1; needs --with-verbs)
 *
 * Rank 0 drives: for each wait mode it tells rank 1 the mode (a USER frame),
 * both switch, then it sends PING frames one at a time and times each answer.
 * Each mode runs --runs times, interleaved; the medians are printed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rankrt.h"
#include "cli.h"
#include "clock.h"

extern char **environ;

enum { TAG_MODE = 1, TAG_PING, TAG_PONG, TAG_CPU, TAG_IDLE, TAG_DONE };

#define MAX_MODES 3

struct mode_result {
	double p50_us[16], p99_us[16], fps[16], cpu0[16], cpu1[16];
	int runs;
};

struct pp {
	struct rk_loop *loop;
	struct rk_world *world;
	int rank;
	unsigned int count, size, warmup, runs;
	unsigned int gap_us;
	struct rk_timer gap_timer;
	double idle_s;
	int modes[MAX_MODES];
	int nmodes;
	struct rk_wait_policy base;

	/* leader state */
	int mode_idx, run_idx;
	unsigned int sent;
	uint64_t t_send, t_start;
	uint64_t *rtt;
	double cpu_start;
	struct mode_result res[MAX_MODES];
	double peer_cpu;
	bool got_peer_cpu;
	bool phase_done;
	/* follower state */
	double f_cpu_start;
	bool done;
	int err;
	uint8_t *buf; /* the ping's payload, --size bytes */
};

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int send_user(struct pp *p, int to, uint32_t tag, const void *data, uint32_t len)
{
	return rk_world_send_user(p->world, to, tag, data, len);
}

static void set_mode(struct pp *p, int mode)
{
	struct rk_wait_policy w = p->base;

	w.mode = (enum rk_wait_mode)mode;
	rk_loop_set_wait(p->loop, &w);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	double t[16];

	memcpy(t, v, sizeof(double) * (size_t)n);
	qsort(t, (size_t)n, sizeof(double), cmp_dbl);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}


static void leader_ping(struct pp *p)
{
	p->t_send = now_ns();
	if (send_user(p, 1, TAG_PING, p->buf, p->size) < 0)
		p->err = -EIO;
}

static enum rk_activity gap_done(struct rk_timer *t, uint64_t now)
{
	(void)now;
	leader_ping(t->data);
	return RK_BUSY;	/* the answer is due within microseconds: keep spinning */
}

static void leader_end_run(struct pp *p)
{
	struct mode_result *r = &p->res[p->mode_idx];
	unsigned int n = p->count;
	double secs = (double)(now_ns() - p->t_start) / 1e9;

	qsort(p->rtt, n, sizeof(uint64_t), cmp_u64);
	r->p50_us[r->runs] = (double)p->rtt[n / 2] / 1e3;
	r->p99_us[r->runs] = (double)p->rtt[(size_t)n * 99 / 100] / 1e3;
	r->fps[r->runs] = 2.0 * n / secs;	/* with --gap-us this includes the gaps */
	r->cpu0[r->runs] = cpu_seconds() - p->cpu_start;
	/* the follower's CPU time arrives in a TAG_CPU frame next */
	p->got_peer_cpu = false;
	send_user(p, 1, TAG_CPU, NULL, 0);
}

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct pp *p = arg;
	struct rk_wire_user u;
	double cpu;

	(void)w;
	if (h->type != RK_FRAME_USER || rk_wire_decode_user(payload, h->len, &u))
		return RK_IDLE;
	if (p->rank == 0) {
		switch (u.tag) {
		case TAG_PONG:
			if (p->sent >= p->warmup)
				p->rtt[p->sent - p->warmup] = now_ns() - p->t_send;
			p->sent++;
			if (p->sent == p->warmup)
				p->t_start = now_ns();
			if (p->sent < p->warmup + p->count && p->gap_us)
				rk_timer_start(p->loop, &p->gap_timer, (uint64_t)p->gap_us * 1000, 0);
			else if (p->sent < p->warmup + p->count)
				leader_ping(p);
			else
				leader_end_run(p);
			return RK_BUSY;
		case TAG_CPU:
			memcpy(&cpu, u.data, sizeof(cpu));
			p->res[p->mode_idx].cpu1[p->res[p->mode_idx].runs] = cpu;
			p->res[p->mode_idx].runs++;
			p->phase_done = true;
			rk_loop_stop(p->loop);
			return RK_BUSY;
		case TAG_IDLE:
			memcpy(&p->peer_cpu, u.data, sizeof(p->peer_cpu));
			p->got_peer_cpu = true;
			rk_loop_stop(p->loop);
			return RK_BUSY;
		}
		return RK_IDLE;
	}
	(void)peer;
	switch (u.tag) {
	case TAG_MODE: {
		int32_t m;

		memcpy(&m, u.data, sizeof(m));
		set_mode(p, m);
		p->f_cpu_start = cpu_seconds();
		send_user(p, 0, TAG_MODE, NULL, 0);
		return RK_BUSY;
	}
	case TAG_PING:
		if (p->f_cpu_start == 0)
			p->f_cpu_start = cpu_seconds();
		send_user(p, 0, TAG_PONG, u.data, u.len);
		return RK_BUSY;
	case TAG_CPU:
		cpu = cpu_seconds() - p->f_cpu_start;
		send_user(p, 0, TAG_CPU, &cpu, sizeof(cpu));
		return RK_BUSY;
	case TAG_IDLE:
		if (u.len == 0) {	/* start of the idle period */
			set_mode(p, RK_WAIT_ADAPTIVE);
			p->f_cpu_start = cpu_seconds();
		} else {		/* end of it: report */
			cpu = cpu_seconds() - p->f_cpu_start;
			send_user(p, 0, TAG_IDLE, &cpu, sizeof(cpu));
		}
		return RK_BUSY;
	case TAG_DONE:
		p->done = true;
		rk_loop_stop(p->loop);
		return RK_BUSY;
	}
	return RK_IDLE;
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct pp *p = arg;

	(void)w;
	if (p->rank != 0 && rank == 0 && p->done)
		return;
	fprintf(stderr, "rk-pingpong[r%d]: rank %d: %s\n", p->rank, rank, rk_strerror(err));
	p->err = err;
	rk_loop_stop(p->loop);
}

static const struct rk_world_ops pp_ops = {
	.frame = on_frame,
	.peer_error = on_peer_error,
};

/* Run the loop until a callback stops it; fail on a peer error or signal. */
static int run_until_stopped(struct pp *p)
{
	int ret = rk_loop_run(p->loop, RK_RUN_DEFAULT);

	if (ret < 0)
		return ret;
	return p->err;
}

static enum rk_activity idle_done(struct rk_timer *t, uint64_t now)
{
	(void)now;
	rk_loop_stop(((struct pp *)t->data)->loop);
	return RK_IDLE;
}

static int leader(struct pp *p)
{
	int m, run, ret;
	int32_t mode;

	p->rtt = calloc(p->count, sizeof(uint64_t));
	if (!p->rtt)
		return -ENOMEM;
	rk_timer_init(&p->gap_timer, gap_done, p);
	for (run = 0; run < (int)p->runs; run++) {
		for (m = 0; m < p->nmodes; m++) {
			p->mode_idx = m;
			mode = p->modes[m];
			set_mode(p, mode);
			send_user(p, 1, TAG_MODE, &mode, sizeof(mode));
			p->sent = 0;
			p->phase_done = false;
			p->cpu_start = cpu_seconds();	/* both ranks count from the mode switch */
			p->t_start = now_ns();
			/* the follower's TAG_MODE answer is ignored; the first ping follows it */
			leader_ping(p);
			while (!p->phase_done) {
				ret = run_until_stopped(p);
				if (ret < 0)
					return ret;
			}
		}
	}
	printf("rk-pingpong: 2 ranks over %s, %u-byte payloads, %u round trips per run, "
	       "%u us apart, median of %u runs\n",
	       rk_link_transport(rk_world_link(p->world, 1)), p->size, p->count, p->gap_us, p->runs);
	printf("%-9s %9s %9s %11s %9s %9s\n", "mode", "p50_us", "p99_us", "frames/s", "cpu_s_r0",
	       "cpu_s_r1");
	for (m = 0; m < p->nmodes; m++) {
		struct mode_result *r = &p->res[m];

		printf("%-9s %9.2f %9.2f %11.0f %9.3f %9.3f\n",
		       rk_wait_mode_name((enum rk_wait_mode)p->modes[m]), median(r->p50_us, r->runs),
		       median(r->p99_us, r->runs), median(r->fps, r->runs), median(r->cpu0, r->runs),
		       median(r->cpu1, r->runs));
	}
	fflush(stdout);
	if (p->idle_s > 0) {
		struct rk_timer t;
		double c0;

		set_mode(p, RK_WAIT_ADAPTIVE);
		send_user(p, 1, TAG_IDLE, NULL, 0);
		c0 = cpu_seconds();
		rk_timer_init(&t, idle_done, p);
		rk_timer_start(p->loop, &t, (uint64_t)(p->idle_s * 1e9), 0);
		ret = run_until_stopped(p);
		rk_timer_stop(&t);
		if (ret < 0)
			return ret;
		c0 = cpu_seconds() - c0;
		send_user(p, 1, TAG_IDLE, "end", 3);
		p->got_peer_cpu = false;
		while (!p->got_peer_cpu) {
			ret = run_until_stopped(p);
			if (ret < 0)
				return ret;
		}
		printf("idle %.0f s after the traffic (default policy): cpu_s r0=%.4f r1=%.4f\n",
		       p->idle_s, c0, p->peer_cpu);
	}
	send_user(p, 1, TAG_DONE, NULL, 0);
	rk_loop_run(p->loop, RK_RUN_NOWAIT);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rk-pingpong [options]\n"
		"Two ranks exchange control frames; rank 0 prints RTT p50/p99, frames/s and\n"
		"CPU seconds per rank for each wait policy.\n\n"
		"  --local            run both ranks on this host (rank 1 is spawned)\n"
		"  --wait=MODES       comma list of adaptive,spin,block, or all (default: all)\n"
		"  --count=N          timed round trips per run (default 20000)\n"
		"  --warmup=N         untimed round trips first (default 1000)\n"
		"  --runs=K           runs per mode, interleaved; medians reported (default 3)\n"
		"  --size=B           payload bytes per frame (default 64)\n"
		"  --gap-us=N         wait N us between round trips: measures the wake-up\n"
		"                     latency of a rank that has been idle that long (default 0)\n"
		"  --idle=S           after the traffic, stay idle S seconds on the default\n"
		"                     policy and report each rank's CPU seconds (default 0)\n"
		"  --pin              pin rank r to CPU r\n"
		"  --stats            at exit, each rank prints its loop's counters on stderr\n"
		"  --leader=ADDR      leader address (else RK_LEADER; --local picks a free port):\n"
		"                     tcp://host:port, or roce://host:port?dev=rxe0&gid=1 for\n"
		"                     RDMA links (host:port is the TCP side channel; a rank on\n"
		"                     another device sets RK_RDMA_DEV/RK_RDMA_GID; a build\n"
		"                     without verbs refuses roce:// with 'built without verbs')\n"
		"  -h, --help         this text\n"
		"      --version      print the version and exit\n\n"
		"Ranks, world size and every wait knob also come from RK_* variables\n"
		"(see README.md); a malformed one is refused by name.\n");
}

static int parse_modes(const char *s, struct pp *p)
{
	char buf[64], *q = buf, *tok;

	if (!strcmp(s, "all")) {
		p->modes[0] = RK_WAIT_ADAPTIVE;
		p->modes[1] = RK_WAIT_SPIN;
		p->modes[2] = RK_WAIT_BLOCK;
		p->nmodes = 3;
		return 0;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	p->nmodes = 0;
	while ((tok = cli_next(&q))) {
		int m;

		if (!strcmp(tok, "adaptive") || !strcmp(tok, "default"))
			m = RK_WAIT_ADAPTIVE;
		else if (!strcmp(tok, "spin"))
			m = RK_WAIT_SPIN;
		else if (!strcmp(tok, "block"))
			m = RK_WAIT_BLOCK;
		else
			return -1;
		if (p->nmodes == MAX_MODES)
			return -1;
		p->modes[p->nmodes++] = m;
	}
	return p->nmodes ? 0 : -1;
}

/* --stats: what the wait policy did on this rank (for tuning it; one line per rank) */
static void print_stats(const struct pp *p)
{
	struct rk_loop_stats st;

	rk_loop_stats(p->loop, &st, sizeof(st));
	fprintf(stderr,
		"rk-pingpong[r%d] stats: spin_ms %.1f blocked_ms %.1f blocks %llu predict_waits %llu "
		"early %llu late %llu cut %llu oversleep_us_avg %.1f margin_us %.1f learn_waits %llu "
		"learn_holds %llu window_cuts %llu spin_window_us %.0f prewarms %llu spin_predict_ms %.1f "
		"spin_window_ms %.1f learn_woken %llu overslept %llu overdue %llu restarts %llu\n",
		p->rank, (double)st.ns_spin / 1e6, (double)st.ns_blocked / 1e6,
		(unsigned long long)st.blocks, (unsigned long long)st.predict_waits,
		(unsigned long long)st.predict_early, (unsigned long long)st.predict_late,
		(unsigned long long)st.predict_cut,
		st.predict_waits ? (double)st.ns_oversleep / 1e3 / (double)st.predict_waits : 0.0,
		(double)st.predict_margin_ns / 1e3, (unsigned long long)st.learn_waits,
		(unsigned long long)st.learn_holds, (unsigned long long)st.window_cuts,
		(double)st.spin_window_ns / 1e3, (unsigned long long)st.prewarms,
		(double)st.ns_spin_predict / 1e6, (double)st.ns_spin_window / 1e6,
		(unsigned long long)st.learn_woken, (unsigned long long)st.predict_overslept,
		(unsigned long long)st.learn_overdue, (unsigned long long)st.learn_restarts);
}

static pid_t spawn_follower(const char *self, int argc, char **argv, const char *leader)
{
	char **args = calloc((size_t)argc + 2, sizeof(char *));
	pid_t pid;
	int i, j = 0, ret;

	if (!args)
		return -1;
	args[j++] = argv[0];	/* exec /proc/self/exe, but show the real name in ps */
	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], "--local") != 0)
			args[j++] = argv[i];
	args[j] = NULL;
	setenv("RK_RANK", "1", 1);
	setenv("RK_WORLD_SIZE", "2", 1);
	setenv("RK_LEADER", leader, 1);
	ret = posix_spawn(&pid, self, NULL, NULL, args, environ);
	setenv("RK_RANK", "0", 1);
	free(args);
	return ret ? -1 : pid;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "local", no_argument, NULL, 'L' },   { "wait", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'c' }, { "warmup", required_argument, NULL, 'W' },
		{ "runs", required_argument, NULL, 'r' }, { "size", required_argument, NULL, 's' },
		{ "idle", required_argument, NULL, 'i' }, { "pin", no_argument, NULL, 'p' },
		{ "leader", required_argument, NULL, 'l' }, { "help", no_argument, NULL, 'h' },
		{ "gap-us", required_argument, NULL, 'g' }, { "stats", no_argument, NULL, 'S' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct pp p = { .count = 20000, .size = 64, .warmup = 1000, .runs = 3 };
	struct rk_config cfg;
	char err[2048], leader_addr[64]; /* an unknown variable's message lists every known one */
	bool local = false, pin = false, stats = false;
	unsigned int idle = 0;
	pid_t child = -1;
	int c, ret, status;

	parse_modes("all", &p);
	rk_config_init(&cfg);
	cfg.catch_signals = true;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'L':
			local = true;
			break;
		case 'w':
			if (parse_modes(optarg, &p)) {
				fprintf(stderr, "rk-pingpong: --wait='%s': expected adaptive, spin, "
						"block (comma-separated) or all\n", optarg);
				return 2;
			}
			break;
		case 'c':
			if (cli_u32("rk-pingpong", "count", optarg, 10, 10000000, &p.count))
				return 2;
			break;
		case 'W':
			if (cli_u32("rk-pingpong", "warmup", optarg, 0, 10000000, &p.warmup))
				return 2;
			break;
		case 'r':
			if (cli_u32("rk-pingpong", "runs", optarg, 1, 16, &p.runs))
				return 2;
			break;
		case 's':
			if (cli_u32("rk-pingpong", "size", optarg, 0, 1u << 20, &p.size))
				return 2;
			break;
		case 'i':
			if (cli_u32("rk-pingpong", "idle", optarg, 0, 86400, &idle))
				return 2;
			break;
		case 'p':
			pin = true;
			break;
		case 'S':
			stats = true;
			break;
		case 'g':
			if (cli_u32("rk-pingpong", "gap-us", optarg, 0, 10000000, &p.gap_us))
				return 2;
			break;
		case 'l':
			if (rk_config_set(&cfg, "RK_LEADER", optarg, err, sizeof(err))) {
				fprintf(stderr, "rk-pingpong: --leader: %s\n", err);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("rk-pingpong (rankrt) %s\n", rk_version(NULL, NULL));
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "rk-pingpong: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	p.idle_s = idle;
	if (local) {
		/* rank 0 here; rank 1 gets the same arguments and the address below */
		setenv("RK_RANK", "0", 1);
		setenv("RK_WORLD_SIZE", "2", 1);
		if (!cfg.leader[0]) {
			snprintf(leader_addr, sizeof(leader_addr), "127.0.0.1:%d",
				 20000 + (int)(getpid() % 20000));
			setenv("RK_LEADER", leader_addr, 1);
		} else {
			setenv("RK_LEADER", cfg.leader, 1);
		}
	}
	ret = rk_config_from_env(&cfg, err, sizeof(err));
	if (!ret)
		ret = rk_config_from_launcher_env(&cfg, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "rk-pingpong: %s\n", err);
		return 2;
	}
	if (cfg.world_size != 2) {
		fprintf(stderr, "rk-pingpong: needs exactly 2 ranks (RK_WORLD_SIZE=2), or --local\n");
		return 2;
	}
	p.rank = cfg.rank;
	p.base = cfg.wait;
	if (pin) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(p.rank % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	/* rk_world_send_user() copies it into the link's batch: no room for a header here */
	p.buf = malloc((size_t)p.size + 1);
	if (!p.buf)
		return 1;
	memset(p.buf, 0xab, (size_t)p.size + 1);
	ret = rk_loop_create(&cfg, &p.loop);
	if (ret) {
		fprintf(stderr, "rk-pingpong: loop: %s\n", rk_strerror(ret));
		return 1;
	}
	ret = rk_world_create(p.loop, &pp_ops, &p, &p.world);
	if (ret) {
		fprintf(stderr, "rk-pingpong[r%d]: world: %s\n", p.rank, rk_strerror(ret));
		if (ret == -EOPNOTSUPP)
			fprintf(stderr, "rk-pingpong: roce:// needs a rankrt built with verbs "
					"(./configure --with-verbs, libibverbs-dev); use tcp://\n");
		rk_loop_destroy(p.loop);
		return 1;
	}
	if (local && p.rank == 0) {
		child = spawn_follower("/proc/self/exe", argc, argv, cfg.leader);
		if (child < 0) {
			fprintf(stderr, "rk-pingpong: cannot start rank 1\n");
			rk_world_destroy(p.world);
			rk_loop_destroy(p.loop);
			return 1;
		}
	}
	ret = rk_world_wait_ready(p.world);
	if (ret) {
		fprintf(stderr, "rk-pingpong[r%d]: bootstrap: %s\n", p.rank, rk_strerror(ret));
	} else if (p.rank == 0) {
		ret = leader(&p);
		if (ret)
			fprintf(stderr, "rk-pingpong[r0]: %s\n", rk_strerror(ret));
	} else {
		while (!p.done && !p.err) {
			ret = run_until_stopped(&p);
			if (ret < 0)
				break;
		}
		if (p.err)
			ret = p.err;
		if (ret)
			fprintf(stderr, "rk-pingpong[r1]: %s\n", rk_strerror(ret));
	}
	if (stats)
		print_stats(&p);
	rk_world_destroy(p.world);
	rk_loop_destroy(p.loop);
	free(p.rtt);
	free(p.buf);
	if (child > 0) {
		if (ret)
			kill(child, SIGTERM);
		while (waitpid(child, &status, 0) < 0 && errno == EINTR)
			;
		if (!ret && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
			fprintf(stderr, "rk-pingpong: rank 1 failed\n");
			ret = 1;
		}
	}
	return ret ? 1 : 0;
}
