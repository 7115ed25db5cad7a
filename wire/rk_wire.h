/* SPDX-License-Identifier: MIT */
/*
 * rankrt wire format v2: the control-frame codec.
 *
 * Pure code: no I/O, no allocation, no global state; every function is
 * thread-safe. Decoders take a caller's buffer and return views into it;
 * encoders write into a caller's buffer. Byte layouts are in wire/WIRE.md.
 *
 * A frame is a 32-byte little-endian header followed by a payload of
 * hdr.len bytes. Decoding is incremental: rk_wire_decode_hdr() accepts any
 * prefix of a frame and either rejects it as soon as the bytes present prove
 * it malformed, or asks for more with -EAGAIN.
 */
#ifndef RK_WIRE_H
#define RK_WIRE_H

#include "rk_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RK_WIRE_MAGIC		0x54524b52u	/* "RKRT" as little-endian bytes */
#define RK_WIRE_VERSION		2
#define RK_WIRE_HDR_LEN		32
#define RK_WIRE_MAX_PAYLOAD	(16u << 20)	/* hard cap of any frame, 16 MiB */
#define RK_WIRE_NCCL_ID_LEN	128
#define RK_WIRE_ERRMSG_MAX	256
#define RK_WIRE_ROUND_HDR_LEN	16
#define RK_WIRE_USER_HDR_LEN	8	/* USER: u32 tag, u32 reserved, then the data */
#define RK_WIRE_ROUND_STREAM_LEN 40
#define RK_WIRE_HELLO_LEN	64
#define RK_WIRE_NONCE_LEN	32	/* HELLO/WELCOME: fresh random bytes per handshake */
#define RK_WIRE_MAC_LEN		32	/* AUTH: an HMAC-SHA256 proof */
#define RK_WIRE_RANK_NONE	0xffffffffu
#define RK_WIRE_SHM_REQUEST_LEN	48
#define RK_WIRE_SHM_OFFER_LEN	40
#define RK_WIRE_SHM_ANSWER_LEN	8
#define RK_WIRE_SHM_SWITCH_LEN	24
#define RK_WIRE_BOOT_ID_LEN	16	/* SHM_REQUEST: the kernel's boot id */
#define RK_WIRE_SHM_NAME_LEN	16	/* SHM_OFFER: the random name of its unix socket */
#define RK_WIRE_SHM_NO_SLOT	0xffffffffu	/* SHM_SWITCH: not a broadcast reader */
#define RK_WIRE_SHM_RING_MIN	4096u		/* ring sizes: powers of two in [min, max] */
#define RK_WIRE_SHM_RING_MAX	(1u << 30)
#define RK_WIRE_SHM_SLOTS	64		/* broadcast readers per world at most */

enum rk_frame_type {
	RK_FRAME_HELLO = 0,	/* follower -> leader, first frame on a link */
	RK_FRAME_WELCOME = 1,	/* leader -> follower, answer to HELLO */
	RK_FRAME_HEARTBEAT = 2,
	RK_FRAME_ROUND = 3,	/* a decode round's header */
	RK_FRAME_ROUND_DONE = 4,
	RK_FRAME_NCCL_ID = 5,	/* opaque 128-byte ncclUniqueId */
	RK_FRAME_USER = 6,	/* opaque application payload */
	RK_FRAME_BYE = 7,	/* orderly close */
	RK_FRAME_ERROR = 8,	/* the sender reports an error, then closes */
	RK_FRAME_AUTH = 9,	/* handshake: the sender's proof that it holds the job's key */
	RK_FRAME_SHM_REQUEST = 10,	/* follower -> leader: its host, for a same-host link */
	RK_FRAME_SHM_OFFER = 11,	/* leader -> follower: the shared segment's socket, or no */
	RK_FRAME_SHM_ANSWER = 12,	/* follower -> leader: mapped (its last TCP frame), or no */
	RK_FRAME_SHM_SWITCH = 13,	/* leader -> follower: its last TCP frame */
	RK_FRAME_ROUND_WATCH = 14,	/* the round watchdog: a rank still works, or was late */
	RK_FRAME__COUNT,
};

