/* SPDX-License-Identifier: MIT */
/*
 * Same-host links: a tcp:// link whose two ends share a host moves its frames
 * to shared-memory rings after its (authenticated) handshake; an shm:// link
 * must. The TCP socket stays open as the side channel that tells of the
 * peer's end, as a verbs link's does, and a pidfd tells of it sooner.
 *
 * The upgrade (WIRE.md, "Same-host links"), on a link that is up:
 *   follower -> SHM_REQUEST: its pid, uid, boot id, network and pid namespace
 *   leader   -> SHM_OFFER: a random abstract unix socket name, or a refusal
 *   follower connects; the leader hands the segment's descriptors (a sealed
 *     memfd, two eventfds, the broadcast ring's memfd) over SCM_RIGHTS only to
 *     the process whose kernel-checked credentials are the requester's
 *   follower -> SHM_ANSWER: mapped (its last frame on TCP), or why not
 *   leader   -> SHM_SWITCH: its last frame on TCP, and where the follower starts
 *     reading the broadcast ring
 * Frames sent before a side's switch frame go on TCP, frames after it on the
 * ring, and the receiver reads the ring only after the switch frame, so the
 * link's one byte stream (and its sequence numbers) runs on unbroken. Any
 * failure before the switch leaves the link on TCP (one log line, a counter).
 * The leader only ever maps memory it created itself.
 *
 * A link segment holds one ring per direction, each single-producer. Records
 * are a 16-byte header (u32 length, u32 zero, u64 mark) and the bytes; a link
 * ring's records start on 128-byte line pairs, and its reader polls the length
 * word at its head (written last, with release; the writer zeroed it first,
 * with its previous record), so no tail index is written or read: a frame
 * moves its record's lines and nothing else. The reader owns the head, on a
 * line of its own, which the writer reads only when the head it saw last
 * leaves too little room, and which the reader publishes lazily, at the latest
 * before the fence that tells a writer of room. A link ring carries chunks of
 * the link's byte stream, split
 * anywhere, exactly what TCP would carry; the link layer parses and checks
 * every frame as it does for TCP. The leader's broadcast ring (one segment
 * per world, sealed so that only the leader can write it: followers map it
 * read-only) carries whole frames, written once for every same-host follower;
 * each follower publishes how far it has read in its own link segment, and
 * the slowest bounds reuse. A chunk's mark is the broadcast ring's tail when
 * it was written: a follower delivers the broadcast frames before that mark
 * first, so broadcasts and link frames reach it in the order they were sent.
 * A follower whose link had frames waiting when a broadcast was written gets
 * a copy on its link instead (a skip bit in the record says so), which keeps
 * that order too; when the ring has no room, every follower gets a copy, and a
 * follower that does not read fails by the link's send bound (RK_ESLOWPEER).
 *
 * Nothing read from shared memory is trusted more than the socket: an index
 * is checked against the ring's bounds before use, a record is copied into
 * private memory before it is validated, and what is wrong fails that link
 * with RK_ESHMRING (or the frame's own error).
 *
 * Waking: a side about to block stores "asleep" in its bell (a futex word in
 * the link segment: FUTEX, or EFD when it waits on its eventfd, plus SPACE when
 * it waits for room to write), fences, and looks at its rings once more; only
 * then does it arm IORING_OP_FUTEX_WAIT on the word (liburing 2.3 has no helper:
 * the SQE is filled by hand) or a read of its eventfd. A writer publishes its
 * record (a reader its head), fences, and makes a syscall (FUTEX_WAKE or an
 * eventfd write) only when the bell says the peer sleeps; while the peer spins
 * it makes none.
 *
 * A follower's lane (rk_link_lane_open()): a third ring in the link segment,
 * follower -> leader, written by one thread of the follower's that is not its
 * loop (a worker with a round's partial results) and read by the leader's
 * loop beside the link's rings. Its records hold whole USER frames of the
 * lane's own sequence; the lane publishes and rings the leader's bell as a
 * flush would, so the follower's loop is not on that frame's path and may
 * sleep. It never waits for room: a commit without room fails (-EAGAIN) and
 * the caller sends another way. The lane maps the segment itself, so it
 * outlives the link safely; either end's link end marks the segment shut.
 */
#include "config.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime_int.h"
#include "sock_int.h"
#include "memfd_int.h"
#include "wire_int.h"
#include "rk_sched.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD		77	/* Linux 6.5 */
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open		434
#endif
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
#define SHM_ACCEPT_BUDGET 16		/* connections one wake of the listener takes */
#define SHM_FD_MSG	"RKSHMFD1"

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

struct ring;
static void ring_init(struct ring *r, uint8_t *data, uint64_t size, uint8_t *base, size_t tail,
		      size_t head);

/* The lane of the segment mapped at @base: a link-style ring (no tail word,
 * the head's line stands in), after the two link rings. */
static void lane_ring(struct ring *r, uint8_t *base, uint32_t ring)
{
	ring_init(r, base + SHM_HDR_SIZE + 2 * (size_t)ring, lane_size(ring), base, LS_LN_HEAD,
		  LS_LN_HEAD);
}

/* ---- what this kernel can do ------------------------------------------------------ */

static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;
static unsigned int g_have;
static atomic_uint g_mask;	/* tests: features to pretend missing */

static void probe(void)
{
	struct io_uring_probe *p;
	int fd;

	fd = (int)syscall(SYS_memfd_create, "rankrt-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd >= 0) {
		if (!ftruncate(fd, 4096) &&
		    !fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW))
			g_have |= RK__SHM_F_MEMFD;
		if (!fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE))
			g_have |= RK__SHM_F_FUTURE_WRITE;
		close(fd);
	}
	fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (fd >= 0) {
		g_have |= RK__SHM_F_PIDFD;
		close(fd);
	}
	p = io_uring_get_probe();
	if (p) {
		if (io_uring_opcode_supported(p, SHM_OP_FUTEX_WAIT))
			g_have |= RK__SHM_F_FUTEX;
		io_uring_free_probe(p);
	}
}

static unsigned int features(void)
{
	pthread_once(&g_probe_once, probe);
	return g_have & ~atomic_load_explicit(&g_mask, memory_order_relaxed);
}

void rk__shm_test_mask(unsigned int f)
{
	atomic_store(&g_mask, f);
}

/* ---- the two ends of a link, their rings and bells -------------------------------- */

struct ring {
	uint8_t *data;
	uint64_t size;			/* a power of two */
	_Atomic uint64_t *tail;		/* the writer's (broadcast ring; a link ring has none) */
	_Atomic uint64_t *head;		/* the reader's */
	uint64_t pos;			/* ours: the writer's tail or the reader's head */
	uint64_t seen;			/* writer: the reader's head when we last read it;
					 * link reader: the head we last published */
};

struct rk__shm;

enum shm_state {
	SS_IDLE,		/* nothing asked, or declined: the link stays on TCP */
	SS_REQUESTED,		/* follower: SHM_REQUEST sent */
	SS_OFFERED,		/* leader: SHM_OFFER sent, listening for the follower */
	SS_SENT,		/* leader: the descriptors went to the follower */
	SS_FETCHING,		/* follower: connected, waiting for the descriptors */
	SS_MAPPED,		/* follower: SHM_ANSWER sent, its frames on the ring */
	SS_ACTIVE,		/* both directions on the rings */
};

struct rk__shm_link {
	struct rk_link *l;
	struct rk__shm *ctx;
	enum shm_state st;
	bool leader;

	/* the link segment */
	uint8_t *base;
	size_t len;
	int memfd;
	uint32_t ring_size;
	struct ring tx, rx;
	struct ring lrx;		/* leader: the follower's lane */
	uint8_t *lstage;		/* leader: a lane frame, copied out */
	_Atomic uint32_t *bell;		/* ours: set before we sleep */
	_Atomic uint32_t *peer_bell;
	_Atomic uint64_t *bhead;	/* the follower's position in the broadcast ring */
	int efd;			/* the eventfd we wait on */
	int peer_efd;			/* the peer's */
	uint64_t switch_at;		/* link bytes before this offset go on TCP */
	bool rx_ring;			/* the peer's frames come on the ring now */
	bool tx_blocked;		/* a flush found the ring full */
	bool space_owed;		/* we read records since our last fence: space_settle() */
	bool use_futex;

	/* follower: the broadcast ring, mapped read-only */
	uint8_t *bbase;
	size_t blen;
	uint32_t bcast_size;
	struct ring brx;
	bool bcast;			/* this follower reads it */
	bool marks;			/* leader: this follower reads it, so chunks carry marks */
	int slot;			/* its reader slot (both sides), -1 = none */
	uint64_t last_mark;

