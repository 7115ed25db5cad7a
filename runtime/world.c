/* SPDX-License-Identifier: MIT */
/*
 * The world: a star of links around the leader (rank 0).
 *
 * The leader listens on cfg.leader and accepts followers. Until an accepted
 * socket has completed the handshake (and, with a secret, proved it holds
 * it) it is a stranger: it holds no rank, it may send only the handshake,
 * it must finish within handshake_timeout, at most max_pending strangers are
 * kept (when full, a new one pushes out the stalest stranger of the address
 * holding the most: rk__world_pending_victim()), and its failure is counted
 * by cause and logged at a bounded rate (world_strangers.c).
 * A follower connects, retrying with backoff until connect_timeout, and sends
 * HELLO; the leader answers WELCOME (and both prove the secret with AUTH).
 * Links are made by the transport classes of the leader address's scheme
 * (link_int.h, transport.c), so this file names no transport. Heartbeats flow on idle links; a peer
 * silent for peer_timeout is declared dead. When the leader loses a follower
 * it tells every other follower with an ERROR frame naming the rank, so every
 * rank learns of a death within peer_timeout + heartbeat.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime_int.h"
#include "link_int.h"
#include "sock_int.h"
#include "world_int.h"

static void world_set_ready(struct rk_world *w)
{
	if (w->ready)
		return;
	w->ready = true;
	rk__info(w->rank, "world ready: %d ranks", w->size);
	if (w->ops && w->ops->ready)
		w->ops->ready(w, w->arg);
}

static void report_peer(struct rk_world *w, int rank, int err)
{
	if (!w->failed)
		w->failed = err;
	if (w->destroying)
		return;
	if (err == -RK_EPEERBYE)
		rk__info(w->rank, "rank %d left", rank);
	else
		rk__warn(w->rank, "rank %d failed: %s", rank, rk_strerror(err));
	if (w->ops && w->ops->peer_error)
		w->ops->peer_error(w, rank, err, w->arg);
}

/* ---- link owner callbacks ------------------------------------------------------ */

/* The peer's HELLO or WELCOME passed the link's checks: may it join? */
static int world_check(struct rk_link *l, const struct rk_wire_hello *hello)
{
	struct rk_world *w = l->owner;
	int r = (int)hello->rank;

	if (w->rank == 0) {
		if (r <= 0 || r >= w->size || w->links[r])
			return -RK_ERANK;
		rk__world_pending_step(w, l);
		return 0;
	}
	return r != 0 ? -RK_ERANK : 0;
}

/* The handshake completed (the peer proved the secret, where one is set). */
static int world_handshake(struct rk_link *l)
{
	struct rk_world *w = l->owner;
	int r = l->peer;

	if (w->rank == 0) {
		/* another link may have taken the rank while this one proved itself */
		if (r <= 0 || r >= w->size || w->links[r])
			return -RK_ERANK;
		rk__world_pending_remove(w, l);
		w->links[r] = l;
		w->nr_up++;
		w->stats.joined++;
		rk__info(w->rank, "rank %d joined from %s (%d/%d)%s", r, l->peer_addr,
			 w->nr_up + 1, w->size, l->authed ? ", authenticated" : "");
		if (w->nr_up == w->size - 1)
			world_set_ready(w);
		return 0;
	}
	w->connecting = NULL;
	w->links[0] = l;
	w->nr_up = 1;
	world_set_ready(w);
	return 0;
}

/* Whether claim @c takes a frame of @type (decoded into @p). */
static bool claim_covers(const struct rk__claim *c, unsigned int type,
			 const union rk__wire_payload *p)
{
	if (type == RK_FRAME_USER)
		return p->user.tag - c->tag < c->ntags;	/* wraps below c->tag */
	return c->types & (1u << type);
}

