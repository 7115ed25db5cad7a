/* SPDX-License-Identifier: MIT */
/*
 * check_wire_errors: every documented error, provoked by a crafted frame (one
 * per row of WIRE.md's table), payload decoders called alone, encoders that
 * refuse what decoders refuse, and 10k seeded buffers of garbage that nothing
 * may crash on.
 */
#include "wire_test.h"

/* ---- every documented error, by a crafted frame ---------------------------- */

struct patch {
	uint8_t off, width;	/* width 0: no patch */
	uint64_t val;
};

#define C_HDR_BYTE	0x1u	/* flip a header bit after its CRC was computed */
#define C_HDR_CRC	0x2u	/* flip a bit of the header CRC itself */
#define C_PAY_BYTE	0x4u	/* flip a payload bit after its CRC was computed */

struct bad_frame {
	const char *name;
	uint8_t type;		/* the sample to start from */
	uint16_t flags;
	struct patch pay[4];	/* payload patches, before the payload CRC */
	int len_delta;		/* zero bytes appended (> 0) or bytes cut (< 0) */
	struct patch hdr;	/* header patch, before the header CRC */
	unsigned int corrupt;
	size_t feed;		/* bytes given to the decoder; 0: the whole frame */
	uint32_t max_len;	/* 0: RK_WIRE_MAX_PAYLOAD */
	int expect;
};

#define P(o, w, v) { (o), (w), (v) }
#define NAN_F	0x7fc00000u
#define NNAN_F	0xffc00000u
#define INF_F	0x7f800000u
#define NINF_F	0xff800000u

