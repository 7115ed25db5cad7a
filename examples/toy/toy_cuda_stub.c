/* SPDX-License-Identifier: MIT */
/*
 * The toy model's CUDA backend in a build without CUDA or NCCL (toy_cuda.h):
 * it does not exist, toy_cuda_create() says so (-EOPNOTSUPP), and callers
 * still build and link. cuda.mk builds this file instead of toy_cuda.c.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "toy_cuda.h"

int toy_cuda_create(struct rk_world *w, const struct toy_params *p, int device,
		    enum rk_gpu_notify_mode mode, struct toy_cuda **out)
{
	(void)w;
	(void)p;
	(void)device;
	(void)mode;
	if (out)
		*out = NULL;
	return -EOPNOTSUPP;
}

int toy_cuda_ready(const struct toy_cuda *b)
{
	(void)b;
	return -EOPNOTSUPP;
}

uint64_t toy_cuda_reports(const struct toy_cuda *b, uint64_t *round_id, int *status)
{
	(void)b;
	if (round_id)
		*round_id = 0;
	if (status)
		*status = 0;
	return 0;
}

void toy_cuda_abort(struct toy_cuda *b)
{
	(void)b;
}

void toy_cuda_set_graphs(struct toy_cuda *b, bool on)
{
	(void)b;
	(void)on;
}

int toy_cuda_set_notify(struct toy_cuda *b, enum rk_gpu_notify_mode mode)
{
	(void)b;
	(void)mode;
	return -EOPNOTSUPP;
}

bool toy_cuda_busy(const struct toy_cuda *b)
{
	(void)b;
	return false;
}

uint32_t toy_cuda_streams(const struct toy_cuda *b)
{
	(void)b;
	return 0;
}

int toy_cuda_device(const struct toy_cuda *b)
{
	(void)b;
	return -EOPNOTSUPP;
}

const int32_t *toy_cuda_logits(const struct toy_cuda *b, uint32_t out)
{
	(void)b;
	(void)out;
	return NULL;
}

void toy_cuda_stats(const struct toy_cuda *b, struct toy_cuda_stats *out)
{
	(void)b;
	memset(out, 0, sizeof(*out));
}

int toy_cuda_destroy(struct toy_cuda *b)
{
	(void)b;
	return 0;
}

static int stub_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *round,
		       unsigned int flags)
{
	(void)ctx;
	(void)s;
	(void)round;
	(void)flags;
	return -EOPNOTSUPP;
}

const struct rk_backend_ops toy_cuda_ops = {
	.launch = stub_launch,
};