static enum rk_activity world_frame(struct rk_link *l, const struct rk_wire_hdr *h,
				    const uint8_t *payload, const union rk__wire_payload *p)
{
	struct rk_world *w = l->owner;
	struct rk__claim *c;

	if (h->type == RK_FRAME_ERROR) {
		const struct rk_wire_error *e = &p->error;

		/* Only the leader speaks of other ranks, and only of real ones: a
		 * rank this world does not have (0xfffffffe) is the link's own error. */
		if (w->rank != 0 && l->peer == 0 && e->rank != RK_WIRE_RANK_NONE &&
		    e->rank < (uint32_t)w->size && e->rank != 0 && e->rank != (uint32_t)w->rank) {
			report_peer(w, (int)e->rank, e->code < 0 ? e->code : -RK_EPEERERR);
			return RK_BUSY;
		}
		rk__warn(w->rank, "rank %d reports %s: %.*s", l->peer, rk_errname(e->code),
			 (int)e->msg_len, e->msg);
		rk__link_fail(l, e->code < 0 ? e->code : -RK_EPEERERR, false);
		return RK_BUSY;
	}
	/* a module's own frames never reach the application */
	for (c = w->claims; c; c = c->next)
		if (claim_covers(c, h->type, p))
			return c->frame(c, l->peer, h, payload, p);
	if (!w->ops || !w->ops->frame)
		return RK_IDLE;
	return w->ops->frame(w, l->peer, h, payload, w->arg);
}

static void world_retry_connect(struct rk_world *w);

static void world_link_failed(struct rk_link *l, int err)
{
	struct rk_world *w = l->owner;
	uint8_t buf[16 + RK_WIRE_ERRMSG_MAX];
	int peer = l->peer, i, n;

	if (peer >= 0 && peer < w->size && w->links[peer] == l) {
		w->links[peer] = NULL;
		w->final[peer].left = l;
		w->nr_up--;
		report_peer(w, peer, err);
		/* a clean BYE is the follower's own business; a failure is everyone's */
		if (w->rank == 0 && !w->destroying && err != -RK_EPEERBYE) {
			/* tell every other follower, so no rank waits on a dead one */
			n = rk_wire_encode_error(buf, sizeof(buf), err, (uint32_t)peer,
						 "rank failed");
			for (i = 1; i < w->size && n > 0; i++)
				if (w->links[i])
					rk_link_send(w->links[i], RK_FRAME_ERROR, 0, buf,
						     (uint32_t)n);
		}
		return;
	}
	if (l == w->connecting) {
		w->connecting = NULL;
		/* destroying, or the bootstrap already gave up (connect_timeout) */
		if (w->destroying || w->failed)
			return;
		switch (err) {
		case -ECONNREFUSED:
		case -ECONNRESET:
		case -ECONNABORTED:
		case -ETIMEDOUT:
		case -EHOSTUNREACH:
		case -ENETUNREACH:
		case -EPIPE:
			if (rk_loop_now(w->loop) < w->deadline) {
				rk__dbg(w->rank, "connect: %s, retrying", rk_strerror(err));
				rk_timer_start(w->loop, &w->retry_timer, w->retry_ns, 0);
				if (w->retry_ns < 500000000ull)
					w->retry_ns *= 2;
				return;
			}
			/* retried until connect_timeout: that is the error (documented
			 * for rk_world_wait_ready()), the last refusal only its cause */
			rk__err(w->rank, "cannot join the leader at %s:%u within %llu ms: %s",
				w->addr.host, w->addr.port,
				(unsigned long long)(rk_loop_config(w->loop)->connect_timeout_ns /
						     1000000),
				rk_strerror(err));
			report_peer(w, 0, -RK_ETIMEOUT);
			return;
		default:
			break;
		}
		rk__err(w->rank, "cannot join the leader at %s:%u: %s", w->addr.host, w->addr.port,
			rk_strerror(err));
		report_peer(w, 0, err);
		return;
	}
	/* an accepted socket that never completed the handshake: drop it alone */
	rk__world_pending_remove(w, l);
	rk__world_refused(w, l, err);
}

static void world_link_closed(struct rk_link *l)
{
	struct rk_world *w = l->owner;
	struct rk_link **pp;

	rk__world_pending_remove(w, l);
	if (l->peer >= 0 && l->peer < w->size && w->links[l->peer] == l) {
		w->links[l->peer] = NULL;
		w->nr_up--;
	}
	if (l->was_up && l->peer >= 0 && l->peer < w->size) {
		w->final[l->peer].st = l->stats;
		w->final[l->peer].kept = true;
		if (w->final[l->peer].left == l)
			w->final[l->peer].left = NULL;
	}
	if (w->connecting == l)
		w->connecting = NULL;
	for (pp = &w->all; *pp; pp = &(*pp)->all_next) {
		if (*pp == l) {
			*pp = l->all_next;
			break;
		}
	}
	w->nr_live--;
}

