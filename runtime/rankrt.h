/* SPDX-License-Identifier: MIT */
/* rankrt: the umbrella header. #include <rankrt/rankrt.h> */
#ifndef RANKRT_H
#define RANKRT_H

#include "rk_common.h"
#include "rk_wire.h"
#include "rk_runtime.h"
#include "rk_sched.h"
#include "rk_rdma.h"
#include "rk_gpu.h"

#endif /* RANKRT_H */
