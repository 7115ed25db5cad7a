/* SPDX-License-Identifier: MIT */
/*
 * Same-host links on shared memory: what the shm files share. Never installed.
 *
 *   shm_ring.c     the kernel probe, segments (sealed memfds), rings and bells
 *                  (the primitives themselves are inline below: the data path's)
 *   shm.c          the transport: a link's rings as its data path, its loop
 *                  source, swapped in over the tcp carrier at the switch frame
 *   shm_bcast.c    the leader's broadcast ring: one write for every follower
 *   shm_lane.c     a follower's lane (rk_link_lane_open(), rk_lane_*())
 *   shm_upgrade.c  the shm class: the same-host test and the upgrade protocol
 *                  over a tcp link (SHM_REQUEST/OFFER/ANSWER/SWITCH, fd passing)
 *   shm_test.c     tests: what a broken peer writes, the arm step, the probe's mask
 *
 * A link segment holds one ring per direction, each single-producer, then the
 * follower's lane. Records are a 16-byte header (u32 length, u32 zero, u64
 * mark) and the bytes; a link ring's records start on 128-byte line pairs, and
 * its reader polls the length word at its head (written last, with release;
 * the writer zeroed it first, with its previous record), so no tail index is
 * written or read: a frame moves its record's lines and nothing else. The
 * reader owns the head, on a line of its own, which the writer reads only when
 * the head it saw last leaves too little room, and which the reader publishes
 * lazily, at the latest before the fence that tells a writer of room.
 *
 * Nothing read from shared memory is trusted more than the socket: an index
 * is checked against the ring's bounds before use, a record is copied into
 * private memory before it is validated, and what is wrong fails that link
 * with RK_ESHMRING (or the frame's own error).
 *
 * Waking: a side about to block stores "asleep" in its bell (a futex word in
 * the link segment: FUTEX, or EFD when it waits on its eventfd, plus SPACE when
 * it waits for room to write), fences, and looks at its rings once more; only
 * then does it arm a wait. A writer publishes its record (a reader its head),
 * fences, and makes a syscall (FUTEX_WAKE or an eventfd write) only when the
 * bell says the peer sleeps; while the peer spins it makes none.
 */
#ifndef RK_SHM_INT_H
#define RK_SHM_INT_H

#include <endian.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "runtime_int.h"
#include "link_int.h"
#include "wire_int.h"

#define SHM_OP_FUTEX_WAIT	51	/* IORING_OP_FUTEX_WAIT, Linux 6.7 */
#define SHM_FUTEX2_SIZE_U32	0x02	/* futex2 flags: a 32-bit word, shared (not private) */

#define SHM_RING_SIZE	(1u << 20)	/* each direction of a link */
#define SHM_BCAST_SIZE	(1u << 20)	/* the world's broadcast ring */
#define SHM_BCAST_MAX	(SHM_BCAST_SIZE / 4)	/* larger broadcasts go link by link */
#define SHM_CHUNK_MAX	(64u << 10)	/* a link ring's record: the reader's staging buffer */
#define SHM_HDR_SIZE	4096u		/* the control page before the rings */
#define SHM_LINE	128u		/* one index per line: no false sharing, even paired */
#define SHM_MAGIC_LINK	0x4c534b52u	/* "RKSL" */
#define SHM_MAGIC_BCAST	0x42534b52u	/* "RKSB" */
#define SHM_VERSION	3u		/* a link segment's layout: records polled by their length,
					 * and the follower's lane */
#define SHM_BCAST_VERSION 1u		/* the broadcast segment's (ARCHITECTURE.md: fixed) */
#define SHM_POLL_BUDGET	64		/* records one poll delivers */