static void live_add(struct rk_world *w, struct rk_link *l)
{
	l->all_next = w->all;
	w->all = l;
	w->nr_live++;
}

static const struct rk__link_owner_ops world_link_ops = {
	.check = world_check,
	.handshake = world_handshake,
	.frame = world_frame,
	.failed = world_link_failed,
	.closed = world_link_closed,
};

/* ---- leader: accept ---------------------------------------------------------------- */

void rk__world_accept(struct rk_world *w, int fd)
{
	unsigned int max = w->max_pending;
	struct rk__pending_host *h;
	struct rk_link *l;
	int ret;

	if (w->destroying) {
		close(fd);
		return;
	}
	w->stats.accepted++;
	while (w->nr_pending >= max) {
		l = rk__world_pending_victim(w);
		if (!l)
			break;
		rk__world_pending_remove(w, l);
		rk__link_fail(l, ERR_EVICTED, false);
	}
	if (w->nr_pending >= max) {
		close(fd);	/* every pending one is already closing */
		(*rk__world_refusal_counter(&w->stats, REF_EVICTED))++;
		return;
	}
	ret = rk__transport_accept(&w->tr, w->loop, fd, &world_link_ops, w, &l);
	if (ret) {
		close(fd);
		(*rk__world_refusal_counter(&w->stats, REF_OTHER))++;
		return;
	}
	live_add(w, l);
	h = rk__world_host_get(w, l);
	if (!h) {
		rk__link_fail(l, -ENOMEM, false);
		return;
	}
	rk__world_pending_add(w, l, h);
}

static void world_accept(struct rk__listener *ls, int fd)
{
	rk__world_accept(rk__sock_listener_arg(ls), fd);
}

/* ---- follower: connect ------------------------------------------------------------- */

static void world_retry_connect(struct rk_world *w)
{
	struct rk_link *l;
	int ret;

	ret = rk__transport_connect(&w->tr, w->loop, &w->addr, &world_link_ops, w, &l);
	if (ret) {
		report_peer(w, 0, ret);
		return;
	}
	live_add(w, l);
	w->connecting = l;
}

static enum rk_activity retry_timer_cb(struct rk_timer *t, uint64_t now)
{
	struct rk_world *w = t->data;

	(void)now;
	if (!w->destroying && !w->ready && !w->failed)
		world_retry_connect(w);
	return RK_IDLE;
}

/* ---- heartbeats and deadlines ------------------------------------------------------ */

static enum rk_activity hb_timer_cb(struct rk_timer *t, uint64_t now)
{
	struct rk_world *w = t->data;
	const struct rk_config *cfg = rk_loop_config(w->loop);
	struct rk_link *l, *next;
	uint8_t buf[8];
	int i, n;

	for (i = 0; i < w->size; i++) {
		l = w->links[i];
		if (!l)
			continue;
		if (now - l->last_rx >= cfg->peer_timeout_ns) {
			rk__warn(w->rank, "rank %d silent for %llu ms", i,
				 (unsigned long long)((now - l->last_rx) / 1000000));
			rk__link_fail(l, -RK_EPEERDEAD, true);
			continue;
		}
		if (rk__heartbeat_due(now, l->last_tx, rk__config_ctuning(cfg)->heartbeat_ns)) {
			struct rk_wire_heartbeat hb = { .time_ns = now };

			n = rk_wire_encode_heartbeat(buf, sizeof(buf), &hb);
			if (n > 0 && rk_link_send(l, RK_FRAME_HEARTBEAT, 0, buf, (uint32_t)n) == 0)
				l->stats.heartbeats_tx++;
		}
	}
	for (l = w->pending; l; l = next) {
		next = l->next;
		if (now - l->created >= rk__config_ctuning(cfg)->handshake_timeout_ns)
			rk__link_fail(l, -RK_ETIMEOUT, false);
	}
	if (w->nr_folded && now - w->log_at >= rk__config_ctuning(cfg)->refused_log_ns)
		rk__world_refusals_flush(w, now);
	if (!w->ready && !w->failed && now >= w->deadline) {
		rk__err(w->rank, "world not ready after %llu ms (%d of %d ranks)",
			(unsigned long long)(cfg->connect_timeout_ns / 1000000), w->nr_up + 1,
			w->size);
		w->failed = -RK_ETIMEOUT;
	}
	return RK_IDLE;
}

