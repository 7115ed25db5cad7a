/* SPDX-License-Identifier: MIT */
/*
 * rk-serve's backend: the toy model's CPU backend (toy_cpu) or its CUDA
 * backend (toy_cuda, --backend=cuda), behind one set of calls (loop thread).
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

const char *backend_name(enum backend_kind k)
{
	return k == BACKEND_CUDA ? "cuda" : "cpu";
}

/*
 * RK_TEST_STALL=RANK:ROUND:MS[:loop], a test hook (tests/round-watchdog.sh):
 * rank RANK's CPU backend sits MS ms on round ROUND, in its worker, or with
 * ":loop" in launch() on the loop thread (toy_params.stall_round).
 */
static int stall_hook(const struct server *srv, struct toy_params *p)
{
	const char *v = getenv("RK_TEST_STALL");
	unsigned long long round, ms;
	int rank, n = 0;

	if (!v)
		return 0;
	if (sscanf(v, "%d:%llu:%llu%n", &rank, &round, &ms, &n) != 3 ||
	    (v[n] && strcmp(v + n, ":loop")) || rank < 0 || !round || !ms) {
		fprintf(stderr, PROG ": RK_TEST_STALL='%s': want RANK:ROUND:MS[:loop], ROUND and "
			"MS > 0\n", v);
		return -RK_ECONFIG;
	}
	if (rank != srv->rank)
		return 0;
	p->stall_round = round;
	p->stall_ms = ms;
	p->stall_loop = v[n] != '\0';
	return 0;
}

int be_create(struct server *srv)
{
	struct toy_params p = srv->opt.model;
	int ret;

	if (srv->opt.backend == BACKEND_CUDA) {
		ret = srv->cm->create(srv->world, &srv->opt.model, srv->opt.device,
				      srv->opt.notify, &srv->cuda);
		if (!ret)
			srv->cm->set_graphs(srv->cuda, srv->opt.graphs);
		return ret;
	}
	ret = stall_hook(srv, &p);
	if (ret)
		return ret;
	return toy_cpu_create(srv->world, &p, &srv->cpu);
}

int be_sched_create(struct server *srv, const struct rk_sched_config *sc)
{
	if (srv->cuda)
		return rk_sched_create(srv->world, sc, srv->cm->ops, srv->cuda, &srv->sched);
	return rk_sched_create(srv->world, sc, &toy_cpu_ops, srv->cpu, &srv->sched);
}

bool be_busy(const struct server *srv)
{
	if (srv->cuda)
		return srv->cm->busy(srv->cuda);
	return srv->cpu && toy_cpu_busy(srv->cpu);
}

int be_destroy(struct server *srv)
{
	int ret;

	if (srv->cuda) {
		ret = srv->cm->destroy(srv->cuda);
		if (ret != -EBUSY)
			srv->cuda = NULL;
		return ret;
	}
	ret = toy_cpu_destroy(srv->cpu);
	if (!ret)
		srv->cpu = NULL;
	return ret;
}

void be_abort(struct server *srv)
{
	if (srv->cuda)
		srv->cm->abort(srv->cuda);
	else if (srv->cpu)
		toy_cpu_abort(srv->cpu);
}

void be_stats(const struct server *srv, struct be_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (srv->cuda) {
		struct toy_cuda_stats cs;

		srv->cm->stats(srv->cuda, &cs);
		out->rounds = cs.rounds;
		out->outputs = cs.outputs;
		out->ns_compute = cs.ns_round;
	} else if (srv->cpu) {
		struct toy_cpu_stats ts;

		toy_cpu_stats(srv->cpu, &ts);
		out->rounds = ts.rounds;
		out->outputs = ts.outputs;
		out->ns_compute = ts.ns_compute;
	}
}

