/* SPDX-License-Identifier: MIT */
/*
 * The world: a star of links around the leader (rank 0).
 *
 * The leader listens on cfg.leader and accepts followers; an accepted socket
 * must send a valid HELLO within handshake_timeout or it is dropped, alone
 * (port scanners, stray or mismatched ranks never disturb the others). A
 * follower connects, retrying with backoff until connect_timeout, and sends
 * HELLO; the leader answers WELCOME. Heartbeats flow on idle links; a peer
 * silent for peer_timeout is declared dead. When the leader loses a follower
 * it tells every other follower with an ERROR frame naming the rank, so every
 * rank learns of a death within peer_timeout + heartbeat.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime_int.h"

#define RK_MAX_PENDING 64	/* accepted sockets that have not said HELLO yet */

struct rk_world {
	struct rk_loop *loop;
	const struct rk_world_ops *ops;
	void *arg;
	int rank, size;
	struct rk__addr addr;
	bool roce;			/* links are verbs QPs behind a TCP side channel */
	struct rk__verbs_opts vopts;	/* this rank's device end of them */
	struct rk_link **links;		/* [size]: links that are up */
	struct rk_link *pending;	/* leader: accepted, not handshaken */
	unsigned int nr_pending;
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
};

static void pending_remove(struct rk_world *w, struct rk_link *l)
{
	struct rk_link **pp;

	for (pp = &w->pending; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			l->next = NULL;
			w->nr_pending--;
			return;
		}
	}
}

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

static int world_handshake(struct rk_link *l, const struct rk_wire_hdr *h,
			   const struct rk_wire_hello *hello)
{
	struct rk_world *w = l->owner;
	const struct rk_config *cfg = rk_loop_config(w->loop);
	struct rk_wire_hello me = {
		.proto_version = RK_WIRE_VERSION,
		.world_size = (uint32_t)w->size,
		.rank = (uint32_t)w->rank,
		.session_id = cfg->session_id,
	};
	uint8_t buf[RK_WIRE_HELLO_LEN];
	int n, r = (int)hello->rank;

	(void)h;
	if (hello->proto_version != RK_WIRE_VERSION)
		return -RK_EPROTOVER;
	if (hello->world_size != (uint32_t)w->size)
		return -RK_EWORLD;
	if (hello->session_id != cfg->session_id)
		return -RK_ESESSION;
	if (w->rank == 0) {
		if (r <= 0 || r >= w->size || w->links[r])
			return -RK_ERANK;
		n = rk_wire_encode_hello(buf, sizeof(buf), &me);
		if (n < 0 || rk__link_send_raw(l, RK_FRAME_WELCOME, 0, buf, (uint32_t)n) < 0)
			return -ENOMEM;
		pending_remove(w, l);
		w->links[r] = l;
		w->nr_up++;
		rk__info(w->rank, "rank %d joined (%d/%d)", r, w->nr_up + 1, w->size);
		if (w->nr_up == w->size - 1)
			world_set_ready(w);
		return 0;
	}
	if (r != 0)
		return -RK_ERANK;
	w->connecting = NULL;
	w->links[0] = l;
	w->nr_up = 1;
	world_set_ready(w);
	return 0;
}

static enum rk_activity world_frame(struct rk_link *l, const struct rk_wire_hdr *h,
				    const uint8_t *payload)
{
	struct rk_world *w = l->owner;

	if (h->type == RK_FRAME_ERROR) {
		struct rk_wire_error e;

		rk_wire_decode_error(payload, h->len, &e);
		if (e.rank != RK_WIRE_RANK_NONE && (int)e.rank != l->peer &&
		    (int)e.rank < w->size) {
			/* the leader reports another rank's failure */
			report_peer(w, (int)e.rank, e.code < 0 ? e.code : -RK_EPEERERR);
			return RK_BUSY;
		}
		rk__warn(w->rank, "rank %d reports %s: %.*s", l->peer, rk_errname(e.code),
			 (int)e.msg_len, e.msg);
		rk__link_fail(l, e.code < 0 ? e.code : -RK_EPEERERR, false);
		return RK_BUSY;
	}
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
	rk__info(w->rank, "dropped a connection before its handshake: %s", rk_strerror(err));
	pending_remove(w, l);
}