	/* setup: the unix socket and who must be at its other end */
	int usock;			/* leader: the listener; follower: the connection */
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

static _Atomic uint64_t *u64_at(uint8_t *base, size_t off)
{
	return (_Atomic uint64_t *)(void *)(base + off);
}

static _Atomic uint32_t *u32_at(uint8_t *base, size_t off)
{
	return (_Atomic uint32_t *)(void *)(base + off);
}

static void ring_init(struct ring *r, uint8_t *data, uint64_t size, uint8_t *base, size_t tail,
		      size_t head)
{
	r->data = data;
	r->size = size;
	r->tail = u64_at(base, tail);
	r->head = u64_at(base, head);
	r->pos = 0;
	r->seen = 0;
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
static int64_t ring_avail(const struct ring *r)
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
static int64_t ring_room(struct ring *r, uint64_t need)
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

static void rec_hdr(uint8_t h[REC_HDR], uint32_t len, uint64_t mark)
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

/* Link reader: publish how far we read, so the writer may reuse it. Lazy: once
 * a quarter ring in a poll's batch, and before every fence that tells a writer
 * of room (space_settle(), rk__shm_flush()), which each poll that read ends
 * in; so the writer's view lags at most one poll, and a writer asleep for room
 * is woken only after the head it will read. Release: pairs with ring_room()'s
 * acquire: the bytes are copied out before the writer reuses them. */
static void head_publish(struct rk__shm_link *s)
{
	if (s->rx.seen == s->rx.pos)
		return;
	s->rx.seen = s->rx.pos;
	atomic_store_explicit(s->rx.head, s->rx.pos, memory_order_release);
}

static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Wake the peer if its bell says it sleeps (@want: BELL_SLEEP, or BELL_SPACE
 * after we made room). The caller fenced after publishing what it did. */
static void bell_ring(struct rk__shm_link *s, uint32_t want)
{
	uint32_t b = atomic_load_explicit(s->peer_bell, memory_order_relaxed);
	uint64_t one = 1;

	if (!(b & want))
		return;
	b = atomic_exchange_explicit(s->peer_bell, 0, memory_order_relaxed);
	if (b & BELL_FUTEX)
		futex_wake(s->peer_bell);
	if ((b & BELL_EFD) && write(s->peer_efd, &one, sizeof(one)) < 0)
		(void)0;	/* non-blocking; a full counter already wakes it */
	if (b & BELL_SLEEP)
		s->l->stats.shm_wakes++;
}

static void peer_wake(struct rk__shm_link *s, uint32_t want)
{
	/* Pairs with the fence in src_arm(): we published our tail (or head), then
	 * look at the bell; a sleeper publishes its bell, then looks at the ring. */
	atomic_thread_fence(memory_order_seq_cst);
	bell_ring(s, want);
}

/* ---- logging and counting why a link stays on TCP --------------------------------- */

enum why {
	WHY_POLICY,		/* RK_SHM=off, or not authenticated: not a failure */
	WHY_REMOTE,		/* another host or namespace */
	WHY_FALLBACK,		/* same host, but a feature or the setup failed */
};

static enum why why_of(int err)
{
	if (err == -RK_ENOSHM)
		return WHY_REMOTE;
	if (err == -EOPNOTSUPP || err == -EPERM)
		return WHY_POLICY;
	return WHY_FALLBACK;
}

static void stays_tcp(struct rk__shm *c, struct rk_link *l, int err, const char *what)
{
	l->shm_settled = true;
	switch (why_of(err)) {
	case WHY_REMOTE:
		c->remote++;
		rk__dbg(c->rank, "link to rank %d stays on TCP: %s", l->peer, what);
		break;
	case WHY_POLICY:
		rk__dbg(c->rank, "link to rank %d stays on TCP: %s (%s)", l->peer, what,
			rk_strerror(err));
		break;
	case WHY_FALLBACK:
		c->fallback++;
		if (!c->warned) {
			c->warned = true;
			rk__warn(c->rank, "same-host link to rank %d stays on TCP: %s: %s "
				 "(shm_fallback counts the others)", l->peer, what,
				 rk_strerror(err));
		} else {
			rk__dbg(c->rank, "link to rank %d stays on TCP: %s: %s", l->peer, what,
				rk_strerror(err));
		}
		break;
	}
	/* shm:// (RK_SHM=on): a link that cannot move must not run on TCP */
	if (c->required)
		rk__link_fail_msg(l, -RK_ENOSHM, true,
				  "RK_ENOSHM: this world requires shared-memory links (shm://, "
				  "RK_SHM=on)");
}

/* ---- identity ------------------------------------------------------------------ */

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static int read_boot_id(uint8_t out[RK_WIRE_BOOT_ID_LEN])
{
	char buf[64];
	ssize_t n;
	int fd, i = 0, hi = -1, v;
	char *p;

	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	for (p = buf; *p && i < RK_WIRE_BOOT_ID_LEN; p++) {
		if (*p == '-')
			continue;
		v = hexval(*p);
		if (v < 0)
			break;
		if (hi < 0) {
			hi = v;
		} else {
			out[i++] = (uint8_t)(hi << 4 | v);
			hi = -1;
		}
	}
	return i == RK_WIRE_BOOT_ID_LEN ? 0 : -EIO;
}

static int ns_id(const char *path, uint64_t *out)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return -errno;
	*out = (uint64_t)st.st_ino;
	return 0;
}

static void identity(struct rk_wire_shm_request *me)
{
	int ret;

	memset(me, 0, sizeof(*me));
	me->pid = (uint32_t)getpid();
	me->uid = (uint32_t)geteuid();
	ret = read_boot_id(me->boot_id);
	if (!ret)
		ret = ns_id("/proc/self/ns/net", &me->net_ns);
	if (!ret)
		ret = ns_id("/proc/self/ns/pid", &me->pid_ns);
	me->status = ret;
}

/* One kernel, one network namespace (the abstract socket), one pid namespace
 * (the pids and pidfds), one user. */
static bool same_host(const struct rk_wire_shm_request *a, const struct rk_wire_shm_request *b)
{
	return !memcmp(a->boot_id, b->boot_id, sizeof(a->boot_id)) && a->net_ns == b->net_ns &&
	       a->pid_ns == b->pid_ns && a->uid == b->uid;
}

/* May this link move? Only on an authenticated link, or in a loopback world. */
static int policy(const struct rk__shm *c, const struct rk_link *l)
{
	if (c->mode == RK_SHM_OFF)
		return -EOPNOTSUPP;
	if (!l->authed && !c->loopback)
		return -EPERM;
	return 0;
}

/* ---- segments ------------------------------------------------------------------ */

static void seg_unmap(uint8_t **base, size_t len)
{
	if (*base)
		munmap(*base, len);
	*base = NULL;
}

static void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Each segment kind has its own layout version: a peer of another link layout
 * fails seg_map() and the link stays on TCP. */
static uint32_t seg_version(uint32_t magic)
{
	return magic == SHM_MAGIC_LINK ? SHM_VERSION : SHM_BCAST_VERSION;
}

/* A sealed memfd of @len bytes mapped read-write, its header written. With
 * @future_write it is sealed against any later writable mapping (ours stays).
 * Return: 0 or -errno. */
static int seg_create(const char *name, size_t len, uint32_t magic, uint32_t ring,
		      bool future_write, int *fdp, uint8_t **basep)
{
	unsigned int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	uint8_t *base;
	int fd, ret;

	if (!(features() & RK__SHM_F_MEMFD))
		return -ENOSYS;
	fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		ret = -errno;
		goto err_close;
	}
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		goto err_close;
	}
	rk__le32_store(base + SEG_MAGIC, magic);
	rk__le32_store(base + SEG_MAGIC + 4, seg_version(magic));
	rk__le32_store(base + SEG_MAGIC + 8, ring);
	if (future_write)
		seals |= F_SEAL_FUTURE_WRITE;
	if (fcntl(fd, F_ADD_SEALS, seals) < 0) {
		ret = -errno;
		munmap(base, len);
		goto err_close;
	}
	*fdp = fd;
	*basep = base;
	return 0;
err_close:
	close(fd);
	return ret;
}

/* Map a segment the leader sent: a memfd of exactly @len bytes whose size is
 * sealed (no SIGBUS later) and, read-only, sealed against writers, with the
 * header the offer promised. Return: 0 or -errno / -RK_EFIELD. */
static int seg_map(int fd, size_t len, uint32_t magic, uint32_t ring, bool ro, uint8_t **basep)
{
	unsigned int want = F_SEAL_SHRINK | F_SEAL_GROW | (ro ? F_SEAL_FUTURE_WRITE : 0);
	uint8_t *base;
	int ret;

	ret = rk__memfd_check(fd, len, want);
	if (ret)
		return ret;
	base = mmap(NULL, len, ro ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	if (rk__le32_load(base + SEG_MAGIC) != magic ||
	    rk__le32_load(base + SEG_MAGIC + 4) != seg_version(magic) ||
	    rk__le32_load(base + SEG_MAGIC + 8) != ring) {
		munmap(base, len);
		return -RK_EFIELD;
	}
	*basep = base;
	return 0;
}

/* An eventfd from the leader, made non-blocking whatever it was. */
static int efd_check(int fd)
{
	char path[64], what[64];
	ssize_t n;
	int fl;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, what, sizeof(what) - 1);
	if (n < 0)
		return -errno;
	what[n] = '\0';
	if (strcmp(what, "anon_inode:[eventfd]"))
		return -RK_EFIELD;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0))
		return -errno;
	return 0;
}

/* The rings and bells of @s's segment, from its own end. */
static void seg_attach(struct rk__shm_link *s)
{
	uint8_t *d = s->base + SHM_HDR_SIZE;

	if (s->leader) {
		ring_init(&s->tx, d, s->ring_size, s->base, LS_LF_TAIL, LS_LF_HEAD);
		ring_init(&s->rx, d + s->ring_size, s->ring_size, s->base, LS_FL_TAIL, LS_FL_HEAD);
		lane_ring(&s->lrx, s->base, s->ring_size);
		s->bell = u32_at(s->base, LS_L_BELL);
		s->peer_bell = u32_at(s->base, LS_F_BELL);
	} else {
		ring_init(&s->tx, d + s->ring_size, s->ring_size, s->base, LS_FL_TAIL, LS_FL_HEAD);
		ring_init(&s->rx, d, s->ring_size, s->base, LS_LF_TAIL, LS_LF_HEAD);
		s->bell = u32_at(s->base, LS_F_BELL);
		s->peer_bell = u32_at(s->base, LS_L_BELL);
	}
	s->bhead = u64_at(s->base, LS_B_HEAD);
}

/* Leader: the broadcast ring, made at the first offer. Without it (no
 * F_SEAL_FUTURE_WRITE, no memory) broadcasts go link by link. */
static void bcast_create(struct rk__shm *c)
{
	int ret;

	if (c->btried)
		return;
	c->btried = true;
	if (!(features() & RK__SHM_F_FUTURE_WRITE)) {
		rk__info(c->rank, "shm: no F_SEAL_FUTURE_WRITE on this kernel: broadcasts go "
			 "link by link");
		return;
	}
	c->blen = SHM_HDR_SIZE + SHM_BCAST_SIZE;
	ret = seg_create("rankrt-bcast", c->blen, SHM_MAGIC_BCAST, SHM_BCAST_SIZE, true, &c->bfd,
			 &c->bbase);
	if (ret) {
		rk__info(c->rank, "shm: no broadcast ring (%s): broadcasts go link by link",
			 rk_strerror(ret));
		return;
	}
	ring_init(&c->btx, c->bbase + SHM_HDR_SIZE, SHM_BCAST_SIZE, c->bbase, BS_TAIL, BS_TAIL);
	if (c->resident) {
		/* the scheduler's bound: rk_sched_create() sizes its own region so */
		ret = rk__epoch_create_fd(rk__epoch_desc_bound(c->max_frame), &c->epfd, &c->ep);
		if (ret) {
			rk__info(c->rank, "shm: no shared epoch region (%s): each follower "
				 "publishes its own rounds", rk_strerror(ret));
			c->ep = NULL;
			c->epfd = -1;
		}
	}
}

/* ---- operations on the loop's ring -------------------------------------------- */