/*
 * The broadcast segment, one memfd and one mapping of SHM_HDR_SIZE +
 * SHM_BCAST_SIZE bytes (page-aligned, whole pages, so it can be registered with
 * CUDA as it is: ARCHITECTURE.md, "Same-host links"; keep the two in step):
 *   0      u32 magic SHM_MAGIC_BCAST, u32 SHM_BCAST_VERSION, u32 ring size, u32 zero
 *   128    u64 tail (BS_TAIL): bytes ever written, a multiple of 8; the leader's
 *   136..  zero up to SHM_HDR_SIZE, reserved
 *   4096   the ring: at position p, data[p & (size - 1)], wrapping, a record:
 *          u32 frame length L, u32 zero, u64 skip mask (bit i: reader slot i
 *          gets this frame on its link), then the L bytes of the wire frame
 *          (its seq counts the broadcast stream), zero-padded to 8.
 * Followers map it read-only; each one's consumed position is LS_B_HEAD in its
 * own link segment. A link segment is the control page below and then two
 * rings of ring_size bytes (leader -> follower first), with chunk records at
 * multiples of REC_ALIGN (rec_put()), then the follower's lane of
 * lane_size(ring_size) bytes, its records whole frames (layout version 3).
 *
 * Round epochs (rk_sched.h): with RK_RESIDENT not off, the leader also makes
 * an epoch region (rk__epoch_create_fd(), sealed as the broadcast ring) and
 * sends it as one more descriptor; a follower maps it read-only, its
 * consumers sleeping on LS_EP_BELL of its own link segment (which both sides
 * may write) and counting themselves in LS_EP_WAITERS; the leader rings that
 * bell after each publication (rk__epoch_bell_add()) while the link is on the
 * rings. Without it (a refusal, an older leader) the follower keeps its own.
 */

/* The control page. Each index is written by one side only. */
#define SEG_MAGIC	0		/* u32, then u32 version, u32 ring size, u32 zero */
#define LS_LF_TAIL	(1 * SHM_LINE)	/* leader -> follower ring: unused, zero (version 1's tail) */
#define LS_LF_HEAD	(2 * SHM_LINE)	/* ... the follower's head */
#define LS_FL_TAIL	(3 * SHM_LINE)	/* follower -> leader ring: unused, zero */
#define LS_FL_HEAD	(4 * SHM_LINE)	/* ... the leader's head */
#define LS_F_BELL	(5 * SHM_LINE)	/* the follower's bell */
#define LS_L_BELL	(6 * SHM_LINE)	/* the leader's bell */
#define LS_B_HEAD	(7 * SHM_LINE)	/* how far the follower read the broadcast ring */
#define LS_EP_WAITERS	(8 * SHM_LINE)	/* u32: the follower's consumers asleep on ... */
#define LS_EP_BELL	(9 * SHM_LINE)	/* u32: ... this futex word, rung by the leader's
					 * epoch publications (rk__epoch_map()) */
