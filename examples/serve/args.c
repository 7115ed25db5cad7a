/* SPDX-License-Identifier: MIT */
/* rk-serve's command line: options, their defaults and checks, and --help. */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "serve.h"

/*
 * rk-load's prompt sets, in its order: request i of a cell is prompt i mod the
 * set with sampling seed 1000 + i in every cell, in rk-load too, so the hash
 * of a mode agrees across cells, runs, backends, wait policies and rk-load.
 */
static const char *const bench_fixed[] = {
	"The quick brown fox jumps over the lazy dog.",
	"Once upon a time, in a land far away,",
	"It was the best of times, it was the worst of times,",
	"Call me Ishmael.",
	"To be, or not to be, that is the question:",
	"All happy families are alike;",
	"The sky above the port was the color of television,",
	"In the beginning",
};

/* Repetitive text: prompt-lookup drafting finds its n-grams. */
static const char *const bench_repeat[] = {
	"abcabcabcabcabcabcabcabcabcabc",
	"one two one two one two one two one two",
	"la la la la la la la la la la la la",
	"0101010101010101010101010101",
};

#ifdef RK_HAVE_SERVE_HTTP
int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sslen)
{
	char host[256], *end;
	const char *colon, *port;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res;
	unsigned long pn;
	size_t hl;
	int ret;

	if (s[0] == '[') {
		end = strchr(s, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		hl = (size_t)(end - s - 1);
		port = end + 2;
		s++;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - s);
		port = colon + 1;
	}
	if (!hl || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	errno = 0;
	pn = strtoul(port, &end, 10);
	if (!*port || *end || errno || pn > 65535 || port[0] == '-' || port[0] == '+')
		return -EINVAL;
	ret = getaddrinfo(host, port, &hints, &res);
	if (ret)
		return -EINVAL;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sslen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

#define HTTP_BUILD "with its HTTP server"
#else
#define HTTP_BUILD "without its HTTP server (no libmicrohttpd and jansson at configure time)"
#endif
#ifdef HAVE_CUDA_BACKEND
#define CUDA_BUILD "with the CUDA backend"
#else
#define CUDA_BUILD "without the CUDA backend"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rk-serve [options]\n"
		"A tensor-parallel decode server for the toy model (examples/toy/TOY.md). Every\n"
		"rank runs it, e.g. rk-launch --hosts localhost,localhost -- rk-serve; rank 0\n"
		"schedules rounds and serves HTTP, the others compute their shard.\n"
		"This build: " HTTP_BUILD ", " CUDA_BUILD ".\n\n"
		"  --http=ADDR:PORT   rank 0 listens here (default 127.0.0.1:8800; port 0: any\n"
		"                     free port, printed at startup)\n"
		"  --http-max-conns=N answer N completions at once, 503 with Retry-After past\n"
		"                     that; past N open connections close the one idle\n"
		"                     longest (default %u; 1..%u; up to 2N open)\n"
		"  --http-idle-timeout=S  close a connection idle for S seconds (default %u;\n"
		"                     1..3600)\n"
		"  --demo             instead of serving, generate from built-in prompts, print\n"
		"                     tokens, hashes and a receipt, then end the job\n"
		"  --bench            instead of serving, run the decode receipt (--bench-*\n"
		"                     below) on rank 0, then end the job\n"
		"  --backend=NAME     cpu (default: the toy model's CPU backend, a worker\n"
		"                     thread per rank) or cuda (one GPU per rank, NCCL)\n"
		"  --device-time=SPEC cpu: emulate GPU device time: each round completes no\n"
		"                     sooner than BASE + PER_STREAM x streams + PER_TOKEN x\n"
		"                     tokens after its launch, through rankrt's GPU notifier\n"
		"                     on an emulated device (word, wake, prediction; the\n"
		"                     tokens are still the toy's). SPEC: a preset (8b-h200:\n"
		"                     3500,25,15; 70b-tp8: 9500,10,20; 1ms, 5ms, 10ms) or\n"
		"                     BASE_US[,PER_STREAM_US,PER_TOKEN_US]; resident rounds\n"
		"                     are off with it (examples/toy/TOY.md)\n"
		"  --device-wake-us=N cpu, --device-time: the wake path's cost, us (default\n"
		"                     23: an H200's host-function hop, docs/GPU.md; 0..1000000)\n"
		"  --notify=MODE      cuda, or cpu with --device-time: how the loop learns that\n"
		"                     a round's GPU work is done:\n"
		"                     auto (default: both), poll (a host word the loop reads\n"
		"                     while it spins) or wake (a CUDA host function wakes it)\n"
		"  --cuda-graphs=on|off  cuda: run each round's kernels and allreduce as one\n"
		"                     CUDA graph per round shape (default on)\n"
		"  --cpu-worker-spin-us=N|auto  cpu, resident rounds: how long the worker\n"
		"                     spins on the round epoch before it sleeps (0..1000000;\n"
		"                     auto, the default: always under RK_WAIT=spin, never\n"
		"                     under block; adaptive: %u us with two CPUs per rank)\n"
		"  --device=N         cuda: the GPU (default: rank %% the GPU count)\n"
		"  --vocab=V          vocabulary size (default %u; 1..%u)\n"
		"  --hidden=H         hidden size: the work per output (default %u; 1..%u,\n"
		"                     divisible by the number of ranks)\n"
		"  --model-seed=S     model seed (default 1)\n"
		"  --max-batch=N      streams per round (default 8; 1..%u)\n"
		"  --draft-k=K        drafted tokens per stream and round for requests that do\n"
		"                     not say (default 0 = plain; 0..%u)\n"
		"  --draft-accept=P|ngram  --bench and --demo requests (whose tokens the leader\n"
		"                     knows ahead) are drafted with the model's own token at\n"
		"                     each position with probability P (default 0.7), else a\n"
		"                     wrong one; ngram: prompt lookup, as for HTTP requests\n"
		"  -h, --help         this text\n"
		"      --version      print the version and exit\n\n"
		"--bench: every cell (streams x mode x draft) sends N requests of M tokens\n"
		"through C closed-loop streams (stream s sends requests s, s+C, ... each once\n"
		"the previous one is done), submitted straight to the scheduler; request i is\n"
		"rk-load's (prompt i mod the set, seed 1000 + i; sampled: top_k 40,\n"
		"temperature 0.8, top_p 0.95), so a mode hashes the same in every cell and as\n"
		"through rk-load. One line per cell: tokens/s, rounds, acceptance, the token\n"
		"hash over the requests in order, each rank's CPU seconds during the cell.\n"
		"  --bench-streams=LIST      concurrent streams per cell (default 1,4,8)\n"
		"  --bench-modes=LIST        greedy,sampled (default both)\n"
		"  --bench-draft=LIST        plain,drafted (default both)\n"
		"  --bench-draft-k=K         drafted tokens per round in drafted cells\n"
		"                            (default 4)\n"
		"  --bench-requests=N        requests per cell (default 16)\n"
		"  --bench-max-tokens=M      tokens per request (default 64)\n"
		"  --bench-prompt-set=SET    fixed or repeat (default fixed)\n"
		"  --bench-runs=R            runs of every cell, interleaved; medians (default 1)\n"
		"  --bench-idle=S            afterwards stay idle S seconds under the loop's\n"
		"                            policy and print each rank's CPU seconds (default 0)\n"
		"  --bench-check-ref         check every request against the TP1 reference\n"
		"  --bench-no-warmup         no untimed pass before the cells\n"
		"  --bench-policies=LIST     run every cell under each of these wait policies\n"
		"                            in turn, in this one process (default: only the\n"
		"                            configured one): default (the RK_* policy, the\n"
		"                            notifier (cuda, --device-time) auto), block\n"
		"                            (RK_WAIT=block, wake), spin\n"
		"                            (RK_WAIT=spin, poll), and two baselines: poll50\n"
		"                            (timed polls of 50 us for 50 ms after the last\n"
		"                            busy event, then block) and yield1s (spin with\n"
		"                            sched_yield() for 1 s after it, then block; no\n"
		"                            prediction); a \"prun\" and a \"pwin\" line per\n"
		"                            run, then \"pcell\" lines of medians; idle: default\n"
		"  --trace-rounds=FILE       every rank records its rounds' events (leader:\n"
		"                            ROUND sent; all: launch, done; CLOCK_MONOTONIC ns)\n"
		"                            and the first peer failure it hears of, and\n"
		"                            writes them to FILE.r<rank> at exit\n"
		"Exit: 0 (a signal too, except during --bench); 1 on a failure; 2 usage; --bench:\n"
		"3 when the cells of a mode (or the runs of a cell) hash differently, 4 when a\n"
		"request differs from the reference.\n\n"
		"Every rank must be given the same model and backend options. Rank, world size\n"
		"and leader come from RK_* variables (rk-launch sets them), or from torchrun,\n"
		"LeaderWorkerSet, mpirun (PMIx) or Slurm (README \"Launching\"); without any,\n"
		"rk-serve runs alone (TP1). Every RK_* knob\n"
		"is in README.md (RK_WAIT=adaptive|spin|block: the loop's wait policy); a\n"
		"malformed one is refused by name.\n\n"
		"HTTP (rank 0), OpenAI-compatible: POST /v1/completions {\"prompt\": \"text\" or\n"
		"[ids], ...} and POST /v1/chat/completions {\"messages\": [...], ...} with\n"
		"\"max_tokens\", \"temperature\", \"top_k\", \"top_p\", \"seed\", \"stop\",\n"
		"\"stop_token_ids\", \"stream\", \"stream_options\", \"draft_k\"; GET /v1/models;\n"
		"GET /metrics (Prometheus); GET /v1/stats; GET /health. Logs carry UTC times\n"
		"and a line per request (RK_LOG_TIME=1, RK_LOG=info unless set). See\n"
		"docs/SERVE.md.\n",
		DEF_HTTP_MAX_CONNS, MAX_HTTP_CONNS, DEF_HTTP_IDLE_S, TOY_WORKER_SPIN_US, TOY_DEF_V,
		TOY_MAX_V, TOY_DEF_H, TOY_MAX_H, MAX_BATCH, RK_SCHED_MAX_DRAFT);
}

