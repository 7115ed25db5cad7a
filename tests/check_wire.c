/* SPDX-License-Identifier: MIT */
/*
 * check_wire: wire/ against WIRE.md: CRC32C, the golden vectors of the frame
 * header and every typed payload (written by hand from WIRE.md, their CRCs by
 * an independent bit-at-a-time implementation, never produced by the encoder
 * they check), the little-endian helpers, and the names of errors and frames.
 * Round trips are check_wire_codec's, malformed frames check_wire_errors'
 */
#include "wire_test.h"

/* ---- CRC32C ---------------------------------------------------------------- */

START_TEST(test_crc32c_known)
{
	uint8_t buf[32];
	size_t i;

	ck_assert_uint_eq(rk_wire_crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(rk__crc32c_sw(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(crc32c_ref(0, (const uint8_t *)"123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(rk_wire_crc32c(0, NULL, 0), 0);
	ck_assert_uint_eq(rk_wire_crc32c(0x12345678, NULL, 0), 0x12345678);
	/* RFC 3720 (iSCSI) B.4 vectors. */
	memset(buf, 0, sizeof(buf));
	ck_assert_uint_eq(rk_wire_crc32c(0, buf, 32), 0x8a9136aau);
	memset(buf, 0xff, sizeof(buf));
	ck_assert_uint_eq(rk_wire_crc32c(0, buf, 32), 0x62a8ab43u);
	for (i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	ck_assert_uint_eq(rk_wire_crc32c(0, buf, 32), 0x46dd794eu);
	for (i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	ck_assert_uint_eq(rk_wire_crc32c(0, buf, 32), 0x113fdb5cu);
	ck_assert_uint_eq(rk__crc32c_sw(0, buf, 32), 0x113fdb5cu);
}
END_TEST

START_TEST(test_crc32c_chaining)
{
	uint8_t buf[1000];
	uint64_t s = 1;
	uint32_t whole;
	size_t k;

	rng_fill(&s, buf, sizeof(buf));
	whole = rk_wire_crc32c(0, buf, sizeof(buf));
	for (k = 0; k <= sizeof(buf); k++) {
		ck_assert_uint_eq(rk_wire_crc32c(rk_wire_crc32c(0, buf, k), buf + k,
						 sizeof(buf) - k), whole);
		ck_assert_uint_eq(rk__crc32c_sw(rk__crc32c_sw(0, buf, k), buf + k,
						sizeof(buf) - k), whole);
	}
}
END_TEST

/* Every path (hardware lanes, hardware tail, slicing-by-8, bytewise) against the
 * bit-at-a-time reference, at every small length, odd alignments and lengths that
 * exercise the 3 x 8192 and 3 x 256 lane blocks with all kinds of remainders. */
START_TEST(test_crc32c_paths)
{
	static const size_t big[] = { 767, 768, 769, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1,
				      3 * 8192 + 768 + 13, 2 * 3 * 8192 + 5 * 768 + 7, 100000 };
	const size_t max = 100000 + 8;
	uint8_t *buf = malloc(max);
	bool hw = rk__crc32c_have_hw();
	uint64_t s = 2;
	size_t n, off, i;

	ck_assert_ptr_nonnull(buf);
	rng_fill(&s, buf, max);
	for (n = 0; n <= 1100; n++) {
		for (off = 0; off < 8; off += 3) {
			uint32_t seed = (uint32_t)rng_next(&s);
			uint32_t ref = crc32c_ref(seed, buf + off, n);

			ck_assert_uint_eq(rk__crc32c_sw(seed, buf + off, n), ref);
			ck_assert_uint_eq(rk_wire_crc32c(seed, buf + off, n), ref);
			if (hw)
				ck_assert_uint_eq(rk__crc32c_hw(seed, buf + off, n), ref);
		}
	}
	for (off = 0; off < 1000; off++) {	/* the header's own, unrolled */
		uint32_t ref = crc32c_ref(0, buf + off, RK__CRC32C_HDR);

		ck_assert_uint_eq(rk__crc32c_hdr(buf + off), ref);
	}
	for (i = 0; i < ARRAY_SIZE(big); i++) {
		for (off = 0; off < 8; off += 7) {
			uint32_t ref = crc32c_ref(0, buf + off, big[i]);

			ck_assert_uint_eq(rk__crc32c_sw(0, buf + off, big[i]), ref);
			ck_assert_uint_eq(rk_wire_crc32c(0, buf + off, big[i]), ref);
			if (hw)
				ck_assert_uint_eq(rk__crc32c_hw(0, buf + off, big[i]), ref);
		}
	}
	free(buf);
}
END_TEST

/* ---- golden vectors -------------------------------------------------------- */

START_TEST(test_golden_heartbeat)
{
	const struct rk_wire_heartbeat hb = { .time_ns = 0x0102030405060708ull };
	struct rk_wire_heartbeat got;
	struct rk_wire_hdr h;
	uint8_t f[64];

	ck_assert_int_eq(rk_wire_encode_heartbeat(f + RK_WIRE_HDR_LEN, sizeof(f) - 32, &hb), 8);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_HEARTBEAT, RK_FRAME_F_REPLY, 1, 5,
					    f + RK_WIRE_HDR_LEN, 8), RK_WIRE_HDR_LEN);
	ck_assert_mem_eq(f, golden_heartbeat, sizeof(golden_heartbeat));

	ck_assert_int_eq(rk_wire_decode_hdr(golden_heartbeat, sizeof(golden_heartbeat),
					    RK_WIRE_MAX_PAYLOAD, &h), 40);
	ck_assert_uint_eq(h.magic, RK_WIRE_MAGIC);
	ck_assert_uint_eq(h.version, 2);
	ck_assert_uint_eq(h.type, RK_FRAME_HEARTBEAT);
	ck_assert_uint_eq(h.flags, RK_FRAME_F_REPLY);
	ck_assert_uint_eq(h.src_rank, 1);
	ck_assert_uint_eq(h.len, 8);
	ck_assert_uint_eq(h.seq, 5);
	ck_assert_uint_eq(h.payload_crc, 0x26f9021cu);
	ck_assert_uint_eq(h.hdr_crc, 0x23de959cu);
	ck_assert_int_eq(rk_wire_check_payload(&h, golden_heartbeat + 32), 0);
	ck_assert_int_eq(rk_wire_decode_heartbeat(golden_heartbeat + 32, 8, &got), 0);
	ck_assert_uint_eq(got.time_ns, 0x0102030405060708ull);
}
END_TEST

START_TEST(test_golden_hello)
{
	struct rk_wire_hello in = { .proto_version = 2, .world_size = 4, .rank = 2,
				    .auth = RK_WIRE_AUTH_HMAC,
				    .session_id = 0x1122334455667788ull,
				    .caps = RK_CAP_VERBS | RK_CAP_NCCL };
	struct rk_wire_hello got;
	uint8_t out[RK_WIRE_HELLO_LEN];
	unsigned int i;

	for (i = 0; i < RK_WIRE_NONCE_LEN; i++)
		in.nonce[i] = (uint8_t)i;
	ck_assert_int_eq(rk_wire_encode_hello(out, sizeof(out), &in), RK_WIRE_HELLO_LEN);
	ck_assert_mem_eq(out, golden_hello, sizeof(golden_hello));
	ck_assert_int_eq(rk_wire_decode_hello(golden_hello, sizeof(golden_hello), &got), 0);
	ck_assert_uint_eq(got.proto_version, 2);
	ck_assert_uint_eq(got.world_size, 4);
	ck_assert_uint_eq(got.rank, 2);
	ck_assert_uint_eq(got.auth, RK_WIRE_AUTH_HMAC);
	ck_assert_uint_eq(got.session_id, 0x1122334455667788ull);
	ck_assert_uint_eq(got.caps, RK_CAP_VERBS | RK_CAP_NCCL);
	ck_assert_mem_eq(got.nonce, in.nonce, RK_WIRE_NONCE_LEN);
}
END_TEST

/* The proofs of WIRE.md's worked example, from the library's HMAC (OpenSSL). */
START_TEST(test_golden_auth)
{
	uint8_t t[RK__TRANSCRIPT_LEN], mac[RK_WIRE_MAC_LEN], f[RK_WIRE_HDR_LEN + RK_WIRE_MAC_LEN];
	const uint8_t *key = (const uint8_t *)golden_key;
	size_t klen = strlen(golden_key);

	if (!rk__auth_available()) {
		ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_LEADER, t, mac), -EOPNOTSUPP);
		return;
	}
	memcpy(t, golden_hello, RK_WIRE_HELLO_LEN);
	memcpy(t + RK_WIRE_HELLO_LEN, golden_welcome, RK_WIRE_HELLO_LEN);
	ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_LEADER, t, mac), 0);
	ck_assert_mem_eq(mac, golden_leader_proof, sizeof(mac));
	ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_FOLLOWER, t, mac), 0);
	ck_assert_mem_eq(mac, golden_follower_proof, sizeof(mac));
	ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_LINK_KEY, t, mac), 0);
	ck_assert_mem_eq(mac, golden_link_key, sizeof(mac));
	/* any bit of the transcript or the key changes the proof */
	t[RK_WIRE_HELLO_LEN + 40] ^= 1;
	ck_assert_int_eq(rk__auth_mac(key, klen, RK__AUTH_LEADER, t, mac), 0);
	ck_assert(!rk__auth_equal(mac, golden_leader_proof, sizeof(mac)));
	t[RK_WIRE_HELLO_LEN + 40] ^= 1;
	ck_assert_int_eq(rk__auth_mac(key, klen - 1, RK__AUTH_LEADER, t, mac), 0);
	ck_assert(!rk__auth_equal(mac, golden_leader_proof, sizeof(mac)));
	/* the AUTH frame: 32 bytes, no flags */
	ck_assert_int_eq(rk_wire_encode_auth(f + RK_WIRE_HDR_LEN, RK_WIRE_MAC_LEN,
					     golden_leader_proof), RK_WIRE_MAC_LEN);
	ck_assert_int_eq(rk_wire_encode_auth(f + RK_WIRE_HDR_LEN, RK_WIRE_MAC_LEN - 1,
					     golden_leader_proof), -ENOSPC);
	ck_assert_int_eq(rk_wire_encode_hdr(f, RK_FRAME_AUTH, 0, 0, 1, f + RK_WIRE_HDR_LEN,
					    RK_WIRE_MAC_LEN), RK_WIRE_HDR_LEN);
	ck_assert_int_eq(rk_wire_decode_auth(f + RK_WIRE_HDR_LEN, RK_WIRE_MAC_LEN, mac), 0);
	ck_assert_mem_eq(mac, golden_leader_proof, sizeof(mac));
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME_AUTH), "AUTH");
}
END_TEST