#define LS_LN_HEAD	(10 * SHM_LINE)	/* the follower's lane: the leader's head */
#define LS_LN_SHUT	(11 * SHM_LINE)	/* u32: nonzero once either end's link ended */
#define LS_LN_WRITER	(12 * SHM_LINE)	/* the lane's writer: u32 open, u32 zero, u64
					 * position, u64 next sequence number (the
					 * follower's, kept while no lane is open) */
_Static_assert(RK__EPOCH_MAX_BELLS >= RK_WIRE_SHM_SLOTS,
	       "every broadcast reader's epoch bell must fit the writer's list");
#define BS_TAIL		(1 * SHM_LINE)	/* the broadcast ring's tail (the leader's) */

#define BELL_FUTEX	0x1u	/* asleep in a futex wait on the bell */
#define BELL_EFD	0x2u	/* asleep on its eventfd */
#define BELL_SPACE	0x4u	/* ... waiting for room in the ring it writes */
#define BELL_SLEEP	(BELL_FUTEX | BELL_EFD)

#define REC_HDR		16u	/* u32 length, u32 zero, u64 mark (chunk) or skip mask */
#define REC_ALIGN	SHM_LINE	/* a link record starts on a line pair of its own */
#define REC_LINE	64u		/* a cache line: the first one of a record is polled */

/* Tests: pretend the kernel lacks features (RK__SHM_F_* bits), 0 = as probed. */
#define RK__SHM_F_MEMFD		0x1u	/* memfd_create() with sealing */
#define RK__SHM_F_FUTURE_WRITE	0x2u	/* F_SEAL_FUTURE_WRITE: the read-only broadcast ring */
#define RK__SHM_F_PIDFD		0x4u	/* pidfd_open() */
#define RK__SHM_F_FUTEX		0x8u	/* IORING_OP_FUTEX_WAIT (else eventfds) */

static inline uint64_t pad8(uint64_t n)
{
	return (n + 7) & ~7ull;
}

/* The follower's lane: half a link ring, each record one frame of at most a
 * quarter of it (header included). */
static inline uint32_t lane_size(uint32_t ring)
{
	return ring / 2;
}

static inline uint32_t lane_rec_max(uint32_t ring)
{
	return lane_size(ring) / 4;
}

static inline size_t seg_len(uint32_t ring)
{
	return SHM_HDR_SIZE + 2 * (size_t)ring + lane_size(ring);
}

/* ---- rings and records ------------------------------------------------------------ */

struct ring {
	uint8_t *data;
	uint64_t size;			/* a power of two */
	_Atomic uint64_t *tail;		/* the writer's (broadcast ring; a link ring has none) */
	_Atomic uint64_t *head;		/* the reader's */
	uint64_t pos;			/* ours: the writer's tail or the reader's head */
	uint64_t seen;			/* writer: the reader's head when we last read it;
					 * link reader: the head we last published */
};

static inline _Atomic uint64_t *u64_at(uint8_t *base, size_t off)
{
	return (_Atomic uint64_t *)(void *)(base + off);
}

static inline _Atomic uint32_t *u32_at(uint8_t *base, size_t off)
{
	return (_Atomic uint32_t *)(void *)(base + off);
}

static inline void ring_init(struct ring *r, uint8_t *data, uint64_t size, uint8_t *base,
			     size_t tail, size_t head)
{
	r->data = data;
	r->size = size;
	r->tail = u64_at(base, tail);
	r->head = u64_at(base, head);
	r->pos = 0;
	r->seen = 0;
}

/* The lane of the segment mapped at @base: a link-style ring (no tail word,
 * the head's line stands in), after the two link rings. */
static inline void lane_ring(struct ring *r, uint8_t *base, uint32_t ring)
{
	ring_init(r, base + SHM_HDR_SIZE + 2 * (size_t)ring, lane_size(ring), base, LS_LN_HEAD,
		  LS_LN_HEAD);
}

/* Inline, one copy unless the bytes wrap: a record header is two loads or
 * stores, not two library calls. */
static inline void ring_read(const struct ring *r, uint64_t pos, void *dst, size_t n)
{
	size_t off = (size_t)(pos & (r->size - 1)), first = r->size - off;

	if (__builtin_expect(n <= first, 1)) {
		memcpy(dst, r->data + off, n);
		return;
	}
	memcpy(dst, r->data + off, first);
	memcpy((uint8_t *)dst + first, r->data, n - first);
}

static inline void ring_write(struct ring *r, uint64_t pos, const void *src, size_t n)
{
	size_t off = (size_t)(pos & (r->size - 1)), first = r->size - off;

	if (__builtin_expect(n <= first, 1)) {
		memcpy(r->data + off, src, n);
		return;
	}
	memcpy(r->data + off, src, first);
	memcpy(r->data, (const uint8_t *)src + first, n - first);
}

/* Reader: bytes published past our head, or -RK_ESHMRING for a tail that no
 * writer could have written. Acquire: pairs with the writer's release of it. */
static inline int64_t ring_avail(const struct ring *r)
{
	uint64_t t = atomic_load_explicit(r->tail, memory_order_acquire);

	if (t - r->pos > r->size || (t & 7))
		return -RK_ESHMRING;
	return (int64_t)(t - r->pos);
}

/*
 * Link ring writer: bytes it may fill with records, or -RK_ESHMRING. The last
 * REC_ALIGN bytes before the reader's head are never counted: they hold the
 * zero length word after our last record (rec_put()). The reader's head is
 * read only when the head we saw last leaves less than @need bytes: its line
 * then stays with the reader while the ring has room, and a frame moves no
 * line but its records'. Acquire: pairs with the reader's release of its head
 * (head_publish()), after it copied the bytes out. A head seen once stays
 * valid: heads only grow, so room computed from it is never more than there is.
 */
static inline int64_t ring_room(struct ring *r, uint64_t need)
{
	uint64_t h = r->seen, free = r->size - (r->pos - h);

	if (free >= REC_ALIGN && free - REC_ALIGN >= need)
		return (int64_t)(free - REC_ALIGN);
	h = atomic_load_explicit(r->head, memory_order_acquire);
	if (r->pos - h > r->size || (h & (REC_ALIGN - 1)))
		return -RK_ESHMRING;
	r->seen = h;
	free = r->size - (r->pos - h);
	return free > REC_ALIGN ? (int64_t)(free - REC_ALIGN) : 0;
}

static inline void rec_hdr(uint8_t h[REC_HDR], uint32_t len, uint64_t mark)
{
	rk__le32_store(h, len);
	rk__le32_store(h + 4, 0);
	rk__le64_store(h + 8, mark);
}

/*
 * Link records. A record starts on a multiple of REC_ALIGN (a line pair: a
 * chunk of up to 112 bytes moves in one pair, which the pair-line prefetcher
 * of many x86 parts fetches on the one miss), and its u32 length word is what
 * the reader polls: no tail index is written or read, so a frame moves only
 * its record's lines. The writer stores the length last, with release, and
 * first zeroes the length word where its next record will start, so a reader
 * that reaches it stops there and never takes the ring's bytes of an earlier
 * lap for a record. The word is little-endian as every other field.
 */
static inline uint64_t rec_span(uint64_t len)
{
	return (REC_HDR + len + REC_ALIGN - 1) & ~(uint64_t)(REC_ALIGN - 1);
}

static inline _Atomic uint32_t *rec_word(const struct ring *r, uint64_t pos)
{
	return (_Atomic uint32_t *)(void *)(r->data + (pos & (r->size - 1)));
}

/* Reader: the length word of the record at our head (0: none yet). Acquire:
 * pairs with rec_put()'s release, so the record's bytes are there to copy. */
static inline uint32_t rec_len(const struct ring *r)
{
	return le32toh(atomic_load_explicit(rec_word(r, r->pos), memory_order_acquire));
}

/*
 * Reader: the rest of the header of the record at our head, in place (a
 * record's first line never wraps: rec_put()), each word loaded once: relaxed
 * atomics, so the compiler may not read the peer's memory again after the
 * caller's checks; ordered by the acquire of its length word (rec_len()).
 * Return: the mark, and its zero field in *@zero.
 */
static inline uint64_t rec_rest(const struct ring *r, uint32_t *zero)
{
	_Atomic uint32_t *h = rec_word(r, r->pos);

	*zero = le32toh(atomic_load_explicit(h + 1, memory_order_relaxed));
	return le64toh(atomic_load_explicit((_Atomic uint64_t *)(void *)(h + 2),
					    memory_order_relaxed));
}

/*
 * Writer: a record of @len bytes of @p at @pos, published by its length word.
 * The reader polls the record's first line (and asks for the second), so the
 * stores go far to near: the next record's zero word, the bytes past the
 * first line, then the first line's and its length word last, back to back;
 * a poll that takes the first line away between two of our stores to it
 * would cost its transfer twice.
 */
static inline void rec_put(struct ring *r, uint64_t pos, const void *p, uint32_t len,
			   uint64_t mark)
{
	/* a record starts on a REC_ALIGN multiple of a ring that is one: its
	 * first line never wraps, and is written in place */
	uint8_t *line = r->data + (pos & (r->size - 1));
	uint32_t first = len < REC_LINE - REC_HDR ? len : REC_LINE - REC_HDR;

	atomic_store_explicit(rec_word(r, pos + rec_span(len)), 0, memory_order_relaxed);
	if (len > first)
		ring_write(r, pos + REC_LINE, (const uint8_t *)p + first, len - first);
	rk__le32_store(line + 4, 0);
	rk__le64_store(line + 8, mark);
	if (first == REC_LINE - REC_HDR)
		memcpy(line + REC_HDR, p, REC_LINE - REC_HDR);	/* a constant: three moves */
	else
		memcpy(line + REC_HDR, p, first);
	/* Release: the bytes and the next zero word before the length that
	 * publishes them; pairs with rec_len()'s acquire. */
	atomic_store_explicit(rec_word(r, pos), htole32(len), memory_order_release);
}

/* ---- bells ------------------------------------------------------------------------ */

static inline void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Wake the side asleep on @bell (its eventfd @efd) if the bell says it sleeps
 * (@want: BELL_SLEEP, or BELL_SPACE after we made room). The caller fenced
 * after publishing what it did. Return: whether it slept. */
static inline bool bell_wake(_Atomic uint32_t *bell, int efd, uint32_t want)
{
	uint32_t b = atomic_load_explicit(bell, memory_order_relaxed);
	uint64_t one = 1;

	if (!(b & want))
		return false;
	b = atomic_exchange_explicit(bell, 0, memory_order_relaxed);
	if (b & BELL_FUTEX)
		futex_wake(bell);
	if ((b & BELL_EFD) && write(efd, &one, sizeof(one)) < 0)
		(void)0;	/* non-blocking; a full counter already wakes it */
	return (b & BELL_SLEEP) != 0;
}

/* ---- a link's end and the class's context ------------------------------------------ */

enum shm_state {
	SS_IDLE,		/* nothing asked, or declined: the link stays on TCP */
	SS_REQUESTED,		/* follower: SHM_REQUEST sent */
	SS_OFFERED,		/* leader: SHM_OFFER sent, listening for the follower */
	SS_SENT,		/* leader: the descriptors went to the follower */
	SS_FETCHING,		/* follower: connected, waiting for the descriptors */
	SS_MAPPED,		/* follower: SHM_ANSWER sent, its frames on the ring */
	SS_ACTIVE,		/* both directions on the rings */
};

struct rk__shm;

/*
 * One link's same-host state: made by the class when the link is up (l->cpriv),
 * its rings and source once an upgrade begins (rk__shm_begin()), the link's
 * transport from its switch frame (l->tpriv: rk__shm_swap()). Until the swap
 * the class's hooks end and free it, from the swap the transport's ops.
 */
struct rk__shm_link {
	struct rk_link *l;
	struct rk__shm *ctx;
	enum shm_state st;
	bool leader;
	bool begun;			/* rk__shm_begin(): source, stage, carrier's ring mode */
	bool swapped;			/* the link's transport (rk__shm_swap()) */
	bool settled;			/* its upgrade ended: on the rings, or it stays on TCP */
	const struct rk__transport_ops *carrier;	/* the tcp link's ops, from the swap */

	/* the link segment */
	uint8_t *base;
	size_t len;
	int memfd;
	uint32_t ring_size;
	struct ring tx, rx;
	struct ring lrx;		/* leader: the follower's lane */
	uint8_t *lstage;		/* leader: a lane frame, copied out */
	struct rk__frame_stream lstream;	/* leader: the lane's frames */
	_Atomic uint32_t *bell;		/* ours: set before we sleep */
	_Atomic uint32_t *peer_bell;
	_Atomic uint64_t *bhead;	/* the follower's position in the broadcast ring */
	int efd;			/* the eventfd we wait on */
	int peer_efd;			/* the peer's */
	bool rx_ring;			/* the peer's frames come on the ring now */
	bool tx_blocked;		/* a flush found the ring full */
	bool space_owed;		/* we read records since our last fence: space_settle() */
	bool use_futex;

	/* follower: the broadcast ring, mapped read-only */
	uint8_t *bbase;
	size_t blen;
	uint32_t bcast_size;
	struct ring brx;
	struct rk__frame_stream bstream;	/* its frames */
	bool bcast;			/* this follower reads it */
	bool marks;			/* leader: this follower reads it, so chunks carry marks */
	int slot;			/* its reader slot (both sides), -1 = none */
	uint64_t last_mark;

	/* setup: the unix socket and who must be at its other end */
	int usock;			/* leader: the listener; follower: the connection */
	char sock_path[108];		/* leader: the listener's path, "" if abstract */
	pid_t want_pid;
	uid_t want_uid;
	int pidfd;			/* the peer's process */

	/* operations on the loop's ring; each holds the link (rk__link_op_start) */
	struct rk__op sock_op, pid_op, futex_op, efd_op;
	bool sock_armed, pid_armed, futex_armed, efd_armed;
	bool sock_cancel, pid_cancel, futex_cancel, efd_cancel;
	uint64_t efd_val;

	struct rk_source src;		/* polls the rings; holds the link until released */
	bool closing;
	bool released;
	struct rk_epoch *epv;		/* follower: its view of the leader's epoch region */
	bool ep_rung;			/* leader: its bell is on the region's list */
	uint8_t *stage;			/* a chunk, copied out of the ring */
	uint8_t *bstage;		/* a broadcast frame, copied out */
	size_t bstage_cap;
};

/* The shm class's context (its prepare()): this rank's identity and policy,
 * and the leader's broadcast ring. */
struct rk__shm {
	struct rk_loop *loop;
	int rank;
	enum rk_shm_mode mode;
	bool required;			/* shm:// or RK_SHM=on */
	bool loopback;			/* the leader's address is loopback */
	struct rk_wire_shm_request me;	/* this process; status < 0: what it could not read */
	uint32_t max_frame;

	/* leader: the broadcast ring */
	uint8_t *bbase;
	size_t blen;
	int bfd;
	bool btried;
	struct ring btx;
	uint64_t bseq;			/* the next broadcast frame's sequence number */
	struct rk__shm_link *readers[RK_WIRE_SHM_SLOTS];
	struct rk_epoch *ep;		/* round epochs the followers map, or NULL */
	int epfd;
	bool resident;			/* RK_RESIDENT is not off */
	bool lane;			/* RK_LANE */
	uint8_t *scratch;		/* a broadcast frame being encoded */
	size_t scratch_cap;

	uint64_t links, remote, fallback;
	bool warned;			/* the fallback's one log line */
	bool warned_futex;
};

/* The shm class (shm_upgrade.c): the hooks of every tcp:// and shm:// link. */
extern const struct rk__transport_class rk__shm_class;

/* @l's same-host state, or NULL (a link of another class, or none yet). */
static inline struct rk__shm_link *rk__shm_of(const struct rk_link *l)
{
	return l->tclass == &rk__shm_class ? (struct rk__shm_link *)l->cpriv : NULL;
}

/* Whether @l delivers what arrives: up (a failing or closed link drops it). */
static inline bool link_reading(const struct rk_link *l)
{
	return l->state == RK_LINK_UP;
}

/* Bytes the link has queued or in flight, not yet handed to a transport. */
static inline bool rk__shm_tx_pending(const struct rk_link *l)
{
	return l->q.len || l->out.off < l->out.len;
}

/* Whether @s's frames go on its ring now: past the swap, and past the bytes
 * committed before it (the carrier's). */
static inline bool rk__shm_tx_ring(const struct rk__shm_link *s)
{
	return s->swapped && s->l->tx_sent >= s->l->tx_carrier_end;
}

/* Wake the peer of @s if its bell says it sleeps (BELL_SLEEP, or BELL_SPACE
 * after we made room). The caller fenced after publishing what it did. */
static inline void bell_ring(struct rk__shm_link *s, uint32_t want)
{
	if (bell_wake(s->peer_bell, s->peer_efd, want))
		s->l->stats.shm_wakes++;
}

static inline void peer_wake(struct rk__shm_link *s, uint32_t want)
{
	/* Pairs with the fence in src_arm(): we published our tail (or head), then
	 * look at the bell; a sleeper publishes its bell, then looks at the ring. */
	atomic_thread_fence(memory_order_seq_cst);
	bell_ring(s, want);
}

/* The link ends at this end: a lane of the segment refuses from now on. */
static inline void lane_shut(struct rk__shm_link *s)
{
	if (s->base)
		atomic_store_explicit(u32_at(s->base, LS_LN_SHUT), 1, memory_order_release);
}

/* The lane writer's "open" word (LS_LN_WRITER). */
static inline _Atomic uint32_t *lane_owner(uint8_t *w)
{
	return (_Atomic uint32_t *)(void *)w;
}

/* ---- shm_ring.c: the kernel probe and segments ------------------------------------ */

/* What this kernel can do (RK__SHM_F_*), as probed once, less the tests' mask. */
unsigned int rk__shm_features(void);
/* Tests: the features rk__shm_features() pretends are missing. */
extern atomic_uint rk__shm_masked;
/* A sealed memfd of @len bytes mapped read-write, its header written. With
 * @future_write it is sealed against any later writable mapping (ours stays).
 * Return: 0 or -errno. */
int rk__shm_seg_create(const char *name, size_t len, uint32_t magic, uint32_t ring,
		       bool future_write, int *fdp, uint8_t **basep);
/* Map a segment the leader sent: a memfd of exactly @len bytes whose size is
 * sealed (no SIGBUS later) and, read-only, sealed against writers, with the
 * header the offer promised. Return: 0 or -errno / -RK_EFIELD. */
int rk__shm_seg_map(int fd, size_t len, uint32_t magic, uint32_t ring, bool ro, uint8_t **basep);
/* The rings and bells of @s's segment, from its own end. */
void rk__shm_seg_attach(struct rk__shm_link *s);
/* An eventfd from the leader, made non-blocking whatever it was. */
int rk__shm_efd_check(int fd);

static inline void seg_unmap(uint8_t **base, size_t len)
{
	if (*base)
		munmap(*base, len);
	*base = NULL;
}

static inline void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Close the setup socket; the leader's listener takes its path with it. */
static inline void usock_close(struct rk__shm_link *s)
{
	if (s->sock_path[0]) {
		unlink(s->sock_path);
		s->sock_path[0] = '\0';
	}
	fd_close(&s->usock);
}

/* ---- shm.c: the transport ------------------------------------------------------------ */

/* Start @s's upgrade: its staging buffer and loop source, and the carrier's
 * ring mode (l->moving). Return: 0 or -ENOMEM. */
int rk__shm_begin(struct rk__shm_link *s);
/* Swap the shm transport in over the link's carrier, after the side's switch
 * frame was queued: the frames committed after it go on the ring. */
void rk__shm_swap(struct rk__shm_link *s);
/* The transport rk__shm_swap() puts in: local, its frames carry no tag. */
extern const struct rk__transport_ops rk__shm_ops;
/* The link is shut down: stop the ring operations, leave the broadcast
 * readers, release the epoch consumers, shut the lane. Idempotent. */
void rk__shm_link_shutdown(struct rk__shm_link *s);
/* Free @s and what it holds (the link's memory follows). */
void rk__shm_link_free(struct rk__shm_link *s);
/* Fail @s's link (@what: for the log line); RK_ESHMRING tells the peer. */
void rk__shm_fail(struct rk__shm_link *s, int err, const char *what);
/* Operations on the loop's ring: a poll for @fd's input; the cancel of an
 * armed one (once; its completion ends it). */
int rk__shm_arm_poll(struct rk__shm_link *s, struct rk__op *op, bool *armed, int fd);
void rk__shm_op_cancel(struct rk__shm_link *s, struct rk__op *op, bool armed, bool *sent);

/* ---- shm_bcast.c: the broadcast ring ---------------------------------------------- */

/* Leader: the broadcast ring (and the epoch region beside it), made at the
 * first offer. Without it broadcasts go link by link. */
void rk__shm_bcast_create(struct rk__shm *c);
/* Follower: deliver the broadcast frames before @limit, a position the leader
 * has published, at most @budget of them. Return frames delivered, or -errno
 * (the link failed). */
int rk__shm_bcast_until(struct rk__shm_link *s, uint64_t limit, int budget);
/* The class's broadcast() hook. */
int rk__shm_broadcast(void *ctx, unsigned int type, unsigned int flags, const void *payload,
		      uint32_t len, uint8_t *done);

/* ---- shm_lane.c: the follower's lane ------------------------------------------------ */

/* Leader: deliver the lane frames from the one whose length word @len was read
 * at our head. Return: frames delivered, or 0 when the link failed. */
int rk__shm_lane_deliver(struct rk__shm_link *s, uint32_t len);

/* ---- shm_upgrade.c: the class --------------------------------------------------------- */

/* Release the round-epoch words of @s's segment (the leader's bell on them, a
 * follower's view). Before the segment is unmapped. */
void rk__shm_epoch_detach(struct rk__shm_link *s);

/* ---- shm_test.c: tests ---------------------------------------------------------------- */

/* Tests: pretend the kernel lacks @features (RK__SHM_F_*), 0 = as probed. */
void rk__shm_test_mask(unsigned int features);
/* Tests: write into @l's rings what a broken or hostile peer would, bypassing
 * the link (its sequence numbers, its bounds). Return: 0, -ENOTCONN when @l
 * is not on shared memory, -EINVAL for a poke this end cannot make. */
enum rk__shm_poke {
	RK__SHM_POKE_OVERSIZE,	/* a link record longer than a chunk may be */
	RK__SHM_POKE_RESERVED,	/* a link record whose zero field is not zero */
	RK__SHM_POKE_MARK,	/* a link record whose mark is not 8-aligned (or not 0) */
	RK__SHM_POKE_CHUNK,	/* a record holding @p, @n bytes as they are */
	RK__SHM_POKE_BHEAD,	/* follower: a broadcast position past the ring's tail */
	RK__SHM_POKE_BCAST,	/* leader: a broadcast record holding @p, @n bytes */
	RK__SHM_POKE_LANE,	/* follower, no lane open: a lane record holding @p, @n
				 * bytes as they are (@n 0: a length word past the bound) */
};
int rk__shm_test_poke(struct rk_link *l, enum rk__shm_poke what, const void *p, size_t n);
/* Tests: run @l's source arm step, what the loop does before it blocks: the
 * bell is published, fenced and the rings looked at again. Return: 1 (found
 * something: the loop must not block), 0 (asleep: only a write that rings the
 * bell wakes it), -ENOTCONN when @l is not on shared memory. */
int rk__shm_test_arm(struct rk_link *l);

#endif /* RK_SHM_INT_H */
