/* SPDX-License-Identifier: MIT */
/*
 * The world's insides, shared by its files (never installed):
 *   world.c            the star of links: create and destroy, ready, send and
 *                      broadcast, heartbeats and deadlines, the links' owner
 *                      callbacks, accept and connect, claims, stats
 *   world_strangers.c  the leader's admission of strangers: the pending table
 *                      keyed by the peer's address, and the refusals counted by
 *                      cause and logged at a bounded rate
 * rk__world_* names cross between them.
 */
#ifndef RK_WORLD_INT_H
#define RK_WORLD_INT_H

#include "runtime_int.h"
#include "link_int.h"

struct rk__listener;

/* Why a stranger was dropped: the counters of struct rk_world_stats. */
enum rk__refusal {
	REF_MAGIC,
	REF_VERSION,
	REF_FRAME,
	REF_JOB,
	REF_RANK,
	REF_AUTH,
	REF_TIMEOUT,
	REF_EVICTED,
	REF_CLOSED,
	REF_OTHER,
	REF__COUNT,
};

/* The error a stranger is evicted with (never sent: it is not told). */
#define ERR_EVICTED (-ECONNABORTED)

#define PENDING_BUCKETS	64	/* hash chains of the pending table's addresses */

/* What a rank's link counted: the live link, or the one that left, or its last copy. */
struct rk__link_final {
	struct rk_link *left;		/* failed, not yet freed: still counting its last bytes */
	struct rk_link_stats st;	/* ...its counters when it was freed */
	bool kept;
};

/* One peer address (without its port) and its strangers in the pending table. */
struct rk__pending_host {
	struct rk__pending_host *chain;		/* its hash bucket's */
	struct rk__pending_host *prev, *next;	/* every address that holds a stranger */
	struct rk_link *head, *tail;		/* its strangers, stalest step first */
	unsigned int n;
	uint32_t hash;
	char name[64];
};

struct rk_world {
	struct rk_loop *loop;
	const struct rk_world_ops *ops;
	void *arg;
	int rank, size;
	struct rk__addr addr;
	struct rk__transport tr;	/* the classes of the leader address's scheme */
	struct rk_link **links;		/* [size]: links that are up */
	struct rk__link_final *final;	/* [size]: rk_world_link_stats() of links gone */
	uint8_t *bdone;			/* [size]: followers a class's broadcast reached */
	struct rk_link *pending;	/* leader: accepted, not handshaken */
	unsigned int nr_pending;
	unsigned int max_pending;	/* ...at most (rk__world_pending_bound()) */
	struct rk__pending_host *hosts;	/* ...their addresses */
	struct rk__pending_host *host_hash[PENDING_BUCKETS];
	struct rk_link *connecting;	/* follower: the link being set up */
	struct rk_link *all;		/* every link not yet freed, whatever its state */
	unsigned int nr_live;		/* links not yet freed */
	struct rk__listener *ls;
	struct rk_timer hb_timer;
	struct rk_timer retry_timer;
	uint64_t deadline;
	uint64_t retry_ns;
	int nr_up;
	bool ready;
	bool destroying;
	int failed;
	struct rk_world_stats stats;
	/* refusals: the first of an interval is logged, the rest summed */
	uint64_t log_at;		/* when the interval began */
	uint64_t folded[REF__COUNT];	/* refusals since then, not logged */
	uint64_t nr_folded;
	unsigned int holds;		/* schedulers built on it (rk__world_hold) */
	struct rk__claim *claims;	/* frames modules above take (rk__world_claim) */
};

/* ---- world_strangers.c --------------------------------------------------------------- */

struct rk__pending_host *rk__world_host_get(struct rk_world *w, const struct rk_link *l);
void rk__world_pending_add(struct rk_world *w, struct rk_link *l, struct rk__pending_host *h);
void rk__world_pending_remove(struct rk_world *w, struct rk_link *l);
void rk__world_pending_step(struct rk_world *w, struct rk_link *l);
struct rk_link *rk__world_pending_victim(struct rk_world *w);
unsigned int rk__world_pending_bound(const struct rk_config *cfg);
uint64_t *rk__world_refusal_counter(struct rk_world_stats *st, enum rk__refusal r);
void rk__world_refusals_flush(struct rk_world *w, uint64_t now);
void rk__world_refused(struct rk_world *w, struct rk_link *l, int err);

#endif /* RK_WORLD_INT_H */