static const struct bad_frame bad_frames[] = {
	/* header: magic, CRC, version, type */
	{ "magic byte 0", RK_FRAME_HEARTBEAT, .hdr = P(0, 1, 'S'), .expect = -RK_EMAGIC },
	{ "magic byte 3", RK_FRAME_HEARTBEAT, .hdr = P(3, 1, 't'), .expect = -RK_EMAGIC },
	{ "magic big-endian", RK_FRAME_HEARTBEAT, .hdr = P(0, 4, 0x524b5254),
	  .expect = -RK_EMAGIC },
	{ "header bit flip", RK_FRAME_HEARTBEAT, .corrupt = C_HDR_BYTE, .expect = -RK_EHDRCRC },
	{ "header CRC flip", RK_FRAME_ROUND, .flags = 3, .corrupt = C_HDR_CRC,
	  .expect = -RK_EHDRCRC },
	{ "header CRC first", RK_FRAME_HEARTBEAT, .hdr = P(4, 1, 9), .corrupt = C_HDR_CRC,
	  .expect = -RK_EHDRCRC },
	{ "version 0", RK_FRAME_HEARTBEAT, .hdr = P(4, 1, 0), .expect = -RK_EVERSION },
	{ "version 1", RK_FRAME_HEARTBEAT, .hdr = P(4, 1, 1), .expect = -RK_EVERSION },
	{ "version 3", RK_FRAME_HEARTBEAT, .hdr = P(4, 1, 3), .expect = -RK_EVERSION },
	{ "version before type", RK_FRAME_HEARTBEAT, .hdr = P(4, 2, 0xff03),
	  .expect = -RK_EVERSION },
	{ "type 14", RK_FRAME_HEARTBEAT, .hdr = P(5, 1, RK_FRAME__COUNT), .expect = -RK_ETYPE },
	{ "type 255", RK_FRAME_HEARTBEAT, .hdr = P(5, 1, 255), .expect = -RK_ETYPE },
	{ "type before flags", RK_FRAME_HEARTBEAT, .hdr = P(5, 3, 0xffff00 | RK_FRAME__COUNT),
	  .expect = -RK_ETYPE },

	/* fixed-size types: exact length */
	{ "HELLO short", RK_FRAME_HELLO, .len_delta = -1, .expect = -RK_ESHORT },
	{ "HELLO long", RK_FRAME_HELLO, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "WELCOME short", RK_FRAME_WELCOME, .len_delta = -8, .expect = -RK_ESHORT },
	{ "WELCOME long", RK_FRAME_WELCOME, .len_delta = 32, .expect = -RK_ETRAILING },
	{ "HEARTBEAT short", RK_FRAME_HEARTBEAT, .len_delta = -1, .expect = -RK_ESHORT },
	{ "HEARTBEAT empty", RK_FRAME_HEARTBEAT, .len_delta = -8, .expect = -RK_ESHORT },
	{ "HEARTBEAT long", RK_FRAME_HEARTBEAT, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "ROUND_DONE short", RK_FRAME_ROUND_DONE, .len_delta = -1, .expect = -RK_ESHORT },
	{ "ROUND_DONE long", RK_FRAME_ROUND_DONE, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "ROUND_WATCH short", RK_FRAME_ROUND_WATCH, .len_delta = -1, .expect = -RK_ESHORT },
	{ "ROUND_WATCH long", RK_FRAME_ROUND_WATCH, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "NCCL_ID short", RK_FRAME_NCCL_ID, .len_delta = -1, .expect = -RK_ESHORT },
	{ "NCCL_ID long", RK_FRAME_NCCL_ID, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "AUTH short", RK_FRAME_AUTH, .len_delta = -1, .expect = -RK_ESHORT },
	{ "AUTH long", RK_FRAME_AUTH, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "BYE short", RK_FRAME_BYE, .len_delta = -1, .expect = -RK_ESHORT },
	{ "BYE long", RK_FRAME_BYE, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "SHM_REQUEST short", RK_FRAME_SHM_REQUEST, .len_delta = -1, .expect = -RK_ESHORT },
	{ "SHM_REQUEST long", RK_FRAME_SHM_REQUEST, .len_delta = 8, .expect = -RK_ETRAILING },
	{ "SHM_OFFER short", RK_FRAME_SHM_OFFER, .len_delta = -8, .expect = -RK_ESHORT },
	{ "SHM_OFFER long", RK_FRAME_SHM_OFFER, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "SHM_ANSWER short", RK_FRAME_SHM_ANSWER, .len_delta = -4, .expect = -RK_ESHORT },
	{ "SHM_ANSWER long", RK_FRAME_SHM_ANSWER, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "SHM_SWITCH short", RK_FRAME_SHM_SWITCH, .len_delta = -1, .expect = -RK_ESHORT },
	{ "SHM_SWITCH long", RK_FRAME_SHM_SWITCH, .len_delta = 8, .expect = -RK_ETRAILING },
	{ "fixed len 4G", RK_FRAME_BYE, .hdr = P(12, 4, 0xffffffff), .feed = 32,
	  .expect = -RK_ETRAILING },
	{ "length before flags", RK_FRAME_HEARTBEAT, .flags = 0x8000, .len_delta = -1,
	  .expect = -RK_ESHORT },
	/* variable types: minimum and maximum */
	{ "ROUND below fixed part", RK_FRAME_ROUND, .flags = 3, .len_delta = -105,
	  .expect = -RK_ESHORT },
	{ "USER below tag", RK_FRAME_USER, .len_delta = -6, .expect = -RK_ESHORT },
	{ "ERROR below fixed part", RK_FRAME_ERROR, .len_delta = -10, .expect = -RK_ESHORT },
	{ "ERROR past type max", RK_FRAME_ERROR, .hdr = P(12, 4, 16 + RK_WIRE_ERRMSG_MAX + 1),
	  .feed = 32, .expect = -RK_ETOOBIG },

	/* flags the type does not define */
	{ "HELLO flag", RK_FRAME_HELLO, .flags = 1, .expect = -RK_EFLAGS },
	{ "WELCOME flag", RK_FRAME_WELCOME, .flags = 1, .expect = -RK_EFLAGS },
	{ "AUTH flag", RK_FRAME_AUTH, .flags = 1, .expect = -RK_EFLAGS },
	{ "HEARTBEAT flag 2", RK_FRAME_HEARTBEAT, .flags = 2, .expect = -RK_EFLAGS },
	{ "HEARTBEAT flag 0x8000", RK_FRAME_HEARTBEAT, .flags = 0x8001, .expect = -RK_EFLAGS },
	{ "ROUND flag 4", RK_FRAME_ROUND, .flags = 7, .expect = -RK_EFLAGS },
	{ "ROUND flag 0x8000", RK_FRAME_ROUND, .flags = 0x8000, .expect = -RK_EFLAGS },
	{ "ROUND_DONE flag", RK_FRAME_ROUND_DONE, .flags = 1, .expect = -RK_EFLAGS },
	{ "ROUND_WATCH flag", RK_FRAME_ROUND_WATCH, .flags = 1, .expect = -RK_EFLAGS },
	{ "NCCL_ID flag", RK_FRAME_NCCL_ID, .flags = 2, .expect = -RK_EFLAGS },
	{ "USER flag", RK_FRAME_USER, .flags = 1, .expect = -RK_EFLAGS },
	{ "BYE flag", RK_FRAME_BYE, .flags = 1, .expect = -RK_EFLAGS },
	{ "ERROR flag", RK_FRAME_ERROR, .flags = 0x100, .expect = -RK_EFLAGS },
	{ "flags before max_len", RK_FRAME_USER, .flags = 1, .max_len = 1, .expect = -RK_EFLAGS },
	{ "HEARTBEAT REPLY ok", RK_FRAME_HEARTBEAT, .flags = RK_FRAME_F_REPLY, .expect = 0 },
	{ "ROUND no flags ok", RK_FRAME_ROUND, .flags = 0, .expect = 0 },

	/* size limits */
	{ "USER over max_len", RK_FRAME_USER, .max_len = 12, .expect = -RK_ETOOBIG },
	{ "USER at max_len", RK_FRAME_USER, .max_len = 13, .expect = 0 },
	{ "USER over MAX_PAYLOAD", RK_FRAME_USER, .hdr = P(12, 4, RK_WIRE_MAX_PAYLOAD + 1),
	  .feed = 32, .max_len = UINT32_MAX, .expect = -RK_ETOOBIG },
	{ "ROUND over MAX_PAYLOAD", RK_FRAME_ROUND, .hdr = P(12, 4, RK_WIRE_MAX_PAYLOAD + 1),
	  .feed = 32, .max_len = UINT32_MAX, .expect = -RK_ETOOBIG },
	{ "USER len 4G", RK_FRAME_USER, .hdr = P(12, 4, 0xffffffff), .feed = 32,
	  .max_len = UINT32_MAX, .expect = -RK_ETOOBIG },

	/* payload CRC */
	{ "payload bit flip", RK_FRAME_HEARTBEAT, .corrupt = C_PAY_BYTE, .expect = -RK_EPAYCRC },
	{ "ROUND payload bit flip", RK_FRAME_ROUND, .flags = 3, .corrupt = C_PAY_BYTE,
	  .expect = -RK_EPAYCRC },
	{ "payload CRC field", RK_FRAME_USER, .hdr = P(24, 4, 0xdeadbeef), .expect = -RK_EPAYCRC },

	/* ROUND: stream 0 at 16, stream 1 at 56, tokens at 96 */
	{ "ROUND draft count past end", RK_FRAME_ROUND, .flags = 3, .pay = { P(32, 4, 3) },
	  .expect = -RK_ESHORT },
	{ "ROUND token count past end", RK_FRAME_ROUND, .flags = 3, .pay = { P(68, 4, 4) },
	  .expect = -RK_ESHORT },
	{ "ROUND cut token", RK_FRAME_ROUND, .flags = 3, .len_delta = -4, .expect = -RK_ESHORT },
	{ "ROUND cut byte", RK_FRAME_ROUND, .flags = 3, .len_delta = -1, .expect = -RK_ESHORT },
	{ "ROUND trailing token", RK_FRAME_ROUND, .flags = 3, .len_delta = 4,
	  .expect = -RK_ETRAILING },
	{ "ROUND trailing byte", RK_FRAME_ROUND, .flags = 3, .len_delta = 1,
	  .expect = -RK_ETRAILING },
	{ "ROUND fewer streams than sent", RK_FRAME_ROUND, .flags = 3, .pay = { P(8, 4, 1) },
	  .expect = -RK_ETRAILING },
	{ "ROUND streams past end", RK_FRAME_ROUND, .flags = 3, .pay = { P(8, 4, 3) },
	  .expect = -RK_ESHORT },
	{ "ROUND n_streams 4G", RK_FRAME_ROUND, .flags = 3, .pay = { P(8, 4, 0xffffffff) },
	  .expect = -RK_ESHORT },
	{ "ROUND n_streams 0", RK_FRAME_ROUND, .flags = 3, .pay = { P(8, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "ROUND n_tokens 0", RK_FRAME_ROUND, .flags = 3, .pay = { P(28, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "ROUND stream 1 n_tokens 0", RK_FRAME_ROUND, .flags = 3, .pay = { P(68, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature NaN", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, NAN_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature -NaN", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, NNAN_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature Inf", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, INF_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature -1", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, 0xbf800000) },
	  .expect = -RK_EFIELD },
	{ "ROUND temperature -0 ok", RK_FRAME_ROUND, .flags = 3, .pay = { P(40, 4, 0x80000000) },
	  .expect = 0 },
	{ "ROUND stream 1 temperature NaN", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(80, 4, 0x7f800001) }, .expect = -RK_EFIELD },
	{ "ROUND top_p NaN", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, NAN_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p -Inf", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, NINF_F) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p 1.5", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, 0x3fc00000) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p just over 1", RK_FRAME_ROUND, .flags = 3, .pay = { P(84, 4, 0x3f800001) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p -0.5", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, 0xbf000000) },
	  .expect = -RK_EFIELD },
	{ "ROUND top_p 0 ok", RK_FRAME_ROUND, .flags = 3, .pay = { P(44, 4, 0) }, .expect = 0 },
	{ "ROUND reserved", RK_FRAME_ROUND, .flags = 3, .pay = { P(12, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "ROUND reserved high bit", RK_FRAME_ROUND, .flags = 3, .pay = { P(15, 1, 0x80) },
	  .expect = -RK_ERESERVED },
	{ "ROUND reserved before count", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(12, 4, 1), P(8, 4, 0) }, .expect = -RK_ERESERVED },
	{ "ROUND n_tokens 0xffffffff", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(28, 4, 0xffffffff) }, .expect = -RK_ESHORT },
	{ "ROUND all counts 0xffffffff", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(28, 4, 0xffffffff), P(32, 4, 0xffffffff), P(68, 4, 0xffffffff),
		   P(72, 4, 0xffffffff) }, .expect = -RK_ESHORT },
	{ "ROUND count wraps 32 bits", RK_FRAME_ROUND, .flags = 3,
	  .pay = { P(28, 4, 0xfffffffe), P(32, 4, 0), P(68, 4, 0xfffffffe), P(72, 4, 10) },
	  .expect = -RK_ESHORT },

	/* ROUND_DONE, USER, BYE */
	{ "ROUND_DONE reserved", RK_FRAME_ROUND_DONE, .pay = { P(12, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "ROUND_DONE status > 0", RK_FRAME_ROUND_DONE, .pay = { P(8, 4, 1) },
	  .expect = -RK_EFIELD },
	{ "ROUND_DONE status INT32_MIN ok", RK_FRAME_ROUND_DONE, .pay = { P(8, 4, 0x80000000) },
	  .expect = 0 },
	{ "ROUND_WATCH status > 0", RK_FRAME_ROUND_WATCH, .pay = { P(12, 4, 1) },
	  .expect = -RK_EFIELD },
	{ "ROUND_WATCH progress ok", RK_FRAME_ROUND_WATCH, .pay = { P(12, 4, 0) }, .expect = 0 },
	{ "USER reserved", RK_FRAME_USER, .pay = { P(4, 4, 0x100) }, .expect = -RK_ERESERVED },
	{ "USER tag only ok", RK_FRAME_USER, .len_delta = -5, .expect = 0 },
	{ "BYE reason 3", RK_FRAME_BYE, .pay = { P(0, 4, 3) }, .expect = -RK_EFIELD },
	{ "BYE reason 4G", RK_FRAME_BYE, .pay = { P(0, 4, 0xffffffff) }, .expect = -RK_EFIELD },
	{ "BYE reserved", RK_FRAME_BYE, .pay = { P(4, 4, 1) }, .expect = -RK_ERESERVED },
	{ "BYE reason 2 ok", RK_FRAME_BYE, .pay = { P(0, 4, 2) }, .expect = 0 },

	/* the same-host frames */
	{ "SHM_REQUEST flag", RK_FRAME_SHM_REQUEST, .flags = 1, .expect = -RK_EFLAGS },
	{ "SHM_REQUEST status > 0", RK_FRAME_SHM_REQUEST, .pay = { P(0, 4, 1) },
	  .expect = -RK_EFIELD },
	{ "SHM_REQUEST reserved", RK_FRAME_SHM_REQUEST, .pay = { P(12, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "SHM_REQUEST reserved before status", RK_FRAME_SHM_REQUEST,
	  .pay = { P(12, 4, 1), P(0, 4, 1) }, .expect = -RK_ERESERVED },
	{ "SHM_REQUEST refusal ok", RK_FRAME_SHM_REQUEST, .pay = { P(0, 4, 0xffffffda) },
	  .expect = 0 },
	{ "SHM_OFFER flag", RK_FRAME_SHM_OFFER, .flags = 0x8000, .expect = -RK_EFLAGS },
	{ "SHM_OFFER reserved", RK_FRAME_SHM_OFFER, .pay = { P(39, 1, 1) },
	  .expect = -RK_ERESERVED },
	{ "SHM_OFFER status > 0", RK_FRAME_SHM_OFFER, .pay = { P(0, 4, 1) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER ring not a power of two", RK_FRAME_SHM_OFFER, .pay = { P(24, 4, 0x180000) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER ring below 4096", RK_FRAME_SHM_OFFER, .pay = { P(24, 4, 2048) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER ring past 1 GiB", RK_FRAME_SHM_OFFER, .pay = { P(24, 4, 0x80000000) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER ring 0", RK_FRAME_SHM_OFFER, .pay = { P(24, 4, 0) }, .expect = -RK_EFIELD },
	{ "SHM_OFFER broadcast ring odd", RK_FRAME_SHM_OFFER, .pay = { P(28, 4, 4097) },
	  .expect = -RK_EFIELD },
	{ "SHM_OFFER no broadcast ring ok", RK_FRAME_SHM_OFFER, .pay = { P(28, 4, 0) },
	  .expect = 0 },
	{ "SHM_OFFER refusal with a name", RK_FRAME_SHM_OFFER,
	  .pay = { P(0, 4, 0xffffffda), P(4, 4, 0), P(24, 4, 0), P(28, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "SHM_ANSWER flag", RK_FRAME_SHM_ANSWER, .flags = 2, .expect = -RK_EFLAGS },
	{ "SHM_ANSWER status > 0", RK_FRAME_SHM_ANSWER, .pay = { P(0, 4, 0x7fffffff) },
	  .expect = -RK_EFIELD },
	{ "SHM_ANSWER reserved", RK_FRAME_SHM_ANSWER, .pay = { P(4, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "SHM_ANSWER accepted ok", RK_FRAME_SHM_ANSWER, .pay = { P(0, 4, 0) }, .expect = 0 },
	{ "SHM_SWITCH flag", RK_FRAME_SHM_SWITCH, .flags = 1, .expect = -RK_EFLAGS },
	{ "SHM_SWITCH reserved", RK_FRAME_SHM_SWITCH, .pay = { P(20, 4, 1) },
	  .expect = -RK_ERESERVED },
	{ "SHM_SWITCH slot 64", RK_FRAME_SHM_SWITCH, .pay = { P(16, 4, RK_WIRE_SHM_SLOTS) },
	  .expect = -RK_EFIELD },
	{ "SHM_SWITCH no slot ok", RK_FRAME_SHM_SWITCH, .pay = { P(16, 4, 0xffffffff) },
	  .expect = 0 },
	{ "SHM_SWITCH position not 8-aligned", RK_FRAME_SHM_SWITCH, .pay = { P(0, 8, 4100) },
	  .expect = -RK_EFIELD },

	/* ERROR */
	{ "ERROR msg_len past max", RK_FRAME_ERROR, .pay = { P(8, 4, RK_WIRE_ERRMSG_MAX + 1) },
	  .expect = -RK_EFIELD },
	{ "ERROR msg_len 4G", RK_FRAME_ERROR, .pay = { P(8, 4, 0xffffffff) },
	  .expect = -RK_EFIELD },
	{ "ERROR msg_len past end", RK_FRAME_ERROR, .pay = { P(8, 4, 10) },
	  .expect = -RK_ESHORT },
	{ "ERROR msg_len short of end", RK_FRAME_ERROR, .pay = { P(8, 4, 8) },
	  .expect = -RK_ETRAILING },
	{ "ERROR trailing byte", RK_FRAME_ERROR, .len_delta = 1, .expect = -RK_ETRAILING },
	{ "ERROR code 0", RK_FRAME_ERROR, .pay = { P(0, 4, 0) }, .expect = -RK_EFIELD },
	{ "ERROR code positive", RK_FRAME_ERROR, .pay = { P(0, 4, RK_EPEERDEAD) },
	  .expect = -RK_EFIELD },
	{ "ERROR reserved", RK_FRAME_ERROR, .pay = { P(12, 4, 1), P(0, 4, 0) },
	  .expect = -RK_ERESERVED },

	/* HELLO / WELCOME */
	/* ranks are the link's to judge (RK_ERANK): any value decodes */
	{ "HELLO rank == world ok", RK_FRAME_HELLO, .pay = { P(8, 4, 4) }, .expect = 0 },
	{ "HELLO rank 4G ok", RK_FRAME_HELLO, .pay = { P(8, 4, 0xffffffff) }, .expect = 0 },
	{ "HELLO auth 3", RK_FRAME_HELLO, .pay = { P(12, 4, 3) }, .expect = -RK_EFIELD },
	{ "HELLO auth tags ok", RK_FRAME_HELLO, .pay = { P(12, 4, 2) }, .expect = 0 },
	{ "HELLO auth 4G", RK_FRAME_HELLO, .pay = { P(12, 4, 0xffffffff) }, .expect = -RK_EFIELD },
	{ "HELLO auth none ok", RK_FRAME_HELLO, .pay = { P(12, 4, 0) }, .expect = 0 },
	{ "HELLO world 0", RK_FRAME_HELLO, .pay = { P(4, 4, 0), P(8, 4, 0) },
	  .expect = -RK_EFIELD },
	{ "HELLO last rank ok", RK_FRAME_HELLO, .pay = { P(8, 4, 3) }, .expect = 0 },
	{ "HELLO any version ok", RK_FRAME_HELLO, .pay = { P(0, 4, 99) }, .expect = 0 },
	{ "WELCOME rank > world ok", RK_FRAME_WELCOME, .pay = { P(8, 4, 5) }, .expect = 0 },
	{ "WELCOME auth 3", RK_FRAME_WELCOME, .pay = { P(12, 4, 3) }, .expect = -RK_EFIELD },
	{ "WELCOME auth tags ok", RK_FRAME_WELCOME, .pay = { P(12, 4, 2) }, .expect = 0 },
};

static void apply_patch(uint8_t *p, const struct patch *pt)
{
	switch (pt->width) {
	case 0:
		break;
	case 1:
		p[pt->off] = (uint8_t)pt->val;
		break;
	case 2:
		rk__le16_store(p + pt->off, (uint16_t)pt->val);
		break;
	case 3:
		rk__le16_store(p + pt->off, (uint16_t)pt->val);
		p[pt->off + 2] = (uint8_t)(pt->val >> 16);
		break;
	case 4:
		rk__le32_store(p + pt->off, (uint32_t)pt->val);
		break;
	case 8:
		rk__le64_store(p + pt->off, pt->val);
		break;
	default:
		ck_abort_msg("bad patch width %u", pt->width);
	}
}

START_TEST(test_bad_frame)
{
	const struct bad_frame *c = &bad_frames[_i];
	uint8_t f[BUF_LEN];
	uint8_t *p = f + RK_WIRE_HDR_LEN;
	size_t plen, i;
	int64_t ret;

	memset(f, 0, sizeof(f));
	plen = sample_payload(c->type, p);
	for (i = 0; i < ARRAY_SIZE(c->pay); i++)
		apply_patch(p, &c->pay[i]);
	if (c->len_delta > 0)
		memset(p + plen, 0, (size_t)c->len_delta);
	plen = (size_t)((ptrdiff_t)plen + c->len_delta);
	put_hdr(f, RK_WIRE_MAGIC, RK_WIRE_VERSION, c->type, c->flags, 2, (uint32_t)plen, 77,
		crc32c_ref(0, p, plen));
	if (c->hdr.width) {
		apply_patch(f, &c->hdr);
		fix_hdr_crc(f);
	}
	if (c->corrupt & C_HDR_BYTE)
		f[9] ^= 0x10;
	if (c->corrupt & C_HDR_CRC)
		f[30] ^= 0x01;
	if (c->corrupt & C_PAY_BYTE)
		p[plen - 1] ^= 0x80;

	ret = decode_frame(f, c->feed ? c->feed : RK_WIRE_HDR_LEN + plen,
			   c->max_len ? c->max_len : RK_WIRE_MAX_PAYLOAD);
	ck_assert_msg(ret == c->expect, "%s: got %s (%lld), want %s", c->name,
		      rk_errname((int)ret), (long long)ret, rk_errname(c->expect));
	if (ret == 0)
		assert_canonical(f, RK_WIRE_HDR_LEN + plen);
}
END_TEST

/* Payload decoders called alone check the fixed lengths again. */
START_TEST(test_payload_alone)
{
	static const size_t fixed[RK_FRAME__COUNT] = {
		[RK_FRAME_HELLO] = 64, [RK_FRAME_WELCOME] = 64, [RK_FRAME_HEARTBEAT] = 8,
		[RK_FRAME_ROUND_DONE] = 24, [RK_FRAME_NCCL_ID] = 128, [RK_FRAME_BYE] = 8,
		[RK_FRAME_AUTH] = 32, [RK_FRAME_SHM_REQUEST] = 48, [RK_FRAME_SHM_OFFER] = 40,
		[RK_FRAME_SHM_ANSWER] = 8, [RK_FRAME_SHM_SWITCH] = 24, [RK_FRAME_ROUND_WATCH] = 24,
	};
	static const size_t min[RK_FRAME__COUNT] = {
		[RK_FRAME_ROUND] = 16, [RK_FRAME_USER] = 8, [RK_FRAME_ERROR] = 16,
	};
	const unsigned int type = (unsigned int)_i;
	uint8_t p[BUF_LEN];
	size_t n = sample_payload(type, p);

	memset(p + n, 0, sizeof(p) - n);
	ck_assert_int_eq(rk_wire_decode_payload(type, p, n), 0);
	if (fixed[type]) {
		ck_assert_uint_eq(n, fixed[type]);
		ck_assert_int_eq(rk_wire_decode_payload(type, p, n - 1), -RK_ESHORT);
		ck_assert_int_eq(rk_wire_decode_payload(type, p, 0), -RK_ESHORT);
		ck_assert_int_eq(rk_wire_decode_payload(type, p, n + 1), -RK_ETRAILING);
	} else {
		ck_assert_int_eq(rk_wire_decode_payload(type, p, min[type] - 1), -RK_ESHORT);
		ck_assert_int_eq(rk_wire_decode_payload(type, p, 0), -RK_ESHORT);
		if (type != RK_FRAME_USER)
			ck_assert_int_eq(rk_wire_decode_payload(type, p, n + 1), -RK_ETRAILING);
	}
	ck_assert_int_eq(rk_wire_decode_payload(RK_FRAME__COUNT, p, n), -RK_ETYPE);
	ck_assert_int_eq(rk_wire_decode_payload(UINT_MAX, p, n), -RK_ETYPE);
}
END_TEST

/* ---- encoders refuse what decoders refuse ---------------------------------- */

START_TEST(test_encode_hdr_errors)
{
	uint8_t f[64], pay[RK_WIRE_NCCL_ID_LEN] = { 0 };

	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME__COUNT, 0, 0, 0, pay, 8), -RK_ETYPE);
	ck_assert_int_eq(rk_wire_encode_hdr(f, UINT_MAX, 0, 0, 0, pay, 8), -RK_ETYPE);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, 2, 0, 0, pay, 8), -RK_EFLAGS);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, 0x10001, 0, 0, pay, 8),
			 -RK_EFLAGS);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_ROUND, 4, 0, 0, pay, 16), -RK_EFLAGS);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_BYE, 1, 0, 0, pay, 8), -RK_EFLAGS);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, 0, 0, 0, pay, 7), -RK_ESHORT);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, 0, 0, 0, pay, 9),
			 -RK_ETRAILING);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_USER, 0, 0, 0, NULL, 0), -RK_ESHORT);
	/* USER's reserved field, as rk_wire_decode_user() refuses it */
	pay[4] = 1;
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_USER, 0, 0, 0, pay, 8), -RK_ERESERVED);
	pay[4] = 0;
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_USER, 0, 0, 0, pay, 8), RK_WIRE_HDR_LEN);
	/* the length is refused before the payload is read */
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_USER, 0, 0, 0, pay,
					    RK_WIRE_MAX_PAYLOAD + 1), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_ERROR, 0, 0, 0, pay,
					    16 + RK_WIRE_ERRMSG_MAX + 1), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_NCCL_ID, 0, 7, 8, pay,
					    RK_WIRE_NCCL_ID_LEN), RK_WIRE_HDR_LEN);
}
END_TEST

