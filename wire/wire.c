/* SPDX-License-Identifier: MIT */
/*
 * rankrt wire format v2: frame header and typed payload codec (layouts in WIRE.md).
 *
 * Pure code: no I/O, no allocation, no mutable state. Decoders validate everything
 * before they write their output, so a failed decode leaves @out untouched, and
 * they never read outside [p, p + n). Encoders refuse what the decoders would
 * refuse, so this build never sends a frame its own peer would reject.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "rk_wire.h"
#include "wire_int.h"

/* Header field offsets. */
#define HDR_MAGIC	0
#define HDR_VERSION	4
#define HDR_TYPE	5
#define HDR_FLAGS	6
#define HDR_SRC_RANK	8
#define HDR_LEN		12
#define HDR_SEQ		16
#define HDR_PAYLOAD_CRC	24
#define HDR_CRC		28	/* covers bytes [0, HDR_CRC) */
_Static_assert(HDR_CRC == RK__CRC32C_HDR, "rk__crc32c_hdr() covers the header's checked bytes");

#define USER_HDR_LEN		RK_WIRE_USER_HDR_LEN
#define ERROR_HDR_LEN		16
#define HEARTBEAT_LEN		8
#define ROUND_DONE_LEN		24
#define ROUND_WATCH_LEN		24
#define BYE_LEN			8
#define BYE_REASON_MAX		2

/*
 * Per-type rules of the header: payload length in [min_len, max_len] (equal for a
 * fixed-size type) and the flag bits the type admits. Everything else about a
 * payload is the typed decoder's business.
 */
struct frame_def {
	const char *name;
	uint32_t min_len;
	uint32_t max_len;
	uint16_t flags_ok;
};

static const struct frame_def frame_defs[] = {
	[RK_FRAME_HELLO] = { "HELLO", RK_WIRE_HELLO_LEN, RK_WIRE_HELLO_LEN, 0 },
	[RK_FRAME_WELCOME] = { "WELCOME", RK_WIRE_HELLO_LEN, RK_WIRE_HELLO_LEN, 0 },
	[RK_FRAME_HEARTBEAT] = { "HEARTBEAT", HEARTBEAT_LEN, HEARTBEAT_LEN, RK_FRAME_F_REPLY },
	[RK_FRAME_ROUND] = { "ROUND", RK_WIRE_ROUND_HDR_LEN, RK_WIRE_MAX_PAYLOAD,
			     RK_FRAME_F_DRAFTED | RK_FRAME_F_PREFILL },
	[RK_FRAME_ROUND_DONE] = { "ROUND_DONE", ROUND_DONE_LEN, ROUND_DONE_LEN, 0 },
	[RK_FRAME_NCCL_ID] = { "NCCL_ID", RK_WIRE_NCCL_ID_LEN, RK_WIRE_NCCL_ID_LEN, 0 },
	[RK_FRAME_USER] = { "USER", USER_HDR_LEN, RK_WIRE_MAX_PAYLOAD, 0 },
	[RK_FRAME_BYE] = { "BYE", BYE_LEN, BYE_LEN, 0 },
	[RK_FRAME_ERROR] = { "ERROR", ERROR_HDR_LEN, ERROR_HDR_LEN + RK_WIRE_ERRMSG_MAX, 0 },
	[RK_FRAME_AUTH] = { "AUTH", RK_WIRE_MAC_LEN, RK_WIRE_MAC_LEN, 0 },
	[RK_FRAME_SHM_REQUEST] = { "SHM_REQUEST", RK_WIRE_SHM_REQUEST_LEN,
				   RK_WIRE_SHM_REQUEST_LEN, 0 },
	[RK_FRAME_SHM_OFFER] = { "SHM_OFFER", RK_WIRE_SHM_OFFER_LEN, RK_WIRE_SHM_OFFER_LEN, 0 },
	[RK_FRAME_SHM_ANSWER] = { "SHM_ANSWER", RK_WIRE_SHM_ANSWER_LEN, RK_WIRE_SHM_ANSWER_LEN,
				  0 },
	[RK_FRAME_SHM_SWITCH] = { "SHM_SWITCH", RK_WIRE_SHM_SWITCH_LEN, RK_WIRE_SHM_SWITCH_LEN,
				  0 },
	[RK_FRAME_ROUND_WATCH] = { "ROUND_WATCH", ROUND_WATCH_LEN, ROUND_WATCH_LEN, 0 },
};
_Static_assert(ARRAY_SIZE(frame_defs) == RK_FRAME__COUNT, "every frame type needs a def");
_Static_assert(RK_WIRE_MAX_PAYLOAD <= INT32_MAX - RK_WIRE_HDR_LEN,
	       "payload lengths must fit the int returns");

