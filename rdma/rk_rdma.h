/* SPDX-License-Identifier: MIT */
/*
 * rankrt RDMA: RoCE/InfiniBand verbs control links (roce:// addresses).
 * Built only with --with-verbs; otherwise every call returns -EOPNOTSUPP.
 * No verbs header is included here: a build without rdma-core can still
 * include everything.
 *
 * There is no separate link API: a world whose leader address (RK_LEADER,
 * struct rk_config.leader) is "roce://host:port?dev=NAME&gid=N" links its
 * ranks over RC QPs (ARCHITECTURE.md, "Verbs links"). host:port is the TCP
 * side channel (the leader listens there, as for tcp://); dev= and gid= name
 * the leader's device and GID index and are every rank's default; a rank's
 * own RK_RDMA_DEV / RK_RDMA_GID (rk_config.rdma_dev, .rdma_gid) override them.
 * rk_world_create() then returns, besides its tcp:// codes:
 *   -RK_ECONFIG  no device named, or a query other than dev=/gid= (logged);
 *   -ENODEV      the device is not there (the log lists those that are) or does
 *                not open (the log says why);
 *   -ENOENT, -EINVAL  the device has no GID at that index;
 *   -EOPNOTSUPP  rankrt was built without verbs (logged: "built without verbs");
 *   -RK_ENOVERBS libibverbs.so.1 cannot be loaded (logged with the reason):
 *                librankrt opens it at run time, at the first roce:// address.
 * A link's failures reach rk_world_ops.peer_error as for tcp://, plus:
 *   -ECONNRESET  the peer closed the side channel (it died, or left without BYE);
 *   -ETIMEDOUT   the peer's QP stopped acknowledging (retry count exceeded);
 *   -ENOBUFS     receiver not ready (cannot happen with credits; counted in
 *                rk_link_stats.rnr_errors); other work-completion errors -EIO,
 *                each logged with ibv_wc_status_str().
 * Everything runs on the loop thread: a link's CQ is one of its loop's sources.
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
 * -RK_ENOVERBS when libibverbs.so.1 cannot be loaded (not logged), or -errno.
 * Any thread.
 */
RK_EXPORT int rk_rdma_probe(void);

#ifdef __cplusplus
}
#endif
#endif /* RK_RDMA_H */