START_TEST(test_encode_payload_errors)
{
	struct rk_wire_hello hello = { .proto_version = 1, .world_size = 4, .rank = 4,
				       .auth = 3 };
	struct rk_wire_heartbeat hb = { 1 };
	struct rk_wire_round_done done = { 1, 1, 1 };
	struct rk_wire_round_watch watch = { 1, 1, 1, 1 };
	struct rk_wire_bye bye = { 3 };
	struct rk_wire_stream st[2] = { golden_streams[0], golden_streams[1] };
	uint8_t id[RK_WIRE_NCCL_ID_LEN] = { 0 };
	uint8_t out[BUF_LEN];
	char longmsg[400];
	struct rk_wire_error e;

	/* -RK_EFIELD for values the decoder would refuse */
	ck_assert_int_eq(rk_wire_encode_hello(out, sizeof(out), &hello), -RK_EFIELD);
	hello.auth = RK_WIRE_AUTH_HMAC;
	hello.world_size = 0;
	hello.rank = 0;
	ck_assert_int_eq(rk_wire_encode_hello(out, sizeof(out), &hello), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_round_done(out, sizeof(out), &done), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_round_watch(out, sizeof(out), &watch), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_bye(out, sizeof(out), &bye), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_error(out, sizeof(out), 0, 0, "x"), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_error(out, sizeof(out), 5, 0, "x"), -RK_EFIELD);
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 0, golden_tokens),
			 -RK_EFIELD);
	st[1].n_tokens = 0;
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	st[1] = golden_streams[1];
	st[0].temperature = -0.5f;
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	memcpy(&st[0].temperature, &(uint32_t){ NAN_F }, 4);
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	st[0] = golden_streams[0];
	st[0].top_p = 1.0001f;
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	memcpy(&st[0].top_p, &(uint32_t){ INF_F }, 4);
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, golden_tokens),
			 -RK_EFIELD);
	st[0] = golden_streams[0];

	/* -RK_ETOOBIG before any token is read */
	st[0].n_tokens = UINT32_MAX;
	st[0].n_draft = UINT32_MAX;
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, 2, NULL), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 1, st, UINT32_MAX, NULL),
			 -RK_ETOOBIG);
	st[0] = golden_streams[0];
	ck_assert_int_eq(rk_wire_round_size(0, 0), 16);
	ck_assert_int_eq(rk_wire_round_size(UINT32_MAX, 0), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_round_size(1, UINT64_MAX), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_round_size(1, UINT64_MAX / 4 + 1), -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_round_size((RK_WIRE_MAX_PAYLOAD - 16) / 40, 0),
			 16 + (RK_WIRE_MAX_PAYLOAD - 16) / 40 * 40);
	ck_assert_int_eq(rk_wire_encode_user(out, sizeof(out), 1, out, RK_WIRE_MAX_PAYLOAD - 7),
			 -RK_ETOOBIG);
	ck_assert_int_eq(rk_wire_encode_user(out, sizeof(out), 1, out, UINT32_MAX),
			 -RK_ETOOBIG);

	/* -ENOSPC one byte short, exact fit succeeds */
	hello.world_size = 1;
	ck_assert_int_eq(rk_wire_encode_hello(out, 63, &hello), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_hello(out, 64, &hello), 64);
	ck_assert_int_eq(rk_wire_encode_heartbeat(out, 7, &hb), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_heartbeat(out, 8, &hb), 8);
	done.status = 0;
	ck_assert_int_eq(rk_wire_encode_round_done(out, 23, &done), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_round_done(out, 24, &done), 24);
	watch.status = -RK_EROUNDTIMEOUT;
	ck_assert_int_eq(rk_wire_encode_round_watch(out, 23, &watch), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_round_watch(out, 24, &watch), 24);
	ck_assert_int_eq(rk_wire_encode_nccl_id(out, 127, id), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_nccl_id(out, 128, id), 128);
	ck_assert_int_eq(rk_wire_encode_user(out, 12, 1, "abcde", 5), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_user(out, 13, 1, "abcde", 5), 13);
	bye.reason = 0;
	ck_assert_int_eq(rk_wire_encode_bye(out, 7, &bye), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_bye(out, 8, &bye), 8);
	ck_assert_int_eq(rk_wire_encode_error(out, 16 + 8, -1, 0, "peer gone"), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_error(out, 16 + 9, -1, 0, "peer gone"), 25);
	ck_assert_int_eq(rk_wire_encode_error(out, 15, -1, 0, NULL), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_error(out, 16, -1, 0, NULL), 16);

	/* ERROR text is cut at RK_WIRE_ERRMSG_MAX */
	memset(longmsg, 'm', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	ck_assert_int_eq(rk_wire_encode_error(out, sizeof(out), -EIO, 1, longmsg),
			 16 + RK_WIRE_ERRMSG_MAX);
	ck_assert_int_eq(rk_wire_decode_error(out, 16 + RK_WIRE_ERRMSG_MAX, &e), 0);
	ck_assert_uint_eq(e.msg_len, RK_WIRE_ERRMSG_MAX);
	ck_assert_mem_eq(e.msg, longmsg, RK_WIRE_ERRMSG_MAX);
	ck_assert_int_eq(rk_wire_encode_error(out, 16 + RK_WIRE_ERRMSG_MAX - 1, -EIO, 1, longmsg),
			 -ENOSPC);
}
END_TEST

