/* SPDX-License-Identifier: MIT */
/*
 * rankrt RDMA: RoCE/InfiniBand verbs control links (roce:// addresses).
 * Built only with --with-verbs; otherwise every call returns -EOPNOTSUPP.
 * No verbs header is included here: a build without rdma-core can still
 * include everything.
 */
#ifndef RK_RDMA_H
#define RK_RDMA_H

#include "rk_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * rk_rdma_probe() - count the RDMA devices this process can open.
 * Return: the count (>= 0), -EOPNOTSUPP when rankrt was built without verbs,
 * or -errno. Any thread.
 */
RK_EXPORT int rk_rdma_probe(void);

#ifdef __cplusplus
}
#endif
#endif /* RK_RDMA_H */