void print_notify(const struct server *srv)
{
	struct toy_cuda_stats cs;
	const struct rk_gpu_notifier_stats *n = &cs.notify;

	if (srv->cpu && srv->opt.bench) {
		struct rk_sched_stats ss = { 0 };
		struct toy_cpu_stats ts;

		/* which path the rounds took (RK_RESIDENT; tests/bench/bench-resident.sh) */
		toy_cpu_stats(srv->cpu, &ts);
		if (srv->sched)
			rk_sched_stats(srv->sched, &ss, sizeof(ss));
		printf("resident r%d: cpu, %" PRIu64 " rounds: posted %" PRIu64 " resident %" PRIu64
		       " (after a futex sleep %" PRIu64 ", before launch %" PRIu64 "), mismatched %"
		       PRIu64 ", fallbacks %" PRIu64 "; shared region %" PRIu64 "; lane %" PRIu64
		       " (refused %" PRIu64 "); off the loop %" PRIu64 "\n", srv->rank, ts.rounds,
		       ts.posted, ts.resident, ts.resident_sleeps, ts.resident_early,
		       ts.resident_mismatch, ts.resident_fallbacks, ss.shared_rounds, ts.lane_sent,
		       ts.lane_refused, ss.off_loop_rounds);
		fflush(stdout);
	}
	if (srv->cpu && srv->opt.bench && toy_cpu_notifier(srv->cpu)) {
		struct rk_gpu_notifier *nf = toy_cpu_notifier(srv->cpu);
		const struct toy_device_model *dm = &srv->opt.model.device;
		struct toy_cpu_stats ts;

		/* --device-time: the same line as cuda's, from the emulated device's notifier */
		toy_cpu_stats(srv->cpu, &ts);
		rk_gpu_notifier_stats(nf, &cs.notify, sizeof(cs.notify));
		printf("device r%d: emulated, base %.1f us + %.1f us/stream + %.1f us/token, wake "
		       "%.1f us; device time %.3f s, rounds held for the device %" PRIu64
		       ", compute longer than the device %" PRIu64 "\n", srv->rank,
		       dm->base_ns / 1e3, dm->per_stream_ns / 1e3, dm->per_token_ns / 1e3,
		       dm->wake_ns / 1e3, ts.device_ns / 1e9, ts.device_held, ts.device_late);
		printf("notify r%d: emu %s, marks %" PRIu64 " via poll %" PRIu64
		       " via wake %" PRIu64 " predicted (no host function) %" PRIu64
		       " host function armed late %" PRIu64 " bounded samples %" PRIu64
		       ", a mark %.1f us +- %.1f us, expected after %.1f us\n", srv->rank, rk_gpu_notify_mode_name(rk_gpu_notifier_mode(nf)),
		       n->marks, n->via_poll, n->via_wake, n->predicted, n->wake_armed_late,
		       n->pred_bounded, n->pred_mean_ns / 1e3, n->pred_dev_ns / 1e3,
		       n->pred_q_ns / 1e3);
		fflush(stdout);
		return;
	}
	if (!srv->cuda || !srv->opt.bench)
		return;
	srv->cm->stats(srv->cuda, &cs);
	printf("notify r%d: %s, marks %" PRIu64 " via poll %" PRIu64 " via wake %" PRIu64
	       " predicted (no host function) %" PRIu64 " host function armed late %" PRIu64
	       " bounded samples %" PRIu64 ", a mark %.1f us +- %.1f us, expected after %.1f us\n",
	       srv->rank, rk_gpu_notify_mode_name(srv->opt.notify), n->marks, n->via_poll,
	       n->via_wake, n->predicted, n->wake_armed_late, n->pred_bounded,
	       n->pred_mean_ns / 1e3, n->pred_dev_ns / 1e3, n->pred_q_ns / 1e3);
	if (cs.enqueues) {
		double k = 1e3 * (double)cs.enqueues;

		printf("enqueue r%d: %" PRIu64 " rounds, host us per round: upload %.1f"
		       " kernels+allreduce %.1f copy %.1f mark %.1f (ncclInProgress %" PRIu64
		       ", graphs: %" PRIu64 " captured, %" PRIu64 " rounds)\n",
		       srv->rank, cs.enqueues, (double)cs.ns_upload / k, (double)cs.ns_compute / k,
		       (double)cs.ns_copy / k, (double)cs.ns_mark / k, cs.nccl_inprogress,
		       cs.graph_captures, cs.graph_launches);
	}
	fflush(stdout);
}