static struct io_uring_sqe *op_sqe(struct rk__shm_link *s, struct rk__op *op, bool *armed)
{
	struct io_uring_sqe *sqe = rk__loop_sqe(s->l->loop);

	if (!sqe)
		return NULL;
	rk__sqe_set_op(sqe, op);
	*armed = true;
	rk__link_op_start(s->l);
	return sqe;
}

static int arm_poll(struct rk__shm_link *s, struct rk__op *op, bool *armed, int fd)
{
	struct io_uring_sqe *sqe;

	if (*armed)
		return 0;
	sqe = rk__loop_sqe(s->l->loop);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	rk__sqe_set_op(sqe, op);
	*armed = true;
	rk__link_op_start(s->l);
	return 0;
}

/* Cancel one armed operation (once); its completion ends it. */
static void op_cancel(struct rk__shm_link *s, struct rk__op *op, bool armed, bool *sent)
{
	struct io_uring_sqe *sqe;

	if (!armed || *sent)
		return;
	sqe = rk__loop_sqe(s->l->loop);
	if (!sqe)
		return;		/* tried again from the source's poll */
	io_uring_prep_cancel(sqe, op, 0);
	io_uring_sqe_set_data64(sqe, RK_UDATA_INTERNAL);
	*sent = true;
}

static void cancel_all(struct rk__shm_link *s)
{
	op_cancel(s, &s->sock_op, s->sock_armed, &s->sock_cancel);
	op_cancel(s, &s->pid_op, s->pid_armed, &s->pid_cancel);
	op_cancel(s, &s->futex_op, s->futex_armed, &s->futex_cancel);
	op_cancel(s, &s->efd_op, s->efd_armed, &s->efd_cancel);
}

/* ---- the data path ------------------------------------------------------------ */

static bool tx_pending(const struct rk_link *l)
{
	return l->q.len || l->out.off < l->out.len;
}

static void shm_fail(struct rk__shm_link *s, int err, const char *what)
{
	struct rk_link *l = s->l;

	if (l->state == RK_LINK_CLOSED)
		return;
	if (l->state != RK_LINK_FAILED)
		rk__link_warn(l, "link to rank %d (shm): %s: %s", l->peer, what, rk_strerror(err));
	rk__link_fail(l, err, err == -RK_ESHMRING);
}

static bool link_reading(const struct rk_link *l)
{
	return l->state == RK_LINK_UP;
}

/* Follower: deliver the broadcast frames before @limit, a position the leader
 * has published (a chunk's mark, or a tail read before), at most @budget of
 * them. Return frames delivered, or -errno (the link failed). */
static int bcast_until(struct rk__shm_link *s, uint64_t limit, int budget)
{
	struct rk_link *l = s->l;
	uint8_t h[REC_HDR];
	uint64_t rec, skip;
	uint32_t len;
	int64_t av;
	int n = 0;

	while (s->brx.pos < limit && n < budget && link_reading(l)) {
		av = ring_avail(&s->brx);
		if (av < (int64_t)REC_HDR)
			goto bad;	/* a mark past what was written, or a bad tail */
		ring_read(&s->brx, s->brx.pos, h, REC_HDR);
		len = rk__le32_load(h);
		skip = rk__le64_load(h + 8);
		rec = REC_HDR + pad8(len);
		if (len < RK_WIRE_HDR_LEN || len > SHM_BCAST_MAX || rk__le32_load(h + 4) ||
		    rec > (uint64_t)av || s->brx.pos + rec > limit)
			goto bad;
		skip &= 1ull << s->slot;
		if (!skip) {
			if (rk__grow((void **)&s->bstage, &s->bstage_cap, len, 1, 4096)) {
				shm_fail(s, -ENOMEM, "broadcast frame");
				return -ENOMEM;
			}
			ring_read(&s->brx, s->brx.pos + REC_HDR, s->bstage, len);
		}
		s->brx.pos += rec;
		/* Release: our copy is made before the leader may reuse the bytes. */
		atomic_store_explicit(s->bhead, s->brx.pos, memory_order_release);
		if (skip) {
			l->rx_bseq++;	/* ours came on the link: the sequence counts it */
			continue;
		}
		l->stats.shm_bcast_frames++;
		n++;
		if (rk__link_rx_bcast(l, s->bstage, len))
			return -EPROTO;		/* the link failed */
	}
	return n;
bad:
	shm_fail(s, -RK_ESHMRING, "broadcast ring");
	return -RK_ESHMRING;
}

/*
 * Deliver what the rings hold: link chunks in order from the one whose length
 * word @len was read at our head, each after the broadcast frames its mark
 * says were written before it, then the broadcast frames up to @btail (a tail
 * read before @len). Return frames and chunks delivered (busy events), or 0
 * when the link failed. Out of line: a poll that finds nothing does not pay
 * for the loop's registers.
 */
static int __attribute__((noinline)) rx_deliver(struct rk__shm_link *s, uint64_t btail,
						uint32_t len)
{
	struct rk_link *l = s->l;
	uint64_t span, mark;
	uint32_t zero;
	int n = 0, ret;

	while (len && n < SHM_POLL_BUDGET && link_reading(l)) {
		mark = rec_rest(&s->rx, &zero);
		span = rec_span(len);
		/*
		 * The next record's length word, asked for now: the writer zeroed
		 * it with this record, so it is a miss, and it is read when this
		 * record is delivered; the miss overlaps the delivery instead of
		 * following it (in a round trip: before the answer goes).
		 */
		__builtin_prefetch(rec_word(&s->rx, s->rx.pos + span));
		if (len > SHM_CHUNK_MAX || zero || span > s->rx.size - REC_ALIGN)
			goto bad;
		if (s->bcast ? mark < s->last_mark || (mark & 7) : mark != 0)
			goto bad;
		ring_read(&s->rx, s->rx.pos + REC_HDR, s->stage, len);
		s->rx.pos += span;
		if (s->rx.pos - s->rx.seen >= s->rx.size / 4)
			head_publish(s);	/* a long batch: let the writer go on */
		/* a writer waiting for room is woken with the next fence: space_owed */
		s->space_owed = true;
		if (s->bcast && mark > s->brx.pos) {
			ret = bcast_until(s, mark, INT32_MAX);
			if (ret < 0)
				return 0;
			n += ret;
		}
		s->last_mark = mark;
		n++;
		if (rk__link_rx(l, s->stage, len))
			return 0;	/* the link failed */
		len = link_reading(l) ? rec_len(&s->rx) : 0;
	}
	if (s->bcast && s->brx.pos < btail && link_reading(l)) {
		ret = bcast_until(s, btail, SHM_POLL_BUDGET);
		if (ret < 0)
			return 0;
		n += ret;
	}
	return n;
bad:
	shm_fail(s, -RK_ESHMRING, "link ring record");
	return 0;
}

/*
 * Leader: deliver the follower's lane frames from the one whose length word
 * @len was read at our head, as rx_deliver() delivers chunks, each checked as
 * a whole frame (rk__link_rx_lane()). The head is published at the end of the
 * batch: the lane's writer never waits for room, so it needs no wake for it.
 * Return: frames delivered, or 0 when the link failed.
 */
static int __attribute__((noinline)) lane_deliver(struct rk__shm_link *s, uint32_t len)
{
	struct rk_link *l = s->l;
	uint32_t max = lane_rec_max(s->ring_size);
	uint32_t zero;
	uint64_t mark;
	int n = 0;

	if (!s->lstage) {
		s->lstage = malloc(max);
		if (!s->lstage) {
			shm_fail(s, -ENOMEM, "lane staging buffer");
			return 0;
		}
	}
	while (len && n < SHM_POLL_BUDGET && link_reading(l)) {
		mark = rec_rest(&s->lrx, &zero);
		if (len > max || zero || mark) {
			shm_fail(s, -RK_ESHMRING, "lane record");
			return 0;
		}
		ring_read(&s->lrx, s->lrx.pos + REC_HDR, s->lstage, len);
		s->lrx.pos += rec_span(len);
		n++;
		l->stats.shm_lane_rx++;
		if (rk__link_rx_lane(l, s->lstage, len))
			return 0;	/* the link failed */
		len = link_reading(l) ? rec_len(&s->lrx) : 0;
	}
	/* Release: the records are copied out before the writer reuses them. */
	atomic_store_explicit(s->lrx.head, s->lrx.pos, memory_order_release);
	return n;
}

/*
 * One look at the rings. While nothing comes this reads two lines that stay
 * in our cache (the broadcast tail, when we read that ring, and the length
 * word at our head) and writes none; a frame's arrival is the miss on the
 * second, which brings the record itself.
 */
static int rx_poll(struct rk__shm_link *s)
{
	int64_t bav = 0;
	uint32_t len;

	if (!s->rx_ring || !link_reading(s->l))
		return 0;
	/*
	 * The broadcast tail before the link's record: a chunk written before
	 * any broadcast frame up to it was published before it too (release,
	 * release; acquire, acquire), so the length word read next covers it,
	 * and no frame of the broadcast ring overtakes a chunk sent before it.
	 */
	if (s->bcast) {
		bav = ring_avail(&s->brx);
		if (bav < 0) {
			shm_fail(s, -RK_ESHMRING, "broadcast ring");
			return 0;
		}
	}
	/*
	 * The record's second line, asked for with the first: when a frame
	 * came, the two misses overlap instead of following each other (the
	 * length word is read, then the bytes after it). A hint only: what is
	 * read is what the length word published.
	 */
	__builtin_prefetch(s->rx.data + ((s->rx.pos + 64) & (s->rx.size - 1)));
	len = rec_len(&s->rx);
	if (s->leader) {
		uint32_t ll = rec_len(&s->lrx);

		if (ll) {
			int n = lane_deliver(s, ll);

			if (!n || !len || !link_reading(s->l))
				return n;
			return n + rx_deliver(s, 0, len);
		}
	}
	if (!len && !bav)
		return 0;
	return rx_deliver(s, s->brx.pos + (uint64_t)bav, len);
}

/*
 * Room we made in the ring we read, not yet told: a writer that sleeps for it
 * (BELL_SPACE) is woken after a fence. The flush that publishes our next bytes
 * tells it with its own fence (a sleeper's bell holds BELL_FUTEX or BELL_EFD
 * beside BELL_SPACE, so waking BELL_SLEEP wakes it), which keeps one fence a
 * frame on the round trip. Otherwise it is told here: at the end of the poll
 * when no reply is queued for the ring, else (a queued flush that wrote
 * nothing) at the next poll, or in src_arm() before we sleep.
 */