/* The length rule of a type, in validation order: -RK_ESHORT, -RK_ETRAILING for a
 * fixed-size type that is too long, -RK_ETOOBIG for a variable one. */
static int frame_check_len(const struct frame_def *d, uint64_t len)
{
	if (len < d->min_len)
		return -RK_ESHORT;
	if (len > d->max_len)
		return d->min_len == d->max_len ? -RK_ETRAILING : -RK_ETOOBIG;
	return 0;
}

/* ---- header -------------------------------------------------------------- */

int64_t rk_wire_decode_hdr(const uint8_t *p, size_t n, uint32_t max_len, struct rk_wire_hdr *h)
{
	static const uint8_t magic[4] = { 'R', 'K', 'R', 'T' };
	const struct frame_def *d;
	struct rk_wire_hdr t;
	size_t i;
	int ret;

	/* Refuse garbage at its first wrong byte, so a stray peer is dropped at once. */
	if (n < RK_WIRE_HDR_LEN) {
		for (i = 0; i < n && i < sizeof(magic); i++)
			if (p[i] != magic[i])
				return -RK_EMAGIC;
		return -EAGAIN;
	}
	if (rk__le32_load(p + HDR_MAGIC) != RK_WIRE_MAGIC)
		return -RK_EMAGIC;

	t.magic = rk__le32_load(p + HDR_MAGIC);
	t.version = p[HDR_VERSION];
	t.type = p[HDR_TYPE];
	t.flags = rk__le16_load(p + HDR_FLAGS);
	t.src_rank = rk__le32_load(p + HDR_SRC_RANK);
	t.len = rk__le32_load(p + HDR_LEN);
	t.seq = rk__le64_load(p + HDR_SEQ);
	t.payload_crc = rk__le32_load(p + HDR_PAYLOAD_CRC);
	t.hdr_crc = rk__le32_load(p + HDR_CRC);

	/* The CRC comes first: no field of a corrupted header is worth interpreting. */
	if (rk__crc32c_hdr(p) != t.hdr_crc)
		return -RK_EHDRCRC;
	if (t.version != RK_WIRE_VERSION)
		return -RK_EVERSION;
	if (t.type >= RK_FRAME__COUNT)
		return -RK_ETYPE;
	d = &frame_defs[t.type];
	ret = frame_check_len(d, t.len);
	if (ret < 0)
		return ret;
	if (t.flags & ~d->flags_ok)
		return -RK_EFLAGS;
	if (t.len > max_len || t.len > RK_WIRE_MAX_PAYLOAD)
		return -RK_ETOOBIG;
	*h = t;
	return RK_WIRE_HDR_LEN + (int64_t)t.len;
}

int rk_wire_check_payload(const struct rk_wire_hdr *h, const uint8_t *payload)
{
	return rk_wire_crc32c(0, payload, h->len) == h->payload_crc ? 0 : -RK_EPAYCRC;
}

int rk_wire_encode_hdr(uint8_t *out, unsigned int type, unsigned int flags, uint32_t src_rank,
		       uint64_t seq, const uint8_t *payload, uint32_t len)
{
	const struct frame_def *d;
	int ret;

	if (type >= RK_FRAME__COUNT)
		return -RK_ETYPE;
	d = &frame_defs[type];
	ret = frame_check_len(d, len);
	if (ret < 0)
		return ret;
	if (flags & ~(unsigned int)d->flags_ok)
		return -RK_EFLAGS;
	/* what the receiver's rk_wire_decode_user() refuses, refused here: a link
	 * is never failed for a frame its own sender could have known was bad */
	if (type == RK_FRAME_USER && rk__le32_load(payload + 4))
		return -RK_ERESERVED;

	rk__le32_store(out + HDR_MAGIC, RK_WIRE_MAGIC);
	out[HDR_VERSION] = RK_WIRE_VERSION;
	out[HDR_TYPE] = (uint8_t)type;
	rk__le16_store(out + HDR_FLAGS, (uint16_t)flags);
	rk__le32_store(out + HDR_SRC_RANK, src_rank);
	rk__le32_store(out + HDR_LEN, len);
	rk__le64_store(out + HDR_SEQ, seq);
	rk__le32_store(out + HDR_PAYLOAD_CRC, rk_wire_crc32c(0, payload, len));
	rk__le32_store(out + HDR_CRC, rk__crc32c_hdr(out));
	return RK_WIRE_HDR_LEN;
}