/* WIRE.md's frame tag example: the keys, the tag, and that the tag binds every
 * byte of the frame and its sequence number. */
START_TEST(test_golden_tag)
{
	uint8_t t[RK__TRANSCRIPT_LEN], key[RK_WIRE_MAC_LEN], tag[RK__TAG_LEN], f[40];
	const uint8_t *k = (const uint8_t *)golden_key;
	struct rk__tagger s = { 0 };
	size_t i;

	if (!rk__auth_available()) {
		ck_assert_int_eq(rk__tagger_init(&s, golden_follower_frame_key), -EOPNOTSUPP);
		return;
	}
	memcpy(t, golden_hello, RK_WIRE_HELLO_LEN);
	memcpy(t + RK_WIRE_HELLO_LEN, golden_welcome, RK_WIRE_HELLO_LEN);
	ck_assert_int_eq(rk__auth_mac(k, strlen(golden_key), RK__AUTH_TAG_LEADER, t, key), 0);
	ck_assert_mem_eq(key, golden_leader_frame_key, sizeof(key));
	ck_assert_int_eq(rk__auth_mac(k, strlen(golden_key), RK__AUTH_TAG_FOLLOWER, t, key), 0);
	ck_assert_mem_eq(key, golden_follower_frame_key, sizeof(key));
	ck_assert_int_eq(rk__tagger_init(&s, key), 0);
	ck_assert_int_eq(rk__tag_seal(&s, 5, golden_heartbeat, sizeof(golden_heartbeat), tag), 0);
	ck_assert_mem_eq(tag, golden_heartbeat_tag, sizeof(tag));
	ck_assert_int_eq(rk__tag_open(&s, 5, golden_heartbeat, sizeof(golden_heartbeat), tag), 0);
	/* another nonce: a replay or a reordering */
	ck_assert_int_eq(rk__tag_open(&s, 4, golden_heartbeat, sizeof(golden_heartbeat), tag),
			 -RK_EFRAMEAUTH);
	ck_assert_int_eq(rk__tag_open(&s, 6, golden_heartbeat, sizeof(golden_heartbeat), tag),
			 -RK_EFRAMEAUTH);
	/* any bit of the frame or of the tag */
	for (i = 0; i < 8 * sizeof(f); i++) {
		memcpy(f, golden_heartbeat, sizeof(f));
		f[i / 8] ^= (uint8_t)(1u << (i % 8));
		ck_assert_int_eq(rk__tag_open(&s, 5, f, sizeof(f), tag), -RK_EFRAMEAUTH);
	}
	for (i = 0; i < 8 * sizeof(tag); i++) {
		tag[i / 8] ^= (uint8_t)(1u << (i % 8));
		ck_assert_int_eq(rk__tag_open(&s, 5, golden_heartbeat, sizeof(golden_heartbeat),
					      tag), -RK_EFRAMEAUTH);
		tag[i / 8] ^= (uint8_t)(1u << (i % 8));
	}
	/* a frame cut short */
	ck_assert_int_eq(rk__tag_open(&s, 5, golden_heartbeat, sizeof(golden_heartbeat) - 1, tag),
			 -RK_EFRAMEAUTH);
	rk__tagger_fini(&s);
	rk__tagger_fini(&s);	/* idempotent */
}
END_TEST