/* ---- public ------------------------------------------------------------------------ */

/*
 * Safe by default: a world of several ranks authenticates with the job's
 * secret, or lives on loopback, or says RK_AUTH=off out loud.
 */
static int world_auth_policy(struct rk_world *w, const struct rk_config *cfg)
{
	static atomic_bool warned_off;
	struct sockaddr_storage ss;
	socklen_t len;
	int ret;

	if (cfg->secret_len) {
		if (rk__auth_available())
			return 0;
		rk__err(w->rank, "world: a secret is set, but rankrt was built without OpenSSL "
			"and cannot authenticate (configure --with-openssl)");
		return -EOPNOTSUPP;
	}
	if (cfg->auth == RK_AUTH_ON) {
		rk__err(w->rank, "world: RK_AUTH=on, but no secret: set RK_SECRET_FILE to the "
			"job's secret file");
		return -RK_ENOSECRET;
	}
	if (cfg->auth == RK_AUTH_OFF) {
		if (!atomic_exchange(&warned_off, true))
			rk__warn(w->rank, "world: RK_AUTH=off: any process that reaches %s:%u can "
				 "join this job as a rank", w->addr.host, w->addr.port);
		return 0;
	}
	ret = rk__sock_resolve(&w->addr, w->rank == 0, &ss, &len);
	if (ret)
		return ret;
	if (rk__sock_loopback(&ss))
		return 0;
	rk__err(w->rank, "world: %s:%u is not a loopback address and no secret is set, so "
		"anyone who reaches it could join the job. Set RK_SECRET_FILE to a file (chmod "
		"600) holding the job's secret, the same on every rank (make one with: openssl "
		"rand -hex 32), or set RK_AUTH=off to run without authentication",
		w->addr.host, w->addr.port);
	return -RK_ENOSECRET;
}

int rk_world_create(struct rk_loop *loop, const struct rk_world_ops *ops, void *arg,
		    struct rk_world **out)
{
	const struct rk_config *cfg = rk_loop_config(loop);
	struct rk_world *w;
	uint64_t period;
	int ret;

	if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size) {
		rk__err(cfg->rank, "world: rank %d / size %d: set RK_RANK and RK_WORLD_SIZE",
			cfg->rank, cfg->world_size);
		return -RK_ECONFIG;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->links = calloc((size_t)cfg->world_size, sizeof(*w->links));
	w->bdone = calloc((size_t)cfg->world_size, 1);
	w->final = calloc((size_t)cfg->world_size, sizeof(*w->final));
	if (!w->links || !w->bdone || !w->final) {
		ret = -ENOMEM;
		goto err_free_links;
	}
	w->loop = loop;
	w->ops = ops;
	w->arg = arg;
	w->rank = cfg->rank;
	w->size = cfg->world_size;
	w->retry_ns = 20000000ull;
	w->deadline = rk_loop_now(loop) + cfg->connect_timeout_ns;
	rk_timer_init(&w->hb_timer, hb_timer_cb, w);
	rk_timer_init(&w->retry_timer, retry_timer_cb, w);
	if (w->size > 1) {
		if (!cfg->leader[0]) {
			rk__err(w->rank, "world: no leader address: set RK_LEADER");
			ret = -RK_ECONFIG;
			goto err_free_links;
		}
		ret = rk__addr_parse(cfg->leader, &w->addr);
		if (ret) {
			rk__err(w->rank, "world: RK_LEADER='%.64s' is not an address this build "
				"takes", cfg->leader);
			goto err_free_links;
		}
		ret = world_auth_policy(w, cfg);
		if (ret)
			goto err_free_links;
		ret = rk__transport_open(loop, &w->addr, &w->tr);
		if (ret)
			goto err_free_links;
		if (w->rank == 0) {
			w->max_pending = rk__world_pending_bound(cfg);
			ret = rk__sock_listen(loop, &w->addr, world_accept, w, &w->ls);
			if (ret) {
				rk__err(0, "world: cannot listen on %s: %s", cfg->leader,
					rk_strerror(ret));
				goto err_release;
			}
		} else {
			world_retry_connect(w);
			if (w->failed) {
				ret = w->failed;
				goto err_release;
			}
		}
	}
	period = rk__config_ctuning(cfg)->heartbeat_ns;
	if (rk__config_ctuning(cfg)->handshake_timeout_ns < period)
		period = rk__config_ctuning(cfg)->handshake_timeout_ns;
	rk_timer_start(loop, &w->hb_timer, period, period);
	rk__loop_ref(loop);
	if (w->size == 1)
		world_set_ready(w);
	*out = w;
	return 0;

err_release:
	rk__transport_close(&w->tr);
err_free_links:
	free(w->final);
	free(w->bdone);
	free(w->links);
	free(w);
	return ret;
}