const char *rk_wire_frame_name(unsigned int type)
{
	return type < RK_FRAME__COUNT ? frame_defs[type].name : "UNKNOWN";
}

/* ---- typed payloads ------------------------------------------------------ */

static int check_fixed(size_t n, size_t len)
{
	if (n < len)
		return -RK_ESHORT;
	return n > len ? -RK_ETRAILING : 0;
}

/* HELLO/WELCOME: u32 proto_version, u32 world_size, u32 rank, u32 auth,
 * u64 session_id, u64 caps, 32 bytes nonce. Versions, sessions and ranks are
 * compared by the link, which knows what it expects. */
static int hello_fields_ok(uint32_t world_size, uint32_t auth)
{
	return world_size != 0 && auth <= RK_WIRE_AUTH_TAGS;
}

int rk_wire_decode_hello(const uint8_t *p, size_t n, struct rk_wire_hello *out)
{
	struct rk_wire_hello t;
	int ret;

	ret = check_fixed(n, RK_WIRE_HELLO_LEN);
	if (ret < 0)
		return ret;
	t.proto_version = rk__le32_load(p);
	t.world_size = rk__le32_load(p + 4);
	t.rank = rk__le32_load(p + 8);
	t.auth = rk__le32_load(p + 12);
	t.session_id = rk__le64_load(p + 16);
	t.caps = rk__le64_load(p + 24);
	memcpy(t.nonce, p + 32, RK_WIRE_NONCE_LEN);
	if (!hello_fields_ok(t.world_size, t.auth))
		return -RK_EFIELD;
	*out = t;
	return 0;
}

int rk_wire_encode_hello(uint8_t *out, size_t cap, const struct rk_wire_hello *h)
{
	if (!hello_fields_ok(h->world_size, h->auth))
		return -RK_EFIELD;
	if (cap < RK_WIRE_HELLO_LEN)
		return -ENOSPC;
	rk__le32_store(out, h->proto_version);
	rk__le32_store(out + 4, h->world_size);
	rk__le32_store(out + 8, h->rank);
	rk__le32_store(out + 12, h->auth);
	rk__le64_store(out + 16, h->session_id);
	rk__le64_store(out + 24, h->caps);
	memcpy(out + 32, h->nonce, RK_WIRE_NONCE_LEN);
	return RK_WIRE_HELLO_LEN;
}

/* AUTH: 32 bytes of HMAC-SHA256 (how it is computed: WIRE.md, runtime/auth.c). */
int rk_wire_decode_auth(const uint8_t *p, size_t n, uint8_t mac[RK_WIRE_MAC_LEN])
{
	int ret;

	ret = check_fixed(n, RK_WIRE_MAC_LEN);
	if (ret < 0)
		return ret;
	memcpy(mac, p, RK_WIRE_MAC_LEN);
	return 0;
}

int rk_wire_encode_auth(uint8_t *out, size_t cap, const uint8_t mac[RK_WIRE_MAC_LEN])
{
	if (cap < RK_WIRE_MAC_LEN)
		return -ENOSPC;
	memcpy(out, mac, RK_WIRE_MAC_LEN);
	return RK_WIRE_MAC_LEN;
}

/* HEARTBEAT: u64 time_ns. */
int rk_wire_decode_heartbeat(const uint8_t *p, size_t n, struct rk_wire_heartbeat *out)
{
	int ret;

	ret = check_fixed(n, HEARTBEAT_LEN);
	if (ret < 0)
		return ret;
	out->time_ns = rk__le64_load(p);
	return 0;
}

int rk_wire_encode_heartbeat(uint8_t *out, size_t cap, const struct rk_wire_heartbeat *hb)
{
	if (cap < HEARTBEAT_LEN)
		return -ENOSPC;
	rk__le64_store(out, hb->time_ns);
	return HEARTBEAT_LEN;
}

/* ROUND_DONE: u64 round_id, i32 status (<= 0), u32 reserved, u64 elapsed_ns. */
int rk_wire_decode_round_done(const uint8_t *p, size_t n, struct rk_wire_round_done *out)
{
	struct rk_wire_round_done t;
	int ret;

	ret = check_fixed(n, ROUND_DONE_LEN);
	if (ret < 0)
		return ret;
	if (rk__le32_load(p + 12))
		return -RK_ERESERVED;
	t.round_id = rk__le64_load(p);
	t.status = (int32_t)rk__le32_load(p + 8);
	t.elapsed_ns = rk__le64_load(p + 16);
	if (t.status > 0)
		return -RK_EFIELD;
	*out = t;
	return 0;
}