START_TEST(test_golden_round)
{
	struct rk_wire_stream st;
	struct rk_wire_round r;
	uint8_t out[256];
	uint32_t i;

	ck_assert_int_eq(rk_wire_round_size(2, 6), sizeof(golden_round));
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(out), 7, golden_streams, 2,
					      golden_tokens), sizeof(golden_round));
	ck_assert_mem_eq(out, golden_round, sizeof(golden_round));
	/* exactly enough room, then one byte short */
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(golden_round), 7, golden_streams, 2,
					      golden_tokens), sizeof(golden_round));
	ck_assert_int_eq(rk_wire_encode_round(out, sizeof(golden_round) - 1, 7, golden_streams,
					      2, golden_tokens), -ENOSPC);

	ck_assert_int_eq(rk_wire_decode_round(golden_round, sizeof(golden_round), &r), 0);
	ck_assert_uint_eq(r.round_id, 7);
	ck_assert_uint_eq(r.n_streams, 2);
	ck_assert_uint_eq(r.n_tok_total, 6);
	ck_assert_uint_eq(r.n_draft_total, 2);
	ck_assert_ptr_eq(r.streams, golden_round + 16);
	ck_assert_ptr_eq(r.tokens, golden_round + 96);
	for (i = 0; i < 2; i++) {
		rk_wire_round_stream(&r, i, &st);
		ck_assert_uint_eq(st.stream_id, golden_streams[i].stream_id);
		ck_assert_uint_eq(st.position, golden_streams[i].position);
		ck_assert_uint_eq(st.n_tokens, golden_streams[i].n_tokens);
		ck_assert_uint_eq(st.n_draft, golden_streams[i].n_draft);
		ck_assert_uint_eq(st.top_k, golden_streams[i].top_k);
		ck_assert(st.temperature == golden_streams[i].temperature);
		ck_assert(st.top_p == golden_streams[i].top_p);
		ck_assert_uint_eq(st.seed, golden_streams[i].seed);
	}
	for (i = 0; i < 6; i++)
		ck_assert_uint_eq(rk_wire_round_token(&r, i), golden_tokens[i]);
}
END_TEST