/* Header flag bits. Each type admits only the bits listed in WIRE.md. */
#define RK_FRAME_F_DRAFTED	0x0001u	/* ROUND: some stream carries drafted tokens */
#define RK_FRAME_F_PREFILL	0x0002u	/* ROUND: some stream carries more than one input token */
#define RK_FRAME_F_REPLY	0x0001u	/* HEARTBEAT: this is an echo of a HEARTBEAT */

/* HELLO/WELCOME auth field: how the handshake proves the key (WIRE.md). */
#define RK_WIRE_AUTH_NONE	0u	/* no secret: no AUTH frames */
#define RK_WIRE_AUTH_HMAC	1u	/* HMAC-SHA256 over the transcript, AUTH both ways */
#define RK_WIRE_AUTH_TAGS	2u	/* as HMAC, then an AES-256-GCM tag after every frame */
#define RK_WIRE_TAG_LEN		16	/* a frame's tag, after its payload (WIRE.md, "Frame tags") */

/* Capability bits in HELLO/WELCOME. */
#define RK_CAP_VERBS		0x0001u
#define RK_CAP_CUDA		0x0002u
#define RK_CAP_NCCL		0x0004u

/* A decoded header. */
struct rk_wire_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t type;		/* enum rk_frame_type */
	uint16_t flags;
	uint32_t src_rank;
	uint32_t len;		/* payload bytes after the header */
	uint64_t seq;		/* per-link, per-direction, starts at 0 */
	uint32_t payload_crc;	/* CRC32C of the payload */
	uint32_t hdr_crc;	/* CRC32C of header bytes 0..27 */
};

/**
 * rk_wire_decode_hdr() - validate and decode a frame header from a prefix.
 * @p: bytes received so far (the start of a frame).
 * @n: how many bytes @p holds (may be less than the header, or more than a frame).
 * @max_len: the largest payload the caller accepts (<= RK_WIRE_MAX_PAYLOAD
 *           is enforced in any case).
 * @h: filled when the header is complete and valid.
 *
 * Validates in this order, with the first failure returned: magic (checked on
 * as many of its 4 bytes as @n holds, so garbage is refused at its first byte),
 * then, once 32 bytes are present: header CRC, version, type, the type's
 * payload-length rule (fixed-size types must have their exact size, others have
 * a minimum and a maximum), flags allowed for the type, the @max_len limit.
 *
 * Return: the total frame length (32 + h->len) when the header is complete and
 * valid (the payload may not have arrived yet: compare with @n);
 * -EAGAIN when @n is too short to decide; -RK_EMAGIC, -RK_EHDRCRC,
 * -RK_EVERSION, -RK_ETYPE, -RK_ESHORT (fixed-size type, too short),
 * -RK_ETRAILING (fixed-size type, too long), -RK_EFLAGS, -RK_ETOOBIG (over the
 * type's maximum, @max_len or RK_WIRE_MAX_PAYLOAD). @h is written only on success.
 */
RK_EXPORT int64_t rk_wire_decode_hdr(const uint8_t *p, size_t n, uint32_t max_len,
				     struct rk_wire_hdr *h);

/**
 * rk_wire_check_payload() - verify a complete frame's payload CRC.
 * @h: a header from rk_wire_decode_hdr().
 * @payload: h->len bytes.
 * Return: 0, or -RK_EPAYCRC.
 */
RK_EXPORT int rk_wire_check_payload(const struct rk_wire_hdr *h, const uint8_t *payload);

/**
 * rk_wire_encode_hdr() - write a frame header for a payload already in place.
 * @out: RK_WIRE_HDR_LEN bytes.
 * @type, @flags, @src_rank, @seq: header fields.
 * @payload, @len: the payload (may be NULL when @len is 0); its CRC is computed here.
 *
 * Return: RK_WIRE_HDR_LEN, or -RK_ETYPE / -RK_ESHORT / -RK_ETRAILING /
 * -RK_EFLAGS / -RK_ETOOBIG when the header would not pass rk_wire_decode_hdr(),
 * -RK_ERESERVED for a USER payload rk_wire_decode_user() would refuse (so a
 * bad frame is never sent).
 */
