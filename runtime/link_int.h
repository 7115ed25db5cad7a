/* SPDX-License-Identifier: MIT */
/*
 * Links and the seams below and beside them: the transport-independent half
 * of a link (link.c), the ops a transport fills in (tcp.c, shm.c, rdma/), and
 * the transport classes a world's links are made by (transport.c). Used by
 * the transports, the world and the tests. Never installed.
 */
#ifndef RK_LINK_INT_H
#define RK_LINK_INT_H

#include "runtime_int.h"

struct rk_epoch;
struct rk__pending_host;

/* ---- transports: how a link's bytes move ---------------------------------------- */

struct rk__transport_ops {
	const char *name;		/* "tcp", "shm", "roce": what rk_link_transport() says */
	/* Its bytes go only between two processes of one user on one kernel (shared
	 * memory): frames on it carry no tag (WIRE.md, "Frame tags"). */
	bool local;
	/* Send what rk__link_tx_next() hands out; called by the flusher when
	 * frames are queued and nothing is in flight. */
	void (*flush)(struct rk_link *l);
	/* Stop all I/O (shutdown the socket, flush QPs). Each operation in
	 * flight must end with rk__link_op_done(). */
	void (*shutdown)(struct rk_link *l);
	/* Free the transport's resources (fd, QP); the link's memory follows. */
	void (*destroy)(struct rk_link *l);
	/* Optional: write one frame of @n bytes now, from the commit that encoded
	 * it, when nothing is queued or in flight on the link (link_direct()).
	 * Return the bytes the transport took, 0..@n: the rest goes through the
	 * batch and a flush, as any frame's would; an error is left to that flush. */
	size_t (*send_direct)(struct rk_link *l, const uint8_t *frame, size_t n);
	/* Optional, on a transport swapped in over a carrier: the carrier's side
	 * channel ended. Deliver what this transport already holds from the peer
	 * (a BYE it wrote before it left) before the carrier fails the link. */
	void (*drain)(struct rk_link *l);
};

/* ---- links (link.c): framing, handshake, batching, bounds; over a transport ---- */

/*
 * What a link reports to its owner (the world). All on the loop thread.
 * The link runs the handshake itself (WIRE.md): it checks the peer's protocol
 * version, world size, session, rank range and authentication mode, exchanges
 * the proofs, and asks the owner only what the owner knows.
 */
struct rk__link_owner_ops {
	/* The peer's HELLO (accepting side) or WELCOME (connecting side) passed
	 * the link's checks: may this rank join? (No proof has been checked yet:
	 * decide nothing lasting.) Return 0, or an error sent back as ERROR. */
	int (*check)(struct rk_link *l, const struct rk_wire_hello *hello);
	/* The handshake completed, the peer's proof included when a secret is
	 * used: the link is up. Return 0 to take it, or an error sent back. */
	int (*handshake)(struct rk_link *l);
	/* a frame for the application, or an ERROR frame: @payload and what the
	 * link decoded from it (@dec, by h->type), valid during the call */
	enum rk_activity (*frame)(struct rk_link *l, const struct rk_wire_hdr *h,
				  const uint8_t *payload, const union rk__wire_payload *dec);
	/* the link failed (called once, with the cause); it closes itself after */
	void (*failed)(struct rk_link *l, int err);
	/* the link's I/O is over and its memory is about to be freed */
	void (*closed)(struct rk_link *l);
};

enum rk__link_state {
	RK_LINK_CONNECTING,	/* transport connecting */
	RK_LINK_ACCEPTED,	/* waiting for HELLO */
	RK_LINK_HELLO_SENT,	/* waiting for WELCOME */
	RK_LINK_WELCOMED,	/* connecting side: waiting for the leader's AUTH */
	RK_LINK_AUTH_WAIT,	/* accepting side: WELCOME and AUTH sent, waiting for AUTH */
	RK_LINK_UP,
	RK_LINK_FAILED,		/* draining an ERROR/BYE frame, then closing */
	RK_LINK_CLOSED,		/* I/O shut down, waiting for ops to end */
};

struct rk__txbuf {
	uint8_t *p;
	size_t len, off, cap;
};