int rk_world_wait_ready(struct rk_world *w)
{
	bool waited = !w->ready;
	int ret;

	while (!w->ready && !w->failed) {
		ret = rk_loop_run(w->loop, RK_RUN_ONCE);
		if (ret < 0)
			return ret;
	}
	/* leader: the first round then goes on the rings; a world found ready
	 * returns at once, as before (a caller that pumps every rank's loop
	 * itself would otherwise run only this one for the connect timeout) */
	if (w->ready && waited)
		rk__world_settle(w);
	return w->ready ? 0 : w->failed;
}

/* Every link that is up has ended its same-host upgrade, one way or the other. */
static bool links_settled(const struct rk_world *w)
{
	int i;

	for (i = 0; i < w->size; i++) {
		if (i == w->rank || !w->links[i] || !rk_link_up(w->links[i]))
			continue;
		if (!rk__transport_settled(&w->tr, w->links[i]))
			return false;
	}
	return true;
}

bool rk__world_settle(struct rk_world *w)
{
	uint64_t deadline;

	if (!w->ready)
		return false;
	/* a follower runs nothing: a ROUND that came meanwhile would reach a
	 * scheduler not yet made; the leader sends none before it has settled */
	if (w->rank != 0 || w->failed || rk__loop_running(w->loop))
		return links_settled(w);
	deadline = rk__now_ns() + rk_loop_config(w->loop)->connect_timeout_ns;
	/* RK_RUN_ONCE returns at least at each heartbeat tick: the bound holds */
	while (!links_settled(w) && !w->failed && rk__now_ns() < deadline) {
		if (rk_loop_run(w->loop, RK_RUN_ONCE) < 0)
			break;
	}
	return links_settled(w);
}

struct rk_epoch *rk__world_epoch(struct rk_world *w)
{
	if (w->rank == 0)
		return rk__transport_epoch(&w->tr);
	return w->links[0] ? rk__transport_link_epoch(&w->tr, w->links[0]) : NULL;
}

int rk_world_send(struct rk_world *w, int rank, unsigned int type, unsigned int flags,
		  const void *payload, uint32_t len)
{
	if (rank < 0 || rank >= w->size || !w->links[rank])
		return -ENOTCONN;
	return rk_link_send(w->links[rank], type, flags, payload, len);
}

int rk_world_broadcast(struct rk_world *w, unsigned int type, unsigned int flags,
		       const void *payload, uint32_t len)
{
	int i, ret, first = 0;

	if (w->rank != 0)
		return -ENOTCONN;
	memset(w->bdone, 0, (size_t)w->size);
	/* the followers that take one write (a same-host ring) first; if that
	 * write cannot be made, every follower gets its own copy */
	if (rk__transport_broadcast(&w->tr, type, flags, payload, len, w->bdone))
		memset(w->bdone, 0, (size_t)w->size);
	for (i = 1; i < w->size; i++) {
		if (w->bdone[i])
			continue;
		if (!w->links[i]) {
			if (!first)
				first = -ENOTCONN;
			continue;
		}
		ret = rk_link_send(w->links[i], type, flags, payload, len);
		if (ret && !first)
			first = ret;
	}
	return first;
}

struct rk_link *rk_world_link(struct rk_world *w, int rank)
{
	if (rank < 0 || rank >= w->size)
		return NULL;
	return w->links[rank];
}

int rk_world_link_stats(const struct rk_world *w, int rank, struct rk_link_stats *out,
			size_t size)
{
	const struct rk_link *l;

	if (rank < 0 || rank >= w->size || rank == w->rank)
		return -EINVAL;
	l = w->links[rank] ? w->links[rank] : w->final[rank].left;
	if (l)
		return (int)rk_link_stats(l, out, size);
	if (!w->final[rank].kept)
		return -ENOENT;
	return (int)rk__stats_copy(out, size, &w->final[rank].st, sizeof(w->final[rank].st));
}

