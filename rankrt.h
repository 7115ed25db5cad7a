/* SPDX-License-Identifier: MIT */
/*
 * rankrt: the umbrella header. #include <rankrt/rankrt.h>
 *
 * It includes every module's public header, so it sits above all of them: at
 * the top of the tree with librankrt.map and rankrt.pc.in, the other files that
 * speak for the whole library, and never inside a module.
 */
#ifndef RANKRT_H
#define RANKRT_H

#include "rk_common.h"
#include "rk_wire.h"
#include "rk_runtime.h"
#include "rk_sched.h"
#include "rk_rdma.h"
#include "rk_gpu.h"

#endif /* RANKRT_H */