/* --draft-accept=P|ngram: a probability 0..1, or ngram (-1). Return 0 or -1 (said). */
static int parse_draft_accept(const char *s, double *p)
{
	char *end;
	double v;

	if (!strcmp(s, "ngram")) {
		*p = -1;
		return 0;
	}
	errno = 0;
	v = strtod(s, &end);
	if (!*s || *end || errno || !(v >= 0 && v <= 1)) {
		fprintf(stderr, PROG ": --draft-accept='%s': expected a probability 0..1 or ngram\n",
			s);
		return -1;
	}
	*p = v;
	return 0;
}

/* --bench-policies=LIST: names of bench_policies, each once. Return 0 or -1 (said). */
static int parse_policies(const char *s, struct options *o)
{
	char buf[64], *q = buf, *tok;
	uint32_t p, seen = 0;

	o->b_n_pol = 0;
	if (strlen(s) >= sizeof(buf))
		goto bad;
	strcpy(buf, s);
	while ((tok = cli_next(&q))) {
		for (p = 0; p < BENCH_POLICIES && strcmp(tok, bench_policies[p].name); p++)
			;
		if (p == BENCH_POLICIES || (seen & (1u << p)))
			goto bad;
		seen |= 1u << p;
		o->b_pol[o->b_n_pol++] = p;
	}
	if (o->b_n_pol)
		return 0;
bad:
	fprintf(stderr, PROG ": --bench-policies='%s': expected a list of default, block, "
		"spin, poll50 and yield1s, each at most once\n", s);
	o->b_n_pol = 0;
	return -1;
}

