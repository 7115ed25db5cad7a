/* SPDX-License-Identifier: MIT */
/* gpu/: CUDA completion sources. Without CUDA this file is the -EOPNOTSUPP stub. */
#include "config.h"

#include <errno.h>

#include "rk_gpu.h"

#ifdef RK_HAVE_CUDA
#include <cuda_runtime_api.h>

int rk_gpu_probe(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		return -ENODEV;
	return n;
}
#else
int rk_gpu_probe(void)
{
	return -EOPNOTSUPP;
}
#endif