static void space_settle(struct rk__shm_link *s)
{
	if (!s->space_owed)
		return;
	s->space_owed = false;
	head_publish(s);
	peer_wake(s, BELL_SPACE);
}

bool rk__shm_tx_ring(const struct rk_link *l)
{
	const struct rk__shm_link *s = l->shm;

	return s && l->tx_sent >= s->switch_at;
}

size_t rk__shm_tx_tcp(const struct rk_link *l, size_t n)
{
	const struct rk__shm_link *s = l->shm;
	uint64_t left;

	if (!s || s->switch_at == UINT64_MAX)
		return n;
	left = s->switch_at - l->tx_sent;
	return n < left ? n : (size_t)left;
}

bool rk__shm_rx_ring(const struct rk_link *l)
{
	return l->shm && l->shm->rx_ring;
}

/* Records written: publish our head (the room we made, told with the fence that
 * follows, so space_settle() has nothing left to do) and wake a sleeping peer. */
static void tx_told(struct rk__shm_link *s)
{
	head_publish(s);
	s->space_owed = false;
	peer_wake(s, BELL_SLEEP);
}

/* Copy what the link has to send into its ring, as far as there is room. The
 * mark of a leader's chunk is the broadcast ring's tail now: every broadcast
 * frame written so far was sent before these bytes were handed over. */
void rk__shm_flush(struct rk_link *l)
{
	struct rk__shm_link *s = l->shm;
	const uint8_t *p;
	size_t n, done = 0, c;
	uint64_t mark;
	int64_t room;

	if (s->closing)
		return;
	n = rk__link_tx_next(l, &p);
	if (!n) {
		space_settle(s);
		return;
	}
	/* all of it, in records of at most SHM_CHUNK_MAX, each padded */
	room = ring_room(&s->tx, n + (n / SHM_CHUNK_MAX + 1) * (REC_HDR + REC_ALIGN));
	if (room < 0) {
		shm_fail(s, -RK_ESHMRING, "link ring head");
		return;
	}
	mark = s->marks ? s->ctx->btx.pos : 0;
	while (done < n && room > (int64_t)REC_HDR) {
		c = n - done;
		if (c > (size_t)room - REC_HDR)
			c = (size_t)room - REC_HDR;
		if (c > SHM_CHUNK_MAX)
			c = SHM_CHUNK_MAX;
		rec_put(&s->tx, s->tx.pos, p + done, (uint32_t)c, mark);
		s->tx.pos += rec_span(c);
		room -= (int64_t)rec_span(c);
		done += c;
	}
	s->tx_blocked = done < n;
	if (s->tx_blocked)
		l->stats.shm_ring_full++;	/* the source's poll tries again */
	if (!done) {
		space_settle(s);
		return;
	}
	tx_told(s);
	rk__link_tx_done(l, done);
}

/*
 * The direct lane (link_commit()): one frame, one record, published as a flush
 * would publish it (the same record, mark, head, fence and bell), without the
 * batch. Refused, and left to the flush, before the switch (tx_sent short of
 * switch_at), on a closing link or one whose ring looked full, for a frame
 * over one record, and without room; a bad head is left to the flush too,
 * which fails the link for it.
 */
bool rk__shm_tx_direct(struct rk_link *l, const uint8_t *frame, size_t n)
{
	struct rk__shm_link *s = l->shm;
	uint64_t span = rec_span(n);
	int64_t room;

	if (s->closing || s->tx_blocked || l->tx_sent < s->switch_at || n > SHM_CHUNK_MAX)
		return false;
	room = ring_room(&s->tx, span);
	if (room < (int64_t)span)
		return false;
	rec_put(&s->tx, s->tx.pos, frame, (uint32_t)n, s->marks ? s->ctx->btx.pos : 0);
	s->tx.pos += span;
	tx_told(s);
	l->tx_sent += n;
	l->stats.shm_tx_direct++;
	return true;
}

void rk__shm_drain(struct rk_link *l)
{
	struct rk__shm_link *s = l->shm;

	if (s && !s->closing) {
		while (rx_poll(s) > 0)
			;
		space_settle(s);
	}
}

/* ---- the loop source: poll while spinning, arm before blocking ------------------- */

/* After shutdown: once no operation of ours is in flight, detach and let the
 * link go. Only from the source's poll (this may free the link). */
static bool try_release(struct rk__shm_link *s)
{
	struct rk_link *l = s->l;

	if (s->released || l->in_dispatch)
		return false;
	if (s->sock_armed || s->pid_armed || s->futex_armed || s->efd_armed) {
		cancel_all(s);
		return false;
	}
	rk_loop_remove_source(l->loop, &s->src);
	s->released = true;
	rk__link_op_done(l);	/* may free l and s */
	return true;
}

static int src_poll(struct rk_source *src, uint64_t now)
{
	struct rk__shm_link *s = src->data;

	(void)now;
	if (s->closing)
		return try_release(s) ? 1 : 0;	/* an event: a teardown's iteration ends */
	if (!s->rx_ring && !s->tx_blocked)
		return 0;
	/* awake: a writer need not wake us (the bell is ours to set) */
	if (atomic_load_explicit(s->bell, memory_order_relaxed))
		atomic_store_explicit(s->bell, 0, memory_order_relaxed);
	space_settle(s);	/* left from the last iteration: its flush did not write */
	/*
	 * What the frames were is noted by the link as they are dispatched, as
	 * for TCP: a heartbeat is an idle event and must not restart the spin
	 * window, so the records themselves are not counted as busy here.
	 */
	rx_poll(s);
	/* a reply queued for the ring tells the room with its flush, this iteration */
	if (s->space_owed && !(s->l->flusher.queued && rk__shm_tx_ring(s->l)))
		space_settle(s);
	if (s->tx_blocked && !s->closing) {
		int64_t room = ring_room(&s->tx, UINT64_MAX);	/* fresh: it looked full */

		if (room < 0 || room > (int64_t)REC_HDR) {
			s->tx_blocked = false;	/* the flush writes, or fails the link */
			rk__loop_queue_flush(s->l->loop, &s->l->flusher);
		}
	}
	return 0;
}

static void prep_futex_wait(struct io_uring_sqe *sqe, _Atomic uint32_t *word, uint32_t val)
{
	/* liburing >= 2.5's io_uring_prep_futex_wait(), by hand */
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = SHM_OP_FUTEX_WAIT;
	sqe->fd = SHM_FUTEX2_SIZE_U32;
	sqe->addr = (uint64_t)(uintptr_t)word;
	sqe->off = val;			/* addr2: the value the word must still hold */
	sqe->addr3 = FUTEX_BITSET_MATCH_ANY;
}

static int wait_arm(struct rk__shm_link *s, uint32_t val)
{
	struct io_uring_sqe *sqe;

	if (s->use_futex) {
		if (s->futex_armed)
			return 0;	/* still asleep in the kernel: a wake ends it */
		sqe = rk__loop_sqe(s->l->loop);
		if (!sqe)
			return -EBUSY;
		prep_futex_wait(sqe, s->bell, val);
		rk__sqe_set_op(sqe, &s->futex_op);
		s->futex_armed = true;
		rk__link_op_start(s->l);
		return 0;
	}
	if (s->efd_armed)
		return 0;
	sqe = op_sqe(s, &s->efd_op, &s->efd_armed);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, s->efd, &s->efd_val, sizeof(s->efd_val), 0);
	rk__sqe_set_op(sqe, &s->efd_op);
	return 0;
}

static bool pending(struct rk__shm_link *s)
{
	int64_t room;

	if (s->rx_ring && rec_len(&s->rx))
		return true;	/* a record, or a bad one the poll will fail */
	if (s->rx_ring && s->leader && rec_len(&s->lrx))
		return true;	/* a lane frame */
	if (s->rx_ring && s->bcast && ring_avail(&s->brx) != 0)
		return true;
	if (!s->tx_blocked)
		return false;
	room = ring_room(&s->tx, UINT64_MAX);
	return room < 0 || room > (int64_t)REC_HDR;
}

static int src_arm(struct rk_source *src)
{
	struct rk__shm_link *s = src->data;
	uint32_t val;

	if (s->closing)
		return 1;	/* do not block: the next poll lets the link go */
	if (!s->rx_ring && !s->tx_blocked)
		return 0;
	space_settle(s);
	val = (s->use_futex ? BELL_FUTEX : BELL_EFD) | (s->tx_blocked ? BELL_SPACE : 0);
	atomic_store_explicit(s->bell, val, memory_order_relaxed);
	s->l->stats.shm_sleeps++;	/* a writer may wake us from now on */
	/* Pairs with peer_wake(): either the writer sees our bell and wakes us, or
	 * we see what it published and do not sleep. */
	atomic_thread_fence(memory_order_seq_cst);
	if (pending(s) || wait_arm(s, val)) {
		atomic_store_explicit(s->bell, 0, memory_order_relaxed);
		return 1;
	}
	return 0;
}

static const struct rk_source_ops shm_source_ops = {
	.name = "shm",
	.poll = src_poll,
	.arm = src_arm,
};

static void futex_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__shm_link *s = rk__container_of(op, struct rk__shm_link, futex_op);
	struct rk_link *l = s->l;

	(void)flags;
	s->futex_armed = false;
	s->futex_cancel = false;
	if (res < 0 && res != -EAGAIN && res != -ECANCELED && res != -EINTR && s->use_futex) {
		/* this kernel does not wait on the word after all: eventfds from now on */
		s->use_futex = false;
		if (!s->ctx->warned_futex) {
			s->ctx->warned_futex = true;
			rk__info(l->rank, "shm: futex wait refused (%s): waiting on eventfds",
				 rk_strerror(res));
		}
	}
	rk__loop_note(l->loop, RK_IDLE);
	rk__link_op_done(l);
}

static void efd_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__shm_link *s = rk__container_of(op, struct rk__shm_link, efd_op);
	struct rk_link *l = s->l;

	(void)flags;
	(void)res;
	s->efd_armed = false;
	s->efd_cancel = false;
	rk__loop_note(l->loop, RK_IDLE);
	rk__link_op_done(l);
}

