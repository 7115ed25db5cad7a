/* SPDX-License-Identifier: MIT */
/*
 * Links: the transport-independent half of a control link.
 *
 * A link owns, once for every transport: the frame decoder over received
 * bytes (any split), the handshake (HELLO/WELCOME/AUTH, with the proofs that
 * both sides hold the job's secret, WIRE.md), sequence numbers, the tags
 * that frames carry after an authenticated handshake where the transport
 * leaves the host (WIRE.md, "Frame tags": sealed here, before any transport
 * sees a frame, and opened before any frame is dispatched),
 * the send batch (frames queued by handlers leave in one send before the loop
 * waits; a frame with nothing queued before it may leave at once, from its
 * commit: link_direct()), the per-link memory bounds (a partial frame
 * <= max_frame, unsent bytes <= tx_limit: a peer that stops reading fails
 * with RK_ESLOWPEER), and the hand-over of a link from its carrier to a
 * transport its class swaps in (rk__link_set_transport(): the same-host
 * upgrade), with the frames of the whole-frame streams such a transport
 * reads beside the link's byte stream (rk__link_rx_frame()).
 *
 * Lifetime: a link is created by its transport, handed to its owner, and freed
 * by the transport's destroy() once it is closed and no operation is in flight
 * and no handler is running on it (ops_inflight == 0, in_dispatch == 0); its
 * class's link_shutdown() and link_free() hooks run just after the
 * transport's shutdown() and just before its destroy().
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "link_int.h"

static void link_flush_cb(struct rk__flusher *f);

void rk__link_init(struct rk_link *l, struct rk_loop *loop, const struct rk__transport_ops *tops,
		   const struct rk__link_owner_ops *oops, void *owner, enum rk__link_state state)
{
	const struct rk_config *cfg = rk_loop_config(loop);

	memset(l, 0, sizeof(*l));
	l->loop = loop;
	l->tops = tops;
	l->oops = oops;
	l->owner = owner;
	l->state = state;
	l->rank = cfg->rank;
	l->peer = -1;
	l->max_frame = cfg->max_frame;
	l->tx_limit = cfg->tx_limit;
	l->created = l->last_rx = l->last_tx = rk_loop_now(loop);
	l->accepted = state == RK_LINK_ACCEPTED;
	l->flusher.fn = link_flush_cb;
	rk__loop_ref(loop);
}

static void link_maybe_free(struct rk_link *l)
{
	struct rk_loop *loop = l->loop;

	if (l->state != RK_LINK_CLOSED || l->ops_inflight || l->in_dispatch)
		return;
	if (l->flusher.queued)
		return;		/* the flusher runs later this iteration; it frees then */
	if (l->oops && l->oops->closed)
		l->oops->closed(l);
	free(l->q.p);
	free(l->out.p);
	free(l->rx);
	l->q.p = l->out.p = l->rx = NULL;
	rk__secure_zero(l->key, sizeof(l->key));
	rk__tagger_fini(&l->tag_tx);
	rk__tagger_fini(&l->tag_rx);
	rk__gaps_detach(&l->gaps);
	rk__loop_unref(loop);
	if (l->tclass && l->tclass->link_free)
		l->tclass->link_free(l->tctx, l);
	l->tops->destroy(l);	/* frees l */
}

void rk__link_op_done(struct rk_link *l)
{
	l->ops_inflight--;
	link_maybe_free(l);
}

static void link_shutdown(struct rk_link *l)
{
	if (l->state == RK_LINK_CLOSED)
		return;
	l->state = RK_LINK_CLOSED;
	l->tops->shutdown(l);
	if (l->tclass && l->tclass->link_shutdown)
		l->tclass->link_shutdown(l->tctx, l);
	link_maybe_free(l);
}

void rk__link_abort(struct rk_link *l)
{
	link_shutdown(l);
}

static size_t tx_pending(const struct rk_link *l)
{
	return l->q.len + (l->out.len - l->out.off);
}

static void link_flush_cb(struct rk__flusher *f)
{
	struct rk_link *l = rk__container_of(f, struct rk_link, flusher);

	if (l->state == RK_LINK_CLOSED) {
		link_maybe_free(l);
		return;
	}
	if (l->out.off == l->out.len && l->q.len) {
		struct rk__txbuf t = l->out;

		l->out = l->q;
		l->q = t;
		l->q.len = l->q.off = 0;
		l->out.off = 0;
	}
	if (l->out.off < l->out.len) {
		l->stats.tx_flushes++;
		l->tops->flush(l);
	} else if (l->close_after_flush) {
		link_shutdown(l);
	}
}