START_TEST(test_golden_error)
{
	struct rk_wire_error e;
	uint8_t out[RK_WIRE_ERRMSG_MAX + 16];

	ck_assert_int_eq(rk_wire_encode_error(out, sizeof(out), -ECONNRESET, 3, "peer gone"),
			 sizeof(golden_error));
	ck_assert_mem_eq(out, golden_error, sizeof(golden_error));
	ck_assert_int_eq(rk_wire_decode_error(golden_error, sizeof(golden_error), &e), 0);
	ck_assert_int_eq(e.code, -ECONNRESET);
	ck_assert_uint_eq(e.rank, 3);
	ck_assert_uint_eq(e.msg_len, 9);
	ck_assert_ptr_eq(e.msg, (const char *)golden_error + 16);
	ck_assert_mem_eq(e.msg, "peer gone", 9);
}
END_TEST

/* The same-host frames, byte for byte, both ways. */
START_TEST(test_golden_shm)
{
	struct rk_wire_shm_request rq = { .status = 0, .pid = 0x1234, .uid = 1000,
					  .net_ns = 0xf0000098, .pid_ns = 0xeffffffc }, grq;
	struct rk_wire_shm_offer of = { .status = 0, .pid = 0x1200, .ring_size = 1u << 20,
					.bcast_size = 1u << 20 }, gof;
	struct rk_wire_shm_answer an = { .status = -ENOSYS }, gan;
	struct rk_wire_shm_switch sw = { .bcast_pos = 4096, .bcast_seq = 7, .slot = 2 }, gsw;
	uint8_t out[64];
	int i;

	for (i = 0; i < RK_WIRE_BOOT_ID_LEN; i++)
		rq.boot_id[i] = (uint8_t)(0xa0 + i);
	for (i = 0; i < RK_WIRE_SHM_NAME_LEN; i++)
		of.name[i] = (uint8_t)(0x10 + i);

	ck_assert_int_eq(rk_wire_encode_shm_request(out, sizeof(out), &rq), RK_WIRE_SHM_REQUEST_LEN);
	ck_assert_mem_eq(out, golden_shm_request, sizeof(golden_shm_request));
	ck_assert_int_eq(rk_wire_encode_shm_request(out, RK_WIRE_SHM_REQUEST_LEN - 1, &rq), -ENOSPC);
	ck_assert_int_eq(rk_wire_decode_shm_request(golden_shm_request, sizeof(golden_shm_request),
						    &grq), 0);
	ck_assert(grq.status == 0 && grq.pid == 0x1234 && grq.uid == 1000 &&
		  grq.net_ns == 0xf0000098 && grq.pid_ns == 0xeffffffc &&
		  !memcmp(grq.boot_id, rq.boot_id, sizeof(rq.boot_id)));

	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), RK_WIRE_SHM_OFFER_LEN);
	ck_assert_mem_eq(out, golden_shm_offer, sizeof(golden_shm_offer));
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, RK_WIRE_SHM_OFFER_LEN - 1, &of), -ENOSPC);
	ck_assert_int_eq(rk_wire_decode_shm_offer(golden_shm_offer, sizeof(golden_shm_offer), &gof),
			 0);
	ck_assert(gof.status == 0 && gof.pid == 0x1200 && gof.ring_size == 1u << 20 &&
		  gof.bcast_size == 1u << 20 && !memcmp(gof.name, of.name, sizeof(of.name)));

	ck_assert_int_eq(rk_wire_encode_shm_answer(out, sizeof(out), &an), RK_WIRE_SHM_ANSWER_LEN);
	ck_assert_mem_eq(out, golden_shm_answer, sizeof(golden_shm_answer));
	ck_assert_int_eq(rk_wire_decode_shm_answer(golden_shm_answer, sizeof(golden_shm_answer),
						   &gan), 0);
	ck_assert_int_eq(gan.status, -ENOSYS);

	ck_assert_int_eq(rk_wire_encode_shm_switch(out, sizeof(out), &sw), RK_WIRE_SHM_SWITCH_LEN);
	ck_assert_mem_eq(out, golden_shm_switch, sizeof(golden_shm_switch));
	ck_assert_int_eq(rk_wire_decode_shm_switch(golden_shm_switch, sizeof(golden_shm_switch),
						   &gsw), 0);
	ck_assert(gsw.bcast_pos == 4096 && gsw.bcast_seq == 7 && gsw.slot == 2);

	/* the encoders refuse what the decoders refuse */
	rq.status = 1;
	ck_assert_int_eq(rk_wire_encode_shm_request(out, sizeof(out), &rq), -RK_EFIELD);
	of.ring_size = 3u << 20;
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), -RK_EFIELD);
	of.ring_size = 1u << 20;
	of.bcast_size = 2048;
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), -RK_EFIELD);
	of.bcast_size = 0;	/* no broadcast ring */
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), RK_WIRE_SHM_OFFER_LEN);
	of.status = -RK_ENOSHM;	/* a refusal names nothing else */
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), -RK_EFIELD);
	memset(&of, 0, sizeof(of));
	of.status = -RK_ENOSHM;
	ck_assert_int_eq(rk_wire_encode_shm_offer(out, sizeof(out), &of), RK_WIRE_SHM_OFFER_LEN);
	an.status = 5;
	ck_assert_int_eq(rk_wire_encode_shm_answer(out, sizeof(out), &an), -RK_EFIELD);
	sw.slot = RK_WIRE_SHM_SLOTS;
	ck_assert_int_eq(rk_wire_encode_shm_switch(out, sizeof(out), &sw), -RK_EFIELD);
	sw.slot = RK_WIRE_SHM_NO_SLOT;
	ck_assert_int_eq(rk_wire_encode_shm_switch(out, sizeof(out), &sw), RK_WIRE_SHM_SWITCH_LEN);
	sw.bcast_pos = 4097;
	ck_assert_int_eq(rk_wire_encode_shm_switch(out, sizeof(out), &sw), -RK_EFIELD);
}
END_TEST