/* The peer's process exited: what it wrote before is delivered first (a BYE). */
static void pid_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__shm_link *s = rk__container_of(op, struct rk__shm_link, pid_op);
	struct rk_link *l = s->l;

	(void)flags;
	s->pid_armed = false;
	s->pid_cancel = false;
	l->in_dispatch++;
	if (res > 0 && !s->closing) {
		rk__shm_drain(l);
		if (l->state == RK_LINK_UP) {
			rk__link_warn(l, "link to rank %d (shm): its process exited", l->peer);
			rk__link_fail(l, -RK_EPEEREXIT, false);
		}
	}
	rk__loop_note(l->loop, RK_BUSY);
	l->in_dispatch--;
	rk__link_op_done(l);
}

/* ---- per-link state ---------------------------------------------------------- */

static void sock_done(struct rk__op *op, int res, unsigned int flags);

static struct rk__shm_link *shm_link_new(struct rk_link *l, struct rk__shm *c, bool leader)
{
	struct rk__shm_link *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->stage = malloc(SHM_CHUNK_MAX);
	if (!s->stage) {
		free(s);
		return NULL;
	}
	s->l = l;
	s->ctx = c;
	s->leader = leader;
	s->memfd = s->efd = s->peer_efd = s->usock = s->pidfd = -1;
	s->slot = -1;
	s->switch_at = UINT64_MAX;
	s->use_futex = (features() & RK__SHM_F_FUTEX) != 0;
	s->sock_op.fn = sock_done;
	s->pid_op.fn = pid_done;
	s->futex_op.fn = futex_done;
	s->efd_op.fn = efd_done;
	rk_source_init(&s->src, &shm_source_ops, s);
	rk_loop_add_source(l->loop, &s->src);
	rk__link_op_start(l);	/* the source's: see try_release() */
	l->shm = s;
	return s;
}

/* The round-epoch words of @s's segment: the leader stops ringing them, a
 * follower's consumers are released and its view dropped (its bell page is
 * the view's own mapping, so a consumer still holding it touches no freed
 * memory). Before the segment is unmapped. */
static void epoch_detach(struct rk__shm_link *s)
{
	if (s->ep_rung) {
		rk__epoch_bell_del(s->ctx->ep, u32_at(s->base, LS_EP_BELL));
		s->ep_rung = false;
	}
	if (s->epv) {
		rk_epoch_close(s->epv);
		rk_epoch_release(s->epv);
		s->epv = NULL;
	}
}

/* The link ends at this end: a lane of the segment refuses from now on. */
static void lane_shut(struct rk__shm_link *s)
{
	if (s->base)
		atomic_store_explicit(u32_at(s->base, LS_LN_SHUT), 1, memory_order_release);
}

/* Give back what the setup made (the link stays on TCP). Ops in flight end by
 * their cancellation; their descriptors close at destroy. */
static void setup_undo(struct rk__shm_link *s)
{
	op_cancel(s, &s->sock_op, s->sock_armed, &s->sock_cancel);
	op_cancel(s, &s->pid_op, s->pid_armed, &s->pid_cancel);
	if (!s->sock_armed)
		fd_close(&s->usock);
	if (!s->pid_armed)
		fd_close(&s->pidfd);
	epoch_detach(s);
	lane_shut(s);
	seg_unmap(&s->base, s->len);
	seg_unmap(&s->bbase, s->blen);
	fd_close(&s->memfd);
	if (!s->efd_armed)
		fd_close(&s->efd);
	fd_close(&s->peer_efd);
	s->bcast = false;
	s->st = SS_IDLE;
}

static int send_frame(struct rk_link *l, unsigned int type, const uint8_t *p, int n)
{
	return n < 0 ? n : rk__link_send_raw(l, type, 0, p, (uint32_t)n);
}

static int send_answer(struct rk_link *l, int status)
{
	struct rk_wire_shm_answer a = { .status = status };
	uint8_t b[RK_WIRE_SHM_ANSWER_LEN];

	return send_frame(l, RK_FRAME_SHM_ANSWER, b, rk_wire_encode_shm_answer(b, sizeof(b), &a));
}

/* A pidfd for the process at the other end of the unix socket @sock: from the
 * socket (kernel-checked), else pidfd_open() on its pid while that process
 * still holds its end (so the pid cannot have been reused). -errno otherwise:
 * the link then relies on the side channel and heartbeats alone. */
static int peer_pidfd(int sock, pid_t pid)
{
	struct pollfd p = { .fd = sock, .events = POLLRDHUP };
	socklen_t len = sizeof(int);
	int fd = -1;

	if (!(features() & RK__SHM_F_PIDFD))
		return -ENOSYS;
	if (!getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) && fd >= 0)
		return fd;
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -errno;
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
		close(fd);
		return -ESRCH;
	}
	return fd;
}

static socklen_t sock_name(const uint8_t name[RK_WIRE_SHM_NAME_LEN], struct sockaddr_un *sa)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	n = (size_t)snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "rankrt-shm-");
	for (i = 0; i < RK_WIRE_SHM_NAME_LEN; i++) {
		sa->sun_path[1 + n++] = hex[name[i] >> 4];
		sa->sun_path[1 + n++] = hex[name[i] & 15];
	}
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static void arm_pid_watch(struct rk__shm_link *s)
{
	if (s->pidfd >= 0 && arm_poll(s, &s->pid_op, &s->pid_armed, s->pidfd))
		rk__dbg(s->l->rank, "shm: cannot watch rank %d's pidfd", s->l->peer);
}

/* ---- leader ------------------------------------------------------------------ */

/* A follower asks: create its segment, listen for it, offer. 0 or -errno. */
static int offer_setup(struct rk_link *l, struct rk__shm *c, const struct rk_wire_shm_request *r,
		       struct rk_wire_shm_offer *o)
{
	struct rk__shm_link *s = shm_link_new(l, c, true);
	struct sockaddr_un sa;
	socklen_t salen;
	int ret;

	if (!s)
		return -ENOMEM;
	s->ring_size = SHM_RING_SIZE;
	s->len = seg_len(SHM_RING_SIZE);
	ret = seg_create("rankrt-link", s->len, SHM_MAGIC_LINK, SHM_RING_SIZE, false, &s->memfd,
			 &s->base);
	if (ret)
		goto fail;
	seg_attach(s);
	s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->peer_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->efd < 0 || s->peer_efd < 0) {
		ret = -errno;
		goto fail;
	}
	bcast_create(c);
	s->usock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->usock < 0) {
		ret = -errno;
		goto fail;
	}
	ret = rk__auth_random(o->name, sizeof(o->name));
	if (ret)
		goto fail;
	salen = sock_name(o->name, &sa);
	if (bind(s->usock, (struct sockaddr *)&sa, salen) < 0 || listen(s->usock, 4) < 0) {
		ret = -errno;
		goto fail;
	}
	ret = arm_poll(s, &s->sock_op, &s->sock_armed, s->usock);
	if (ret)
		goto fail;
	s->want_pid = (pid_t)r->pid;
	s->want_uid = (uid_t)r->uid;
	s->st = SS_OFFERED;
	o->status = 0;
	o->pid = c->me.pid;
	o->ring_size = SHM_RING_SIZE;
	o->bcast_size = c->bbase ? SHM_BCAST_SIZE : 0;
	return 0;
fail:
	setup_undo(s);
	return ret;
}

static int leader_request(struct rk_link *l, struct rk__shm *c, const uint8_t *payload,
			  uint32_t len)
{
	struct rk_wire_shm_request r;
	struct rk_wire_shm_offer o;
	uint8_t b[RK_WIRE_SHM_OFFER_LEN];
	const char *what;
	int ret, status;

	ret = rk_wire_decode_shm_request(payload, len, &r);
	if (ret)
		return ret;
	if (l->shm)
		return -RK_EHANDSHAKE;	/* one request per link */
	memset(&o, 0, sizeof(o));
	if (r.status) {
		/* it waits for no answer: it stays on TCP, as the leader's link does */
		stays_tcp(c, l, r.status, "the follower does not ask");
		return 0;
	}
	if ((status = policy(c, l))) {
		what = "not offered";
	} else if (c->me.status) {
		status = c->me.status;
		what = "cannot read this host's identity";
	} else if (!same_host(&c->me, &r)) {
		status = -RK_ENOSHM;
		what = "another host or namespace";
	} else {
		what = "setting up the segment";
		status = offer_setup(l, c, &r, &o);
	}
	if (status) {
		memset(&o, 0, sizeof(o));
		o.status = status;
	}
	ret = send_frame(l, RK_FRAME_SHM_OFFER, b, rk_wire_encode_shm_offer(b, sizeof(b), &o));
	if (ret)
		return ret;
	if (status)
		stays_tcp(c, l, status, what);
	return 0;
}

/* The fds go to the connection whose credentials are the requester's. */
static int send_fds(struct rk__shm_link *s, int fd)
{
	int fds[5] = { s->memfd, s->peer_efd, s->efd, s->ctx->bfd, s->ctx->epfd };
	size_t nfd = s->ctx->bbase ? (s->ctx->ep ? 5 : 4) : 3;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(fds))];
	} u;
	struct iovec iov = { .iov_base = (void *)SHM_FD_MSG, .iov_len = 8 };
	struct msghdr m = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = CMSG_SPACE(nfd * sizeof(int)),
	};
	struct cmsghdr *cm;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(nfd * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, nfd * sizeof(int));
	if (sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) != 8)
		return errno ? -errno : -EIO;
	return 0;
}

/* Connections on the offer's socket: only the requester's process gets the
 * descriptors; anyone else is closed at once (no state, no reading). */
static void leader_accept(struct rk__shm_link *s)
{
	struct rk_link *l = s->l;
	struct ucred cr = { .pid = 0 };
	socklen_t len;
	int i, fd, ret;

	for (i = 0; i < SHM_ACCEPT_BUDGET && s->st == SS_OFFERED; i++) {
		fd = accept4(s->usock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			break;
		len = sizeof(cr);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
		    cr.pid != s->want_pid || cr.uid != s->want_uid) {
			rk__dbg(l->rank, "shm: refused a connection for rank %d's segment from "
				"pid %d", l->peer, (int)cr.pid);
			close(fd);
			continue;
		}
		ret = peer_pidfd(fd, cr.pid);
		if (ret >= 0)
			s->pidfd = ret;
		ret = send_fds(s, fd);
		close(fd);
		fd_close(&s->usock);	/* one follower, once */
		if (ret) {
			rk__dbg(l->rank, "shm: sending rank %d its segment: %s", l->peer,
				rk_strerror(ret));
			return;		/* it sees the socket close and answers why */
		}
		s->st = SS_SENT;
		return;
	}
	if (s->st == SS_OFFERED && arm_poll(s, &s->sock_op, &s->sock_armed, s->usock))
		fd_close(&s->usock);	/* the follower's wait ends with the socket */
}