struct rk_link {
	struct rk_loop *loop;
	const struct rk__transport_ops *tops;
	const struct rk__link_owner_ops *oops;
	void *owner;
	enum rk__link_state state;
	int rank;			/* ours */
	int peer;			/* theirs, -1 until known */
	int err;			/* first failure */
	uint64_t tx_seq, rx_seq;
	struct rk__txbuf q;		/* frames being queued */
	struct rk__txbuf out;		/* frames being sent */
	uint8_t *rx;			/* a partial frame */
	size_t rx_len, rx_cap;
	uint32_t max_frame;
	uint64_t tx_limit;
	uint64_t created, last_rx, last_tx;
	struct rk__flusher flusher;
	unsigned int ops_inflight;
	unsigned int in_dispatch;
	bool close_after_flush;
	bool reserved;
	bool failed_reported;
	bool accepted;			/* the accepting side (a stranger until it is up) */
	bool was_up;			/* the handshake completed once */
	bool authed;			/* the peer proved the secret; key[] is the link's */
	uint8_t transcript[RK__TRANSCRIPT_LEN];	/* HELLO payload, then WELCOME payload */
	uint8_t key[RK_WIRE_MAC_LEN];	/* the link's own key (WIRE.md), once authed */
	bool tags;			/* both sides agreed on frame tags (auth 2, WIRE.md) */
	bool tx_tag, rx_tag;		/* ...and its frames carry them now, each way: from
					 * the handshake on, until a local transport takes
					 * that direction over */
	struct rk__tagger tag_tx, tag_rx;	/* keyed once the link is up */
	char peer_addr[64];		/* "host:port" of the peer, for log lines */
	struct rk_link_stats stats;
	struct rk__gaps gaps;		/* its busy frames' arrivals, learned by the loop */
	uint64_t tx_sent;		/* bytes handed to the transport (rk__link_tx_done) */
	bool rx_cut;			/* set by a control frame: the stream it came on ends
					 * with it; bytes after it fail the link (-EPROTO) */

	/* its class (transport.c) and a transport swapped in over its carrier */
	const struct rk__transport_class *tclass;	/* whose hooks run on it, or NULL */
	void *tctx;			/* that class's context (its prepare()'s) */
	void *cpriv;			/* that class's own state for this link, or NULL */
	void *tpriv;			/* the swapped-in transport's (rk__link_set_transport()) */
	const char *carrier_name;	/* the transport before the swap, or NULL */
	uint64_t tx_carrier_end;	/* stream bytes committed before the swap: the carrier's */
	bool moving;			/* a transport takes it over, or tried to: its carrier
					 * keeps every read and write on the loop's ring (tcp.c),
					 * so the socket stays watched and the switch ordered
					 * after a send */
	bool rx_moved;			/* the peer's stream left the carrier
					 * (rk__link_rx_switch()): what the carrier
					 * receives now fails the link */

	struct rk_link *next;		/* owner's list */
	struct rk_link *all_next;	/* owner's list of every live link */
	/* the leader's pending table (world_strangers.c), while the link is a stranger there */
	struct rk_link *prev;		/* ...next's other way */
	struct rk_link *host_prev, *host_next;	/* its address's strangers, stalest first */
	struct rk__pending_host *host;	/* that address */
	uint64_t step_at;		/* its last handshake step: accepted, then a valid HELLO */
};

/* Initialise the generic part of a link embedded in a transport's struct. */
void rk__link_init(struct rk_link *l, struct rk_loop *loop, const struct rk__transport_ops *tops,
		   const struct rk__link_owner_ops *oops, void *owner, enum rk__link_state state);
/* Bytes received (any split); frames are parsed, validated and dispatched.
 * Return: 0, or the error that failed the link. */
int rk__link_rx(struct rk_link *l, const uint8_t *p, size_t n);

/* A frame type's bit in a mask (struct rk__frame_stream, RK__FRAME_CONTROL). */
#define RK__FRAME_BIT(t)	(1u << (t))
_Static_assert(RK_FRAME__COUNT <= 32, "a frame type mask is 32 bits");
/* The frame types only a link's class takes (its control() hook: the same-host
 * upgrade's, WIRE.md). They never reach the owner; on a link whose class takes
 * none they fail it (RK_EHANDSHAKE). */
#define RK__FRAME_CONTROL						\
	(RK__FRAME_BIT(RK_FRAME_SHM_REQUEST) | RK__FRAME_BIT(RK_FRAME_SHM_OFFER) |	\
	 RK__FRAME_BIT(RK_FRAME_SHM_ANSWER) | RK__FRAME_BIT(RK_FRAME_SHM_SWITCH))

/*
 * A stream of whole frames beside the link's byte stream (a same-host
 * broadcast ring, a follower's lane): each record is one frame, numbered in
 * the stream's own sequence, of the types the stream may carry. The transport
 * that reads the stream owns this and sets it up; rk__link_rx_frame() checks
 * and counts each frame against it.
 */