/* ---- names --------------------------------------------------------------------- */

START_TEST(test_errnames)
{
	static const struct {
		int e;
		const char *name;
	} errnos[] = {
		{ EAGAIN, "EAGAIN" }, { ENOMEM, "ENOMEM" }, { EINVAL, "EINVAL" },
		{ ECONNRESET, "ECONNRESET" }, { ECONNREFUSED, "ECONNREFUSED" },
		{ EPIPE, "EPIPE" }, { ETIMEDOUT, "ETIMEDOUT" }, { ENOSPC, "ENOSPC" },
		{ EOPNOTSUPP, "EOPNOTSUPP" }, { EBUSY, "EBUSY" }, { EPROTO, "EPROTO" },
		{ EBADMSG, "EBADMSG" }, { EIO, "EIO" }, { ENOENT, "ENOENT" }, { EINTR, "EINTR" },
		{ EALREADY, "EALREADY" }, { ENOTCONN, "ENOTCONN" },
		{ EHOSTUNREACH, "EHOSTUNREACH" }, { ENETUNREACH, "ENETUNREACH" },
		{ EADDRINUSE, "EADDRINUSE" }, { ENODEV, "ENODEV" }, { ECANCELED, "ECANCELED" },
		{ ENOBUFS, "ENOBUFS" }, { EMSGSIZE, "EMSGSIZE" }, { ETIME, "ETIME" },
		{ EPERM, "EPERM" }, { EACCES, "EACCES" }, { EEXIST, "EEXIST" },
		{ E2BIG, "E2BIG" }, { ERANGE, "ERANGE" }, { ENOSYS, "ENOSYS" },
	};
	static const int odd[] = { 0, 1000, 4095, RK_E__END, RK_E__END + 1, 100000,
				   INT_MAX, INT_MIN, -INT_MAX };
	int a, b;
	size_t i;

	for (a = RK_E_BASE; a < RK_E__END; a++) {
		const char *s = rk_strerror(-a), *name = rk_errname(-a);

		ck_assert_ptr_nonnull(s);
		ck_assert_ptr_nonnull(name);
		ck_assert_str_eq(s, rk_strerror(a));
		ck_assert_str_eq(name, rk_errname(a));
		ck_assert_int_eq(strncmp(name, "RK_E", 4), 0);
		/* "RK_EMAGIC: bad frame magic" */
		ck_assert_int_eq(strncmp(s, name, strlen(name)), 0);
		ck_assert_int_eq(strncmp(s + strlen(name), ": ", 2), 0);
		ck_assert_uint_gt(strlen(s), strlen(name) + 4);
		for (b = RK_E_BASE; b < a; b++) {
			ck_assert_str_ne(s, rk_strerror(-b));
			ck_assert_str_ne(name, rk_errname(-b));
		}
	}
	ck_assert_str_eq(rk_errname(-RK_EMAGIC), "RK_EMAGIC");
	ck_assert_str_eq(rk_errname(-RK_ESTOPPED), "RK_ESTOPPED");
	ck_assert_str_eq(rk_strerror(-RK_EMAGIC), "RK_EMAGIC: bad frame magic");

	for (i = 0; i < ARRAY_SIZE(errnos); i++) {
		ck_assert_str_eq(rk_errname(-errnos[i].e), errnos[i].name);
		ck_assert_str_eq(rk_errname(errnos[i].e), errnos[i].name);
		ck_assert_str_eq(rk_strerror(-errnos[i].e), strerror(errnos[i].e));
	}
	ck_assert_str_eq(rk_errname(-EWOULDBLOCK), "EAGAIN");
	ck_assert_ptr_nonnull(rk_errname(-ENOTSOCK));	/* not in our table */
	ck_assert_str_ne(rk_strerror(-ENOTSOCK), "");

	for (i = 0; i < ARRAY_SIZE(odd); i++) {
		const char *s = rk_strerror(odd[i]), *name = rk_errname(odd[i]);

		ck_assert_ptr_nonnull(s);
		ck_assert_ptr_nonnull(name);
		ck_assert_uint_gt(strlen(s), 0);
		ck_assert_uint_gt(strlen(name), 0);
	}
	ck_assert_str_eq(rk_errname(0), "OK");
	ck_assert_str_ne(rk_errname(-RK_E__END), rk_errname(-RK_ESTOPPED));
}
END_TEST

