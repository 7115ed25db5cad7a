/* SPDX-License-Identifier: MIT */
/* rankrt runtime internals shared across runtime/, rdma/ and gpu/. Never installed. */
#ifndef RK_RUNTIME_INT_H
#define RK_RUNTIME_INT_H

#include <stdarg.h>
#include "rk_runtime.h"
#include "util_int.h"
#include "config_int.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#include "wire_int.h"	/* union rk__wire_payload: frames handed on decoded */

/* ---- config defaults (documented in README.md; chosen in ARCHITECTURE.md) ---- */
#define RK_DEF_SPIN_US		20000
#define RK_DEF_SPIN_YIELD	64
#define RK_DEF_PREDICT		1
#define RK_DEF_PREDICT_MARGIN_US	20
#define RK_DEF_PREDICT_MIN_US	20
#define RK_DEF_LEARN		1
#define RK_DEF_LEARN_SPIN_MIN_US	1000
#define RK_SQPOLL_AUTO_CPUS	8	/* RK_SQPOLL=auto: CPUs in the affinity mask for on */
#define RK_DEF_RING_ENTRIES	256
#define RK_DEF_RX_BUF_SIZE	16384
#define RK_DEF_RX_BUF_COUNT	64
#define RK_DEF_MAX_FRAME	(4u << 20)
#define RK_DEF_TX_LIMIT		(64ull << 20)
#define RK_DEF_HEARTBEAT_MS	1000
#define RK_DEF_PEER_TIMEOUT_MS	5000
#define RK_DEF_CONNECT_MS	30000
#define RK_DEF_PORT		18000	/* RK_PORT: not torch's 29500, nor a well-known service's */
#define RK_DEF_HANDSHAKE_MS	2000
/* The round watchdog's floor: a first prefill with no progress calls, seconds on
 * a GPU, must pass; 10x the slowest round seen raises the bound above it. */
#define RK_DEF_ROUND_TIMEOUT_MS	10000
#define RK_DEF_MAX_PENDING	1024
#define RK_DEF_REFUSED_LOG_MS	10000
#define RK_RX_POOL_MAX		(1ull << 30)	/* RK_RX_BUF_COUNT x RK_RX_BUF_SIZE */