struct rk__frame_stream {
	uint64_t seq;			/* the next frame's sequence number */
	uint32_t types;			/* RK__FRAME_BIT()s of the types it may carry */
	int err_type;			/* what a frame of another type fails the link with */
	int err_record;			/* ...and a record that is not exactly one frame */
};
/* One whole frame of @st (@n bytes, in private memory): validated like any
 * received frame, then dispatched. Return: 0, or the error that failed the link. */
int rk__link_rx_frame(struct rk_link *l, struct rk__frame_stream *st, const uint8_t *frame,
		      size_t n);
/* Next bytes to send: a pointer and length into the out buffer (0: none). After
 * rk__link_set_transport(), and until they are sent, only the bytes committed
 * before it: the carrier's. */
size_t rk__link_tx_next(struct rk_link *l, const uint8_t **p);
/* @n bytes of what rk__link_tx_next() gave were sent. */
void rk__link_tx_done(struct rk_link *l, size_t n);
/* Queue a frame ignoring the link state (handshake, ERROR, BYE). */
int rk__link_send_raw(struct rk_link *l, unsigned int type, unsigned int flags,
		      const void *payload, uint32_t len);
/* Fail the link with @err: report it to the owner once; if @tell, send the
 * peer an ERROR frame first; then close. Safe to call repeatedly. */
void rk__link_fail(struct rk_link *l, int err, bool tell);
/* As rk__link_fail(), with @msg (NULL: rk_strerror(err)) as the ERROR's text. */
void rk__link_fail_msg(struct rk_link *l, int err, bool tell, const char *msg);
/* Orderly close: send BYE (if up), flush, then shut down. */
void rk__link_close(struct rk_link *l, bool bye);
/* Shut the transport down now (after a linger), skipping unsent frames. */
void rk__link_abort(struct rk_link *l);
/* Transports: an operation of theirs started / ended. */
static inline void rk__link_op_start(struct rk_link *l)
{
	l->ops_inflight++;
}
void rk__link_op_done(struct rk_link *l);
/* The transport connected: start the handshake (HELLO) as rank @rank. */
void rk__link_connected(struct rk_link *l);
/*
 * A transport takes the link over from its carrier (the one in l->tops) at a
 * frame boundary of the link's own sends: from now on the link calls @ops,
 * with @priv in l->tpriv, and the bytes committed before this call are the
 * carrier's to send (rk__link_tx_next() hands out no more until they are
 * sent; @ops->flush() calls the carrier's flush for them). @ops must keep the
 * carrier's ops to shut it down and destroy it, and its rk_link_transport()
 * name stays the carrier's until rk__link_rx_switch(). Once per link. Loop
 * thread.
 */
void rk__link_set_transport(struct rk_link *l, const struct rk__transport_ops *ops, void *priv);
/* Inside a control() hook: the frame being dispatched is the peer's last on the
 * carrier; its frames come through the transport @to (the one swapped in, or
 * about to be) from now on, and bytes after it on the carrier fail the link
 * (-EPROTO). */
void rk__link_rx_switch(struct rk_link *l, const struct rk__transport_ops *to);
/* A stranger: an accepted link whose handshake has not completed. Its
 * failures are the owner's to count and log (rate-limited), not the link's. */
static inline bool rk__link_stranger(const struct rk_link *l)
{
	return l->accepted && !l->was_up;
}
/* A warning about a link; about a stranger it is only a debug line. */
#define rk__link_warn(l, ...)							\
	rk__log(rk__link_stranger(l) ? RK_LOG_DEBUG : RK_LOG_WARN, (l)->rank, __VA_ARGS__)

/* ---- transport classes (transport.c): how a world's links are made, by scheme ---- */
/*
 * One class per address scheme (rdma-core's provider pattern): the world binds
 * the leader address's scheme here (rk__transport_open()) and never names a
 * transport itself. The leader always listens on TCP (for roce:// that socket
 * is the side channel); a class turns each accepted socket into a link, and
 * connects a follower's. A class may also take over the links another class
 * makes (@over: the same-host upgrade of tcp links, NCCL's canConnect()): its
 * hooks run on each link once it is up, and it swaps its own transport in
 * where it can (rk__link_set_transport()). A class registers itself from its
 * own module (a constructor), so a new transport plugs in without touching
 * world.c. Every hook is optional unless said otherwise; all run on the loop
 * thread.
 */