static void world_link_closed(struct rk_link *l)
{
	struct rk_world *w = l->owner;
	struct rk_link **pp;

	pending_remove(w, l);
	if (l->peer >= 0 && l->peer < w->size && w->links[l->peer] == l) {
		w->links[l->peer] = NULL;
		w->nr_up--;
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
	.handshake = world_handshake,
	.frame = world_frame,
	.failed = world_link_failed,
	.closed = world_link_closed,
};

/* ---- leader: accept ---------------------------------------------------------------- */

static void world_accept(struct rk__listener *ls, int fd)
{
	struct rk_world *w = rk__listener_arg(ls);
	struct rk_link *l;

	if (w->destroying || w->nr_pending >= RK_MAX_PENDING) {
		rk__warn(w->rank, "refusing a connection: %u handshakes pending", w->nr_pending);
		close(fd);
		return;
	}
	if (w->roce ? rk__verbs_link_from_fd(w->loop, fd, &w->vopts, &world_link_ops, w, &l) :
		      rk__tcp_link_from_fd(w->loop, fd, &world_link_ops, w, RK_LINK_ACCEPTED, &l)) {
		close(fd);
		return;
	}
	live_add(w, l);
	l->next = w->pending;
	w->pending = l;
	w->nr_pending++;
}

/* ---- follower: connect ------------------------------------------------------------- */

static void world_retry_connect(struct rk_world *w)
{
	struct rk_link *l;
	int ret;

	if (w->roce)
		ret = rk__verbs_connect(w->loop, &w->addr, &w->vopts, &world_link_ops, w, &l);
	else
		ret = rk__tcp_connect(w->loop, &w->addr, &world_link_ops, w, &l);
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
		if (now - l->last_tx >= cfg->heartbeat_ns) {
			struct rk_wire_heartbeat hb = { .time_ns = now };

			n = rk_wire_encode_heartbeat(buf, sizeof(buf), &hb);
			if (n > 0 && rk_link_send(l, RK_FRAME_HEARTBEAT, 0, buf, (uint32_t)n) == 0)
				l->stats.heartbeats_tx++;
		}
	}
	for (l = w->pending; l; l = next) {
		next = l->next;
		if (now - l->created >= cfg->handshake_timeout_ns)
			rk__link_fail(l, -RK_ETIMEOUT, false);
	}
	if (!w->ready && !w->failed && now >= w->deadline) {
		rk__err(w->rank, "world not ready after %llu ms (%d of %d ranks)",
			(unsigned long long)(cfg->connect_timeout_ns / 1000000), w->nr_up + 1,
			w->size);
		w->failed = -RK_ETIMEOUT;
	}
	return RK_IDLE;
}

/* ---- public ------------------------------------------------------------------------ */

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
	if (!w->links) {
		ret = -ENOMEM;
		goto err_free;
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
		if (ret)
			goto err_free_links;
		if (!strcmp(w->addr.scheme, "roce")) {
			/* the TCP address is the side channel; the device is checked
			 * here, once, so a wrong one fails at start, by name */
			w->roce = true;
			ret = rk__verbs_prepare(loop, &w->addr, &w->vopts);
			if (ret)
				goto err_free_links;
		} else if (strcmp(w->addr.scheme, "tcp") != 0) {
			rk__err(w->rank, "world: transport '%s' is not available in this build",
				w->addr.scheme);
			ret = -EOPNOTSUPP;
			goto err_free_links;
		}
		if (w->rank == 0) {
			ret = rk__tcp_listen(loop, &w->addr, world_accept, w, &w->ls);
			if (ret) {
				rk__err(0, "world: cannot listen on %s: %s", cfg->leader,
					rk_strerror(ret));
				goto err_free_links;
			}
		} else {
			world_retry_connect(w);
			if (w->failed) {
				ret = w->failed;
				goto err_free_links;
			}
		}
	}
	period = cfg->heartbeat_ns;
	if (cfg->handshake_timeout_ns < period)
		period = cfg->handshake_timeout_ns;
	rk_timer_start(loop, &w->hb_timer, period, period);
	rk__loop_ref(loop);
	if (w->size == 1)
		world_set_ready(w);
	*out = w;
	return 0;

err_free_links:
	free(w->links);
err_free:
	free(w);
	return ret;
}

int rk_world_wait_ready(struct rk_world *w)
{
	int ret;

	while (!w->ready && !w->failed) {
		ret = rk_loop_run(w->loop, RK_RUN_ONCE);
		if (ret < 0)
			return ret;
	}
	return w->ready ? 0 : w->failed;
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
	for (i = 1; i < w->size; i++) {
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

int rk_world_port(const struct rk_world *w)
{
	return w->ls ? rk__tcp_listener_port(w->ls) : -ENOTCONN;
}

static enum rk_activity linger_cb(struct rk_timer *t, uint64_t now)
{
	(void)now;
	*(bool *)t->data = true;
	return RK_BUSY;
}

int rk_world_destroy(struct rk_world *w)
{
	struct rk_link *l, *next;
	struct rk_timer linger;
	bool expired = false, aborted = false, ls_gone = true;

	if (!w)
		return 0;
	w->destroying = true;
	rk_timer_stop(&w->hb_timer);
	rk_timer_stop(&w->retry_timer);
	if (w->ls) {
		ls_gone = false;
		rk__tcp_listener_close(w->ls, &ls_gone);
	}
	/* BYE goes only on links that are up; the others just close */
	for (l = w->all; l; l = next) {
		next = l->all_next;
		rk__link_close(l, true);
	}
	/* Give BYE frames a bounded time to leave, then cut what is left. The
	 * cached time may be stale here (a server's teardown can block for a
	 * while before this call): count the grace from now. */
	rk__loop_refresh(w->loop);
	rk_timer_init(&linger, linger_cb, &expired);
	rk_timer_start(w->loop, &linger, 100000000ull, 0);
	while (w->nr_live || !ls_gone) {
		if (expired && !aborted) {
			/* every live link, also one that failed earlier and is
			 * still flushing its ERROR to a peer that does not read */
			aborted = true;
			for (l = w->all; l; l = next) {
				next = l->all_next;
				rk__link_abort(l);
			}
		}
		if (rk_loop_run(w->loop, RK_RUN_ONCE) == -EBUSY)
			break;	/* called from a callback: documented misuse */
	}
	rk_timer_stop(&linger);
	rk__loop_unref(w->loop);
	free(w->links);
	free(w);
	return 0;
}