int rk_wire_encode_round_done(uint8_t *out, size_t cap, const struct rk_wire_round_done *d)
{
	if (d->status > 0)
		return -RK_EFIELD;
	if (cap < ROUND_DONE_LEN)
		return -ENOSPC;
	rk__le64_store(out, d->round_id);
	rk__le32_store(out + 8, (uint32_t)d->status);
	rk__le32_store(out + 12, 0);
	rk__le64_store(out + 16, d->elapsed_ns);
	return ROUND_DONE_LEN;
}

/* ROUND_WATCH: u64 round_id, u32 rank, i32 status (<= 0), u64 elapsed_ns. */
int rk_wire_decode_round_watch(const uint8_t *p, size_t n, struct rk_wire_round_watch *out)
{
	struct rk_wire_round_watch t;
	int ret;

	ret = check_fixed(n, ROUND_WATCH_LEN);
	if (ret < 0)
		return ret;
	t.round_id = rk__le64_load(p);
	t.rank = rk__le32_load(p + 8);
	t.status = (int32_t)rk__le32_load(p + 12);
	t.elapsed_ns = rk__le64_load(p + 16);
	if (t.status > 0)
		return -RK_EFIELD;
	*out = t;
	return 0;
}

int rk_wire_encode_round_watch(uint8_t *out, size_t cap, const struct rk_wire_round_watch *w)
{
	if (w->status > 0)
		return -RK_EFIELD;
	if (cap < ROUND_WATCH_LEN)
		return -ENOSPC;
	rk__le64_store(out, w->round_id);
	rk__le32_store(out + 8, w->rank);
	rk__le32_store(out + 12, (uint32_t)w->status);
	rk__le64_store(out + 16, w->elapsed_ns);
	return ROUND_WATCH_LEN;
}

/* NCCL_ID: 128 opaque bytes. */
int rk_wire_decode_nccl_id(const uint8_t *p, size_t n, uint8_t id[RK_WIRE_NCCL_ID_LEN])
{
	int ret;

	ret = check_fixed(n, RK_WIRE_NCCL_ID_LEN);
	if (ret < 0)
		return ret;
	memcpy(id, p, RK_WIRE_NCCL_ID_LEN);
	return 0;
}

int rk_wire_encode_nccl_id(uint8_t *out, size_t cap, const uint8_t id[RK_WIRE_NCCL_ID_LEN])
{
	if (cap < RK_WIRE_NCCL_ID_LEN)
		return -ENOSPC;
	memcpy(out, id, RK_WIRE_NCCL_ID_LEN);
	return RK_WIRE_NCCL_ID_LEN;
}

/* USER: u32 tag, u32 reserved, data. */
int rk_wire_decode_user(const uint8_t *p, size_t n, struct rk_wire_user *out)
{
	if (n > RK_WIRE_MAX_PAYLOAD)
		return -RK_ETOOBIG;
	if (n < USER_HDR_LEN)
		return -RK_ESHORT;
	if (rk__le32_load(p + 4))
		return -RK_ERESERVED;
	out->tag = rk__le32_load(p);
	out->len = (uint32_t)(n - USER_HDR_LEN);
	out->data = p + USER_HDR_LEN;
	return 0;
}

int rk_wire_encode_user(uint8_t *out, size_t cap, uint32_t tag, const void *data, uint32_t len)
{
	if (len > RK_WIRE_MAX_PAYLOAD - USER_HDR_LEN)
		return -RK_ETOOBIG;
	if (cap < (size_t)USER_HDR_LEN + len)
		return -ENOSPC;
	/* the data may overlap @out (already in place, or where the header goes): move it first */
	if (len)
		memmove(out + USER_HDR_LEN, data, len);
	rk__le32_store(out, tag);
	rk__le32_store(out + 4, 0);
	return USER_HDR_LEN + (int)len;
}

/* BYE: u32 reason (0..2), u32 reserved. */
int rk_wire_decode_bye(const uint8_t *p, size_t n, struct rk_wire_bye *out)
{
	uint32_t reason;
	int ret;

	ret = check_fixed(n, BYE_LEN);
	if (ret < 0)
		return ret;
	if (rk__le32_load(p + 4))
		return -RK_ERESERVED;
	reason = rk__le32_load(p);
	if (reason > BYE_REASON_MAX)
		return -RK_EFIELD;
	out->reason = reason;
	return 0;
}

int rk_wire_encode_bye(uint8_t *out, size_t cap, const struct rk_wire_bye *b)
{
	if (b->reason > BYE_REASON_MAX)
		return -RK_EFIELD;
	if (cap < BYE_LEN)
		return -ENOSPC;
	rk__le32_store(out, b->reason);
	rk__le32_store(out + 4, 0);
	return BYE_LEN;
}

