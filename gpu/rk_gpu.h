/* SPDX-License-Identifier: MIT */
/*
 * rankrt GPU: CUDA stream completion sources and NCCL bootstrap.
 * Built only with --with-cuda; otherwise every call returns -EOPNOTSUPP.
 * No CUDA header is included here (CUDA types are forward-declared where needed).
 */
#ifndef RK_GPU_H
#define RK_GPU_H

#include "rk_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * rk_gpu_probe() - count the CUDA devices this process can use.
 * Return: the count (> 0), -ENODEV when the driver reports none (or no driver
 * is loaded), -EOPNOTSUPP when rankrt was built without CUDA. Any thread.
 */
RK_EXPORT int rk_gpu_probe(void);

#ifdef __cplusplus
}
#endif
#endif /* RK_GPU_H */
