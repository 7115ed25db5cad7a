/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport: a roce:// link is one reliable-connected QP carrying
 * the same byte stream of frames as a TCP link, set up over a TCP side
 * channel (ARCHITECTURE.md, "Verbs links", says why not rdma_cm).
 *
 * Setup: the world's TCP connect/accept gives a socket; each side creates its
 * QP (INIT, every receive posted), sends its QP description (rdma_int.h) on
 * the socket, moves the QP to RTR/RTS with the peer's, and sends one READY
 * byte. A side sends on the QP only after the peer's READY, so the first SEND
 * always finds a posted receive. The socket then stays open as the liveness
 * signal: EOF or an error on it fails the link.
 *
 * Data: SEND_WITH_IMM of at most the peer's buffer size (rk__link_rx takes any
 * split, so frames are chunked freely); small chunks inline, others copied
 * into a registered send slot. Every send consumes one credit (a receive the
 * peer has posted); the immediate carries the credits this side returns. One
 * credit is kept back for a credit-only message, so two sides can never both
 * hold all credits owed with none to send them: no sender ever meets an
 * unposted receive, and rnr_retry = 0 turns any RNR into an error.
 * Every RK_VB_SIGNAL_EVERY-th send (and any that fills the queue) is
 * signalled; its completion frees every slot up to it (sends complete in order).
 *
 * Completions: one CQ per link behind a completion channel, driven by the
 * loop's wait policy as a source: poll() polls the CQ while the loop spins;
 * arm() requests a notification, arms the channel's fd on the ring and polls
 * once more before the loop blocks, so a completion between the last poll
 * and the request is never lost. Events are acknowledged in batches.
 *
 * rdma-core returns NULL + errno, a positive errno, or -1 + errno depending on
 * the call; each is turned into -errno where it is called (vb_ret, vb_errno).
 * libibverbs itself is opened at run time (rdma/verbs_load.c): its functions
 * are called through rk__ibv, which rk__verbs_prepare() fills before any link.
 *
 * Lifetime: the link holds one operation (rk__link_op_start) for its verbs
 * resources from creation until, after shutdown, the completion-channel watch
 * is cancelled and the source is detached; then destroy() frees the QP, CQ,
 * MRs, channel, PD and device in reverse order of creation.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdma_int.h"
#include "verbs_int.h"
#include "wire_int.h"

#define VB_CQ_BATCH	16
#define VB_CQ_MAX	256 /* completions handled per poll: bounds one iteration */
#define VB_ACK_BATCH	16
#define VB_RECV_FLAG	(1ull << 63) /* wr_id of a receive: flag | buffer index */
#define VB_EOF_GRACE_NS 50000000ull  /* BYE on the QP may trail the side channel's EOF */
#define VB_SC_BUF	80	     /* blob + READY + room to see extra bytes */
#define VB_DRAIN_NS	200000000ull /* a closing link waits this long for its last send */

struct verbs_link {
	struct rk_link link; /* first: rk_link * <-> verbs_link * */
	struct rk__verbs_opts o;

	/* the TCP side channel */
	int fd;
	struct rk__op recv_op;
	struct rk__op connect_op;
	bool recv_armed;
	bool connecting;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	uint8_t sc[VB_SC_BUF]; /* what the peer sent on it */
	size_t sc_have;
	bool qp_ready;	 /* our QP is in RTS */
	bool peer_ready; /* the peer's READY arrived: we may send */
	struct rk_timer eof_timer;

	/* verbs resources, created in this order */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *rx_mem, *tx_mem;
	struct ibv_mr *rx_mr, *tx_mr;
	uint32_t max_inline;
	uint32_t psn;
	union ibv_gid gid;
	uint16_t lid;
	enum ibv_mtu mtu;

	/* flow control */
	uint32_t chunk;		     /* min(our, the peer's buffer size) */
	int64_t credits;	     /* receives the peer has posted for us */
	uint32_t owed;		     /* our receives reposted, not yet told */
	uint64_t sq_posted, sq_done; /* send WR sequence numbers */
	bool stalled;		     /* a flush stopped: credits or slots */

	/* completions through the loop */
	struct rk_source src;
	struct rk_fd_watch cq_watch;
	bool src_added;
	bool notify_armed;
	bool released; /* the resources' op is done */
	bool draining; /* closing: wait for the send of drain_seq */
	bool fd_shut;
	uint64_t drain_seq;
	uint64_t closing_since;
	unsigned int unacked;
};

static inline struct verbs_link *vl_of(struct rk_link *l)
{
	return (struct verbs_link *)l;
}

/* rdma-core's conventions -> -errno. */
static int vb_errno(void)
{
	return errno > 0 ? -errno : -EIO;
}

static int vb_ret(int ret)
{
	if (ret > 0)
		return -ret; /* a positive errno (ibv_modify_qp, ibv_post_send, ...) */
	if (ret < 0)
		return vb_errno(); /* -1 with errno (ibv_query_gid, ibv_get_cq_event) */
	return 0;
}

static bool vl_closed(const struct verbs_link *v)
{
	return v->link.state == RK_LINK_CLOSED || v->link.state == RK_LINK_FAILED;
}

/* I/O is shut down. A FAILED link still drains: it sends its last frames
 * (ERROR, BYE), so it keeps reposting receives and returning credits. */
static bool vl_down(const struct verbs_link *v)
{
	return v->link.state == RK_LINK_CLOSED;
}

static bool tx_pending(const struct rk_link *l)
{
	return l->out.off < l->out.len || l->q.len;
}