/* ERROR: i32 code (< 0), u32 rank, u32 msg_len (<= RK_WIRE_ERRMSG_MAX), u32 reserved,
 * msg_len bytes of text (not NUL-terminated). */
int rk_wire_decode_error(const uint8_t *p, size_t n, struct rk_wire_error *out)
{
	struct rk_wire_error t;

	if (n > RK_WIRE_MAX_PAYLOAD)
		return -RK_ETOOBIG;
	if (n < ERROR_HDR_LEN)
		return -RK_ESHORT;
	if (rk__le32_load(p + 12))
		return -RK_ERESERVED;
	t.code = (int32_t)rk__le32_load(p);
	t.rank = rk__le32_load(p + 4);
	t.msg_len = rk__le32_load(p + 8);
	if (t.code >= 0 || t.msg_len > RK_WIRE_ERRMSG_MAX)
		return -RK_EFIELD;
	if (n - ERROR_HDR_LEN < t.msg_len)
		return -RK_ESHORT;
	if (n - ERROR_HDR_LEN > t.msg_len)
		return -RK_ETRAILING;
	t.msg = (const char *)p + ERROR_HDR_LEN;
	*out = t;
	return 0;
}

int rk_wire_encode_error(uint8_t *out, size_t cap, int32_t code, uint32_t rank, const char *msg)
{
	size_t len = msg ? strnlen(msg, RK_WIRE_ERRMSG_MAX) : 0;	/* truncates */

	if (code >= 0)
		return -RK_EFIELD;
	if (cap < ERROR_HDR_LEN + len)
		return -ENOSPC;
	rk__le32_store(out, (uint32_t)code);
	rk__le32_store(out + 4, rank);
	rk__le32_store(out + 8, (uint32_t)len);
	rk__le32_store(out + 12, 0);
	if (len)
		memcpy(out + ERROR_HDR_LEN, msg, len);
	return ERROR_HDR_LEN + (int)len;
}

/* ---- same-host links ------------------------------------------------------- */

/* SHM_REQUEST: i32 status (<= 0), u32 pid, u32 uid, u32 reserved, 16 bytes boot
 * id, u64 net_ns, u64 pid_ns. Whether the host is this one is the leader's call. */
int rk_wire_decode_shm_request(const uint8_t *p, size_t n, struct rk_wire_shm_request *out)
{
	struct rk_wire_shm_request t;
	int ret;

	ret = check_fixed(n, RK_WIRE_SHM_REQUEST_LEN);
	if (ret < 0)
		return ret;
	if (rk__le32_load(p + 12))
		return -RK_ERESERVED;
	t.status = (int32_t)rk__le32_load(p);
	t.pid = rk__le32_load(p + 4);
	t.uid = rk__le32_load(p + 8);
	memcpy(t.boot_id, p + 16, RK_WIRE_BOOT_ID_LEN);
	t.net_ns = rk__le64_load(p + 32);
	t.pid_ns = rk__le64_load(p + 40);
	if (t.status > 0)
		return -RK_EFIELD;
	*out = t;
	return 0;
}

int rk_wire_encode_shm_request(uint8_t *out, size_t cap, const struct rk_wire_shm_request *r)
{
	if (r->status > 0)
		return -RK_EFIELD;
	if (cap < RK_WIRE_SHM_REQUEST_LEN)
		return -ENOSPC;
	rk__le32_store(out, (uint32_t)r->status);
	rk__le32_store(out + 4, r->pid);
	rk__le32_store(out + 8, r->uid);
	rk__le32_store(out + 12, 0);
	memcpy(out + 16, r->boot_id, RK_WIRE_BOOT_ID_LEN);
	rk__le64_store(out + 32, r->net_ns);
	rk__le64_store(out + 40, r->pid_ns);
	return RK_WIRE_SHM_REQUEST_LEN;
}

static bool ring_size_ok(uint32_t v)
{
	return v >= RK_WIRE_SHM_RING_MIN && v <= RK_WIRE_SHM_RING_MAX && !(v & (v - 1));
}

/* An offer names a socket and two ring sizes; a refusal only its reason. */
static bool offer_ok(const struct rk_wire_shm_offer *o)
{
	static const uint8_t zero[RK_WIRE_SHM_NAME_LEN];

	if (o->status > 0)
		return false;
	if (o->status < 0)
		return !o->pid && !memcmp(o->name, zero, sizeof(zero)) && !o->ring_size &&
		       !o->bcast_size;
	return ring_size_ok(o->ring_size) && (!o->bcast_size || ring_size_ok(o->bcast_size));
}

