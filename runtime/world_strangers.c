/* SPDX-License-Identifier: MIT */
/*
 * The leader's admission of strangers: accepted sockets that have not yet
 * completed the handshake. They wait in a bounded table grouped by the peer's
 * address, which names the one to evict when it is full, and each one's
 * failure is counted by cause and logged at a bounded rate. world.c calls in
 * at a stranger's steps (accepted, a valid HELLO, joined, failed) and at its
 * heartbeat tick, which flushes the summary.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "world_int.h"

/* ---- the leader's pending table ------------------------------------------------ */

/* The address part of @l's "host:port" or "[host]:port" (the whole, failing that). */
static size_t host_name(const struct rk_link *l)
{
	const char *colon = strrchr(l->peer_addr, ':');

	return colon ? (size_t)(colon - l->peer_addr) : strlen(l->peer_addr);
}

static uint32_t host_hash(const char *p, size_t n)
{
	uint32_t h = 2166136261u;	/* FNV-1a */

	while (n--)
		h = (h ^ (uint8_t)*p++) * 16777619u;
	return h;
}

/* @l's address in the table, added if new; NULL when out of memory. */
struct rk__pending_host *rk__world_host_get(struct rk_world *w, const struct rk_link *l)
{
	size_t n = host_name(l);
	uint32_t hash = host_hash(l->peer_addr, n);
	struct rk__pending_host **bucket = &w->host_hash[hash % PENDING_BUCKETS], *h;

	for (h = *bucket; h; h = h->chain)
		if (h->hash == hash && !strncmp(h->name, l->peer_addr, n) && !h->name[n])
			return h;
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	memcpy(h->name, l->peer_addr, n);	/* n < sizeof(peer_addr) == sizeof(name) */
	h->hash = hash;
	h->chain = *bucket;
	*bucket = h;
	h->next = w->hosts;
	if (w->hosts)
		w->hosts->prev = h;
	w->hosts = h;
	return h;
}

static void host_put(struct rk_world *w, struct rk__pending_host *h)
{
	struct rk__pending_host **pp;

	if (h->n)
		return;
	for (pp = &w->host_hash[h->hash % PENDING_BUCKETS]; *pp != h; pp = &(*pp)->chain)
		;
	*pp = h->chain;
	if (h->prev)
		h->prev->next = h->next;
	else
		w->hosts = h->next;
	if (h->next)
		h->next->prev = h->prev;
	free(h);
}

/* Append @l to its address's strangers: the freshest step is the last. */
static void host_append(struct rk__pending_host *h, struct rk_link *l)
{
	l->host_next = NULL;
	l->host_prev = h->tail;
	if (h->tail)
		h->tail->host_next = l;
	else
		h->head = l;
	h->tail = l;
}

static void host_unlink(struct rk__pending_host *h, struct rk_link *l)
{
	if (l->host_prev)
		l->host_prev->host_next = l->host_next;
	else
		h->head = l->host_next;
	if (l->host_next)
		l->host_next->host_prev = l->host_prev;
	else
		h->tail = l->host_prev;
	l->host_prev = l->host_next = NULL;
}

void rk__world_pending_add(struct rk_world *w, struct rk_link *l, struct rk__pending_host *h)
{
	l->host = h;
	l->step_at = rk_loop_now(w->loop);
	host_append(h, l);
	h->n++;
	l->prev = NULL;
	l->next = w->pending;
	if (w->pending)
		w->pending->prev = l;
	w->pending = l;
	w->nr_pending++;
	if (w->nr_pending > w->stats.pending_max)
		w->stats.pending_max = w->nr_pending;
}

/* @l leaves the table (it joined, failed or closed); a no-op when not in it. */
void rk__world_pending_remove(struct rk_world *w, struct rk_link *l)
{
	struct rk__pending_host *h = l->host;

	if (!h)
		return;
	host_unlink(h, l);
	h->n--;
	host_put(w, h);
	l->host = NULL;
	if (l->prev)
		l->prev->next = l->next;
	else
		w->pending = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = l->next = NULL;
	w->nr_pending--;
}

/* @l took a handshake step (a valid HELLO): it is its address's freshest. */
void rk__world_pending_step(struct rk_world *w, struct rk_link *l)
{
	struct rk__pending_host *h = l->host;

	if (!h)
		return;
	l->step_at = rk_loop_now(w->loop);
	host_unlink(h, l);
	host_append(h, l);
}

/*
 * The stranger to push out for a newcomer: the address that holds the most
 * strangers gives up its stalest, the one whose last handshake step is the
 * oldest (ties between addresses: the stalest of theirs). A real rank's last
 * step starts its proof round trip, so strangers from another address never
 * push it out, and strangers from its own must take a table's worth of steps
 * within that one round trip to.
 */
struct rk_link *rk__world_pending_victim(struct rk_world *w)
{
	struct rk__pending_host *h, *best = NULL;

	for (h = w->hosts; h; h = h->next)
		if (!best || h->n > best->n ||
		    (h->n == best->n && h->head->step_at < best->head->step_at))
			best = h;
	return best ? best->head : NULL;
}