/* ---- resources ------------------------------------------------------------------ */

static struct ibv_context *vb_open_dev(const char *name, int rank)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	char have[256] = "";
	int n = 0, i, err;

	errno = 0;
	list = rk__ibv.get_device_list(&n);
	if (!list) {
		err = vb_errno();
		rk__err(rank, "roce: no RDMA devices: %s", rk_strerror(err));
		errno = -err;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		const char *dn = rk__ibv.get_device_name(list[i]);
		size_t len = strlen(have);

		if (!strcmp(dn, name)) {
			ctx = rk__ibv.open_device(list[i]);
			err = ctx ? 0 : vb_errno();
			rk__ibv.free_device_list(list);
			if (!ctx) {
				rk__err(rank, "roce: cannot open device %s: %s", name,
					rk_strerror(err));
				errno = -err;
			}
			return ctx;
		}
		snprintf(have + len, sizeof(have) - len, " %s", dn);
	}
	rk__ibv.free_device_list(list);
	rk__err(rank, "roce: RDMA device '%s' not found (devices:%s)", name, n ? have : " none");
	errno = ENODEV;
	return NULL;
}

/* Port attributes and the GID; 0 or -errno (logged). */
static int vb_query(struct verbs_link *v, int rank)
{
	struct ibv_port_attr pa;
	static const uint8_t zero[16];
	int ret;

	ret = vb_ret(rk__ibv_query_port(v->ctx, (uint8_t)v->o.port, &pa));
	if (ret) {
		rk__err(rank, "roce: %s port %d: %s", v->o.dev, v->o.port, rk_strerror(ret));
		return ret;
	}
	if (pa.state != IBV_PORT_ACTIVE)
		rk__warn(rank, "roce: %s port %d is %s, not active", v->o.dev, v->o.port,
			 rk__ibv.port_state_str(pa.state));
	v->lid = pa.lid;
	v->mtu = pa.active_mtu;
	ret = vb_ret(rk__ibv.query_gid(v->ctx, (uint8_t)v->o.port, v->o.gid, &v->gid));
	if (!ret && !memcmp(v->gid.raw, zero, sizeof(zero)))
		ret = -ENOENT;
	if (ret)
		rk__err(rank,
			"roce: %s port %d has no GID at index %d (%s): check RK_RDMA_GID "
			"or gid= (ibv_devinfo -v lists them)",
			v->o.dev, v->o.port, v->o.gid, rk_strerror(ret));
	return ret;
}

int rk__verbs_prepare(struct rk_loop *loop, const struct rk__addr *a, struct rk__verbs_opts *o)
{
	int rank = rk_loop_config(loop)->rank;
	struct verbs_link probe;
	const char *why;
	int ret;

	ret = rk__verbs_opts_resolve(loop, a, o);
	if (ret)
		return ret;
	ret = rk__verbs_load(&why);
	if (ret) {
		rk__err(rank, "roce://%s:%u: libibverbs not available (%s); use a tcp:// address",
			a->host, a->port, why);
		return ret;
	}
	memset(&probe, 0, sizeof(probe));
	probe.o = *o;
	probe.ctx = vb_open_dev(o->dev, rank);
	if (!probe.ctx)
		return -ENODEV;
	ret = vb_query(&probe, rank);
	rk__ibv.close_device(probe.ctx);
	if (!ret)
		rk__info(rank, "roce: links on %s port %d gid %d", o->dev, o->port, o->gid);
	return ret;
}

static void vb_free_resources(struct verbs_link *v)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	/* No completion, so no event, after the QP is gone. ibv_destroy_cq()
	 * waits until every event read from the channel was acknowledged: ack
	 * the batch in hand, and events still queued with it (a clean slate). */
	if (v->qp)
		rk__ibv.destroy_qp(v->qp);
	if (v->ch)
		while (rk__ibv.get_cq_event(v->ch, &cq, &cq_ctx) == 0)
			v->unacked++;
	if (v->cq && v->unacked)
		rk__ibv.ack_cq_events(v->cq, v->unacked);
	v->unacked = 0;
	if (v->tx_mr)
		rk__ibv.dereg_mr(v->tx_mr);
	if (v->rx_mr)
		rk__ibv.dereg_mr(v->rx_mr);
	if (v->cq)
		rk__ibv.destroy_cq(v->cq);
	if (v->ch)
		rk__ibv.destroy_comp_channel(v->ch);
	if (v->pd)
		rk__ibv.dealloc_pd(v->pd);
	if (v->ctx)
		rk__ibv.close_device(v->ctx);
	free(v->tx_mem);
	free(v->rx_mem);
	v->qp = NULL;
	v->tx_mr = v->rx_mr = NULL;
	v->cq = NULL;
	v->ch = NULL;
	v->pd = NULL;
	v->ctx = NULL;
	v->tx_mem = v->rx_mem = NULL;
}

static int vb_post_recv(struct verbs_link *v, uint32_t idx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(v->rx_mem + (size_t)idx * RK_VB_BUF_SIZE),
		.length = RK_VB_BUF_SIZE,
		.lkey = v->rx_mr->lkey,
	};
	struct ibv_recv_wr wr = {
		.wr_id = VB_RECV_FLAG | idx,
		.sg_list = &sge,
		.num_sge = 1,
	}, *bad;

	return vb_ret(ibv_post_recv(v->qp, &wr, &bad));
}

