/* SPDX-License-Identifier: MIT */
/*
 * rk-serve's CUDA backend as a loadable module (rk-serve-cuda.so, installed in
 * $(pkglibdir)): toy_cuda (examples/toy/toy_cuda.h) and the CUDA and NCCL
 * libraries it links. rk-serve itself links none of them, so it starts on a
 * host without them; it opens the module only for --backend=cuda.
 *
 * The module exports one symbol, CUDA_MODULE_SYM, a struct cuda_module whose
 * members are toy_cuda's calls. rk-serve and the module are built together:
 * a module of another build (another version or size) is refused.
 */
#ifndef SERVE_CUDA_MODULE_H
#define SERVE_CUDA_MODULE_H

#include "toy_cuda.h"

#define CUDA_MODULE_FILE    "rk-serve-cuda.so"
#define CUDA_MODULE_SYM	    "rk_serve_cuda_module"
#define CUDA_MODULE_VERSION 1u

struct cuda_module {
	uint32_t version; /* CUDA_MODULE_VERSION */
	uint32_t size;	  /* sizeof(struct cuda_module) */
	int (*create)(struct rk_world *w, const struct toy_params *p, int device,
		      enum rk_gpu_notify_mode mode, struct toy_cuda **out);
	int (*ready)(const struct toy_cuda *b);
	void (*set_graphs)(struct toy_cuda *b, bool on);
	int (*set_notify)(struct toy_cuda *b, enum rk_gpu_notify_mode mode);
	void (*abort)(struct toy_cuda *b);
	bool (*busy)(const struct toy_cuda *b);
	int (*device)(const struct toy_cuda *b);
	void (*stats)(const struct toy_cuda *b, struct toy_cuda_stats *out);
	int (*destroy)(struct toy_cuda *b);
	const struct rk_backend_ops *ops;
};

/*
 * cuda_module_open() - rk-serve: open the module and return its table, once
 * per process. It is looked for in $RANKRT_SERVE_MODULE_DIR when set, else beside
 * the running executable when that is a libtool build tree's .libs/ (an
 * uninstalled rk-serve), else in the pkglibdir configure chose. Return: the
 * table, or NULL with the reason (dlerror()'s text: the file or the CUDA or
 * NCCL library that is missing) in @why (@cap bytes). Main thread.
 */
const struct cuda_module *cuda_module_open(char *why, size_t cap);

#endif /* SERVE_CUDA_MODULE_H */