static int leader_answer(struct rk_link *l, struct rk__shm *c, const uint8_t *payload,
			 uint32_t len)
{
	struct rk__shm_link *s = l->shm;
	struct rk_wire_shm_answer a;
	struct rk_wire_shm_switch sw;
	uint8_t b[RK_WIRE_SHM_SWITCH_LEN];
	int ret, i;

	ret = rk_wire_decode_shm_answer(payload, len, &a);
	if (ret)
		return ret;
	if (!s || (s->st != SS_SENT && s->st != SS_OFFERED))
		return -RK_EHANDSHAKE;
	if (a.status) {
		setup_undo(s);
		stays_tcp(c, l, a.status, "the follower could not map its segment");
		return 0;
	}
	if (s->st != SS_SENT)
		return -RK_EHANDSHAKE;	/* "mapped" what it was never sent */
	/* its frames come on the ring from the next one on; this was the last on TCP */
	s->rx_ring = true;
	l->rx_cut = true;
	sw.slot = RK_WIRE_SHM_NO_SLOT;
	if (c->bbase) {
		for (i = 0; i < RK_WIRE_SHM_SLOTS; i++) {
			if (!c->readers[i]) {
				c->readers[i] = s;
				s->slot = i;
				s->marks = true;	/* its chunks carry marks from now on */
				sw.slot = (uint32_t)i;
				break;
			}
		}
	}
	sw.bcast_pos = c->bbase ? c->btx.pos : 0;
	sw.bcast_seq = c->bseq;
	atomic_store_explicit(s->bhead, sw.bcast_pos, memory_order_relaxed);
	ret = send_frame(l, RK_FRAME_SHM_SWITCH, b, rk_wire_encode_shm_switch(b, sizeof(b), &sw));
	if (ret)
		return ret;
	s->switch_at = l->stats.tx_bytes;	/* SWITCH is our last frame on TCP */
	s->st = SS_ACTIVE;
	l->via = "shm";
	l->shm_settled = true;
	c->links++;
	arm_pid_watch(s);
	/* a broadcast reader that was sent the epoch region may sleep on its
	 * bell now (one that did not map it never counts itself in
	 * LS_EP_WAITERS); a follower without a slot drops its view, as there
	 * are as many bells as slots */
	if (c->ep && s->slot >= 0) {
		ret = rk__epoch_bell_add(c->ep, u32_at(s->base, LS_EP_WAITERS),
					 u32_at(s->base, LS_EP_BELL));
		if (!ret)
			s->ep_rung = true;
		else	/* a bell per slot (the _Static_assert): a broken invariant */
			rk__warn(l->rank, "link to rank %d: epoch bell: %s", l->peer,
				 rk_strerror(ret));
	}
	rk__info(l->rank, "link to rank %d: on shared memory (%s wake-ups, %s)", l->peer,
		 s->use_futex ? "futex" : "eventfd",
		 s->slot >= 0 ? "broadcast ring" : "broadcasts on the link");
	return 0;
}

/* ---- follower ---------------------------------------------------------------- */

void rk__shm_link_up(struct rk_link *l)
{
	struct rk__shm *c = l->tctx;
	struct rk_wire_shm_request r;
	uint8_t b[RK_WIRE_SHM_REQUEST_LEN];
	int ret;

	if (!c || l->accepted)
		return;		/* the leader answers requests */
	r = c->me;
	if (!r.status)
		r.status = policy(c, l);
	if (!r.status && !shm_link_new(l, c, false))
		r.status = -ENOMEM;
	ret = send_frame(l, RK_FRAME_SHM_REQUEST, b, rk_wire_encode_shm_request(b, sizeof(b), &r));
	if (ret) {
		rk__link_fail(l, ret, false);
		return;
	}
	if (r.status) {
		stays_tcp(c, l, r.status, "not asked for");
		return;
	}
	l->shm->st = SS_REQUESTED;
}

static int follower_offer(struct rk_link *l, struct rk__shm *c, const uint8_t *payload,
			  uint32_t len)
{
	struct rk__shm_link *s = l->shm;
	struct rk_wire_shm_offer o;
	struct sockaddr_un sa;
	struct ucred cr;
	socklen_t salen, crlen = sizeof(cr);
	int ret;

	ret = rk_wire_decode_shm_offer(payload, len, &o);
	if (ret)
		return ret;
	if (!s || s->st != SS_REQUESTED)
		return -RK_EHANDSHAKE;
	if (o.status) {
		s->st = SS_IDLE;
		stays_tcp(c, l, o.status, "the leader declined");
		return 0;
	}
	s->ring_size = o.ring_size;
	s->bcast_size = o.bcast_size;
	s->want_pid = (pid_t)o.pid;
	s->usock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->usock < 0) {
		ret = -errno;
		goto fail;
	}
	salen = sock_name(o.name, &sa);
	if (connect(s->usock, (struct sockaddr *)&sa, salen) < 0) {
		ret = -errno;
		goto fail;
	}
	/* the socket is the leader's: its process, our user */
	if (getsockopt(s->usock, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0) {
		ret = -errno;
		goto fail;
	}
	if (cr.pid != (pid_t)o.pid || cr.uid != geteuid()) {
		ret = -EACCES;
		goto fail;
	}
	ret = peer_pidfd(s->usock, cr.pid);
	if (ret >= 0)
		s->pidfd = ret;
	ret = arm_poll(s, &s->sock_op, &s->sock_armed, s->usock);
	if (ret)
		goto fail;
	s->st = SS_FETCHING;
	return 0;
fail:
	setup_undo(s);
	ret = ret ? ret : -EIO;
	stays_tcp(c, l, ret, "connecting to the leader's segment socket");
	return send_answer(l, ret);
}

/*
 * The leader's epoch region in memfd @fd (not taken), read-only, its bell on
 * our segment's control page through a mapping of that page which the view
 * owns. Optional: without it (RK_RESIDENT=off here, or it cannot be mapped)
 * the link moves all the same and this rank publishes its own rounds.
 */
static void epoch_map(struct rk__shm_link *s, int fd)
{
	long page = sysconf(_SC_PAGESIZE);
	uint32_t dmax;
	uint8_t *ctl;
	int ret;

	if (!s->ctx->resident)
		return;
	if (page <= 0 || (size_t)page < SHM_HDR_SIZE)
		page = SHM_HDR_SIZE;
	/* the leader's bound is ours (rk_sched_create()'s): a world of one max_frame */
	dmax = rk__epoch_desc_bound(s->ctx->max_frame);
	ctl = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0);
	if (ctl == MAP_FAILED) {
		ret = -errno;
		goto fail;
	}
	/* -RK_EFIELD: another size, another max_frame */
	ret = rk__epoch_map(fd, dmax, u32_at(ctl, LS_EP_WAITERS), u32_at(ctl, LS_EP_BELL),
			    &s->epv);
	if (ret) {
		munmap(ctl, (size_t)page);
		goto fail;
	}
	rk__epoch_own(s->epv, ctl, (size_t)page);
	return;
fail:
	s->epv = NULL;
	rk__info(s->l->rank, "shm: the leader's epoch region not mapped (%s): this rank "
		 "publishes its own rounds", rk_strerror(ret));
}

/* Receive the descriptors, check and map them. 0 or -errno. */
static int follower_fetch(struct rk__shm_link *s)
{
	int fds[8], nfd = 0, i, ret;
	size_t want = s->bcast_size ? 4 : 3;
	bool epoch = false;
	char data[16];
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(fds))];
	} u;
	struct iovec iov = { .iov_base = data, .iov_len = sizeof(data) };
	struct msghdr m = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm;
	ssize_t n;

	n = recvmsg(s->usock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		size_t k, cnt;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		cnt = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < cnt && nfd < (int)ARRAY_SIZE(fds); k++)
			memcpy(&fds[nfd++], CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
	}
	ret = 0;
	if (n == 0)
		ret = -ECONNRESET;
	else if (n != 8 || memcmp(data, SHM_FD_MSG, 8) || (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ||
		 ((size_t)nfd != want && !(s->bcast_size && (size_t)nfd == want + 1)))
		ret = -RK_EFIELD;
	else
		epoch = (size_t)nfd == want + 1;	/* the leader's round epochs too */
	if (!ret) {
		s->memfd = fds[0];
		s->efd = fds[1];
		s->peer_efd = fds[2];
		fds[0] = fds[1] = fds[2] = -1;
		s->len = seg_len(s->ring_size);
		ret = seg_map(s->memfd, s->len, SHM_MAGIC_LINK, s->ring_size, false, &s->base);
	}
	if (!ret)
		ret = efd_check(s->efd);
	if (!ret)
		ret = efd_check(s->peer_efd);
	if (!ret && s->bcast_size) {
		s->blen = SHM_HDR_SIZE + (size_t)s->bcast_size;
		ret = seg_map(fds[3], s->blen, SHM_MAGIC_BCAST, s->bcast_size, true, &s->bbase);
	}
	if (!ret && epoch)
		epoch_map(s, fds[4]);
	for (i = 0; i < nfd; i++)
		if (fds[i] >= 0)
			close(fds[i]);	/* the broadcast memfd: its mapping is enough */
	if (ret)
		return ret;
	seg_attach(s);
	if (s->bbase) {
		s->brx.data = s->bbase + SHM_HDR_SIZE;
		s->brx.size = s->bcast_size;
		s->brx.tail = u64_at(s->bbase, BS_TAIL);
		s->brx.head = s->bhead;	/* our position lives in our own link segment */
	}
	return 0;
}

static void follower_fetched(struct rk__shm_link *s)
{
	struct rk_link *l = s->l;
	int ret;

	ret = follower_fetch(s);
	if (ret == -EAGAIN) {
		if (!arm_poll(s, &s->sock_op, &s->sock_armed, s->usock))
			return;
		ret = -EBUSY;
	}
	fd_close(&s->usock);
	if (!ret) {
		ret = send_answer(l, 0);
		if (ret) {
			rk__link_fail(l, ret, false);
			return;
		}
		s->switch_at = l->stats.tx_bytes;	/* ANSWER is our last frame on TCP */
		s->st = SS_MAPPED;
		arm_pid_watch(s);
		return;
	}
	setup_undo(s);
	stays_tcp(s->ctx, l, ret, "mapping the leader's segment");
	ret = send_answer(l, ret);
	if (ret)
		rk__link_fail(l, ret, false);
}

