/* SPDX-License-Identifier: MIT */
/* rdma/ internals: the roce:// side-channel blob and the verbs link's sizes. Never installed. */
#ifndef RK_RDMA_INT_H
#define RK_RDMA_INT_H

#include "runtime_int.h"
#include "link_int.h"
#include "sock_int.h"

/*
 * The QP description each side sends on the TCP side channel right after the
 * connection is made; little-endian, explicit offsets, never a cast struct.
 * After it each side sends one READY byte once its QP is in RTS with every
 * receive posted: nothing is sent on the QP before the peer's READY.
 */
#define RK_VB_MAGIC    0x42564b52u /* "RKVB" */
#define RK_VB_VERSION  1
#define RK_VB_BLOB_LEN 48
#define RK_VB_READY    0xa5
enum {
	RK_VB_OFF_MAGIC = 0,	/* u32 */
	RK_VB_OFF_VERSION = 4,	/* u16 */
	RK_VB_OFF_LEN = 6,	/* u16: RK_VB_BLOB_LEN */
	RK_VB_OFF_QPN = 8,	/* u32, 24 bits */
	RK_VB_OFF_PSN = 12,	/* u32, 24 bits */
	RK_VB_OFF_GID = 16,	/* 16 bytes, network order as verbs has it */
	RK_VB_OFF_MTU = 32,	/* u8: enum ibv_mtu, 1..5 */
	RK_VB_OFF_RSVD0 = 33,	/* u8: 0 */
	RK_VB_OFF_LID = 34,	/* u16 (0 on RoCE) */
	RK_VB_OFF_RXDEPTH = 36, /* u32: receive buffers posted = the peer's first credits */
	RK_VB_OFF_BUFSIZE = 40, /* u32: bytes per receive buffer = the peer's chunk bound */
	RK_VB_OFF_RSVD1 = 44,	/* u32: 0 */
};

/* Per link (ARCHITECTURE.md, "Verbs links"). */
#define RK_VB_BUF_SIZE	   16384 /* receive buffer and send slot */
#define RK_VB_RX_DEPTH	   64	 /* receive buffers pre-posted */
#define RK_VB_TX_SLOTS	   64	 /* send queue depth = send slots */
#define RK_VB_SIGNAL_EVERY 16	 /* one signalled send in N reclaims N slots */
#define RK_VB_CREDIT_BATCH 16	 /* owed credits that justify a credit-only message */
#define RK_VB_MAX_INLINE   256	 /* asked of the QP; the QP's answer is used */

/* ---- the verbs transport (rdma/verbs.c; rdma/rdma.c stubs without verbs) ---- */
/* This rank's end of a roce:// link. */
struct rk__verbs_opts {
	char dev[RK_RDMA_DEV_MAX];
	int gid;			/* GID index */
	int port;			/* device port, 1 */
};
/* Resolve this rank's device and GID index (RK_RDMA_DEV/RK_RDMA_GID over the
 * address's dev=/gid=) and check that the device opens and has that GID.
 * Loop thread, before any link. Return: 0; -RK_ECONFIG (malformed or missing,
 * logged by name); -ENODEV; -RK_ENOVERBS (no libibverbs, logged); -EOPNOTSUPP
 * (built without verbs, logged). */
int rk__verbs_prepare(struct rk_loop *loop, const struct rk__addr *a, struct rk__verbs_opts *o);
/* As rk__tcp_link_from_fd(), for a roce:// link: @fd is the accepted TCP side
 * channel; the QP description is exchanged on it, then frames go over the QP.
 * The link owns @fd on success only. */
int rk__verbs_link_from_fd(struct rk_loop *loop, int fd, const struct rk__verbs_opts *o,
			   const struct rk__link_owner_ops *oops, void *owner,
			   struct rk_link **out);
/* As rk__tcp_connect(), for a roce:// link. */
int rk__verbs_connect(struct rk_loop *loop, const struct rk__addr *a,
		      const struct rk__verbs_opts *o, const struct rk__link_owner_ops *oops,
		      void *owner, struct rk_link **out);

/* Fill @o from the config knobs over the address's query (both builds). */
int rk__verbs_opts_resolve(struct rk_loop *loop, const struct rk__addr *a,
			   struct rk__verbs_opts *o);

#endif /* RK_RDMA_INT_H */