enum {
	OPT_BACKEND = 256,
	OPT_NOTIFY,
	OPT_GRAPHS,
	OPT_WORKER_SPIN,
	OPT_DEVICE,
	OPT_BENCH,
	OPT_B_STREAMS,
	OPT_B_MODES,
	OPT_B_DRAFT,
	OPT_B_DRAFT_K,
	OPT_B_REQUESTS,
	OPT_B_MAX_TOKENS,
	OPT_B_PROMPT_SET,
	OPT_B_RUNS,
	OPT_B_IDLE,
	OPT_B_CHECK_REF,
	OPT_B_NO_WARMUP,
	OPT_B_POLICIES,
	OPT_TRACE_ROUNDS,
	OPT_HTTP_MAX_CONNS,
	OPT_HTTP_IDLE,
	OPT_DRAFT_ACCEPT,
	OPT_DEVICE_TIME,
	OPT_DEVICE_WAKE,
};

int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option opts[] = {
		{ "http", required_argument, NULL, 'H' },
		{ "http-max-conns", required_argument, NULL, OPT_HTTP_MAX_CONNS },
		{ "http-idle-timeout", required_argument, NULL, OPT_HTTP_IDLE },
		{ "demo", no_argument, NULL, 'D' },
		{ "vocab", required_argument, NULL, 'v' },
		{ "hidden", required_argument, NULL, 'n' },
		{ "model-seed", required_argument, NULL, 's' },
		{ "max-batch", required_argument, NULL, 'b' },
		{ "draft-k", required_argument, NULL, 'k' },
		{ "draft-accept", required_argument, NULL, OPT_DRAFT_ACCEPT },
		{ "backend", required_argument, NULL, OPT_BACKEND },
		{ "notify", required_argument, NULL, OPT_NOTIFY },
		{ "device-time", required_argument, NULL, OPT_DEVICE_TIME },
		{ "device-wake-us", required_argument, NULL, OPT_DEVICE_WAKE },
		{ "cuda-graphs", required_argument, NULL, OPT_GRAPHS },
		{ "cpu-worker-spin-us", required_argument, NULL, OPT_WORKER_SPIN },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "bench", no_argument, NULL, OPT_BENCH },
		{ "bench-streams", required_argument, NULL, OPT_B_STREAMS },
		{ "bench-modes", required_argument, NULL, OPT_B_MODES },
		{ "bench-draft", required_argument, NULL, OPT_B_DRAFT },
		{ "bench-draft-k", required_argument, NULL, OPT_B_DRAFT_K },
		{ "bench-requests", required_argument, NULL, OPT_B_REQUESTS },
		{ "bench-max-tokens", required_argument, NULL, OPT_B_MAX_TOKENS },
		{ "bench-prompt-set", required_argument, NULL, OPT_B_PROMPT_SET },
		{ "bench-runs", required_argument, NULL, OPT_B_RUNS },
		{ "bench-idle", required_argument, NULL, OPT_B_IDLE },
		{ "bench-check-ref", no_argument, NULL, OPT_B_CHECK_REF },
		{ "bench-no-warmup", no_argument, NULL, OPT_B_NO_WARMUP },
		{ "bench-policies", required_argument, NULL, OPT_B_POLICIES },
		{ "trace-rounds", required_argument, NULL, OPT_TRACE_ROUNDS },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