RK_EXPORT int rk_wire_encode_hdr(uint8_t *out, unsigned int type, unsigned int flags,
				 uint32_t src_rank, uint64_t seq, const uint8_t *payload,
				 uint32_t len);

/**
 * rk_wire_crc32c() - CRC32C (Castagnoli), as used by the header and payload checks.
 * @crc: 0 to start, or a previous result to continue.
 */
RK_EXPORT uint32_t rk_wire_crc32c(uint32_t crc, const void *p, size_t n);

/* ---- typed payloads ----------------------------------------------------- */

/* HELLO and WELCOME share one 64-byte layout. */
struct rk_wire_hello {
	uint32_t proto_version;	/* RK_WIRE_VERSION of the sender */
	uint32_t world_size;
	uint32_t rank;		/* HELLO: the follower's rank; WELCOME: the leader's (0) */
	uint32_t auth;		/* RK_WIRE_AUTH_* */
	uint64_t session_id;
	uint64_t caps;		/* RK_CAP_* */
	uint8_t nonce[RK_WIRE_NONCE_LEN];
};

struct rk_wire_heartbeat {
	uint64_t time_ns;	/* sender's monotonic clock */
};

struct rk_wire_round_done {
	uint64_t round_id;
	int32_t status;		/* 0, or a negative rankrt/errno code */
	uint64_t elapsed_ns;	/* launch to completion on the sender */
};

/*
 * ROUND_WATCH: @status 0 says rank @rank still works on its share of
 * @round_id (a follower's progress, to the leader); a negative @status says
 * that round failed because rank @rank did not finish its share (the leader's
 * verdict, to every follower; -RK_EROUNDTIMEOUT).
 */
struct rk_wire_round_watch {
	uint64_t round_id;
	uint32_t rank;
	int32_t status;		/* 0, or a negative rankrt/errno code */
	uint64_t elapsed_ns;	/* since the round's launch on the sender */
};

struct rk_wire_bye {
	uint32_t reason;	/* 0 = normal shutdown, 1 = stopping on a signal, 2 = error */
};

struct rk_wire_error {
	int32_t code;		/* a negative rankrt/errno code */
	uint32_t rank;		/* the rank the error concerns; RK_WIRE_RANK_NONE = the link itself */
	uint32_t msg_len;	/* <= RK_WIRE_ERRMSG_MAX */
	const char *msg;	/* view into the payload, NOT NUL-terminated */
};

struct rk_wire_user {
	uint32_t tag;		/* application-defined demultiplexing tag */
	uint32_t len;
	const uint8_t *data;	/* view into the payload */
};

/*
 * The same-host upgrade of a link (WIRE.md, "Same-host links"): after the
 * handshake the follower describes its host (SHM_REQUEST), the leader offers a
 * shared segment through a unix socket or declines (SHM_OFFER), the follower
 * says whether it mapped it (SHM_ANSWER), and the leader switches (SHM_SWITCH).
 */
struct rk_wire_shm_request {
	int32_t status;		/* 0: the follower wants a shared link; < 0: why not */
	uint32_t pid;		/* the follower's process id (its unix connection proves it) */
	uint32_t uid;		/* its effective user id */
	uint8_t boot_id[RK_WIRE_BOOT_ID_LEN];	/* /proc/sys/kernel/random/boot_id */
	uint64_t net_ns;	/* inode of /proc/self/ns/net */
	uint64_t pid_ns;	/* inode of /proc/self/ns/pid */
};

struct rk_wire_shm_offer {
	int32_t status;		/* 0: offered; < 0: declined, and why (the rest is 0) */
	uint32_t pid;		/* the leader's process id (its socket proves it) */
	uint8_t name[RK_WIRE_SHM_NAME_LEN];	/* the abstract unix socket's random name */
	uint32_t ring_size;	/* bytes of each direction's ring */
	uint32_t bcast_size;	/* bytes of the broadcast ring, 0 = none */
};

struct rk_wire_shm_answer {
	int32_t status;		/* 0: mapped, the sender's frames go on the rings from now on */
};