/* ---- garbage ----------------------------------------------------------------- */

/*
 * 10k seeded buffers in four shapes: pure noise, noise behind the magic, random
 * headers with correct CRCs over random payloads, and valid frames with a few
 * bytes changed (CRCs then fixed). Nothing may crash or read out of bounds
 * (ASan/valgrind watch that), and whatever passes the whole receive path must be
 * the canonical encoding of what it decodes to.
 */
START_TEST(test_garbage)
{
	unsigned int valid[4] = { 0 }, i;
	uint64_t s = 0x5eed;

	for (i = 0; i < 10000; i++) {
		unsigned int shape = i % 4;
		uint8_t *f = calloc(1, BUF_LEN);	/* exact-size copy below, for ASan */
		uint8_t *g;
		size_t n = 0, k;

		ck_assert_ptr_nonnull(f);
		switch (shape) {
		case 0:
			n = rng_next(&s) % 200;
			rng_fill(&s, f, n);
			break;
		case 1:
			n = 4 + rng_next(&s) % 200;
			rng_fill(&s, f, n);
			rk__le32_store(f, RK_WIRE_MAGIC);
			break;
		case 2: {
			uint64_t r = rng_next(&s);
			uint32_t len = (uint32_t)(rng_next(&s) % 300);

			if (r & 1)	/* often an exact fixed size */
				len = (uint32_t)(r >> 8) % 2 ? 8 : 32;
			rng_fill(&s, f + 32, len);
			put_hdr(f, RK_WIRE_MAGIC, r % 16 ? RK_WIRE_VERSION : 1,
				(uint8_t)(r >> 16) % 11,
				(r >> 24) % 4 ? 0 : (uint16_t)(r >> 32) & 7, (uint32_t)r,
				r % 8 ? len : len + 1, r, crc32c_ref(0, f + 32, len));
			n = 32 + len + (r >> 40) % 3;
			break;
		}
		case 3: {
			unsigned int type = (unsigned int)(rng_next(&s) % RK_FRAME__COUNT);
			unsigned int m = 1 + (unsigned int)(rng_next(&s) % 3);
			size_t plen;

			n = sample_frame(type, f);
			plen = n - 32;
			while (m--) {
				uint64_t r = rng_next(&s);
				size_t at = (size_t)(r >> 8) % plen;

				/* small values and boundary bytes hit the checks */
				f[32 + at] = (uint8_t)(r >> 32);
				if (!(r & 3))
					f[32 + at] &= 3;
			}
			if (rng_next(&s) % 4 == 0) {
				k = rng_next(&s) % 9;
				if (rng_next(&s) & 1 && k < plen) {
					plen -= k;
				} else {
					rng_fill(&s, f + n, k);
					plen += k;
				}
				rk__le32_store(f + 12, (uint32_t)plen);
			}
			rk__le32_store(f + 24, crc32c_ref(0, f + 32, plen));
			fix_hdr_crc(f);
			n = 32 + plen;
			break;
		}
		}
		g = malloc(n ? n : 1);
		ck_assert_ptr_nonnull(g);
		memcpy(g, f, n);
		free(f);
		for (k = 0; k <= n; k += n / 5 + 1)	/* prefixes too */
			(void)decode_frame(g, k, RK_WIRE_MAX_PAYLOAD);
		if (decode_frame(g, n, RK_WIRE_MAX_PAYLOAD) == 0) {
			struct rk_wire_hdr h;
			int64_t len = rk_wire_decode_hdr(g, n, RK_WIRE_MAX_PAYLOAD, &h);

			ck_assert_int_ge(len, RK_WIRE_HDR_LEN);
			ck_assert_uint_le((size_t)len, n);
			assert_canonical(g, (size_t)len);
			valid[shape]++;
		}
		/* payload decoders must survive any bytes on their own as well */
		for (k = 0; k < RK_FRAME__COUNT; k++)
			(void)rk_wire_decode_payload((unsigned int)k, n > 32 ? g + 32 : g,
						     n > 32 ? n - 32 : n);
		free(g);
	}
	ck_assert_uint_eq(valid[0], 0);
	ck_assert_uint_eq(valid[1], 0);
	ck_assert_uint_gt(valid[2], 20);	/* the deep paths were reached */
	ck_assert_uint_gt(valid[3], 100);
}
END_TEST

static Suite *wire_errors_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc;

	tc = rk_tcase(s, "errors", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_bad_frame, 0, (int)ARRAY_SIZE(bad_frames));
	tcase_add_loop_test(tc, test_payload_alone, 0, RK_FRAME__COUNT);
	tcase_add_test(tc, test_encode_hdr_errors);
	tcase_add_test(tc, test_encode_payload_errors);

	tc = rk_tcase(s, "garbage", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_garbage);
	return s;
}

int main(void)
{
	return rk_check_run(wire_errors_suite());
}