#ifdef RK_HAVE_SERVE_HTTP
	struct sockaddr_storage ss;
	socklen_t sslen;
#endif
	uint32_t dev, wake_us = UINT32_MAX;
	int c, mode;

	toy_params_init(&o->model);
	o->max_batch = 8;
	o->draft_k = 0;
	o->draft_p = TOY_ORACLE_DEF_P;
	snprintf(o->http, sizeof(o->http), "127.0.0.1:8800");
	o->http_max_conns = DEF_HTTP_MAX_CONNS;
	o->http_idle_s = DEF_HTTP_IDLE_S;
	o->backend = BACKEND_CPU;
	o->notify = RK_GPU_NOTIFY_AUTO;
	o->graphs = true;
	o->device = -1;
	o->b_streams[0] = 1;
	o->b_streams[1] = 4;
	o->b_streams[2] = 8;
	o->b_n_streams = 3;
	o->b_modes[0] = o->b_modes[1] = true;
	o->b_drafts[0] = o->b_drafts[1] = true;
	o->b_draft_k = 4;
	o->b_requests = 16;
	o->b_max_tokens = 64;
	o->b_runs = 1;
	o->b_prompts = bench_fixed;
	o->b_n_prompts = sizeof(bench_fixed) / sizeof(bench_fixed[0]);
	o->b_prompt_set = "fixed";
	o->b_warmup = true;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'H':
#ifdef RK_HAVE_SERVE_HTTP
			if (strlen(optarg) >= sizeof(o->http) ||
			    parse_listen(optarg, &ss, &sslen)) {
				fprintf(stderr,
					PROG ": --http='%s': expected HOST:PORT or "
					     "[IPV6]:PORT with a port in [0, 65535]\n",
					optarg);
				return 2;
			}
			snprintf(o->http, sizeof(o->http), "%s", optarg);
			o->http_set = true;
			break;
#else
			fprintf(stderr,
				PROG ": --http: this rk-serve was built without its HTTP server "
				     "(configure found no libmicrohttpd and jansson; see "
				     "--with-serve): use --demo or --bench\n");
			return 2;