struct rk_wire_shm_switch {
	uint64_t bcast_pos;	/* where this reader starts in the broadcast ring */
	uint64_t bcast_seq;	/* the sequence number of the frame there */
	uint32_t slot;		/* its reader slot, < RK_WIRE_SHM_SLOTS, or RK_WIRE_SHM_NO_SLOT */
};

/* One stream's entry in a ROUND. */
struct rk_wire_stream {
	uint64_t stream_id;
	uint32_t position;	/* sequence position of the first input token */
	uint32_t n_tokens;	/* input tokens this round (1 for decode, more for prefill) */
	uint32_t n_draft;	/* drafted tokens to verify after the input tokens */
	uint32_t top_k;		/* 0 = greedy */
	float temperature;
	float top_p;
	uint64_t seed;
};

/* A decoded ROUND: a view into the payload. Use the accessors below. */
struct rk_wire_round {
	uint64_t round_id;
	uint32_t n_streams;
	uint32_t n_tok_total;		/* sum of n_tokens + n_draft over streams */
	uint32_t n_draft_total;		/* sum of n_draft: the round's outputs (one after
					 * each stream's inputs and after each draft) are
					 * n_streams + n_draft_total */
	const uint8_t *streams;		/* n_streams * 40 bytes */
	const uint8_t *tokens;		/* n_tok_total * 4 bytes */
};

/*
 * Every payload decoder validates completely before it returns 0 and
 * returns -RK_ESHORT, -RK_ETRAILING, -RK_ERESERVED or -RK_EFIELD
 * otherwise (ROUND, USER, ERROR: -RK_ETOOBIG when @n exceeds RK_WIRE_MAX_PAYLOAD).
 * @p/@n are the payload (after the header); views point into @p. @out is written
 * only on success.
 */
RK_EXPORT int rk_wire_decode_hello(const uint8_t *p, size_t n, struct rk_wire_hello *out);
RK_EXPORT int rk_wire_decode_heartbeat(const uint8_t *p, size_t n,
				       struct rk_wire_heartbeat *out);
RK_EXPORT int rk_wire_decode_round(const uint8_t *p, size_t n, struct rk_wire_round *out);
RK_EXPORT int rk_wire_decode_round_done(const uint8_t *p, size_t n,
					struct rk_wire_round_done *out);
RK_EXPORT int rk_wire_decode_round_watch(const uint8_t *p, size_t n,
					 struct rk_wire_round_watch *out);
RK_EXPORT int rk_wire_decode_nccl_id(const uint8_t *p, size_t n,
				     uint8_t id[RK_WIRE_NCCL_ID_LEN]);
RK_EXPORT int rk_wire_decode_user(const uint8_t *p, size_t n, struct rk_wire_user *out);
RK_EXPORT int rk_wire_decode_bye(const uint8_t *p, size_t n, struct rk_wire_bye *out);
RK_EXPORT int rk_wire_decode_error(const uint8_t *p, size_t n, struct rk_wire_error *out);
RK_EXPORT int rk_wire_decode_auth(const uint8_t *p, size_t n, uint8_t mac[RK_WIRE_MAC_LEN]);
RK_EXPORT int rk_wire_decode_shm_request(const uint8_t *p, size_t n,
					 struct rk_wire_shm_request *out);
RK_EXPORT int rk_wire_decode_shm_offer(const uint8_t *p, size_t n, struct rk_wire_shm_offer *out);
RK_EXPORT int rk_wire_decode_shm_answer(const uint8_t *p, size_t n,
					struct rk_wire_shm_answer *out);
RK_EXPORT int rk_wire_decode_shm_switch(const uint8_t *p, size_t n,
					struct rk_wire_shm_switch *out);

/**
 * rk_wire_decode_payload() - validate any payload by type (dispatches to the above
 * and discards the result). Return: 0 or the decoder's error; -RK_ETYPE for an
 * unknown type.
 */
RK_EXPORT int rk_wire_decode_payload(unsigned int type, const uint8_t *p, size_t n);

/** rk_wire_round_stream() - load stream @i (< n_streams) of a decoded ROUND. */
RK_EXPORT void rk_wire_round_stream(const struct rk_wire_round *r, uint32_t i,
				    struct rk_wire_stream *out);