/* ---- logging: "rankrt[r<rank>] <level>: <message>" ---- */
/* rank < 0 prints "rankrt[-]". Thread-safe: one write() per line. */
void rk__log(int level, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The threshold: lines above it are dropped. Set from the first loop's config
 * and by rk__log_set_level(); RK_LOG is read by rk_config_from_env(). */
void rk__log_set_level(int level);
void rk__log_set_time(bool on);
int rk__log_level(void);

#define rk__err(rank, ...)	rk__log(RK_LOG_ERROR, rank, __VA_ARGS__)
#define rk__warn(rank, ...)	rk__log(RK_LOG_WARN, rank, __VA_ARGS__)
#define rk__info(rank, ...)	rk__log(RK_LOG_INFO, rank, __VA_ARGS__)
#define rk__dbg(rank, ...)						\
	do {								\
		if (rk__log_level() >= RK_LOG_DEBUG)			\
			rk__log(RK_LOG_DEBUG, rank, __VA_ARGS__);	\
	} while (0)

/* ---- config parsing helpers (config.c; addresses: addr.c) ---- */
/* The rules between knobs (timeouts, the receive pool's size, SQPOLL_CPU against
 * this machine, the secret and RK_AUTH). 0 or -RK_ECONFIG with @err naming the
 * variables. rk_config_from_env() and rk_loop_create() apply it. */
int rk__config_check(const struct rk_config *c, char *err, size_t errlen);
/* Strict unsigned parse of the whole string; 0 or -RK_ECONFIG. */
int rk__parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* "tcp://host:port", "roce://host:port?dev=rxe0&gid=1" or "host:port" (tcp).
 * Splits into scheme ("tcp"/"roce"), host, port and the query string. */
struct rk__addr {
	char scheme[8];
	char host[128];
	uint16_t port;
	char query[96];
};
int rk__addr_parse(const char *s, struct rk__addr *out);
/* A roce:// query: "dev=NAME&gid=N" (either, both, any order; nothing else).
 * Sets *@dev / *@gid only for the keys present. Return: 0 or -RK_ECONFIG. */
int rk__roce_query_parse(const char *query, char *dev, size_t devlen, int *gid);
/* 64-bit FNV-1a. */
uint64_t rk__fnv1a64(const void *p, size_t n);

/* ---- the transport classes' scheme table (transport.c; a class: link_int.h) ---- */
struct rk__transport_class;
/* Add @c. Return: 0, -EEXIST (its scheme is taken), -ENOSPC. Not thread-safe:
 * constructors, and tests before any world exists. */
int rk__transport_register(const struct rk__transport_class *c);
/* Remove @c again (tests). */
void rk__transport_unregister(const struct rk__transport_class *c);
/* The class of @scheme, or NULL (rk__addr_parse() refuses a scheme without one). */
const struct rk__transport_class *rk__transport_find(const char *scheme);

/* ---- authentication (auth.c, over OpenSSL's libcrypto) ---- */
/* The handshake transcript: the HELLO payload, then the WELCOME payload. */
#define RK__TRANSCRIPT_LEN	(2 * RK_WIRE_HELLO_LEN)
enum rk__auth_label {
	RK__AUTH_LEADER,	/* the leader's proof (its AUTH frame) */
	RK__AUTH_FOLLOWER,	/* the follower's proof */
	RK__AUTH_LINK_KEY,	/* the link's own key, for whatever later needs one */
	RK__AUTH_TAG_LEADER,	/* the key of the tags on the leader's frames */
	RK__AUTH_TAG_FOLLOWER,	/* ...and on the follower's */
	RK__AUTH__COUNT,
};
/* Whether this build can authenticate (it has libcrypto). */
bool rk__auth_available(void);
/* HMAC-SHA256(key, label || transcript). 0, -EOPNOTSUPP (no OpenSSL) or -EIO. */
int rk__auth_mac(const uint8_t *key, size_t keylen, enum rk__auth_label which,
		 const uint8_t transcript[RK__TRANSCRIPT_LEN], uint8_t out[RK_WIRE_MAC_LEN]);
/* Constant-time equality of two proofs. */
bool rk__auth_equal(const uint8_t *a, const uint8_t *b, size_t n);
/* Unpredictable bytes (nonces). 0 or -errno. */
int rk__auth_random(void *buf, size_t n);
/* Wipe key material (not optimised away). */
void rk__secure_zero(void *p, size_t n);

/*
 * Frame tags (WIRE.md, "Frame tags"): AES-256-GCM with the whole frame as
 * associated data and no plaintext, one key per link and direction, the
 * frame's sequence number as the nonce. One per direction, keyed once.
 */
#define RK__TAG_LEN	RK_WIRE_TAG_LEN
struct rk__tagger {
	void *ctx;			/* EVP_CIPHER_CTX: AES-256 (ECB, its block) */
	void *gcm;			/* GCM128_CONTEXT over it; NULL until keyed */
};
/* Key @t with @key. 0, -EOPNOTSUPP (no OpenSSL), -ENOMEM or -EIO. */
int rk__tagger_init(struct rk__tagger *t, const uint8_t key[RK_WIRE_MAC_LEN]);
/* Free the contexts, their key material wiped. Safe on a zeroed @t. */
void rk__tagger_fini(struct rk__tagger *t);
/* The tag of the @n bytes at @p under nonce @seq, into @tag. 0 or -EIO. */
int rk__tag_seal(struct rk__tagger *t, uint64_t seq, const uint8_t *p, size_t n,
		 uint8_t tag[RK__TAG_LEN]);
/* Whether @tag is the tag of the @n bytes at @p under nonce @seq: 0 or -RK_EFRAMEAUTH. */
int rk__tag_open(struct rk__tagger *t, uint64_t seq, const uint8_t *p, size_t n,
		 const uint8_t tag[RK__TAG_LEN]);

/* Grow *@p (@elem-byte elements, capacity *@cap) to hold @need, doubling from
 * @min. Return: 0 or -ENOMEM (then *@p and *@cap are unchanged). */
int rk__grow(void **p, size_t *cap, size_t need, size_t elem, size_t min);

/* ---- the loop's internal interface (loop.c), used by links and transports ---- */
#include <liburing.h>
#include <sys/socket.h>

/*
 * Every SQE the runtime submits carries a pointer to one of these as its
 * user_data; the loop calls fn with the CQE's result and flags. The op's
 * storage must live until its last CQE (IORING_CQE_F_MORE clear).
 */
struct rk__op {
	void (*fn)(struct rk__op *op, int res, unsigned int flags);
};

/* user_data of SQEs whose completion is ignored (cancels, links' timeouts). */
#define RK_UDATA_INTERNAL (~0ULL)

/* Get an SQE, submitting queued ones first if the SQ is full. NULL only if
 * the kernel refuses to take any (fatal for the caller's operation). */
struct io_uring_sqe *rk__loop_sqe(struct rk_loop *loop);
static inline void rk__sqe_set_op(struct io_uring_sqe *sqe, struct rk__op *op)
{
	io_uring_sqe_set_data(sqe, op);
}

/* Before-wait work (Redis ae's beforeSleep): links queue themselves here when
 * they have frames to flush; the loop runs each once per iteration, before it
 * spins or blocks, so frames queued by handlers go out in one send. */
struct rk__flusher {
	void (*fn)(struct rk__flusher *f);
	struct rk__flusher *next;
	bool queued;
};
void rk__loop_queue_flush(struct rk_loop *loop, struct rk__flusher *f);
/* Run the queued flushers and submit their SQEs now, from inside a handler,
 * instead of at the end of the iteration (frames that must leave before the
 * handler goes on, e.g. a ROUND before the leader's own launch). A link whose
 * previous send is still in flight sends when that one completes, as usual. */
void rk__loop_flush_now(struct rk_loop *loop);

/* The loop's provided-buffer ring for TCP receive (NULL group when absent). */
struct rk__bufring {
	struct io_uring_buf_ring *br;
	uint8_t *mem;
	unsigned int size, count, mask;
	int bgid;
};
struct rk__bufring *rk__loop_bufring(struct rk_loop *loop);
/* Hand buffer @bid back to the kernel. */
void rk__bufring_recycle(struct rk__bufring *r, unsigned int bid);

/* Handles attached to a loop (links, worlds): rk_loop_destroy() refuses while > 0. */
void rk__loop_ref(struct rk_loop *loop);
void rk__loop_unref(struct rk_loop *loop);
/* Count events into the policy: busy events restart the spin window. */
void rk__loop_note(struct rk_loop *loop, enum rk_activity a);
int rk__loop_rank(const struct rk_loop *loop);
/* Re-read the clock outside an iteration (the cached time may be stale after
 * a long handler or a blocking call); returns the new rk_loop_now(). */
uint64_t rk__loop_refresh(struct rk_loop *loop);
/* The loop's iteration count (rk_loop_stats.iterations): changes once per
 * iteration, so a source can tell a second event of one iteration. */
uint64_t rk__loop_iteration(const struct rk_loop *loop);
/* The loop's clock now, without touching its cached time. Loop thread. */
uint64_t rk__loop_clock(const struct rk_loop *loop);
/* Whether this iteration follows a wait in which the thread slept (a predictive
 * or blocking wait): what it sees now may have happened a while ago. */
bool rk__loop_after_park(const struct rk_loop *loop);
/*
 * A source's poll() that found nothing at the price of a syscall (a TCP link's
 * direct read): count it as @n more empty spin iterations toward RK_SPIN_YIELD,
 * so that a loop spinning on syscalls yields about as often in time as one
 * peeking its ring does, and leaves the CPU to other threads as often.
 */
void rk__loop_spin_charge(struct rk_loop *loop, unsigned int n);
/*
 * For a source's arm(): the timeout of the wait being armed, UINT64_MAX when
 * it has none (the loop blocks until an event). Only valid inside arm().
 */
uint64_t rk__loop_parking_ns(const struct rk_loop *loop);
/* The spin's sched_yield() calls so far (RK_SPIN_YIELD): for tests. */
uint64_t rk__loop_yields(const struct rk_loop *loop);
/*
 * A source whose events come on the ring (a frame), not through its poll():
 * say that its predicted event came, so the loop can tell a late prediction
 * from a sleep cut short by something else. Loop thread.
 */
void rk__loop_source_event(struct rk_loop *loop, struct rk_source *src);
/*
 * One busy event of this iteration was @src's (a link's frame, told by its
 * learner): while the last busy work was all one source's, the wait policy
 * may end the spin window where that source says (rk__gaps). Loop thread.
 */
void rk__loop_busy_by(struct rk_loop *loop, struct rk_source *src);
/* The source of @loop with @ops, or NULL (a transport's one per loop). Loop thread. */
struct rk_source *rk__loop_source_find(struct rk_loop *loop, const struct rk_source_ops *ops);
/* A source warmed a path after a predictive sleep (rk_loop_stats.prewarms). */
void rk__loop_count_prewarm(struct rk_loop *loop);

/*
 * A predictor for a source's expect() (rk_source_ops): how long after a known
 * start an event comes. It tracks q, a low quantile (about the 10th
 * percentile) of that duration, stochastically: a duration below q moves q
 * down by 9 steps, one above moves it up by one step (a step is q/256), so
 * about one event in ten comes before q. That needs only "below or above q",
 * which a censored observation also gives: an event seen right after the loop
 * slept happened at most then, so when that bound is below q it counts as
 * below, and oversleeping can never teach longer sleeps. The mean and mean
 * deviation (EWMA 1/8, 1/4) of the exact samples bound how long a prediction
 * stays valid: past max(q, mean + 4 deviations) + slack it is overdue; the
 * expected time is the earlier of q and mean - 2 deviations.
 */
struct rk__pred {
	uint64_t q;
	uint64_t mean;
	uint64_t dev;
	uint32_t n;
};

#define RK__PRED_WARM		8		/* samples before predicting */
#define RK__PRED_MIN_SLACK	20000ull	/* ns past the mean + 4 dev before overdue */

static inline uint64_t rk__pred_step(const struct rk__pred *p)
{
	return p->q / 256 > 50 ? p->q / 256 : 50;
}

static inline void rk__pred_below(struct rk__pred *p)
{
	uint64_t down = 9 * rk__pred_step(p);

	p->q = p->q > down ? p->q - down : 0;
}

/* An exact sample: the event came @d ns after its start. */
static inline void rk__pred_sample(struct rk__pred *p, uint64_t d)
{
	uint64_t dev;

	if (!p->n) {
		p->q = d;
		p->mean = d;
		p->dev = d / 4;
	} else {
		if (d < p->q)
			rk__pred_below(p);
		else
			p->q += rk__pred_step(p);
		dev = d > p->mean ? d - p->mean : p->mean - d;
		p->dev = (p->dev * 3 + dev) / 4;
		p->mean = (p->mean * 7 + d) / 8;
	}
	if (p->n < UINT32_MAX)
		p->n++;
}

/* A censored one: the event came at most @d ns after its start. */
static inline void rk__pred_bound(struct rk__pred *p, uint64_t d)
{
	if (!p->n)
		rk__pred_sample(p, d);
	else if (d <= p->q)
		rk__pred_below(p);
}

/* When an event that started at @start is expected, or 0 (cold, or overdue at @now). */
static inline uint64_t rk__pred_expect(const struct rk__pred *p, uint64_t start, uint64_t now)
{
	uint64_t slack, span, early;

	if (p->n < RK__PRED_WARM)
		return 0;
	slack = p->mean / 4 > RK__PRED_MIN_SLACK ? p->mean / 4 : RK__PRED_MIN_SLACK;
	span = p->mean + 4 * p->dev > p->q ? p->mean + 4 * p->dev : p->q;
	if (now > start + span + slack)
		return 0;
	/* q moves slowly (a step is q/256): while it settles, or after a change
	 * of pace, mean - 2 deviations (quick) keeps the wake early */
	early = p->mean > 2 * p->dev ? p->mean - 2 * p->dev : 0;
	if (p->q < early)
		early = p->q;
	return start + (early ? early : 1);
}

/*
 * What the loop learns of one source of arrivals (a link's busy frames): the
 * gaps between their bursts, from which it predicts the next burst and sleeps
 * until shortly before it (the wait policy's learner: wait.c and wait_int.h
 * say how). Embedded in its owner (struct rk_link), zeroed; a source of the
 * loop's from the first arrival, detached with rk__gaps_detach() before the
 * owner is freed.
 */
struct rk__wait;
struct rk__gaps {
	struct rk_source src;		/* a source of the loop's, without poll() */
	struct rk__wait *w;		/* the loop's wait decisions */
	uint64_t mean, dev;
	uint64_t lo;			/* the shortest gap sampled */
	uint64_t off_rate;		/* the last gap sampled, if off the learned pace; else 0 */
	uint64_t late_hi;		/* how far past the mean bursts came: a peak, decaying */
	uint64_t first, last;		/* this burst's first and last arrival, 0 = none */
	uint32_t n;			/* samples taken */
	uint32_t hold;			/* bursts left without predicting */
	uint32_t hold_next;		/* the next hold: doubles while sleeps are cut */
	bool first_late;		/* the burst's first arrival was seen after a sleep */
};

/* A busy arrival on @g now (rk_loop_now()). Loop thread. */
void rk__gaps_arrival(struct rk_loop *loop, struct rk__gaps *g);
/* Take @g off its loop (no-op when it never arrived). Loop thread. */
void rk__gaps_detach(struct rk__gaps *g);

/*
 * Whether the heartbeat tick at @now sends on a link whose last frame went out
 * at @last_tx, the ticks @hb apart (world.c): idle for half a period or more.
 * The heartbeat it sent at the previous tick is a period old, give or take the
 * timer's jitter, so "idle for a whole period" would skip every tick that came
 * a little earlier than the one before, and the heartbeats would go one or two
 * periods apart at random. An idle rank's CPU is its wakes: one tick and one
 * peer's heartbeat a period, each period.
 */
static inline bool rk__heartbeat_due(uint64_t now, uint64_t last_tx, uint64_t hb)
{
	return now - last_tx >= hb / 2;
}

/* ---- the TCP rehearsal (tcp.c's per-loop source), for check_tcp ---- */
/* Send 64 bytes around the loopback pair @fds and read them back, making the
 * pair at the first call (both -1). Return 0, or -errno (the pair is closed,
 * both -1 again). Loop thread. */
int rk__tcp_rehearse(int fds[2]);

/* Leader: a connection accepted on the world's port (the listener's callback;
 * the fuzzers hand it descriptors directly). Takes @fd. Loop thread. */
void rk__world_accept(struct rk_world *w, int fd);

/* ---- teardown (loop.c, world.c, sched*.c) ---- */
/*
 * One iteration that only drives I/O, for a world's teardown: reap completions,
 * poll the sources, run the flushers, then, if nothing ran, spin (inside the
 * policy's spin window) or wait at most @timeout_ns (UINT64_MAX: no bound),
 * so links drain as fast as under rk_loop_run(). It delivers no post and runs no timer
 * (they wait for the application's next rk_loop_run()), and it neither honours
 * nor consumes rk_loop_stop(). Return: 0, -EBUSY inside a callback, -EEXIST on a
 * thread other than the one a RK_DEFER_TASKRUN ring is bound to. Loop thread.
 */
int rk__loop_run_io(struct rk_loop *loop, uint64_t timeout_ns);
/* Whether a run of @loop is under way: the caller is inside one of its callbacks. */
bool rk__loop_running(const struct rk_loop *loop);
/* Whether @loop's ring is bound (RK_DEFER_TASKRUN) to a thread other than the caller. */
bool rk__loop_foreign(const struct rk_loop *loop);
/* How many ring timeouts blocking waits armed at a timer's deadline (park_timer()). */
uint64_t rk__loop_ring_timeouts(const struct rk_loop *loop);
/* A scheduler is built on @w: rk_world_destroy() refuses (-EBUSY) until it is released. */
void rk__world_hold(struct rk_world *w);
void rk__world_release(struct rk_world *w);
/*
 * Leader: run @w's loop (rk_loop_run()) until every link that is up has
 * settled its same-host upgrade (its class's settled()), bounded by the connect
 * timeout; nothing on a follower (its link is on the rings before the first
 * ROUND it gets, as the leader's SWITCH precedes it), before the world is
 * ready, or inside a callback. Return: true when
 * settled (never before the world is ready). rk__world_epoch(): the shared round-epoch region this rank uses
 * (the leader's own, a follower's view over its link to rank 0), or NULL.
 * Loop thread.
 */
bool rk__world_settle(struct rk_world *w);
struct rk_epoch *rk__world_epoch(struct rk_world *w);

/* ---- frame claims (world.c): what modules above the world take for themselves ---- */
/*
 * A claim names the frames a module above the world owns (the scheduler:
 * ROUND, ROUND_DONE, ROUND_WATCH and its backend's USER tags; the NCCL bootstrap:
 * NCCL_ID). The world hands every frame a claim covers to its @frame, with
 * what the link decoded, and never to the application's frame callback,
 * which sees only what no claim covers. The claims of a world never overlap.
 * Embedded in its owner, which registers it (rk__world_claim()) and removes
 * it (rk__world_unclaim()) before its memory goes; rk_world_destroy() drops
 * the claims left, delivering nothing more to them. Loop thread.
 */
struct rk__claim {
	uint32_t types;		/* 1u << type of each type taken whole: ROUND,
				 * ROUND_DONE, ROUND_WATCH or NCCL_ID (USER goes
				 * by tag) */
	uint32_t tag, ntags;	/* USER frames tagged [tag, tag + ntags); ntags 0: none */
	/* @peer's frame: its @payload, and @p, the payload decoded by h->type
	 * (views into it), valid during the call. It may remove its own claim.
	 * Return: as a world frame callback. */
	enum rk_activity (*frame)(struct rk__claim *c, int peer, const struct rk_wire_hdr *h,
				  const uint8_t *payload, const union rk__wire_payload *p);
	/* private: the world's */
	struct rk_world *world;	/* the world it is registered on, else NULL */
	struct rk__claim *next;
};
/* Return: 0; -EINVAL (no frame, another type, tags past UINT32_MAX, nothing
 * claimed, or registered already), -EBUSY (another claim covers one of them). */
int rk__world_claim(struct rk_world *w, struct rk__claim *c);
/* Remove @c: nothing more reaches it. A no-op when it is not registered. */
void rk__world_unclaim(struct rk__claim *c);


/* ---- round epochs other processes map (epoch.c) ------------------------------------ */

struct rk_epoch;

/* how many readers' bells a writer rings (one per same-host follower) */
#define RK__EPOCH_MAX_BELLS	64

/*
 * rk__epoch_desc_bound() - the descriptor bound of a world's round-epoch
 * regions: a ROUND payload as large as @max_frame allows, within
 * RK_EPOCH_DESC_MAX. The scheduler's own region, the leader's shared one and a
 * follower's view of it use this one bound (a view of another size is
 * refused). Any thread.
 */
uint32_t rk__epoch_desc_bound(uint32_t max_frame);

/* rk__epoch_sleepers() - consumers of @e (a region or a view) that announced a
 * futex sleep and have not left it yet (tests: a waiter is on the sleep path). */
uint32_t rk__epoch_sleepers(const struct rk_epoch *e);

/*
 * rk__epoch_create_fd() - as rk_epoch_create(), in a memfd sealed against
 * resizing and against any later writable mapping, for same-host followers
 * to map read-only; *@fdp is the caller's to send and close. Loop thread.
 * Return: 0, -EINVAL (@desc_max 0 or above RK_WIRE_MAX_PAYLOAD) or -errno.
 */
int rk__epoch_create_fd(uint32_t desc_max, int *fdp, struct rk_epoch **out);

/*
 * rk__epoch_map() - a reader's view of the region in memfd @fd (not taken):
 * mapped read-only after checking that it is sealed against writers and
 * resizing and has the size @desc_max implies. Its consumers sleep on @bell
 * and count themselves in @waiters (memory the writer rings, see
 * rk__epoch_bell_add(), and which must outlive the view); its kicks and its
 * rk_epoch_close() are this process's only; rk_epoch_publish() on it fails
 * with -EPERM. Nothing read from it is trusted beyond the seqlock's
 * consistency: descriptors are decoded as peer bytes.
 * Return: 0, -EINVAL, -EPERM (seals missing), -RK_EFIELD (size) or -errno.
 */
int rk__epoch_map(int fd, uint32_t desc_max, _Atomic uint32_t *waiters, _Atomic uint32_t *bell,
		  struct rk_epoch **out);

/*
 * rk__epoch_own() - the view @e unmaps @map (@len bytes) with its last
 * reference: the mapping that holds the words given to rk__epoch_map(), so
 * they outlive every consumer still holding the view. Once, before the view
 * is handed out. Any thread.
 */
void rk__epoch_own(struct rk_epoch *e, void *map, size_t len);

/* rk__epoch_is_view() - whether @e is a reader's view (rk__epoch_map()): mapped
 * read-only, another process's region. Any thread. */
bool rk__epoch_is_view(const struct rk_epoch *e);

/*
 * rk__epoch_bell_add() - the writer @e also wakes a reader's consumers asleep
 * on @bell (counted in @waiters) after each publication and close (not a kick),
 * with no system call while @waiters is 0. rk__epoch_bell_del() before the
 * words' memory goes. Writer's loop thread.
 * Return: 0, -EINVAL (a view, or a NULL word), -ENOSPC (RK__EPOCH_MAX_BELLS).
 */
int rk__epoch_bell_add(struct rk_epoch *e, _Atomic uint32_t *waiters, _Atomic uint32_t *bell);
void rk__epoch_bell_del(struct rk_epoch *e, _Atomic uint32_t *bell);

#endif /* RK_RUNTIME_INT_H */