/* SHM_OFFER: i32 status (<= 0), u32 pid, 16 bytes socket name, u32 ring_size,
 * u32 bcast_size, u64 reserved. */
int rk_wire_decode_shm_offer(const uint8_t *p, size_t n, struct rk_wire_shm_offer *out)
{
	struct rk_wire_shm_offer t;
	int ret;

	ret = check_fixed(n, RK_WIRE_SHM_OFFER_LEN);
	if (ret < 0)
		return ret;
	if (rk__le64_load(p + 32))
		return -RK_ERESERVED;
	t.status = (int32_t)rk__le32_load(p);
	t.pid = rk__le32_load(p + 4);
	memcpy(t.name, p + 8, RK_WIRE_SHM_NAME_LEN);
	t.ring_size = rk__le32_load(p + 24);
	t.bcast_size = rk__le32_load(p + 28);
	if (!offer_ok(&t))
		return -RK_EFIELD;
	*out = t;
	return 0;
}

int rk_wire_encode_shm_offer(uint8_t *out, size_t cap, const struct rk_wire_shm_offer *o)
{
	if (!offer_ok(o))
		return -RK_EFIELD;
	if (cap < RK_WIRE_SHM_OFFER_LEN)
		return -ENOSPC;
	rk__le32_store(out, (uint32_t)o->status);
	rk__le32_store(out + 4, o->pid);
	memcpy(out + 8, o->name, RK_WIRE_SHM_NAME_LEN);
	rk__le32_store(out + 24, o->ring_size);
	rk__le32_store(out + 28, o->bcast_size);
	rk__le64_store(out + 32, 0);
	return RK_WIRE_SHM_OFFER_LEN;
}

/* SHM_ANSWER: i32 status (<= 0), u32 reserved. */
int rk_wire_decode_shm_answer(const uint8_t *p, size_t n, struct rk_wire_shm_answer *out)
{
	int32_t status;
	int ret;

	ret = check_fixed(n, RK_WIRE_SHM_ANSWER_LEN);
	if (ret < 0)
		return ret;
	if (rk__le32_load(p + 4))
		return -RK_ERESERVED;
	status = (int32_t)rk__le32_load(p);
	if (status > 0)
		return -RK_EFIELD;
	out->status = status;
	return 0;
}

int rk_wire_encode_shm_answer(uint8_t *out, size_t cap, const struct rk_wire_shm_answer *a)
{
	if (a->status > 0)
		return -RK_EFIELD;
	if (cap < RK_WIRE_SHM_ANSWER_LEN)
		return -ENOSPC;
	rk__le32_store(out, (uint32_t)a->status);
	rk__le32_store(out + 4, 0);
	return RK_WIRE_SHM_ANSWER_LEN;
}

static bool switch_ok(const struct rk_wire_shm_switch *sw)
{
	return !(sw->bcast_pos & 7) &&
	       (sw->slot < RK_WIRE_SHM_SLOTS || sw->slot == RK_WIRE_SHM_NO_SLOT);
}

/* SHM_SWITCH: u64 bcast_pos (a multiple of 8), u64 bcast_seq, u32 slot, u32 reserved. */
int rk_wire_decode_shm_switch(const uint8_t *p, size_t n, struct rk_wire_shm_switch *out)
{
	struct rk_wire_shm_switch t;
	int ret;

	ret = check_fixed(n, RK_WIRE_SHM_SWITCH_LEN);
	if (ret < 0)
		return ret;
	if (rk__le32_load(p + 20))
		return -RK_ERESERVED;
	t.bcast_pos = rk__le64_load(p);
	t.bcast_seq = rk__le64_load(p + 8);
	t.slot = rk__le32_load(p + 16);
	if (!switch_ok(&t))
		return -RK_EFIELD;
	*out = t;
	return 0;
}

int rk_wire_encode_shm_switch(uint8_t *out, size_t cap, const struct rk_wire_shm_switch *sw)
{
	if (!switch_ok(sw))
		return -RK_EFIELD;
	if (cap < RK_WIRE_SHM_SWITCH_LEN)
		return -ENOSPC;
	rk__le64_store(out, sw->bcast_pos);
	rk__le64_store(out + 8, sw->bcast_seq);
	rk__le32_store(out + 16, sw->slot);
	rk__le32_store(out + 20, 0);
	return RK_WIRE_SHM_SWITCH_LEN;
}

/* ---- ROUND --------------------------------------------------------------- */