struct rk__transport_class {
	const char *scheme;		/* "tcp", "roce", "shm" (at most 7 characters) */
	/* The scheme of the class whose links this one takes over: in a world
	 * of that scheme (the first such class registered), and in one of its
	 * own, whose links that class then makes. NULL: it makes its own. */
	const char *over;
	/* Once per world, before any link: check this rank's end for address @a
	 * (a device, a GID index, a policy) and keep what its links need in *@ctx.
	 * Return: 0 or -errno / -RK_ECONFIG, logged by the class. */
	int (*prepare)(struct rk_loop *loop, const struct rk__addr *a, void **ctx);
	/* Free what prepare() kept. */
	void (*release)(void *ctx);
	/* Follower: connect to @a; the link starts the handshake once connected,
	 * and a failure to connect comes through oops->failed(). Required unless
	 * @over is set. */
	int (*connect)(struct rk_loop *loop, const struct rk__addr *a, void *ctx,
		       const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out);
	/* Leader: a link over the socket @fd accepted on the world's port, in state
	 * RK_LINK_ACCEPTED. It owns @fd on success only. Required unless @over is set. */
	int (*from_fd)(struct rk_loop *loop, int fd, void *ctx,
		       const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out);

	/* The hooks that run on each link (l->tclass, with l->tctx as @ctx). */
	/* The handshake completed and the link is up (an upgrade starts here). */
	void (*up)(void *ctx, struct rk_link *l);
	/* A frame of the class's own (RK__FRAME_CONTROL) on a link that is up.
	 * Return 0, or an error that fails the link. Without it such frames fail
	 * the link from their header (RK_EHANDSHAKE). */
	int (*control)(void *ctx, struct rk_link *l, const struct rk_wire_hdr *h,
		       const uint8_t *payload);
	/* The link is shut down, then about to be freed (before its transport's
	 * destroy()): end, then free, what up() and control() keep in l->cpriv. */
	void (*link_shutdown)(void *ctx, struct rk_link *l);
	void (*link_free)(void *ctx, struct rk_link *l);
	/* Whether @l's upgrade has ended, either way. Without it: true. */
	bool (*settled)(void *ctx, const struct rk_link *l);

	/* The world's hooks. */
	/* Leader: deliver a frame to every follower the class reaches with one
	 * write (same-host shared memory), setting @done[rank] for each one it
	 * took; the world sends it to the others link by link. Return 0, or an
	 * error when no write was made (the world then sends to all). */
	int (*broadcast)(void *ctx, unsigned int type, unsigned int flags, const void *payload,
			 uint32_t len, uint8_t *done);
	/* Add the class's counters to @st. */
	void (*stats)(void *ctx, struct rk_world_stats *st);
	/* Same-host round epochs (rk_sched.h, docs/RESIDENT-SHM.md). epoch(): the
	 * leader's region that its same-host followers map, or NULL. link_epoch():
	 * a follower's read-only view of it over link @l, or NULL; it is closed
	 * (rk_epoch_close()) when the link ends, which releases this process's
	 * consumers asleep on it. Neither reference is the caller's:
	 * rk_epoch_hold() one to keep it. */
	struct rk_epoch *(*epoch)(void *ctx);
	struct rk_epoch *(*link_epoch)(void *ctx, const struct rk_link *l);
};
/* The table of classes (register, unregister, find) is runtime_int.h's: the
 * address parser reads it too. */

/* A world's classes: the one that makes its links and the one whose hooks run
 * on them (the same class, or one that takes the first's links over). */
struct rk__transport {
	const struct rk__transport_class *make, *run;
	void *make_ctx, *run_ctx;
};
/* Bind @t to the scheme of @a and prepare its classes (@t zeroed: a world of
 * one rank, which has none, may call every function below on it). Return: 0,
 * -RK_ECONFIG (no class for it) or what a prepare() returned. */
int rk__transport_open(struct rk_loop *loop, const struct rk__addr *a, struct rk__transport *t);
/* Release what rk__transport_open() prepared. */
void rk__transport_close(struct rk__transport *t);
/* The make class's connect() and from_fd(), the link then handed to the run class. */
int rk__transport_connect(const struct rk__transport *t, struct rk_loop *loop,
			  const struct rk__addr *a, const struct rk__link_owner_ops *oops,
			  void *owner, struct rk_link **out);
int rk__transport_accept(const struct rk__transport *t, struct rk_loop *loop, int fd,
			 const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out);
/* The run class's hooks, with their defaults where it has none: settled true,
 * broadcast 0 with nothing @done, no counters, no epochs. */
bool rk__transport_settled(const struct rk__transport *t, const struct rk_link *l);
int rk__transport_broadcast(const struct rk__transport *t, unsigned int type, unsigned int flags,
			    const void *payload, uint32_t len, uint8_t *done);
void rk__transport_stats(const struct rk__transport *t, struct rk_world_stats *st);
struct rk_epoch *rk__transport_epoch(const struct rk__transport *t);
struct rk_epoch *rk__transport_link_epoch(const struct rk__transport *t, const struct rk_link *l);

#endif /* RK_LINK_INT_H */
