/* SPDX-License-Identifier: MIT */
/*
 * The one symbol of rk-serve's CUDA module (cuda_module.h): toy_cuda's calls.
 * Built into rk-serve-cuda.so only, with toy_cuda.c and its kernels.
 */
#include "config.h"

#include "cuda_module.h"

/* The table rk-serve looks up by name (CUDA_MODULE_SYM). */
extern const struct cuda_module rk_serve_cuda_module;
const struct cuda_module rk_serve_cuda_module = {
	.version = CUDA_MODULE_VERSION,
	.size = sizeof(struct cuda_module),
	.create = toy_cuda_create,
	.ready = toy_cuda_ready,
	.set_graphs = toy_cuda_set_graphs,
	.set_notify = toy_cuda_set_notify,
	.abort = toy_cuda_abort,
	.busy = toy_cuda_busy,
	.device = toy_cuda_device,
	.stats = toy_cuda_stats,
	.destroy = toy_cuda_destroy,
	.ops = &toy_cuda_ops,
};