static int follower_switch(struct rk_link *l, struct rk__shm *c, const uint8_t *payload,
			   uint32_t len)
{
	struct rk__shm_link *s = l->shm;
	struct rk_wire_shm_switch sw;
	int ret;

	ret = rk_wire_decode_shm_switch(payload, len, &sw);
	if (ret)
		return ret;
	if (!s || s->st != SS_MAPPED)
		return -RK_EHANDSHAKE;
	if (sw.slot != RK_WIRE_SHM_NO_SLOT && !s->bbase)
		return -RK_EFIELD;	/* a reader of a ring it was not given */
	s->bcast = sw.slot != RK_WIRE_SHM_NO_SLOT;
	s->slot = s->bcast ? (int)sw.slot : -1;
	s->brx.pos = sw.bcast_pos;
	s->last_mark = sw.bcast_pos;
	l->rx_bseq = sw.bcast_seq;
	if (s->bcast)
		atomic_store_explicit(s->bhead, sw.bcast_pos, memory_order_release);
	else
		epoch_detach(s);	/* no slot, no bell: the leader would not ring it */
	s->rx_ring = true;
	l->rx_cut = true;	/* SWITCH was the leader's last frame on TCP */
	s->st = SS_ACTIVE;
	l->via = "shm";
	l->shm_settled = true;
	c->links++;
	rk__info(l->rank, "link to rank %d: on shared memory (%s wake-ups, %s)", l->peer,
		 s->use_futex ? "futex" : "eventfd",
		 s->bcast ? "broadcast ring" : "broadcasts on the link");
	return 0;
}

static void sock_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__shm_link *s = rk__container_of(op, struct rk__shm_link, sock_op);
	struct rk_link *l = s->l;

	(void)flags;
	s->sock_armed = false;
	s->sock_cancel = false;
	l->in_dispatch++;
	if (s->closing || res == -ECANCELED || l->state != RK_LINK_UP) {
		fd_close(&s->usock);
	} else if (s->leader && s->st == SS_OFFERED) {
		leader_accept(s);
	} else if (!s->leader && s->st == SS_FETCHING) {
		follower_fetched(s);
	} else {
		fd_close(&s->usock);
	}
	rk__loop_note(l->loop, RK_IDLE);
	l->in_dispatch--;
	rk__link_op_done(l);
}

/* ---- the transport's hooks ----------------------------------------------------- */

int rk__shm_control(struct rk_link *l, const struct rk_wire_hdr *h, const uint8_t *payload)
{
	struct rk__shm *c = l->tctx;

	if (!c)
		return -RK_EHANDSHAKE;	/* a link made outside a world's class */
	switch (h->type) {
	case RK_FRAME_SHM_REQUEST:
		return l->accepted ? leader_request(l, c, payload, h->len) : -RK_EHANDSHAKE;
	case RK_FRAME_SHM_OFFER:
		return l->accepted ? -RK_EHANDSHAKE : follower_offer(l, c, payload, h->len);
	case RK_FRAME_SHM_ANSWER:
		return l->accepted ? leader_answer(l, c, payload, h->len) : -RK_EHANDSHAKE;
	case RK_FRAME_SHM_SWITCH:
		return l->accepted ? -RK_EHANDSHAKE : follower_switch(l, c, payload, h->len);
	default:
		return -RK_EHANDSHAKE;
	}
}

void rk__shm_shutdown(struct rk_link *l)
{
	struct rk__shm_link *s = l->shm;

	if (!s || s->closing)
		return;
	s->closing = true;
	if (s->leader && s->slot >= 0 && s->ctx->readers[s->slot] == s)
		s->ctx->readers[s->slot] = NULL;
	epoch_detach(s);	/* the link ends: its consumers take the launch path */
	lane_shut(s);
	cancel_all(s);
}

void rk__shm_destroy(struct rk_link *l)
{
	struct rk__shm_link *s = l->shm;

	if (!s)
		return;
	if (s->leader && s->slot >= 0 && s->ctx->readers[s->slot] == s)
		s->ctx->readers[s->slot] = NULL;
	epoch_detach(s);
	lane_shut(s);
	seg_unmap(&s->base, s->len);
	seg_unmap(&s->bbase, s->blen);
	fd_close(&s->memfd);
	fd_close(&s->efd);
	fd_close(&s->peer_efd);
	fd_close(&s->usock);
	fd_close(&s->pidfd);
	free(s->stage);
	free(s->bstage);
	free(s->lstage);
	free(s);
	l->shm = NULL;
}

/* ---- the world's side: one write for every same-host follower -------------------- */

int rk__shm_broadcast(void *ctx, unsigned int type, unsigned int flags, const void *payload,
		      uint32_t len, uint8_t *done)
{
	struct rk__shm *c = ctx;
	struct rk__shm_link *s;
	uint64_t frame, rec, lag, maxlag = 0, skip = 0, h;
	uint8_t hdr[REC_HDR];
	bool waiting = false;
	int i, takers = 0, ret;

	if (!c || !c->bbase)
		return 0;
	frame = RK_WIRE_HDR_LEN + (uint64_t)len;
	rec = REC_HDR + pad8(frame);
	if (len > c->max_frame || frame > SHM_BCAST_MAX)
		return 0;	/* link by link: each link applies its own bounds */
	for (i = 0; i < RK_WIRE_SHM_SLOTS; i++) {
		s = c->readers[i];
		if (!s)
			continue;
		if (!rk_link_up(s->l)) {
			c->readers[i] = NULL;	/* failing: it reads no more */
			s->slot = -1;
			continue;
		}
		waiting = waiting || tx_pending(s->l);
	}
	/* frames queued before this one leave first, so that it can be the one write */
	if (waiting)
		rk__loop_flush_now(c->loop);
	for (i = 0; i < RK_WIRE_SHM_SLOTS; i++) {
		s = c->readers[i];
		if (!s)
			continue;
		h = atomic_load_explicit(s->bhead, memory_order_acquire);
		if (c->btx.pos - h > c->btx.size || (h & 7)) {
			c->readers[i] = NULL;
			s->slot = -1;
			shm_fail(s, -RK_ESHMRING, "broadcast position");
			continue;
		}
		lag = c->btx.pos - h;
		if (lag > maxlag)
			maxlag = lag;
		if (tx_pending(s->l) || !rk__shm_tx_ring(s->l) || !rk_link_up(s->l))
			skip |= 1ull << i;	/* its copy goes on its link, after its frames */
		else
			takers++;
	}
	/* the slowest reader bounds reuse: no room, every follower gets a copy on
	 * its link, where the send bound drops one that does not read */
	if (!takers || maxlag + rec > c->btx.size)
		return 0;
	if (rk__grow((void **)&c->scratch, &c->scratch_cap, frame, 1, 4096))
		return -ENOMEM;
	if (len)
		memcpy(c->scratch + RK_WIRE_HDR_LEN, payload, len);
	ret = rk_wire_encode_hdr(c->scratch, type, flags, 0, c->bseq, c->scratch + RK_WIRE_HDR_LEN,
				 len);
	if (ret < 0)
		return ret;
	rec_hdr(hdr, (uint32_t)frame, skip);
	ring_write(&c->btx, c->btx.pos, hdr, REC_HDR);
	ring_write(&c->btx, c->btx.pos + REC_HDR, c->scratch, frame);
	c->btx.pos += rec;
	c->bseq++;
	/* Release: the record before the tail; readers acquire the tail. */
	atomic_store_explicit(c->btx.tail, c->btx.pos, memory_order_release);
	/* Pairs with src_arm()'s fence, for every reader at once. */
	atomic_thread_fence(memory_order_seq_cst);
	for (i = 0; i < RK_WIRE_SHM_SLOTS; i++) {
		s = c->readers[i];
		if (!s || (skip & (1ull << i)))
			continue;
		done[s->l->peer] = 1;
		s->l->stats.tx_frames++;
		s->l->stats.tx_bytes += frame;
		s->l->stats.shm_bcast_frames++;
		s->l->last_tx = rk_loop_now(c->loop);
		bell_ring(s, BELL_SLEEP);
	}
	return 0;
}

void rk__shm_stats(void *ctx, struct rk_world_stats *st)
{
	const struct rk__shm *c = ctx;

	if (!c)
		return;
	st->shm_links += c->links;
	st->shm_remote += c->remote;
	st->shm_fallback += c->fallback;
}

int rk__shm_prepare(struct rk_loop *loop, const struct rk__addr *a, bool required, void **ctx)
{
	const struct rk_config *cfg = rk_loop_config(loop);
	struct sockaddr_storage ss;
	struct rk__shm *c;
	socklen_t len;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->loop = loop;
	c->rank = cfg->rank;
	c->mode = required ? RK_SHM_ON : cfg->shm;
	c->required = c->mode == RK_SHM_ON;
	c->max_frame = cfg->max_frame;
	c->bfd = -1;
	c->epfd = -1;
	c->resident = cfg->resident != RK_RESIDENT_OFF;
	c->lane = cfg->lane;
	c->loopback = !rk__sock_resolve(a, cfg->rank == 0, &ss, &len) && rk__sock_loopback(&ss);
	identity(&c->me);
	if (c->mode != RK_SHM_OFF)
		(void)features();	/* the probe's few syscalls now, not on a link */
	*ctx = c;
	return 0;
}

void rk__shm_release(void *ctx)
{
	struct rk__shm *c = ctx;

	if (!c)
		return;
	seg_unmap(&c->bbase, c->blen);
	fd_close(&c->bfd);
	rk_epoch_release(c->ep);	/* a scheduler may hold its own reference */
	fd_close(&c->epfd);
	free(c->scratch);
	free(c);
}

struct rk_epoch *rk__shm_epoch(void *ctx)
{
	struct rk__shm *c = ctx;

	return c ? c->ep : NULL;
}

struct rk_epoch *rk__shm_link_epoch(const struct rk_link *l)
{
	const struct rk__shm_link *s = l->shm;

	return s && s->st == SS_ACTIVE && !s->closing ? s->epv : NULL;
}

bool rk__shm_settled(const struct rk_link *l)
{
	return !l->tctx || l->shm_settled;
}

/* ---- the follower's lane ---------------------------------------------------------- */