/** rk_wire_round_token() - load token @i (< n_tok_total) of a decoded ROUND.
 * Tokens are laid out stream by stream: n_tokens inputs then n_draft drafts. */
RK_EXPORT uint32_t rk_wire_round_token(const struct rk_wire_round *r, uint32_t i);

/*
 * Payload encoders write into @out (capacity @cap) and return the payload length,
 * or -ENOSPC when @cap is too small, or -RK_EFIELD for an unencodable value
 * (what the decoder would refuse), or -RK_ETOOBIG (USER data past RK_WIRE_MAX_PAYLOAD).
 * rk_wire_encode_error() truncates @msg (NULL = empty) to RK_WIRE_ERRMSG_MAX bytes.
 * rk_wire_encode_user()'s @data may overlap @out (e.g. written in place at
 * @out + RK_WIRE_USER_HDR_LEN).
 */
RK_EXPORT int rk_wire_encode_hello(uint8_t *out, size_t cap, const struct rk_wire_hello *h);
RK_EXPORT int rk_wire_encode_heartbeat(uint8_t *out, size_t cap,
				       const struct rk_wire_heartbeat *hb);
RK_EXPORT int rk_wire_encode_round_done(uint8_t *out, size_t cap,
					const struct rk_wire_round_done *d);
RK_EXPORT int rk_wire_encode_round_watch(uint8_t *out, size_t cap,
					 const struct rk_wire_round_watch *w);
RK_EXPORT int rk_wire_encode_nccl_id(uint8_t *out, size_t cap,
				     const uint8_t id[RK_WIRE_NCCL_ID_LEN]);
RK_EXPORT int rk_wire_encode_user(uint8_t *out, size_t cap, uint32_t tag, const void *data,
				  uint32_t len);
RK_EXPORT int rk_wire_encode_bye(uint8_t *out, size_t cap, const struct rk_wire_bye *b);
RK_EXPORT int rk_wire_encode_error(uint8_t *out, size_t cap, int32_t code, uint32_t rank,
				   const char *msg);
RK_EXPORT int rk_wire_encode_auth(uint8_t *out, size_t cap, const uint8_t mac[RK_WIRE_MAC_LEN]);
RK_EXPORT int rk_wire_encode_shm_request(uint8_t *out, size_t cap,
					 const struct rk_wire_shm_request *r);
RK_EXPORT int rk_wire_encode_shm_offer(uint8_t *out, size_t cap,
				       const struct rk_wire_shm_offer *o);
RK_EXPORT int rk_wire_encode_shm_answer(uint8_t *out, size_t cap,
					const struct rk_wire_shm_answer *a);
RK_EXPORT int rk_wire_encode_shm_switch(uint8_t *out, size_t cap,
					const struct rk_wire_shm_switch *sw);

/**
 * rk_wire_round_size() - payload bytes of a ROUND with @n_streams streams and
 * @n_tok_total tokens in all. Return: the size, or -RK_ETOOBIG past RK_WIRE_MAX_PAYLOAD.
 */
RK_EXPORT int64_t rk_wire_round_size(uint32_t n_streams, uint64_t n_tok_total);

/**
 * rk_wire_encode_round() - encode a ROUND payload.
 * @streams: @n_streams entries; stream i's tokens are taken from @tokens in order
 *           (n_tokens inputs, then n_draft drafts), sum over streams = token count.
 * Return: the payload length, -ENOSPC, -RK_ETOOBIG, or -RK_EFIELD (e.g. a
 * stream with n_tokens == 0).
 */
RK_EXPORT int64_t rk_wire_encode_round(uint8_t *out, size_t cap, uint64_t round_id,
				       const struct rk_wire_stream *streams, uint32_t n_streams,
				       const uint32_t *tokens);

/** rk_wire_frame_name() - "HELLO", "ROUND", ...; "UNKNOWN" past the table. */
RK_EXPORT const char *rk_wire_frame_name(unsigned int type);

#ifdef __cplusplus
}
#endif
#endif /* RK_WIRE_H */