#endif
		case OPT_HTTP_MAX_CONNS:
			if (cli_u32(PROG, "http-max-conns", optarg, 1, MAX_HTTP_CONNS,
				    &o->http_max_conns))
				return 2;
			break;
		case OPT_HTTP_IDLE:
			if (cli_u32(PROG, "http-idle-timeout", optarg, 1, 3600, &o->http_idle_s))
				return 2;
			break;
		case 'D':
			o->demo = true;
			break;
		case 'v':
			if (cli_u32(PROG, "vocab", optarg, 1, TOY_MAX_V, &o->model.V))
				return 2;
			break;
		case 'n':
			if (cli_u32(PROG, "hidden", optarg, 1, TOY_MAX_H, &o->model.H))
				return 2;
			break;
		case 's':
			if (cli_u64(PROG, "model-seed", optarg, 0, 0, UINT64_MAX, &o->model.seed))
				return 2;
			break;
		case 'b':
			if (cli_u32(PROG, "max-batch", optarg, 1, MAX_BATCH, &o->max_batch))
				return 2;
			break;
		case 'k':
			if (cli_u32(PROG, "draft-k", optarg, 0, RK_SCHED_MAX_DRAFT, &o->draft_k))
				return 2;
			break;
		case OPT_DRAFT_ACCEPT:
			if (parse_draft_accept(optarg, &o->draft_p))
				return 2;
			break;
		case OPT_BACKEND:
			if (!strcmp(optarg, "cpu")) {
				o->backend = BACKEND_CPU;
			} else if (!strcmp(optarg, "cuda")) {
#ifndef HAVE_CUDA_BACKEND
				fprintf(stderr,
					PROG ": --backend=cuda: %s: this rk-serve was built "
					     "without CUDA and NCCL (configure --with-cuda "
					     "--with-nccl)\n",
					rk_strerror(-EOPNOTSUPP));
				return 2;
#endif
				o->backend = BACKEND_CUDA;
			} else {
				fprintf(stderr, PROG ": --backend='%s': expected cpu or cuda\n",
					optarg);
				return 2;
			}
			break;
		case OPT_NOTIFY:
			mode = rk_gpu_notify_mode_parse(optarg);
			if (mode < 0) {
				fprintf(stderr,
					PROG ": --notify='%s': expected auto, poll or wake\n",
					optarg);
				return 2;
			}
			o->notify = (enum rk_gpu_notify_mode)mode;
			o->notify_set = true;
			break;
		case OPT_DEVICE_TIME:
			if (toy_device_parse(optarg, &o->model.device)) {
				fprintf(stderr, PROG ": --device-time='%s': expected a preset "
					"(8b-h200, 70b-tp8, 1ms, 5ms, 10ms) or BASE_US[,"
					"PER_STREAM_US,PER_TOKEN_US], each 0..10000000\n", optarg);
				return 2;
			}
			break;
		case OPT_DEVICE_WAKE:
			if (cli_u32(PROG, "device-wake-us", optarg, 0, 1000000, &wake_us))
				return 2;
			break;
		case OPT_GRAPHS:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, PROG ": --cuda-graphs='%s': expected on or off\n",
					optarg);
				return 2;
			}
			o->graphs = !strcmp(optarg, "on");
			o->graphs_set = true;
			break;
		case OPT_WORKER_SPIN:
			if (!strcmp(optarg, "auto")) {
				o->model.worker_spin_us = TOY_WORKER_SPIN_AUTO;
			} else if (cli_u32(PROG, "cpu-worker-spin-us", optarg, 0, 1000000,
					   &o->model.worker_spin_us)) {
				return 2;
			}
			o->worker_spin_set = true;
			break;
		case OPT_DEVICE:
			if (cli_u32(PROG, "device", optarg, 0, 1023, &dev))
				return 2;
			o->device = (int)dev;
			break;
		case OPT_BENCH:
			o->bench = true;
			break;
		case OPT_B_STREAMS:
			if (cli_u32_list(PROG, "bench-streams", optarg, 1, MAX_BATCH, o->b_streams,
					 BENCH_MAX_LIST, &o->b_n_streams))
				return 2;
			break;
		case OPT_B_MODES:
			if (cli_pair(PROG, "bench-modes", optarg, "greedy", "sampled", o->b_modes))
				return 2;
			break;
		case OPT_B_DRAFT:
			if (cli_pair(PROG, "bench-draft", optarg, "plain", "drafted", o->b_drafts))
				return 2;
			break;
		case OPT_B_DRAFT_K:
			if (cli_u32(PROG, "bench-draft-k", optarg, 1, RK_SCHED_MAX_DRAFT,
				      &o->b_draft_k))
				return 2;
			break;
		case OPT_B_REQUESTS:
			if (cli_u32(PROG, "bench-requests", optarg, 1, 100000, &o->b_requests))
				return 2;
			break;
		case OPT_B_MAX_TOKENS:
			if (cli_u32(PROG, "bench-max-tokens", optarg, 1, MAX_GEN, &o->b_max_tokens))
				return 2;
			break;
		case OPT_B_PROMPT_SET:
			if (!strcmp(optarg, "fixed")) {
				o->b_prompts = bench_fixed;
				o->b_n_prompts = sizeof(bench_fixed) / sizeof(bench_fixed[0]);
				o->b_prompt_set = "fixed";
			} else if (!strcmp(optarg, "repeat")) {
				o->b_prompts = bench_repeat;
				o->b_n_prompts = sizeof(bench_repeat) / sizeof(bench_repeat[0]);
				o->b_prompt_set = "repeat";
			} else {
				fprintf(stderr,
					PROG ": --bench-prompt-set='%s': expected fixed or "
					     "repeat\n",
					optarg);
				return 2;
			}
			break;
		case OPT_B_RUNS:
			if (cli_u32(PROG, "bench-runs", optarg, 1, BENCH_MAX_RUNS, &o->b_runs))
				return 2;
			break;
		case OPT_B_IDLE:
			if (cli_u32(PROG, "bench-idle", optarg, 0, 86400, &o->b_idle))
				return 2;
			break;
		case OPT_B_CHECK_REF:
			o->b_check_ref = true;
			break;
		case OPT_B_NO_WARMUP:
			o->b_warmup = false;
			break;
		case OPT_B_POLICIES:
			if (parse_policies(optarg, o))
				return 2;
			break;
		case OPT_TRACE_ROUNDS:
			if (!*optarg) {
				fprintf(stderr, PROG ": --trace-rounds: expected a file name\n");
				return 2;
			}
			o->trace_path = optarg;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'V':
			printf(PROG " (rankrt) %s\n", rk_version(NULL, NULL));
			return 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (o->demo + o->bench + o->http_set > 1) {
		fprintf(stderr, PROG ": --http, --demo and --bench exclude each other\n");
		return 2;
	}
	if (o->b_n_pol && (!o->bench || (o->notify_set && o->notify != RK_GPU_NOTIFY_AUTO))) {
		fprintf(stderr, PROG ": --bench-policies needs --bench, and --notify=auto (the "
			"policies switch the notifier's mode)\n");
		return 2;
	}
	if (o->backend != BACKEND_CUDA && (o->graphs_set || o->device >= 0)) {
		fprintf(stderr, PROG ": --cuda-graphs and --device apply to --backend=cuda only\n");
		return 2;
	}
	if (o->backend == BACKEND_CPU && o->notify_set && !o->model.device.on) {
		fprintf(stderr, PROG ": --notify applies to --backend=cuda, or to cpu with "
			"--device-time\n");
		return 2;
	}
	if ((o->backend != BACKEND_CPU && o->model.device.on) ||
	    (wake_us != UINT32_MAX && !o->model.device.on)) {
		fprintf(stderr, PROG ": --device-time applies to --backend=cpu only, and "
			"--device-wake-us needs --device-time\n");
		return 2;
	}
	if (wake_us != UINT32_MAX)
		o->model.device.wake_ns = (uint64_t)wake_us * 1000;
	o->model.device_notify = o->notify;
	if (o->backend != BACKEND_CPU && o->worker_spin_set) {
		fprintf(stderr, PROG ": --cpu-worker-spin-us applies to --backend=cpu only\n");
		return 2;
	}
#ifndef RK_HAVE_SERVE_HTTP
	if (!o->demo && !o->bench) {
		fprintf(stderr,
			PROG ": this rk-serve was built without its HTTP server (configure found "
			     "no libmicrohttpd and jansson; see --with-serve): use --demo or "
			     "--bench\n");
		return 2;
	}
#endif
	return 0;
}