size_t rk__link_tx_next(struct rk_link *l, const uint8_t **p)
{
	size_t n = l->out.len - l->out.off;

	*p = l->out.p + l->out.off;
	/* the carrier's bytes before a swap: the transport swapped in sends the rest */
	if (l->tx_sent < l->tx_carrier_end && n > l->tx_carrier_end - l->tx_sent)
		n = (size_t)(l->tx_carrier_end - l->tx_sent);
	return n;
}

void rk__link_tx_done(struct rk_link *l, size_t n)
{
	l->tx_sent += n;
	l->out.off += n;
	if (l->out.off >= l->out.len)
		l->out.len = l->out.off = 0;
	if (l->state == RK_LINK_CLOSED)
		return;
	if (l->out.len || l->q.len || l->close_after_flush)
		rk__loop_queue_flush(l->loop, &l->flusher);
}

int rk__grow(void **p, size_t *cap, size_t need, size_t elem, size_t min)
{
	size_t c;
	void *q;

	if (need <= *cap)
		return 0;
	c = *cap ? *cap : min;
	while (c < need)
		c *= 2;
	q = realloc(*p, c * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static int txbuf_reserve(struct rk__txbuf *b, size_t need)
{
	return rk__grow((void **)&b->p, &b->cap, b->len + need, 1, 4096);
}

/* The bytes a frame of @len payload bytes takes on the link: its tag's too. */
static size_t tx_frame_len(const struct rk_link *l, uint32_t len)
{
	return RK_WIRE_HDR_LEN + (size_t)len + (l->tx_tag ? RK__TAG_LEN : 0);
}

/* Make room for a frame of @len payload bytes at the end of q; enforce the bounds. */
static uint8_t *link_room(struct rk_link *l, uint32_t len, int *err)
{
	size_t need = tx_frame_len(l, len);
	int ret;

	if (len > l->max_frame) {
		*err = -RK_ETOOBIG;
		return NULL;
	}
	if (tx_pending(l) + need > l->tx_limit) {
		rk__link_warn(l, "link to rank %d: %zu bytes unsent, peer is not reading",
			      l->peer, tx_pending(l));
		rk__link_fail(l, -RK_ESLOWPEER, false);
		*err = -RK_ESLOWPEER;
		return NULL;
	}
	ret = txbuf_reserve(&l->q, need);
	if (ret) {
		*err = ret;
		return NULL;
	}
	return l->q.p + l->q.len + RK_WIRE_HDR_LEN;
}

/*
 * The direct lanes (ARCHITECTURE.md, "The TCP busy path", "Same-host links"):
 * a frame that finds nothing queued or in flight before it, on a link that is
 * up, leaves from the commit that encoded it, with no flush. Anything queued
 * (a frame before it, bytes still going on the carrier before a swap) keeps
 * the frame behind it in the batch, so the stream's order holds. The
 * transport's send_direct() takes what it can: all of it or nothing on a
 * shared-memory ring (shm.c), what the socket does on TCP (tcp.c: the first
 * frame of a link in an iteration); a part it took leaves the rest as the out
 * buffer, for the flush. @frame is q's head: q holds nothing before it.
 */
static bool link_direct(struct rk_link *l, const uint8_t *frame, size_t n)
{
	struct rk__txbuf t;
	size_t took;

	if (l->q.len || l->out.off != l->out.len || l->state != RK_LINK_UP || l->close_after_flush)
		return false;
	if (!l->tops->send_direct)
		return false;
	took = l->tops->send_direct(l, frame, n);
	if (!took)
		return false;
	if (took == n) {
		l->tx_sent += n;
		return true;
	}
	t = l->out;
	l->out = l->q;
	l->q = t;
	l->q.len = l->q.off = 0;
	l->out.len = n;
	l->out.off = 0;
	rk__link_tx_done(l, took);	/* queues the flush for the rest */
	return true;
}

static int link_commit(struct rk_link *l, unsigned int type, unsigned int flags, uint32_t len)
{
	uint8_t *hdr = l->q.p + l->q.len;
	size_t n = RK_WIRE_HDR_LEN + (size_t)len;
	int ret;

	ret = rk_wire_encode_hdr(hdr, type, flags, (uint32_t)l->rank, l->tx_seq,
				 hdr + RK_WIRE_HDR_LEN, len);
	if (ret < 0)
		return ret;
	if (l->tx_tag) {
		ret = rk__tag_seal(&l->tag_tx, l->tx_seq, hdr, n, hdr + n);
		if (ret < 0)
			return ret;
	}
	l->tx_seq++;
	l->stats.tx_frames++;
	l->stats.tx_bytes += n;
	l->last_tx = rk_loop_now(l->loop);
	n = tx_frame_len(l, len);
	if (link_direct(l, hdr, n))
		return 0;
	l->q.len += n;
	if (tx_pending(l) > l->stats.tx_queued_max)
		l->stats.tx_queued_max = tx_pending(l);
	rk__loop_queue_flush(l->loop, &l->flusher);
	return 0;
}

int rk__link_send_raw(struct rk_link *l, unsigned int type, unsigned int flags,
		      const void *payload, uint32_t len)
{
	uint8_t *p;
	int err = 0;

	if (l->state == RK_LINK_CLOSED)
		return -ENOTCONN;
	p = link_room(l, len, &err);
	if (!p)
		return err;
	if (len)
		memcpy(p, payload, len);
	return link_commit(l, type, flags, len);
}

int rk_link_send(struct rk_link *l, unsigned int type, unsigned int flags, const void *payload,
		 uint32_t len)
{
	if (l->state != RK_LINK_UP || l->close_after_flush)
		return -ENOTCONN;
	if (l->reserved)
		return -EBUSY;
	return rk__link_send_raw(l, type, flags, payload, len);
}

uint8_t *rk_link_reserve(struct rk_link *l, uint32_t len, int *err)
{
	uint8_t *p;
	int e = 0;

	if (l->state != RK_LINK_UP || l->close_after_flush) {
		e = -ENOTCONN;
		p = NULL;
	} else if (l->reserved) {
		e = -EBUSY;
		p = NULL;
	} else {
		p = link_room(l, len, &e);
	}
	if (err)
		*err = e;
	if (p)
		l->reserved = true;
	return p;
}

int rk_link_commit(struct rk_link *l, unsigned int type, unsigned int flags, uint32_t len)
{
	if (!l->reserved)
		return -EINVAL;
	l->reserved = false;
	if (l->state != RK_LINK_UP)
		return -ENOTCONN;
	/* More than was reserved would encode (and send) past the buffer. */
	if (len > l->max_frame || l->q.len + tx_frame_len(l, len) > l->q.cap)
		return -EINVAL;
	return link_commit(l, type, flags, len);
}

int rk_link_peer(const struct rk_link *l)
{
	return l->peer;
}

bool rk_link_up(const struct rk_link *l)
{
	return l->state == RK_LINK_UP && !l->close_after_flush;
}

size_t rk_link_stats(const struct rk_link *l, struct rk_link_stats *out, size_t size)
{
	return rk__stats_copy(out, size, &l->stats, sizeof(l->stats));
}

const char *rk_link_transport(const struct rk_link *l)
{
	/* after a swap, the carrier's name until the peer's frames moved too: a
	 * link is on the new transport once both directions are */
	return l->carrier_name && !l->rx_moved ? l->carrier_name : l->tops->name;
}

void rk__link_set_transport(struct rk_link *l, const struct rk__transport_ops *ops, void *priv)
{
	l->tx_carrier_end = l->tx_sent + tx_pending(l);
	l->carrier_name = l->tops->name;
	l->tops = ops;
	l->tpriv = priv;
	if (ops->local)
		l->tx_tag = false;
}

void rk__link_rx_switch(struct rk_link *l, const struct rk__transport_ops *to)
{
	l->rx_cut = true;
	l->rx_moved = true;
	if (to->local)
		l->rx_tag = false;
}

/* ---- failure and close ------------------------------------------------------------ */

void rk__link_fail(struct rk_link *l, int err, bool tell)
{
	rk__link_fail_msg(l, err, tell, NULL);
}

void rk__link_fail_msg(struct rk_link *l, int err, bool tell, const char *msg)
{
	if (l->state == RK_LINK_CLOSED || l->state == RK_LINK_FAILED)
		return;
	l->err = err;
	l->state = RK_LINK_FAILED;
	if (tell) {
		uint8_t buf[16 + RK_WIRE_ERRMSG_MAX];
		int n = rk_wire_encode_error(buf, sizeof(buf), err, RK_WIRE_RANK_NONE,
					     msg ? msg : rk_strerror(err));

		/* Best effort, and only if there is room: the peer may be why we fail. */
		if (n > 0 && tx_pending(l) + RK_WIRE_HDR_LEN + (size_t)n <= l->tx_limit)
			rk__link_send_raw(l, RK_FRAME_ERROR, 0, buf, (uint32_t)n);
	}
	if (!l->failed_reported) {
		l->failed_reported = true;
		rk__loop_note(l->loop, RK_IDLE);	/* an event a ONCE run returns on */
		if (l->oops && l->oops->failed)
			l->oops->failed(l, err);
	}
	if (l->state == RK_LINK_CLOSED)
		return;		/* the owner closed it from the callback */
	if (tell && tx_pending(l)) {
		l->close_after_flush = true;
		rk__loop_queue_flush(l->loop, &l->flusher);
	} else {
		link_shutdown(l);
	}
}

void rk__link_close(struct rk_link *l, bool bye)
{
	if (l->state == RK_LINK_CLOSED)
		return;
	l->failed_reported = true;	/* an orderly close is not a failure */
	if (bye && l->state == RK_LINK_UP) {
		uint8_t buf[8];
		struct rk_wire_bye b = { .reason = 0 };
		int n = rk_wire_encode_bye(buf, sizeof(buf), &b);

		if (n > 0)
			rk__link_send_raw(l, RK_FRAME_BYE, 0, buf, (uint32_t)n);
	}
	if (l->state == RK_LINK_CLOSED)
		return;
	if (l->state == RK_LINK_CONNECTING || !tx_pending(l)) {
		link_shutdown(l);
		return;
	}
	l->state = RK_LINK_FAILED;
	l->close_after_flush = true;
	rk__loop_queue_flush(l->loop, &l->flusher);
}

/* ---- receive ----------------------------------------------------------------------- */

/* ---- the handshake (WIRE.md, "Handshake" and "Authentication") ------------------- */

static const struct rk_config *link_cfg(const struct rk_link *l)
{
	return rk_loop_config(l->loop);
}

/* Whether this side authenticates: it holds a secret. */
static bool link_auth(const struct rk_link *l)
{
	return link_cfg(l)->secret_len > 0;
}

/* Whether this side tags its frames after the handshake (it authenticates). */
static bool link_tags_wanted(const struct rk_link *l)
{
	return link_auth(l) && rk__config_ctuning(link_cfg(l))->frame_auth;
}

/* Encode our HELLO (connecting side) or WELCOME (accepting side) with a fresh
 * nonce into its half of the transcript, and queue it. */
static int link_send_hello(struct rk_link *l, unsigned int type)
{
	const struct rk_config *cfg = link_cfg(l);
	struct rk_wire_hello h = {
		.proto_version = RK_WIRE_VERSION,
		.world_size = (uint32_t)cfg->world_size,
		.rank = (uint32_t)cfg->rank,
		.auth = !link_auth(l) ? RK_WIRE_AUTH_NONE :
			link_tags_wanted(l) ? RK_WIRE_AUTH_TAGS : RK_WIRE_AUTH_HMAC,
		.session_id = cfg->session_id,
		.caps = 0,
	};
	uint8_t *half = l->transcript + (type == RK_FRAME_HELLO ? 0 : RK_WIRE_HELLO_LEN);
	int n;

	n = rk__auth_random(h.nonce, sizeof(h.nonce));
	if (n < 0)
		return n;
	n = rk_wire_encode_hello(half, RK_WIRE_HELLO_LEN, &h);
	if (n < 0)
		return n;
	return rk__link_send_raw(l, type, 0, half, (uint32_t)n);
}

/* Queue our AUTH frame: the proof of @which over the transcript. */
static int link_send_proof(struct rk_link *l, enum rk__auth_label which)
{
	const struct rk_config *cfg = link_cfg(l);
	uint8_t mac[RK_WIRE_MAC_LEN];
	int ret;

	ret = rk__auth_mac(cfg->secret, cfg->secret_len, which, l->transcript, mac);
	if (!ret)
		ret = rk__link_send_raw(l, RK_FRAME_AUTH, 0, mac, sizeof(mac));
	rk__secure_zero(mac, sizeof(mac));
	return ret;
}

/* Check the peer's AUTH payload against the proof of @which. 0 or -RK_EAUTH. */
static int link_check_proof(struct rk_link *l, enum rk__auth_label which, const uint8_t *payload)
{
	const struct rk_config *cfg = link_cfg(l);
	uint8_t mac[RK_WIRE_MAC_LEN];
	int ret;

	ret = rk__auth_mac(cfg->secret, cfg->secret_len, which, l->transcript, mac);
	if (!ret && !rk__auth_equal(mac, payload, sizeof(mac)))
		ret = -RK_EAUTH;
	rk__secure_zero(mac, sizeof(mac));
	return ret;
}

void rk__link_connected(struct rk_link *l)
{
	int ret;

	l->state = RK_LINK_HELLO_SENT;
	l->last_rx = rk_loop_now(l->loop);
	ret = link_send_hello(l, RK_FRAME_HELLO);
	if (ret < 0)
		rk__link_fail(l, ret, false);
}

/*
 * Key both directions' tags (WIRE.md, "Frame tags"): each side seals with the
 * key of its role and opens with the other's. From here on every frame each
 * way carries a tag, unless the link's transport is local; the keys stay even
 * if the owner refuses the link, since the peer is up and opens the ERROR
 * that says so.
 */
static int link_tags_start(struct rk_link *l)
{
	const struct rk_config *cfg = link_cfg(l);
	enum rk__auth_label tx = l->accepted ? RK__AUTH_TAG_LEADER : RK__AUTH_TAG_FOLLOWER;
	enum rk__auth_label rx = l->accepted ? RK__AUTH_TAG_FOLLOWER : RK__AUTH_TAG_LEADER;
	uint8_t key[RK_WIRE_MAC_LEN];
	int ret;

	ret = rk__auth_mac(cfg->secret, cfg->secret_len, tx, l->transcript, key);
	if (!ret)
		ret = rk__tagger_init(&l->tag_tx, key);
	if (!ret)
		ret = rk__auth_mac(cfg->secret, cfg->secret_len, rx, l->transcript, key);
	if (!ret)
		ret = rk__tagger_init(&l->tag_rx, key);
	rk__secure_zero(key, sizeof(key));
	if (ret)
		return ret;
	l->tx_tag = l->rx_tag = !l->tops->local;
	return 0;
}

/*
 * The handshake completed (and the peer proved the secret, if we use one):
 * the link is up before the owner hears of it, since accepting may complete
 * the world and the ready callback sends on this very link.
 */
static int link_up(struct rk_link *l)
{
	const struct rk_config *cfg = link_cfg(l);
	enum rk__link_state prev = l->state;
	int ret;

	if (link_auth(l)) {
		ret = rk__auth_mac(cfg->secret, cfg->secret_len, RK__AUTH_LINK_KEY, l->transcript,
				   l->key);
		if (ret)
			return ret;
		l->authed = true;
	}
	if (l->tags) {
		ret = link_tags_start(l);
		if (ret)
			return ret;
	}
	l->state = RK_LINK_UP;
	l->was_up = true;
	ret = l->oops->handshake(l);
	if (ret) {
		l->was_up = false;	/* refused: it never was a member */
		l->state = prev;
		return ret;
	}
	/* a rank joined: real work follows (and a ONCE run ends on it) */
	rk__loop_note(l->loop, RK_BUSY);
	if (l->tclass && l->tclass->up && l->state == RK_LINK_UP)
		l->tclass->up(l->tctx, l);
	return 0;
}

/* What the peer's HELLO or WELCOME must agree on with us; the refusal's text. */
static int link_check_hello(struct rk_link *l, const struct rk_wire_hdr *h,
			    const struct rk_wire_hello *p, const char **why)
{
	const struct rk_config *cfg = link_cfg(l);
	bool mine = link_auth(l), tags = link_tags_wanted(l);
	int ret;

	if (p->proto_version != RK_WIRE_VERSION)
		return -RK_EPROTOVER;
	if (p->world_size != (uint32_t)cfg->world_size)
		return -RK_EWORLD;
	if (p->session_id != cfg->session_id)
		return -RK_ESESSION;
	if (p->rank >= p->world_size || h->src_rank != p->rank)
		return -RK_ERANK;
	ret = l->oops->check(l, p);
	if (ret)
		return ret;
	if (mine != (p->auth != RK_WIRE_AUTH_NONE)) {
		*why = mine ? "RK_EAUTH: this side requires a secret (RK_SECRET_FILE)" :
			      "RK_EAUTH: this side has no secret (set the same RK_SECRET_FILE)";
		return -RK_EAUTH;
	}
	if (mine && tags != (p->auth == RK_WIRE_AUTH_TAGS)) {
		*why = tags ? "RK_EAUTH: this side tags frames (RK_FRAME_AUTH=on), the peer does not" :
			      "RK_EAUTH: the peer tags frames (RK_FRAME_AUTH=on), this side does not";
		return -RK_EAUTH;
	}
	l->tags = tags;
	return 0;
}

/*
 * A handshake frame in state @l->state (the header admitted its type already).
 * Return 0, or an error that fails the link (the peer is told).
 */
static int link_handshake(struct rk_link *l, const struct rk_wire_hdr *h, const uint8_t *payload)
{
	struct rk_wire_hello hello;
	const char *why = NULL;
	int ret;

	if (h->type == RK_FRAME_ERROR) {
		struct rk_wire_error e;

		rk_wire_decode_error(payload, h->len, &e);
		rk__link_warn(l, "peer refused the handshake: %s (%.*s)", rk_errname(e.code),
			      (int)e.msg_len, e.msg);
		rk__link_fail(l, e.code < 0 ? e.code : -RK_EPEERERR, false);
		return 0;
	}
	switch (l->state) {
	case RK_LINK_ACCEPTED:		/* HELLO */
	case RK_LINK_HELLO_SENT:	/* WELCOME */
		rk_wire_decode_hello(payload, h->len, &hello);
		ret = link_check_hello(l, h, &hello, &why);
		if (ret)
			break;
		l->peer = (int)hello.rank;
		if (l->state == RK_LINK_ACCEPTED) {
			memcpy(l->transcript, payload, RK_WIRE_HELLO_LEN);
			ret = link_send_hello(l, RK_FRAME_WELCOME);
			if (!ret && link_auth(l)) {
				ret = link_send_proof(l, RK__AUTH_LEADER);
				l->state = RK_LINK_AUTH_WAIT;
				break;
			}
		} else {
			memcpy(l->transcript + RK_WIRE_HELLO_LEN, payload, RK_WIRE_HELLO_LEN);
			if (link_auth(l)) {
				l->state = RK_LINK_WELCOMED;
				break;
			}
		}
		if (!ret)
			ret = link_up(l);
		break;
	case RK_LINK_WELCOMED:		/* the leader's AUTH */
		ret = link_check_proof(l, RK__AUTH_LEADER, payload);
		if (!ret)
			ret = link_send_proof(l, RK__AUTH_FOLLOWER);
		if (!ret)
			ret = link_up(l);
		break;
	case RK_LINK_AUTH_WAIT:		/* the follower's AUTH */
		ret = link_check_proof(l, RK__AUTH_FOLLOWER, payload);
		if (!ret)
			ret = link_up(l);
		break;
	default:
		return 0;
	}
	if (ret) {
		rk__link_fail_msg(l, ret, ret != -ENOMEM, why);
		if (l->accepted)
			l->peer = -1;	/* never a member: its failure is no rank's */
	}
	return 0;
}

/*
 * Which frame types may start in this state, decided from the header alone,
 * before a payload byte is buffered: a stranger can make the leader hold at
 * most one handshake frame (RK_WIRE_HELLO_LEN) at a time.
 */
static int link_admit(const struct rk_link *l, unsigned int type)
{
	switch (l->state) {
	case RK_LINK_ACCEPTED:
		return type == RK_FRAME_HELLO ? 0 : -RK_EHANDSHAKE;
	case RK_LINK_AUTH_WAIT:
		return type == RK_FRAME_AUTH || type == RK_FRAME_ERROR ? 0 : -RK_EHANDSHAKE;
	case RK_LINK_HELLO_SENT:
		return type == RK_FRAME_WELCOME || type == RK_FRAME_ERROR ? 0 : -RK_EHANDSHAKE;
	case RK_LINK_WELCOMED:
		return type == RK_FRAME_AUTH || type == RK_FRAME_ERROR ? 0 : -RK_EHANDSHAKE;
	case RK_LINK_UP:
		if (RK__FRAME_BIT(type) & RK__FRAME_CONTROL)
			return l->tclass && l->tclass->control ? 0 : -RK_EHANDSHAKE;
		return type == RK_FRAME_HELLO || type == RK_FRAME_WELCOME ||
			       type == RK_FRAME_AUTH ? -RK_EHANDSHAKE : 0;
	default:
		return 0;
	}
}

/* The largest payload accepted now: the handshake's until the link is up. */
static uint32_t link_max_len(const struct rk_link *l)
{
	if (l->state == RK_LINK_UP)
		return l->max_frame;
	return l->accepted ? RK_WIRE_HELLO_LEN : 16 + RK_WIRE_ERRMSG_MAX;
}

/* One complete, header-validated frame of the stream counted by *@seq (the
 * link's, or a whole-frame stream's). Return 0, or an error (the link fails). */
static int link_dispatch(struct rk_link *l, const struct rk_wire_hdr *h, const uint8_t *payload,
			 uint64_t *seq)
{
	union rk__wire_payload dec;	/* what the owner gets, never decoded again */
	enum rk_activity act = RK_IDLE;
	int ret;

	ret = rk_wire_check_payload(h, payload);
	if (ret)
		return ret;
	ret = rk__wire_decode(h->type, payload, h->len, &dec);
	if (ret)
		return ret;
	if (h->seq != *seq)
		return -RK_ESEQ;
	(*seq)++;
	l->stats.rx_frames++;
	l->stats.rx_bytes += RK_WIRE_HDR_LEN + h->len;
	l->last_rx = rk_loop_now(l->loop);

	switch (l->state) {
	case RK_LINK_ACCEPTED:
	case RK_LINK_HELLO_SENT:
	case RK_LINK_WELCOMED:
	case RK_LINK_AUTH_WAIT:
		/* an event, not work: a stranger's bytes never keep the loop spinning */
		rk__loop_note(l->loop, RK_IDLE);
		return link_handshake(l, h, payload);
	case RK_LINK_UP:
		if (h->src_rank != (uint32_t)l->peer)
			return -RK_ERANK;
		switch (h->type) {
		case RK_FRAME_HEARTBEAT:
			l->stats.heartbeats_rx++;
			rk__loop_note(l->loop, RK_IDLE);
			return 0;
		case RK_FRAME_BYE:
			rk__link_fail(l, -RK_EPEERBYE, false);
			return 0;
		default:
			if (RK__FRAME_BIT(h->type) & RK__FRAME_CONTROL) {
				rk__loop_note(l->loop, RK_IDLE);
				/* admitted only with one (link_admit()) */
				return l->tclass->control(l->tctx, l, h, payload);
			}
			act = l->oops->frame(l, h, payload, &dec);
			rk__loop_note(l->loop, act);
			if (act == RK_BUSY)
				rk__gaps_arrival(l->loop, &l->gaps);
			return 0;
		}
	default:
		return 0;	/* failing or closed: drop what is still arriving */
	}
}

static int rx_grow(struct rk_link *l, size_t need)
{
	return rk__grow((void **)&l->rx, &l->rx_cap, need, 1, 4096);
}

static int rx_append(struct rk_link *l, const uint8_t *p, size_t n)
{
	int ret = rx_grow(l, l->rx_len + n);

	if (ret)
		return ret;
	memcpy(l->rx + l->rx_len, p, n);
	l->rx_len += n;
	return 0;
}

static bool link_receiving(const struct rk_link *l)
{
	return l->state >= RK_LINK_ACCEPTED && l->state <= RK_LINK_UP;
}

/* A whole frame of the byte stream at @p, @h its header (and its tag after it,
 * when the link's frames carry one now): the tag is checked before anything
 * of the frame is, under the sequence number the frame must have. */
static int link_rx_one(struct rk_link *l, const struct rk_wire_hdr *h, const uint8_t *p)
{
	size_t n = RK_WIRE_HDR_LEN + (size_t)h->len;
	int ret;

	if (l->rx_tag) {
		ret = rk__tag_open(&l->tag_rx, l->rx_seq, p, n, p + n);
		if (ret)
			return ret;
	}
	return link_dispatch(l, h, p + RK_WIRE_HDR_LEN, &l->rx_seq);
}

/* Decode a header and admit its type in this state (-EAGAIN: not enough bytes). */
static int64_t link_hdr(const struct rk_link *l, const uint8_t *p, size_t n, struct rk_wire_hdr *h)
{
	int64_t total = rk_wire_decode_hdr(p, n, link_max_len(l), h);
	int ret;

	if (total < 0)
		return total;
	ret = link_admit(l, h->type);
	return ret ? ret : total;
}

/*
 * Parse as many frames as @p holds. Frames wholly inside @p are dispatched in
 * place (no copy); a partial frame is copied into l->rx, bounded by
 * max_frame + header, and completed by later calls.
 */
static int link_rx(struct rk_link *l, const uint8_t *p, size_t n)
{
	struct rk_wire_hdr h;
	int64_t total;
	size_t take;
	int ret;

	while (n && link_receiving(l)) {
		if (l->rx_len) {
			if (l->rx_len < RK_WIRE_HDR_LEN) {
				take = RK_WIRE_HDR_LEN - l->rx_len;
				take = take < n ? take : n;
				ret = rx_append(l, p, take);
				if (ret)
					return ret;
				p += take;
				n -= take;
			}
			total = link_hdr(l, l->rx, l->rx_len, &h);
			if (total == -EAGAIN)
				continue;
			if (total < 0)
				return (int)total;
			if (l->rx_tag)
				total += RK__TAG_LEN;
			take = (size_t)total - l->rx_len;
			take = take < n ? take : n;
			ret = rx_append(l, p, take);
			if (ret)
				return ret;
			p += take;
			n -= take;
			if (l->rx_len < (size_t)total)
				return 0;
			l->rx_len = 0;
			ret = link_rx_one(l, &h, l->rx);
			if (ret)
				return ret;
			if (l->rx_cut)
				return n ? -EPROTO : 0;
			continue;
		}
		total = link_hdr(l, p, n, &h);
		if (total == -EAGAIN)
			return rx_append(l, p, n);
		if (total < 0)
			return (int)total;
		if (l->rx_tag)
			total += RK__TAG_LEN;
		if ((size_t)total > n) {
			ret = rx_grow(l, (size_t)total);
			return ret ? ret : rx_append(l, p, n);
		}
		ret = link_rx_one(l, &h, p);
		if (ret)
			return ret;
		p += total;
		n -= (size_t)total;
		if (l->rx_cut)
			return n ? -EPROTO : 0;
	}
	return 0;
}

/*
 * The whole-frame streams (rk__link_rx_frame()): a record holds exactly one
 * frame, of a type the stream may carry, counted in the stream's own sequence.
 * Only a local transport reads such streams: their frames carry no tag.
 */
static int link_rx_whole(struct rk_link *l, struct rk__frame_stream *st, const uint8_t *p,
			 size_t n)
{
	struct rk_wire_hdr h;
	int64_t total;

	if (l->state != RK_LINK_UP)
		return 0;	/* failing or closed: drop what is still arriving */
	total = link_hdr(l, p, n, &h);
	if (total == -EAGAIN || (total >= 0 && (size_t)total != n))
		return st->err_record;
	if (total < 0)
		return (int)total;
	if (!(RK__FRAME_BIT(h.type) & st->types))
		return st->err_type;
	return link_dispatch(l, &h, p + RK_WIRE_HDR_LEN, &st->seq);
}

/* A delivery of received bytes (@st NULL: the byte stream) or of one frame of
 * the whole-frame stream @st; its error fails the link. */
static int link_rx_any(struct rk_link *l, struct rk__frame_stream *st, const uint8_t *p, size_t n)
{
	int ret;

	l->in_dispatch++;
	ret = st ? link_rx_whole(l, st, p, n) : link_rx(l, p, n);
	l->rx_cut = false;
	if (ret) {
		rk__link_warn(l, "link to rank %d (%s %s): %s", l->peer, rk_link_transport(l),
			      l->peer_addr, rk_strerror(ret));
		rk__link_fail(l, ret, ret != -ENOMEM);
	}
	l->in_dispatch--;
	link_maybe_free(l);
	return ret;
}

int rk__link_rx(struct rk_link *l, const uint8_t *p, size_t n)
{
	return link_rx_any(l, NULL, p, n);
}

int rk__link_rx_frame(struct rk_link *l, struct rk__frame_stream *st, const uint8_t *frame,
		      size_t n)
{
	return link_rx_any(l, st, frame, n);
}