struct rk_lane {
	uint8_t *base;			/* our own mapping of the link segment */
	size_t len;
	struct ring tx;
	_Atomic uint32_t *peer_bell;	/* the leader's */
	_Atomic uint32_t *shut;
	uint8_t *writer;		/* LS_LN_WRITER */
	int peer_efd;			/* ours: a dup of the link's */
	uint32_t rank;
	uint64_t seq;
	uint32_t max;			/* payload bytes */
	uint8_t *buf;			/* header + max */
	uint32_t rlen;			/* the open reservation's length */
	bool reserved;
	struct rk_lane_stats stats;
};

static _Atomic uint32_t *lane_owner(uint8_t *w)
{
	return (_Atomic uint32_t *)(void *)w;
}

static void lane_free(struct rk_lane *ln)
{
	if (ln->base)
		munmap(ln->base, ln->len);
	if (ln->peer_efd >= 0)
		close(ln->peer_efd);
	free(ln->buf);
	free(ln);
}

int rk_link_lane_open(struct rk_link *l, struct rk_lane **out)
{
	struct rk__shm_link *s = l->shm;
	struct rk_lane *ln;
	uint32_t zero = 0, rec;
	uint64_t head;
	int ret;

	*out = NULL;
	if (!s || s->leader || !s->ctx->lane || (s->st != SS_MAPPED && s->st != SS_ACTIVE))
		return -EOPNOTSUPP;
	if (s->closing || !rk_link_up(l))
		return -ENOTCONN;
	ln = calloc(1, sizeof(*ln));
	if (!ln)
		return -ENOMEM;
	ln->peer_efd = -1;
	ln->len = s->len;
	ln->base = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0);
	if (ln->base == MAP_FAILED) {
		ret = -errno;
		ln->base = NULL;
		goto fail;
	}
	ln->peer_efd = fcntl(s->peer_efd, F_DUPFD_CLOEXEC, 0);
	if (ln->peer_efd < 0) {
		ret = -errno;
		goto fail;
	}
	rec = lane_rec_max(s->ring_size);
	ln->max = rec - RK_WIRE_HDR_LEN < s->ctx->max_frame ? rec - RK_WIRE_HDR_LEN
							     : s->ctx->max_frame;
	ln->buf = malloc(RK_WIRE_HDR_LEN + (size_t)ln->max);
	if (!ln->buf) {
		ret = -ENOMEM;
		goto fail;
	}
	ln->writer = ln->base + LS_LN_WRITER;
	ln->shut = u32_at(ln->base, LS_LN_SHUT);
	ln->peer_bell = u32_at(ln->base, LS_L_BELL);
	ln->rank = (uint32_t)l->rank;
	lane_ring(&ln->tx, ln->base, s->ring_size);
	/* Acquire: pairs with rk_lane_close()'s release of the writer's state. */
	if (!atomic_compare_exchange_strong_explicit(lane_owner(ln->writer), &zero, 1,
						     memory_order_acquire,
						     memory_order_relaxed)) {
		ret = -EBUSY;
		goto fail;
	}
	ln->tx.pos = rk__le64_load(ln->writer + 8);
	ln->seq = rk__le64_load(ln->writer + 16);
	head = atomic_load_explicit(ln->tx.head, memory_order_acquire);
	if (ln->tx.pos - head > ln->tx.size || (head & (REC_ALIGN - 1)) ||
	    (ln->tx.pos & (REC_ALIGN - 1))) {
		atomic_store_explicit(lane_owner(ln->writer), 0, memory_order_release);
		ret = -RK_ESHMRING;
		goto fail;
	}
	ln->tx.seen = head;
	*out = ln;
	return 0;
fail:
	lane_free(ln);
	return ret;
}

uint8_t *rk_lane_reserve(struct rk_lane *ln, uint32_t len, int *err)
{
	if (ln->reserved) {
		*err = -EBUSY;
		return NULL;
	}
	if (len > ln->max) {
		*err = -RK_ETOOBIG;
		return NULL;
	}
	ln->reserved = true;
	ln->rlen = len;
	return ln->buf + RK_WIRE_HDR_LEN;
}

int rk_lane_commit(struct rk_lane *ln, unsigned int type, unsigned int flags, uint32_t len)
{
	uint64_t span;
	int64_t room;
	uint32_t b;
	uint64_t one = 1;
	size_t n;
	int ret;

	if (!ln->reserved)
		return -EINVAL;
	ln->reserved = false;
	if (type != RK_FRAME_USER || len > ln->rlen)
		return -EINVAL;
	if (atomic_load_explicit(ln->shut, memory_order_acquire))
		return -EPIPE;
	ret = rk_wire_encode_hdr(ln->buf, type, flags, ln->rank, ln->seq,
				 ln->buf + RK_WIRE_HDR_LEN, len);
	if (ret < 0)
		return ret;
	n = RK_WIRE_HDR_LEN + (size_t)len;
	span = rec_span(n);
	room = ring_room(&ln->tx, span);
	if (room < 0)
		return (int)room;
	if (room < (int64_t)span) {
		ln->stats.full++;
		return -EAGAIN;
	}
	rec_put(&ln->tx, ln->tx.pos, ln->buf, (uint32_t)n, 0);
	ln->tx.pos += span;
	ln->seq++;
	ln->stats.frames++;
	ln->stats.bytes += n;
	/* Pairs with the fence in the leader's src_arm(), as peer_wake() does. */
	atomic_thread_fence(memory_order_seq_cst);
	b = atomic_load_explicit(ln->peer_bell, memory_order_relaxed);
	if (b & BELL_SLEEP) {
		b = atomic_exchange_explicit(ln->peer_bell, 0, memory_order_relaxed);
		if (b & BELL_FUTEX)
			futex_wake(ln->peer_bell);
		if ((b & BELL_EFD) && write(ln->peer_efd, &one, sizeof(one)) < 0)
			(void)0;	/* non-blocking; a full counter already wakes it */
		if (b & BELL_SLEEP)
			ln->stats.wakes++;
	}
	return 0;
}

uint32_t rk_lane_max(const struct rk_lane *ln)
{
	return ln->max;
}

void rk_lane_stats(const struct rk_lane *ln, struct rk_lane_stats *out)
{
	*out = ln->stats;
}

void rk_lane_close(struct rk_lane *ln)
{
	if (!ln)
		return;
	rk__le64_store(ln->writer + 8, ln->tx.pos);
	rk__le64_store(ln->writer + 16, ln->seq);
	/* Release: the next lane reads the state we leave. */
	atomic_store_explicit(lane_owner(ln->writer), 0, memory_order_release);
	lane_free(ln);
}

/* ---- tests: what a broken peer writes ------------------------------------------- */

int rk__shm_test_poke(struct rk_link *l, enum rk__shm_poke what, const void *p, size_t n)
{
	struct rk__shm_link *s = l->shm;
	struct rk__shm *c;
	uint8_t h[REC_HDR];

	if (!s || s->st != SS_ACTIVE || s->closing)
		return -ENOTCONN;
	c = s->ctx;
	switch (what) {
	case RK__SHM_POKE_OVERSIZE:
		/* as long as a chunk may not be, its bytes whatever the ring holds */
		atomic_store_explicit(rec_word(&s->tx, s->tx.pos), htole32(SHM_CHUNK_MAX + 8),
				      memory_order_release);
		break;
	case RK__SHM_POKE_RESERVED:
		rk__le32_store(h, 1);
		ring_write(&s->tx, s->tx.pos + 4, h, 4);
		atomic_store_explicit(rec_word(&s->tx, s->tx.pos), htole32(8),
				      memory_order_release);
		break;
	case RK__SHM_POKE_MARK:
		rec_put(&s->tx, s->tx.pos, "12345678", 8, s->marks ? c->btx.pos + 1 : 8);
		break;
	case RK__SHM_POKE_CHUNK:
		if (!n || n > SHM_CHUNK_MAX)
			return -EINVAL;
		rec_put(&s->tx, s->tx.pos, p, (uint32_t)n, s->marks ? c->btx.pos : 0);
		s->tx.pos += rec_span(n);
		break;
	case RK__SHM_POKE_BHEAD:
		if (s->leader || !s->bcast)
			return -EINVAL;
		atomic_store_explicit(s->bhead, s->brx.pos + SHM_BCAST_SIZE * 2,
				      memory_order_release);
		return 0;
	case RK__SHM_POKE_LANE: {
		uint8_t *w = s->base + LS_LN_WRITER;
		struct ring r;

		if (s->leader || atomic_load(lane_owner(w)) || n > lane_rec_max(s->ring_size))
			return -EINVAL;
		lane_ring(&r, s->base, s->ring_size);
		r.pos = rk__le64_load(w + 8);
		if (!n) {
			atomic_store_explicit(rec_word(&r, r.pos),
					      htole32(lane_rec_max(s->ring_size) + 8),
					      memory_order_release);
			break;
		}
		rec_put(&r, r.pos, p, (uint32_t)n, 0);
		rk__le64_store(w + 8, r.pos + rec_span(n));
		break;
	}
	case RK__SHM_POKE_BCAST:
		if (!s->leader || !c->bbase || n < RK_WIRE_HDR_LEN || n > SHM_BCAST_MAX)
			return -EINVAL;
		rec_hdr(h, (uint32_t)n, 0);
		ring_write(&c->btx, c->btx.pos, h, REC_HDR);
		ring_write(&c->btx, c->btx.pos + REC_HDR, p, n);
		c->btx.pos += REC_HDR + pad8(n);
		c->bseq++;
		atomic_store_explicit(c->btx.tail, c->btx.pos, memory_order_release);
		break;
	}
	peer_wake(s, BELL_SLEEP);
	return 0;
}

int rk__shm_test_arm(struct rk_link *l)
{
	struct rk__shm_link *s = l->shm;

	if (!s || s->st != SS_ACTIVE || s->closing)
		return -ENOTCONN;
	return src_arm(&s->src);
}

/* ---- the shm:// class: tcp:// whose every link must move ------------------------ */

static int shm_class_prepare(struct rk_loop *loop, const struct rk__addr *a, void **ctx)
{
	return rk__shm_prepare(loop, a, true, ctx);
}

static const struct rk__transport_class shm_class = {
	.scheme = "shm",
	.prepare = shm_class_prepare,
	.release = rk__shm_release,
	.connect = rk__tcp_class_connect,
	.from_fd = rk__tcp_class_from_fd,
	.broadcast = rk__shm_broadcast,
	.stats = rk__shm_stats,
};

static void __attribute__((constructor)) shm_transport_register(void)
{
	rk__transport_register(&shm_class);
}