START_TEST(test_frame_names)
{
	unsigned int a, b;

	for (a = 0; a < RK_FRAME__COUNT; a++) {
		ck_assert_ptr_nonnull(rk_wire_frame_name(a));
		ck_assert_str_ne(rk_wire_frame_name(a), "UNKNOWN");
		for (b = 0; b < a; b++)
			ck_assert_str_ne(rk_wire_frame_name(a), rk_wire_frame_name(b));
	}
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME_HEARTBEAT), "HEARTBEAT");
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME_ROUND_DONE), "ROUND_DONE");
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME_ROUND_WATCH), "ROUND_WATCH");
	ck_assert_str_eq(rk_wire_frame_name(RK_FRAME__COUNT), "UNKNOWN");
	ck_assert_str_eq(rk_wire_frame_name(UINT_MAX), "UNKNOWN");
}
END_TEST

/* The LE helpers are byte-exact whatever the host order. */
START_TEST(test_le_helpers)
{
	uint8_t b[8];

	rk__le64_store(b, 0x0807060504030201ull);
	ck_assert_mem_eq(b, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	ck_assert_uint_eq(rk__le64_load(b), 0x0807060504030201ull);
	ck_assert_uint_eq(rk__le32_load(b + 1), 0x05040302u);
	ck_assert_uint_eq(rk__le16_load(b + 3), 0x0504u);
	rk__le32_store(b, 0xdeadbeefu);
	ck_assert_mem_eq(b, "\xef\xbe\xad\xde", 4);
	rk__le16_store(b, 0xcafe);
	ck_assert_mem_eq(b, "\xfe\xca", 2);
	rk__lef32_store(b, 1.0f);
	ck_assert_mem_eq(b, "\x00\x00\x80\x3f", 4);
	ck_assert(rk__lef32_load(b) == 1.0f);
}
END_TEST

static Suite *wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc;

	tc = rk_tcase(s, "crc32c", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_crc32c_known);
	tcase_add_test(tc, test_crc32c_chaining);
	tcase_add_test(tc, test_crc32c_paths);
	tcase_add_test(tc, test_le_helpers);

	tc = rk_tcase(s, "golden", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_golden_heartbeat);
	tcase_add_test(tc, test_golden_hello);
	tcase_add_test(tc, test_golden_auth);
	tcase_add_test(tc, test_golden_tag);
	tcase_add_test(tc, test_golden_round);
	tcase_add_test(tc, test_golden_error);
	tcase_add_test(tc, test_golden_shm);

	tc = rk_tcase(s, "names", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_errnames);
	tcase_add_test(tc, test_frame_names);
	return s;
}

int main(void)
{
	return rk_check_run(wire_suite());
}