/* The table's bound: RK_MAX_PENDING, and never over half the descriptors the
 * process may open, so strangers cannot starve the accept of a real rank. */
unsigned int rk__world_pending_bound(const struct rk_config *cfg)
{
	unsigned int max = rk__config_ctuning(cfg)->max_pending;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 2 < max) {
		max = rl.rlim_cur / 2 ? (unsigned int)(rl.rlim_cur / 2) : 1;
		rk__info(0, "pending handshakes: at most %u, half of RLIMIT_NOFILE (%llu)", max,
			 (unsigned long long)rl.rlim_cur);
	}
	return max;
}

/* ---- strangers: counted by cause, logged at a bounded rate ----------------------- */

static const char *const refusal_names[] = {
	[REF_MAGIC] = "not rankrt",
	[REF_VERSION] = "version",
	[REF_FRAME] = "bad frame",
	[REF_JOB] = "another job",
	[REF_RANK] = "rank",
	[REF_AUTH] = "auth",
	[REF_TIMEOUT] = "timeout",
	[REF_EVICTED] = "evicted",
	[REF_CLOSED] = "closed",
	[REF_OTHER] = "other",
};
_Static_assert(ARRAY_SIZE(refusal_names) == REF__COUNT, "every refusal needs a name");

static enum rk__refusal refusal_of(int err)
{
	switch (err) {
	case -RK_EMAGIC:
	case -RK_EHDRCRC:
		return REF_MAGIC;
	case -RK_EVERSION:
	case -RK_EPROTOVER:
		return REF_VERSION;
	case -RK_ETYPE:
	case -RK_EFLAGS:
	case -RK_ERESERVED:
	case -RK_ETOOBIG:
	case -RK_EPAYCRC:
	case -RK_ESHORT:
	case -RK_ETRAILING:
	case -RK_EFIELD:
	case -RK_EHANDSHAKE:
	case -RK_ESEQ:
		return REF_FRAME;
	case -RK_EWORLD:
	case -RK_ESESSION:
		return REF_JOB;
	case -RK_ERANK:
		return REF_RANK;
	case -RK_EAUTH:
		return REF_AUTH;
	case -RK_ETIMEOUT:
		return REF_TIMEOUT;
	case ERR_EVICTED:
		return REF_EVICTED;
	case -ECONNRESET:
	case -EPIPE:
	case -ECANCELED:
		return REF_CLOSED;
	default:
		return REF_OTHER;
	}
}

uint64_t *rk__world_refusal_counter(struct rk_world_stats *st, enum rk__refusal r)
{
	switch (r) {
	case REF_MAGIC:
		return &st->refused_magic;
	case REF_VERSION:
		return &st->refused_version;
	case REF_FRAME:
		return &st->refused_frame;
	case REF_JOB:
		return &st->refused_job;
	case REF_RANK:
		return &st->refused_rank;
	case REF_AUTH:
		return &st->refused_auth;
	case REF_TIMEOUT:
		return &st->refused_timeout;
	case REF_EVICTED:
		return &st->refused_evicted;
	case REF_CLOSED:
		return &st->refused_closed;
	default:
		return &st->refused_other;
	}
}

/* One summary line for the refusals folded since the interval began. */
void rk__world_refusals_flush(struct rk_world *w, uint64_t now)
{
	char buf[512];
	size_t n = 0;
	int i;

	if (!w->nr_folded)
		return;
	for (i = 0; i < REF__COUNT && n < sizeof(buf); i++)
		if (w->folded[i])
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s %llu", n ? ", " : "",
					      refusal_names[i], (unsigned long long)w->folded[i]);
	rk__warn(w->rank, "refused %llu more connections in the last %llu ms: %s",
		 (unsigned long long)w->nr_folded,
		 (unsigned long long)((now - w->log_at) / 1000000), buf);
	memset(w->folded, 0, sizeof(w->folded));
	w->nr_folded = 0;
	w->log_at = now;
}

/*
 * A stranger was dropped: count it; log it when it is the first of an
 * interval, else fold it into the interval's summary (hb_timer_cb prints it),
 * so a flood costs one line per RK_REFUSED_LOG_MS, however fast it comes.
 */
void rk__world_refused(struct rk_world *w, struct rk_link *l, int err)
{
	const struct rk_config *cfg = rk_loop_config(w->loop);
	enum rk__refusal r = refusal_of(err);
	uint64_t now = rk_loop_now(w->loop);

	(*rk__world_refusal_counter(&w->stats, r))++;
	if (w->destroying)
		return;
	if (w->log_at && now - w->log_at < rk__config_ctuning(cfg)->refused_log_ns) {
		w->folded[r]++;
		w->nr_folded++;
		w->stats.log_suppressed++;
		return;
	}
	w->log_at = now;
	rk__warn(w->rank, "refused a connection from %s before its handshake: %s (%s)%s",
		 l->peer_addr[0] ? l->peer_addr : "?", refusal_names[r], rk_errname(err),
		 r == REF_AUTH ? ": it did not prove the job's secret" : "");
}