/*
 * ROUND: u64 round_id, u32 n_streams, u32 reserved; n_streams 40-byte entries;
 * then the tokens (u32), stream by stream: n_tokens inputs, then n_draft drafts.
 * Entry: u64 stream_id, u32 position, u32 n_tokens, u32 n_draft, u32 top_k,
 * f32 temperature, f32 top_p, u64 seed.
 */
#define RS_STREAM_ID	0
#define RS_POSITION	8
#define RS_N_TOKENS	12
#define RS_N_DRAFT	16
#define RS_TOP_K	20
#define RS_TEMPERATURE	24
#define RS_TOP_P	28
#define RS_SEED		32

static bool f32_finite(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return (u >> 23 & 0xff) != 0xff;	/* exponent all ones: Inf or NaN */
}

/* Sampling parameters a sampler can use; NaN fails every comparison below. */
static bool stream_ok(uint32_t n_tokens, float temperature, float top_p)
{
	return n_tokens >= 1 && f32_finite(temperature) && temperature >= 0.0f &&
	       f32_finite(top_p) && top_p >= 0.0f && top_p <= 1.0f;
}

int64_t rk_wire_round_size(uint32_t n_streams, uint64_t n_tok_total)
{
	uint64_t size;

	/* Bound each term first so the sum cannot wrap. */
	if (n_streams > RK_WIRE_MAX_PAYLOAD / RK_WIRE_ROUND_STREAM_LEN ||
	    n_tok_total > RK_WIRE_MAX_PAYLOAD / 4)
		return -RK_ETOOBIG;
	size = RK_WIRE_ROUND_HDR_LEN + (uint64_t)n_streams * RK_WIRE_ROUND_STREAM_LEN +
	       n_tok_total * 4;
	return size > RK_WIRE_MAX_PAYLOAD ? -RK_ETOOBIG : (int64_t)size;
}

int rk_wire_decode_round(const uint8_t *p, size_t n, struct rk_wire_round *out)
{
	uint64_t total = 0, drafts = 0;
	uint32_t n_streams, i;
	size_t rest;

	if (n > RK_WIRE_MAX_PAYLOAD)
		return -RK_ETOOBIG;
	if (n < RK_WIRE_ROUND_HDR_LEN)
		return -RK_ESHORT;
	if (rk__le32_load(p + 12))
		return -RK_ERESERVED;
	n_streams = rk__le32_load(p + 8);
	if (n_streams == 0)
		return -RK_EFIELD;
	rest = n - RK_WIRE_ROUND_HDR_LEN;
	if (rest / RK_WIRE_ROUND_STREAM_LEN < n_streams)
		return -RK_ESHORT;
	/* n <= 16 MiB bounds n_streams to 419430, so the 64-bit total cannot wrap
	 * even when every count is 0xffffffff. */
	for (i = 0; i < n_streams; i++) {
		const uint8_t *s = p + RK_WIRE_ROUND_HDR_LEN + (size_t)i * RK_WIRE_ROUND_STREAM_LEN;
		uint32_t n_tokens = rk__le32_load(s + RS_N_TOKENS);

		if (!stream_ok(n_tokens, rk__lef32_load(s + RS_TEMPERATURE),
			       rk__lef32_load(s + RS_TOP_P)))
			return -RK_EFIELD;
		drafts += rk__le32_load(s + RS_N_DRAFT);
		total += n_tokens;
	}
	total += drafts;
	rest -= (size_t)n_streams * RK_WIRE_ROUND_STREAM_LEN;
	if (rest < total * 4)
		return -RK_ESHORT;
	if (rest > total * 4)
		return -RK_ETRAILING;
	out->round_id = rk__le64_load(p);
	out->n_streams = n_streams;
	out->n_tok_total = (uint32_t)total;
	out->n_draft_total = (uint32_t)drafts;	/* <= total */
	out->streams = p + RK_WIRE_ROUND_HDR_LEN;
	out->tokens = out->streams + (size_t)n_streams * RK_WIRE_ROUND_STREAM_LEN;
	return 0;
}

void rk_wire_round_stream(const struct rk_wire_round *r, uint32_t i, struct rk_wire_stream *out)
{
	const uint8_t *s = r->streams + (size_t)i * RK_WIRE_ROUND_STREAM_LEN;

	out->stream_id = rk__le64_load(s + RS_STREAM_ID);
	out->position = rk__le32_load(s + RS_POSITION);
	out->n_tokens = rk__le32_load(s + RS_N_TOKENS);
	out->n_draft = rk__le32_load(s + RS_N_DRAFT);
	out->top_k = rk__le32_load(s + RS_TOP_K);
	out->temperature = rk__lef32_load(s + RS_TEMPERATURE);
	out->top_p = rk__lef32_load(s + RS_TOP_P);
	out->seed = rk__le64_load(s + RS_SEED);
}