int rk_world_rank(const struct rk_world *w)
{
	return w->rank;
}

int rk_world_size(const struct rk_world *w)
{
	return w->size;
}

struct rk_loop *rk_world_loop(const struct rk_world *w)
{
	return w->loop;
}

int rk_world_failed(const struct rk_world *w)
{
	return w->failed;
}

size_t rk_world_stats(const struct rk_world *w, struct rk_world_stats *out, size_t size)
{
	struct rk_world_stats st = w->stats;

	st.pending = w->nr_pending;
	rk__transport_stats(&w->tr, &st);
	return rk__stats_copy(out, size, &st, sizeof(st));
}

int rk_world_port(const struct rk_world *w)
{
	return w->ls ? rk__sock_listener_port(w->ls) : -ENOTCONN;
}

int rk_world_destroy(struct rk_world *w)
{
	struct rk_link *l, *next;
	bool expired, aborted = false, ls_gone = true;
	uint64_t now, deadline;

	if (!w)
		return 0;
	/* a scheduler still sends through it, or a callback is running: nothing done */
	if (w->holds || rk__loop_running(w->loop))
		return -EBUSY;
	/* its teardown runs the loop, which only the ring's thread can */
	if (rk__loop_foreign(w->loop))
		return -EEXIST;
	w->destroying = true;
	w->ops = NULL;		/* no ready, frame or peer_error callback from here on */
	while (w->claims) {	/* nor a claim's: a later unclaim finds it gone */
		w->claims->world = NULL;
		w->claims = w->claims->next;
	}
	rk_timer_stop(&w->hb_timer);
	rk_timer_stop(&w->retry_timer);
	if (w->ls) {
		ls_gone = false;
		rk__sock_listener_close(w->ls, &ls_gone);
	}
	/* BYE goes only on links that are up; the others just close */
	for (l = w->all; l; l = next) {
		next = l->all_next;
		rk__link_close(l, true);
	}
	/*
	 * Give BYE frames a bounded time to leave, then cut what is left. Only
	 * I/O runs meanwhile: posts and timers wait for the application's next
	 * rk_loop_run(), so nothing reaches an object it has already destroyed.
	 * The cached time may be stale here (a server's teardown can block for a
	 * while before this call): count the grace from now.
	 */
	deadline = rk__loop_refresh(w->loop) + 100000000ull;
	while (w->nr_live || !ls_gone) {
		/* the pass that starts past the deadline still moves what it can
		 * (a link's last chunks, its BYE), as a timer due then would */
		now = rk__loop_clock(w->loop);
		expired = now >= deadline;
		/* after the abort only cancellations are awaited: look again now and then */
		rk__loop_run_io(w->loop, expired ? 10000000ull : deadline - now);
		if (expired && !aborted) {
			/* every live link, also one that failed earlier and is
			 * still flushing its ERROR to a peer that does not read */
			aborted = true;
			for (l = w->all; l; l = next) {
				next = l->all_next;
				rk__link_abort(l);
			}
		}
	}
	rk__loop_unref(w->loop);
	rk__transport_close(&w->tr);
	free(w->final);
	free(w->bdone);
	free(w->links);
	free(w);
	return 0;
}

int rk_world_send_user(struct rk_world *w, int rank, uint32_t tag, const void *data,
		       uint32_t len)
{
	struct rk_link *l = rk_world_link(w, rank);
	const uint32_t plen = RK_WIRE_USER_HDR_LEN + len;
	uint8_t *p;
	int n, ret;

	if (!l)
		return -ENOTCONN;
	if (len > RK_WIRE_MAX_PAYLOAD - RK_WIRE_USER_HDR_LEN)
		return -RK_ETOOBIG;
	/* encoded in place in the link's batch: the caller's bytes are copied once */
	p = rk_link_reserve(l, plen, &ret);
	if (!p)
		return ret;
	n = rk_wire_encode_user(p, plen, tag, data, len);
	assert(n == (int)plen);	/* the bound is checked above, the room reserved */
	return rk_link_commit(l, RK_FRAME_USER, 0, (uint32_t)n);
}