/* Device, PD, channel, CQ, QP (INIT), MRs, every receive posted. 0 or -errno (logged). */
static int vb_create(struct verbs_link *v, int rank)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	struct timespec ts;
	const char *what;
	uint32_t i;
	int ret, flags;

	v->ctx = vb_open_dev(v->o.dev, rank);
	if (!v->ctx)
		return errno ? -errno : -ENODEV;
	ret = vb_query(v, rank);
	if (ret)
		return ret;
	what = "ibv_alloc_pd";
	v->pd = rk__ibv.alloc_pd(v->ctx);
	if (!v->pd)
		goto fail_errno;
	what = "ibv_create_comp_channel";
	v->ch = rk__ibv.create_comp_channel(v->ctx);
	if (!v->ch)
		goto fail_errno;
	/* the fd is read only after the ring says it is readable; never block anyway */
	flags = fcntl(v->ch->fd, F_GETFL);
	if (flags < 0 || fcntl(v->ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		what = "fcntl(O_NONBLOCK)";
		goto fail_errno;
	}
	what = "ibv_create_cq";
	v->cq = rk__ibv.create_cq(v->ctx, RK_VB_RX_DEPTH + RK_VB_TX_SLOTS + 1, v, v->ch, 0);
	if (!v->cq)
		goto fail_errno;
	v->rx_mem = aligned_alloc(4096, (size_t)RK_VB_RX_DEPTH * RK_VB_BUF_SIZE);
	v->tx_mem = aligned_alloc(4096, (size_t)RK_VB_TX_SLOTS * RK_VB_BUF_SIZE);
	if (!v->rx_mem || !v->tx_mem) {
		rk__err(rank, "roce: buffers: %s", rk_strerror(-ENOMEM));
		return -ENOMEM;
	}
	what = "ibv_reg_mr";
	v->rx_mr = rk__ibv.reg_mr(v->pd, v->rx_mem, (size_t)RK_VB_RX_DEPTH * RK_VB_BUF_SIZE,
			      IBV_ACCESS_LOCAL_WRITE);
	if (!v->rx_mr)
		goto fail_errno;
	v->tx_mr = rk__ibv.reg_mr(v->pd, v->tx_mem, (size_t)RK_VB_TX_SLOTS * RK_VB_BUF_SIZE, 0);
	if (!v->tx_mr)
		goto fail_errno;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = v->cq;
	ia.recv_cq = v->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = RK_VB_TX_SLOTS;
	ia.cap.max_recv_wr = RK_VB_RX_DEPTH;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = RK_VB_MAX_INLINE;
	what = "ibv_create_qp";
	v->qp = rk__ibv.create_qp(v->pd, &ia);
	if (!v->qp) {
		/* a device without inline sends: every chunk goes through a slot */
		ia.cap.max_inline_data = 0;
		v->qp = rk__ibv.create_qp(v->pd, &ia);
		if (!v->qp)
			goto fail_errno;
	}
	v->max_inline = ia.cap.max_inline_data; /* what the QP really has */

	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.pkey_index = 0;
	qa.port_num = (uint8_t)v->o.port;
	qa.qp_access_flags = 0; /* SEND/RECV only: no remote access at all */
	ret = vb_ret(rk__ibv.modify_qp(
		v->qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	if (ret) {
		rk__err(rank, "roce: QP to INIT: %s", rk_strerror(ret));
		return ret;
	}
	for (i = 0; i < RK_VB_RX_DEPTH; i++) {
		ret = vb_post_recv(v, i);
		if (ret) {
			rk__err(rank, "roce: ibv_post_recv: %s", rk_strerror(ret));
			return ret;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	v->psn = (uint32_t)rk__fnv1a64(&ts, sizeof(ts)) & 0xffffff;
	return 0;

fail_errno:
	ret = vb_errno();
	rk__err(rank, "roce: %s on %s: %s", what, v->o.dev, rk_strerror(ret));
	return ret;
}

/* ---- the side channel: blob, READY, liveness ----------------------------------- */

static void vb_blob_encode(const struct verbs_link *v, uint8_t *b)
{
	memset(b, 0, RK_VB_BLOB_LEN);
	rk__le32_store(b + RK_VB_OFF_MAGIC, RK_VB_MAGIC);
	rk__le16_store(b + RK_VB_OFF_VERSION, RK_VB_VERSION);
	rk__le16_store(b + RK_VB_OFF_LEN, RK_VB_BLOB_LEN);
	rk__le32_store(b + RK_VB_OFF_QPN, v->qp->qp_num);
	rk__le32_store(b + RK_VB_OFF_PSN, v->psn);
	memcpy(b + RK_VB_OFF_GID, v->gid.raw, 16);
	b[RK_VB_OFF_MTU] = (uint8_t)v->mtu;
	rk__le16_store(b + RK_VB_OFF_LID, v->lid);
	rk__le32_store(b + RK_VB_OFF_RXDEPTH, RK_VB_RX_DEPTH);
	rk__le32_store(b + RK_VB_OFF_BUFSIZE, RK_VB_BUF_SIZE);
}

static int sc_send(struct verbs_link *v, const void *p, size_t n)
{
	ssize_t r;

	/* A few dozen bytes on a fresh socket: the send buffer always has room. */
	r = send(v->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (r < 0)
		return -errno;
	return (size_t)r == n ? 0 : -EAGAIN;
}

/* The peer's description moves our QP to RTR and RTS. 0 or an error (logged). */
static int vb_connect_qp(struct verbs_link *v, const uint8_t *b)
{
	struct rk_link *l = &v->link;
	uint32_t magic = rk__le32_load(b + RK_VB_OFF_MAGIC);
	uint32_t qpn = rk__le32_load(b + RK_VB_OFF_QPN), psn = rk__le32_load(b + RK_VB_OFF_PSN);
	uint32_t depth = rk__le32_load(b + RK_VB_OFF_RXDEPTH);
	uint32_t bufsz = rk__le32_load(b + RK_VB_OFF_BUFSIZE);
	unsigned int mtu = b[RK_VB_OFF_MTU];
	struct ibv_qp_attr qa;
	int ret;

	if (magic != RK_VB_MAGIC) {
		rk__link_warn(l,
			 "roce side channel: bad magic 0x%08x (want 0x%08x): not a "
			 "rankrt roce peer",
			 magic, RK_VB_MAGIC);
		return -RK_EMAGIC;
	}
	if (rk__le16_load(b + RK_VB_OFF_VERSION) != RK_VB_VERSION ||
	    rk__le16_load(b + RK_VB_OFF_LEN) != RK_VB_BLOB_LEN) {
		rk__link_warn(l,
			 "roce side channel: QP description version %u length %u "
			 "(this build speaks %u, %u)",
			 rk__le16_load(b + RK_VB_OFF_VERSION), rk__le16_load(b + RK_VB_OFF_LEN),
			 RK_VB_VERSION, RK_VB_BLOB_LEN);
		return -RK_EVERSION;
	}
	if (b[RK_VB_OFF_RSVD0] || rk__le32_load(b + RK_VB_OFF_RSVD1)) {
		rk__link_warn(l, "roce side channel: reserved fields of the QP description set");
		return -RK_ERESERVED;
	}
	if (!qpn || qpn > 0xffffff || psn > 0xffffff || mtu < IBV_MTU_256 || mtu > IBV_MTU_4096 ||
	    depth < RK_VB_CREDIT_BATCH + 2 || depth > 65536 || bufsz < 64 || bufsz > (1u << 24)) {
		/* (a shallower ring could strand a one-way sender at its last
		 * credit while the peer owes fewer than a credit-only batch) */
		rk__link_warn(l,
			 "roce side channel: QP description out of range (qpn %u psn %u "
			 "mtu %u depth %u bufsize %u)",
			 qpn, psn, mtu, depth, bufsz);
		return -RK_EFIELD;
	}
	v->credits = depth;
	v->link.stats.credits_min = v->credits;
	v->chunk = bufsz < RK_VB_BUF_SIZE ? bufsz : RK_VB_BUF_SIZE;

	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTR;
	qa.path_mtu = (enum ibv_mtu)(mtu < (unsigned int)v->mtu ? mtu : (unsigned int)v->mtu);
	qa.dest_qp_num = qpn;
	qa.rq_psn = psn;
	qa.max_dest_rd_atomic = 1;
	qa.min_rnr_timer = 12;
	qa.ah_attr.is_global = 1; /* RoCE: always routed by GID */
	memcpy(qa.ah_attr.grh.dgid.raw, b + RK_VB_OFF_GID, 16);
	qa.ah_attr.grh.sgid_index = (uint8_t)v->o.gid;
	qa.ah_attr.grh.hop_limit = 64;
	qa.ah_attr.dlid = rk__le16_load(b + RK_VB_OFF_LID);
	qa.ah_attr.sl = 0;
	qa.ah_attr.port_num = (uint8_t)v->o.port;
	ret = vb_ret(rk__ibv.modify_qp(v->qp, &qa,
				   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					   IBV_QP_MIN_RNR_TIMER));
	if (ret) {
		rk__link_warn(l, "roce: QP to RTR (peer qpn 0x%x): %s", qpn, rk_strerror(ret));
		return ret;
	}
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTS;
	qa.timeout = 14; /* 4.096 us << 14 = 67 ms per try */
	qa.retry_cnt = 7;
	qa.rnr_retry = 0; /* credits make RNR impossible: if one happens, it is an error */
	qa.sq_psn = v->psn;
	qa.max_rd_atomic = 1;
	ret = vb_ret(rk__ibv.modify_qp(v->qp, &qa,
				   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					   IBV_QP_MAX_QP_RD_ATOMIC));
	if (ret) {
		rk__link_warn(l, "roce: QP to RTS: %s", rk_strerror(ret));
		return ret;
	}
	rk__dbg(l->rank, "roce: QP 0x%x <-> 0x%x up, mtu %d, inline %u, %u credits", v->qp->qp_num,
		qpn, 128 << qa.path_mtu, v->max_inline, depth);
	return 0;
}

static void sc_recv_arm(struct verbs_link *v);

/* Bytes arrived on the side channel: the blob, then READY, then nothing. */
static int sc_consume(struct verbs_link *v)
{
	struct rk_link *l = &v->link;
	uint8_t ready = RK_VB_READY;
	int ret;

	if (v->sc_have >= 4 && rk__le32_load(v->sc + RK_VB_OFF_MAGIC) != RK_VB_MAGIC)
		return vb_connect_qp(v, v->sc); /* refuses it at once, by name */
	if (!v->qp_ready && v->sc_have >= RK_VB_BLOB_LEN) {
		ret = vb_connect_qp(v, v->sc);
		if (ret)
			return ret;
		v->qp_ready = true;
		ret = sc_send(v, &ready, 1);
		if (ret)
			return ret;
	}
	if (v->qp_ready && !v->peer_ready && v->sc_have > RK_VB_BLOB_LEN) {
		if (v->sc[RK_VB_BLOB_LEN] != RK_VB_READY) {
			rk__link_warn(l, "roce side channel: 0x%02x where READY belongs",
				 v->sc[RK_VB_BLOB_LEN]);
			return -EPROTO;
		}
		v->peer_ready = true;
		if (l->state == RK_LINK_CONNECTING)
			rk__link_connected(l); /* HELLO, now over the QP */
		else if (tx_pending(l))
			rk__loop_queue_flush(l->loop, &l->flusher);
	}
	if (v->sc_have > RK_VB_BLOB_LEN + 1) {
		rk__link_warn(l, "roce side channel: %zu unexpected bytes after READY",
			 v->sc_have - RK_VB_BLOB_LEN - 1);
		return -EPROTO;
	}
	return 0;
}

static enum rk_activity eof_grace_done(struct rk_timer *t, uint64_t now)
{
	struct verbs_link *v = t->data;

	(void)now;
	if (!vl_closed(v)) {
		rk__link_warn(&v->link, "link to rank %d (roce): peer closed the side channel",
			 v->link.peer);
		rk__link_fail(&v->link, -ECONNRESET, false);
	}
	return RK_BUSY;
}

static int vb_poll_cq(struct verbs_link *v, int *busy);

static void sc_recv_done(struct rk__op *op, int res, unsigned int flags)
{
	struct verbs_link *v = rk__container_of(op, struct verbs_link, recv_op);
	struct rk_link *l = &v->link;
	int ret = 0, busy;

	(void)flags;
	v->recv_armed = false;
	l->in_dispatch++;
	if (vl_down(v)) {
		/* shut down: the recv ended, nothing more to do */
	} else if (vl_closed(v)) {
		/* draining our last frames, and the peer's side ends (or says
		 * more than the protocol allows): it is gone, stop now */
		rk__link_abort(l);
	} else if (res > 0) {
		v->sc_have += (size_t)res;
		ret = sc_consume(v);
		if (ret)
			rk__link_fail(l, ret, false);
		else
			sc_recv_arm(v);
	} else if (res == 0 && v->peer_ready) {
		/* An orderly peer sends BYE on the QP, then closes: look at the CQ
		 * first, and give a BYE still in flight a moment before failing. */
		vb_poll_cq(v, &busy);
		if (!vl_closed(v))
			rk_timer_start(l->loop, &v->eof_timer, VB_EOF_GRACE_NS, 0);
	} else {
		ret = res == 0 ? -ECONNRESET : res;
		if (res == 0)
			rk__link_warn(l,
				 "roce side channel closed after %zu of %d bytes of the "
				 "peer's QP description and READY",
				 v->sc_have, RK_VB_BLOB_LEN + 1);
		else
			rk__link_warn(l, "roce side channel: %s", rk_strerror(res));
		rk__link_fail(l, ret, false);
	}
	l->in_dispatch--;
	rk__link_op_done(l);
}

static void sc_recv_arm(struct verbs_link *v)
{
	struct rk_link *l = &v->link;
	struct io_uring_sqe *sqe;

	if (v->recv_armed || vl_closed(v))
		return;
	sqe = rk__loop_sqe(l->loop);
	if (!sqe) {
		rk__link_fail(l, -EBUSY, false);
		return;
	}
	io_uring_prep_recv(sqe, v->fd, v->sc + v->sc_have, sizeof(v->sc) - v->sc_have, 0);
	rk__sqe_set_op(sqe, &v->recv_op);
	v->recv_armed = true;
	rk__link_op_start(l);
}

/* The socket is connected: describe our QP and wait for the peer's. */
static int sc_start(struct verbs_link *v)
{
	uint8_t blob[RK_VB_BLOB_LEN];
	int one = 1, ret;

	setsockopt(v->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	vb_blob_encode(v, blob);
	ret = sc_send(v, blob, sizeof(blob));
	if (ret) {
		rk__link_warn(&v->link, "roce side channel: sending the QP description: %s",
			 rk_strerror(ret));
		return ret;
	}
	sc_recv_arm(v);
	return 0;
}

/* ---- data path -------------------------------------------------------------------- */

static void note_credits(struct verbs_link *v)
{
	if (v->credits < v->link.stats.credits_min)
		v->link.stats.credits_min = v->credits;
}

/* One SEND_WITH_IMM of @n bytes at @p (0: credit-only), returning what we owe;
 * @last: signal it whatever the count (a closing link's last send). */
static int vb_post_send(struct verbs_link *v, const uint8_t *p, uint32_t n, bool last)
{
	struct rk_link *l = &v->link;
	uint32_t slot = (uint32_t)(v->sq_posted % RK_VB_TX_SLOTS);
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	int ret;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = v->sq_posted;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htonl(v->owed);
	/* Signal every Nth send, and any that fills the queue, so a completion
	 * always comes to free the slots before they run out. */
	if (v->sq_posted % RK_VB_SIGNAL_EVERY == RK_VB_SIGNAL_EVERY - 1 ||
	    v->sq_posted + 1 - v->sq_done >= RK_VB_TX_SLOTS || last)
		wr.send_flags |= IBV_SEND_SIGNALED;
	if (n) {
		wr.sg_list = &sge;
		wr.num_sge = 1;
		sge.length = n;
		if (n <= v->max_inline) {
			/* copied into the WQE by the post: the link's buffer is free after */
			sge.addr = (uintptr_t)p;
			sge.lkey = 0;
			wr.send_flags |= IBV_SEND_INLINE;
			l->stats.tx_inline++;
		} else {
			uint8_t *s = v->tx_mem + (size_t)slot * RK_VB_BUF_SIZE;

			memcpy(s, p, n);
			sge.addr = (uintptr_t)s;
			sge.lkey = v->tx_mr->lkey;
		}
	} else {
		l->stats.tx_credit_msgs++;
	}
	ret = vb_ret(ibv_post_send(v->qp, &wr, &bad));
	if (ret) {
		rk__link_warn(l, "link to rank %d (roce): ibv_post_send: %s", l->peer,
			 rk_strerror(ret));
		return ret;
	}
	v->sq_posted++;
	v->credits--;
	v->owed = 0;
	l->stats.tx_sends++;
	note_credits(v);
	return 0;
}

static bool sq_full(const struct verbs_link *v)
{
	return v->sq_posted - v->sq_done >= RK_VB_TX_SLOTS;
}

static void vb_flush(struct rk_link *l)
{
	struct verbs_link *v = vl_of(l);
	const uint8_t *p;
	size_t n;
	uint32_t c;
	bool last;
	int ret;

	if (!v->peer_ready || l->state == RK_LINK_CLOSED)
		return; /* sent once the peer's READY arrives */
	v->stalled = false;
	while ((n = rk__link_tx_next(l, &p)) > 0) {
		/* one credit stays for a credit-only message (see the top) */
		if (v->credits < 2 || sq_full(v)) {
			if (v->credits < 2)
				l->stats.credit_stalls++;
			rk__dbg(l->rank, "roce: flush stalls: %lld credits, %llu sends in flight",
				(long long)v->credits,
				(unsigned long long)(v->sq_posted - v->sq_done));
			v->stalled = true; /* the CQ handler flushes again */
			return;
		}
		c = n < v->chunk ? (uint32_t)n : v->chunk;
		/* the last bytes before a close (BYE, ERROR): the QP must not be
		 * destroyed, nor the side channel closed, before they left */
		last = l->close_after_flush && c == n && !l->q.len;
		ret = vb_post_send(v, p, c, last);
		if (ret) {
			rk__link_fail(l, ret, false);
			return;
		}
		if (last) {
			v->draining = true;
			v->drain_seq = v->sq_posted - 1;
		}
		rk__link_tx_done(l, c);
		if (l->state == RK_LINK_CLOSED)
			return;
	}
}

/* Credits we owe go back with the next data send; without data, once enough
 * are owed that the peer may run short, in a credit-only message. */
static void vb_return_credits(struct verbs_link *v)
{
	struct rk_link *l = &v->link;

	if (v->owed < RK_VB_CREDIT_BATCH || !v->peer_ready || vl_down(v))
		return;
	if (tx_pending(l) && v->credits >= 2 && !sq_full(v))
		return; /* the flush carries them */
	if (v->credits < 1 || sq_full(v))
		return; /* the peer returns credits or the send completes first */
	if (vb_post_send(v, NULL, 0, false))
		rk__link_fail(l, -EIO, false);
}

static int wc_errno(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ENOBUFS; /* the peer had no receive posted */
	case IBV_WC_RETRY_EXC_ERR:
		return -ETIMEDOUT; /* the peer's QP stopped answering */
	case IBV_WC_WR_FLUSH_ERR:
		return -ECANCELED;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
		return -EACCES;
	case IBV_WC_LOC_LEN_ERR:
		return -EMSGSIZE;
	default:
		return -EIO;
	}
}

/* One completion; returns 1 if it carried data (busy). */
static int vb_wc(struct verbs_link *v, const struct ibv_wc *wc)
{
	struct rk_link *l = &v->link;
	uint32_t idx;
	int ret;

	if (wc->status != IBV_WC_SUCCESS) {
		if (!(wc->wr_id & VB_RECV_FLAG))
			v->sq_done = wc->wr_id + 1; /* errors complete every WR */
		if (wc->status == IBV_WC_RNR_RETRY_EXC_ERR)
			l->stats.rnr_errors++;
		if (vl_down(v))
			return 0; /* flushed by the teardown */
		if (vl_closed(v)) {
			/* the last frames cannot go: stop draining */
			rk__link_abort(l);
			return 0;
		}
		ret = wc_errno(wc->status);
		rk__link_warn(l,
			 "link to rank %d (roce): %s completion failed: %s (vendor "
			 "error 0x%x) -> %s",
			 l->peer, wc->wr_id & VB_RECV_FLAG ? "receive" : "send",
			 rk__ibv.wc_status_str(wc->status), wc->vendor_err, rk_strerror(ret));
		rk__link_fail(l, ret, false);
		return 0;
	}
	if (!(wc->wr_id & VB_RECV_FLAG)) {
		v->sq_done = wc->wr_id + 1; /* in order: frees every slot up to it */
		return 0;
	}
	idx = (uint32_t)(wc->wr_id & ~VB_RECV_FLAG);
	if (wc->wc_flags & IBV_WC_WITH_IMM) {
		v->credits += ntohl(wc->imm_data);
		note_credits(v);
	}
	if (wc->byte_len && !vl_closed(v))
		rk__link_rx(l, v->rx_mem + (size_t)idx * RK_VB_BUF_SIZE, wc->byte_len);
	if (vl_down(v))
		return wc->byte_len ? 1 : 0;
	/* the buffer is free once rk__link_rx returns: partial frames were copied */
	ret = vb_post_recv(v, idx);
	if (ret) {
		rk__link_warn(l, "link to rank %d (roce): ibv_post_recv: %s", l->peer,
			 rk_strerror(ret));
		rk__link_fail(l, ret, false);
		return 0;
	}
	v->owed++;
	return wc->byte_len ? 1 : 0;
}

/* Poll the CQ until empty (bounded); *@busy: completions that carried data.
 * Return: completions handled, or -errno. */
static int vb_poll_cq(struct verbs_link *v, int *busy)
{
	struct rk_link *l = &v->link;
	struct ibv_wc wc[VB_CQ_BATCH];
	int n, i, total = 0;

	*busy = 0;
	if (!v->cq || v->released)
		return 0;
	l->in_dispatch++;
	do {
		n = ibv_poll_cq(v->cq, VB_CQ_BATCH, wc);
		if (n < 0) {
			rk__link_warn(l, "link to rank %d (roce): ibv_poll_cq: %d", l->peer, n);
			rk__link_fail(l, -EIO, false);
			break;
		}
		if (n)
			l->stats.cq_polls++;
		for (i = 0; i < n; i++)
			*busy += vb_wc(v, &wc[i]);
		total += n;
	} while (n == VB_CQ_BATCH && total < VB_CQ_MAX);
	if (total && !vl_down(v)) {
		/* a draining (FAILED) link too: its last frames wait for these */
		vb_return_credits(v);
		if (v->stalled && tx_pending(l))
			rk__loop_queue_flush(l->loop, &l->flusher);
	}
	l->in_dispatch--;
	return total;
}

/* ---- the loop source: spin polls, arm before blocking --------------------------- */

/* After shutdown: once the channel watch is gone, detach and let the link go.
 * Only from the source's poll (never inside a link callback: this may free).
 * Return: true when the link was let go (v may be freed). */
static bool vb_try_release(struct verbs_link *v)
{
	uint64_t now = rk_loop_now(v->link.loop);

	if (v->released || v->link.in_dispatch)
		return false;
	if (v->draining && v->sq_done <= v->drain_seq && now - v->closing_since < VB_DRAIN_NS)
		return false; /* BYE/ERROR still on its way: the peer reads it first */
	if (!v->fd_shut && v->fd >= 0) {
		/* ends the side channel's recv; the peer sees EOF after our last frame */
		shutdown(v->fd, SHUT_RDWR);
	}
	if (!v->fd_shut)
		rk__dbg(v->link.rank, "roce: link to rank %d: releasing (CQ watch %s, recv %s)",
			v->link.peer, rk_fd_watch_busy(&v->cq_watch) ? "armed" : "idle",
			v->recv_armed ? "armed" : "idle");
	v->fd_shut = true;
	if (rk_fd_watch_busy(&v->cq_watch)) {
		rk_fd_watch_stop(&v->cq_watch); /* completes on a later iteration */
		return false;
	}
	rk_loop_remove_source(v->link.loop, &v->src);
	v->src_added = false;
	v->released = true;
	rk__link_op_done(&v->link); /* may free v */
	return true;
}

static int vb_src_poll(struct rk_source *src, uint64_t now)
{
	struct verbs_link *v = src->data;
	int busy = 0, ret;

	(void)now;
	if (v->link.state != RK_LINK_CLOSED || (v->draining && !v->released)) {
		ret = vb_poll_cq(v, &busy);
		if (ret < 0)
			return ret;
	}
	/* Letting the link go is an event: its owner (rk_world_destroy() running
	 * the loop once at a time) must see the iteration end, not block on a ring
	 * that has nothing left of this link to complete. */
	if (v->link.state == RK_LINK_CLOSED && vb_try_release(v))
		return 1; /* v may be gone: nothing after this */
	return busy;
}

static enum rk_activity vb_cq_event(struct rk_fd_watch *w, int revents)
{
	struct verbs_link *v = w->data;
	struct ibv_cq *cq;
	void *cq_ctx;
	int busy = 0;

	(void)revents;
	if (v->link.state == RK_LINK_CLOSED)
		return RK_IDLE;
	/* Drain the channel (non-blocking), acknowledging in batches: each
	 * ack takes a lock, and destroy_cq waits for every event acked. */
	while (rk__ibv.get_cq_event(v->ch, &cq, &cq_ctx) == 0) {
		v->unacked++;
		v->link.stats.cq_events++;
		v->notify_armed = false;
	}
	if (v->unacked >= VB_ACK_BATCH) {
		rk__ibv.ack_cq_events(v->cq, v->unacked);
		v->unacked = 0;
	}
	vb_poll_cq(v, &busy);
	return busy ? RK_BUSY : RK_IDLE;
}

static int vb_src_arm(struct rk_source *src)
{
	struct verbs_link *v = src->data;
	int busy, ret;

	if (v->link.state == RK_LINK_CLOSED)
		return 1; /* do not block: the next poll releases the link */
	if (!v->notify_armed) {
		ret = vb_ret(ibv_req_notify_cq(v->cq, 0));
		if (ret)
			goto cannot_arm;
		v->notify_armed = true;
	}
	ret = rk_fd_watch_start(v->link.loop, &v->cq_watch, POLLIN);
	if (ret)
		goto cannot_arm;
	/* A completion that landed before the request raised no event: look again. */
	return vb_poll_cq(v, &busy);
cannot_arm:
	/* Blocking now could miss a completion: keep the loop polling instead. */
	rk__link_warn(&v->link, "link to rank %d (roce): cannot arm the CQ: %s", v->link.peer,
		 rk_strerror(ret));
	return 1;
}

static const struct rk_source_ops vb_source_ops = {
	.name = "roce-cq",
	.poll = vb_src_poll,
	.arm = vb_src_arm,
};

/* ---- transport ops ---------------------------------------------------------------- */

static void vb_shutdown(struct rk_link *l)
{
	struct verbs_link *v = vl_of(l);

	/* The side channel is shut and the verbs resources' op ends in the
	 * source's poll (vb_try_release), after a last send in flight left. */
	rk__dbg(l->rank, "roce: link to rank %d: shutdown (%s, draining %d)", l->peer,
		rk_strerror(l->err), v->draining);
	rk_timer_stop(&v->eof_timer);
	v->closing_since = rk_loop_now(l->loop);
	if (v->connecting) {
		struct io_uring_sqe *sqe = rk__loop_sqe(l->loop);

		if (sqe) {
			io_uring_prep_cancel(sqe, &v->connect_op, 0);
			io_uring_sqe_set_data64(sqe, RK_UDATA_INTERNAL);
		}
	}
}

static void vb_destroy(struct rk_link *l)
{
	struct verbs_link *v = vl_of(l);

	rk__dbg(l->rank, "roce: link to rank %d: freed", l->peer);
	rk_timer_stop(&v->eof_timer);
	vb_free_resources(v);
	if (v->fd >= 0)
		close(v->fd);
	rk__dbg(l->rank, "roce: link to rank %d: resources released", l->peer);
	free(v);
}

static const struct rk__transport_ops verbs_ops = {
	.name = "roce",
	.flush = vb_flush,
	.shutdown = vb_shutdown,
	.destroy = vb_destroy,
};

/* A link with its QP in INIT, attached to the loop. The fd is not owned yet. */
static int vl_new(struct rk_loop *loop, const struct rk__verbs_opts *o,
		  const struct rk__link_owner_ops *oops, void *owner, enum rk__link_state state,
		  struct verbs_link **out)
{
	struct verbs_link *v = calloc(1, sizeof(*v));
	int ret;

	if (!v)
		return -ENOMEM;
	v->o = *o;
	v->fd = -1;
	ret = vb_create(v, rk_loop_config(loop)->rank);
	if (ret) {
		vb_free_resources(v);
		free(v);
		return ret;
	}
	rk__link_init(&v->link, loop, &verbs_ops, oops, owner, state);
	v->recv_op.fn = sc_recv_done;
	rk_timer_init(&v->eof_timer, eof_grace_done, v);
	rk_fd_watch_init(&v->cq_watch, v->ch->fd, vb_cq_event, v);
	v->src.ops = &vb_source_ops;
	v->src.data = v;
	rk_loop_add_source(loop, &v->src);
	v->src_added = true;
	rk__link_op_start(&v->link); /* the verbs resources: see vb_try_release */
	*out = v;
	return 0;
}

/* Undo vl_new() for a link that never started: closed, freed by the release. */
static void vl_abandon(struct verbs_link *v)
{
	v->link.state = RK_LINK_CLOSED;
	v->link.failed_reported = true;
	v->link.oops = NULL; /* the owner never saw it */
	v->released = true;
	rk_loop_remove_source(v->link.loop, &v->src);
	rk__link_op_done(&v->link); /* frees it */
}

int rk__verbs_link_from_fd(struct rk_loop *loop, int fd, const struct rk__verbs_opts *o,
			   const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	struct verbs_link *v;
	int ret;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);

	ret = vl_new(loop, o, oops, owner, RK_LINK_ACCEPTED, &v);
	if (ret)
		return ret;
	v->fd = fd;
	if (getpeername(fd, (struct sockaddr *)&ss, &sslen) == 0)
		rk__sock_addr_str(&ss, v->link.peer_addr, sizeof(v->link.peer_addr));
	ret = sc_start(v);
	if (ret) {
		v->fd = -1; /* the caller closes it */
		vl_abandon(v);
		return ret;
	}
	*out = &v->link;
	return 0;
}

static void vb_connect_done(struct rk__op *op, int res, unsigned int flags)
{
	struct verbs_link *v = rk__container_of(op, struct verbs_link, connect_op);
	struct rk_link *l = &v->link;
	int ret;

	(void)flags;
	v->connecting = false;
	l->in_dispatch++;
	if (res < 0 || l->state == RK_LINK_CLOSED) {
		rk__link_fail(l, res < 0 ? res : -ECANCELED, false);
	} else {
		ret = sc_start(v);
		if (ret)
			rk__link_fail(l, ret, false);
	}
	l->in_dispatch--;
	rk__link_op_done(l);
}

int rk__verbs_connect(struct rk_loop *loop, const struct rk__addr *a,
		      const struct rk__verbs_opts *o, const struct rk__link_owner_ops *oops,
		      void *owner, struct rk_link **out)
{
	struct sockaddr_storage ss;
	struct io_uring_sqe *sqe;
	struct verbs_link *v;
	socklen_t len;
	int fd, ret;

	ret = rk__sock_resolve(a, false, &ss, &len);
	if (ret)
		return ret;
	ret = vl_new(loop, o, oops, owner, RK_LINK_CONNECTING, &v);
	if (ret)
		return ret;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		vl_abandon(v);
		return ret;
	}
	v->fd = fd;
	v->addr = ss;
	v->addrlen = len;
	rk__sock_addr_str(&ss, v->link.peer_addr, sizeof(v->link.peer_addr));
	sqe = rk__loop_sqe(loop);
	if (!sqe) {
		vl_abandon(v);
		return -EBUSY;
	}
	v->connect_op.fn = vb_connect_done;
	v->connecting = true;
	io_uring_prep_connect(sqe, fd, (struct sockaddr *)&v->addr, v->addrlen);
	rk__sqe_set_op(sqe, &v->connect_op);
	rk__link_op_start(&v->link);
	*out = &v->link;
	return 0;
}