uint32_t rk_wire_round_token(const struct rk_wire_round *r, uint32_t i)
{
	return rk__le32_load(r->tokens + (size_t)i * 4);
}

int64_t rk_wire_encode_round(uint8_t *out, size_t cap, uint64_t round_id,
			     const struct rk_wire_stream *streams, uint32_t n_streams,
			     const uint32_t *tokens)
{
	uint64_t total = 0;
	uint8_t *s, *t;
	int64_t size;
	uint32_t i;

	if (n_streams == 0)
		return -RK_EFIELD;
	/* Refuse an absurd stream count before walking the caller's array. */
	size = rk_wire_round_size(n_streams, 0);
	if (size < 0)
		return size;
	for (i = 0; i < n_streams; i++) {
		const struct rk_wire_stream *st = &streams[i];

		if (!stream_ok(st->n_tokens, st->temperature, st->top_p))
			return -RK_EFIELD;
		total += (uint64_t)st->n_tokens + st->n_draft;
	}
	size = rk_wire_round_size(n_streams, total);
	if (size < 0)
		return size;
	if (cap < (uint64_t)size)
		return -ENOSPC;

	rk__le64_store(out, round_id);
	rk__le32_store(out + 8, n_streams);
	rk__le32_store(out + 12, 0);
	s = out + RK_WIRE_ROUND_HDR_LEN;
	for (i = 0; i < n_streams; i++, s += RK_WIRE_ROUND_STREAM_LEN) {
		const struct rk_wire_stream *st = &streams[i];

		rk__le64_store(s + RS_STREAM_ID, st->stream_id);
		rk__le32_store(s + RS_POSITION, st->position);
		rk__le32_store(s + RS_N_TOKENS, st->n_tokens);
		rk__le32_store(s + RS_N_DRAFT, st->n_draft);
		rk__le32_store(s + RS_TOP_K, st->top_k);
		rk__lef32_store(s + RS_TEMPERATURE, st->temperature);
		rk__lef32_store(s + RS_TOP_P, st->top_p);
		rk__le64_store(s + RS_SEED, st->seed);
	}
	t = s;
	for (i = 0; i < total; i++, t += 4)
		rk__le32_store(t, tokens[i]);
	return size;
}

/* ---- dispatch ------------------------------------------------------------ */

int rk__wire_decode(unsigned int type, const uint8_t *p, size_t n, union rk__wire_payload *u)
{
	switch (type) {
	case RK_FRAME_HELLO:
	case RK_FRAME_WELCOME:
		return rk_wire_decode_hello(p, n, &u->hello);
	case RK_FRAME_HEARTBEAT:
		return rk_wire_decode_heartbeat(p, n, &u->hb);
	case RK_FRAME_ROUND:
		return rk_wire_decode_round(p, n, &u->round);
	case RK_FRAME_ROUND_DONE:
		return rk_wire_decode_round_done(p, n, &u->done);
	case RK_FRAME_ROUND_WATCH:
		return rk_wire_decode_round_watch(p, n, &u->watch);
	case RK_FRAME_NCCL_ID:
		return rk_wire_decode_nccl_id(p, n, u->nccl_id);
	case RK_FRAME_USER:
		return rk_wire_decode_user(p, n, &u->user);
	case RK_FRAME_BYE:
		return rk_wire_decode_bye(p, n, &u->bye);
	case RK_FRAME_ERROR:
		return rk_wire_decode_error(p, n, &u->error);
	case RK_FRAME_AUTH:
		return rk_wire_decode_auth(p, n, u->mac);
	case RK_FRAME_SHM_REQUEST:
		return rk_wire_decode_shm_request(p, n, &u->shm_request);
	case RK_FRAME_SHM_OFFER:
		return rk_wire_decode_shm_offer(p, n, &u->shm_offer);
	case RK_FRAME_SHM_ANSWER:
		return rk_wire_decode_shm_answer(p, n, &u->shm_answer);
	case RK_FRAME_SHM_SWITCH:
		return rk_wire_decode_shm_switch(p, n, &u->shm_switch);
	default:
		return -RK_ETYPE;
	}
}

int rk_wire_decode_payload(unsigned int type, const uint8_t *p, size_t n)
{
	union rk__wire_payload u;

	return rk__wire_decode(type, p, n, &u);
}