/* rk_world_recv_user()'s catch: the first USER frame of its tag while it runs. */
struct world_recv {
	struct rk__claim claim;
	struct rk_timer timer;
	struct rk_loop *loop;
	void *buf;
	uint32_t cap;
	uint32_t len;
	int peer;
	int res;		/* 1 caught, -EMSGSIZE too big (the callback had it), 0 none */
	bool timed_out;
};

static enum rk_activity recv_frame(struct rk__claim *c, int peer, const struct rk_wire_hdr *h,
				   const uint8_t *payload, const union rk__wire_payload *p)
{
	struct world_recv *rc = rk__container_of(c, struct world_recv, claim);
	struct rk_world *w = c->world;

	/* one frame a call: the next ones of this iteration go to the callback */
	rk__world_unclaim(c);
	rk_loop_stop(rc->loop);
	rc->peer = peer;
	rc->len = p->user.len;
	if (p->user.len > rc->cap) {
		rc->res = -EMSGSIZE;
		if (!w->ops || !w->ops->frame)
			return RK_BUSY;
		return w->ops->frame(w, peer, h, payload, w->arg);
	}
	if (p->user.len)
		memcpy(rc->buf, p->user.data, p->user.len);
	rc->res = 1;
	return RK_BUSY;
}

static enum rk_activity recv_timeout(struct rk_timer *t, uint64_t now)
{
	struct world_recv *rc = t->data;

	(void)now;
	rc->timed_out = true;
	rk_loop_stop(rc->loop);
	return RK_IDLE;
}

int rk_world_recv_user(struct rk_world *w, uint32_t tag, void *buf, uint32_t cap, int *peer,
		       uint32_t *len, int64_t timeout_ns)
{
	struct world_recv rc = {
		.claim = { .tag = tag, .ntags = 1, .frame = recv_frame },
		.loop = w->loop,
		.buf = buf,
		.cap = cap,
	};
	int ret;

	if (!buf && cap)
		return -EINVAL;
	ret = rk__world_claim(w, &rc.claim);
	if (ret < 0)
		return ret;
	if (timeout_ns >= 0) {
		rk_timer_init(&rc.timer, recv_timeout, &rc);
		ret = rk_timer_start(w->loop, &rc.timer, (uint64_t)timeout_ns, 0);
		if (ret < 0) {
			rk__world_unclaim(&rc.claim);
			return ret;
		}
	}
	ret = rk_loop_run(w->loop, RK_RUN_DEFAULT);
	if (timeout_ns >= 0)
		rk_timer_stop(&rc.timer);
	rk__world_unclaim(&rc.claim);
	if (rc.res) {
		if (peer)
			*peer = rc.peer;
		if (len)
			*len = rc.len;
		return rc.res;
	}
	if (ret < 0)
		return ret;
	return rc.timed_out ? -RK_ETIMEOUT : 0;
}

void rk__world_hold(struct rk_world *w)
{
	w->holds++;
}

void rk__world_release(struct rk_world *w)
{
	w->holds--;
}

int rk__world_claim(struct rk_world *w, struct rk__claim *c)
{
	const uint32_t types = 1u << RK_FRAME_ROUND | 1u << RK_FRAME_ROUND_DONE |
			       1u << RK_FRAME_ROUND_WATCH | 1u << RK_FRAME_NCCL_ID;
	const struct rk__claim *o;

	if (!c->frame || c->world || (c->types & ~types) || (!c->types && !c->ntags) ||
	    (uint64_t)c->tag + c->ntags > (uint64_t)UINT32_MAX + 1)
		return -EINVAL;
	for (o = w->claims; o; o = o->next) {
		if (o->types & c->types)
			return -EBUSY;
		if (o->ntags && c->ntags && (uint64_t)o->tag < (uint64_t)c->tag + c->ntags &&
		    (uint64_t)c->tag < (uint64_t)o->tag + o->ntags)
			return -EBUSY;
	}
	c->world = w;
	c->next = w->claims;
	w->claims = c;
	return 0;
}

void rk__world_unclaim(struct rk__claim *c)
{
	struct rk__claim **pp;

	if (!c->world)
		return;
	for (pp = &c->world->claims; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	c->world = NULL;
	c->next = NULL;
}
