/* SPDX-License-Identifier: MIT */
/*
 * Handshake authentication: the HMAC-SHA256 proofs of WIRE.md ("Authentication"),
 * the AES-256-GCM tags of the frames after it ("Frame tags"),
 * nonces, constant-time comparison and key wiping, all through OpenSSL's
 * libcrypto (no hand-written crypto). Built without OpenSSL, the proofs are
 * unavailable (-EOPNOTSUPP) and rk_world_create() refuses a secret, so a
 * world either authenticates with a vetted HMAC or says that it cannot.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "runtime_int.h"

#ifdef RK_HAVE_OPENSSL
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/modes.h>
#include <openssl/rand.h>
#endif

/* Each label prefixes the transcript; their lengths differ, and the transcript's
 * is fixed, so no proof of one kind can ever be read as another. */
static const char *const labels[] = {
	[RK__AUTH_LEADER] = "rankrt v2 leader proof",
	[RK__AUTH_FOLLOWER] = "rankrt v2 follower proof",
	[RK__AUTH_LINK_KEY] = "rankrt v2 link key",
	[RK__AUTH_TAG_LEADER] = "rankrt v2 leader frame key",
	[RK__AUTH_TAG_FOLLOWER] = "rankrt v2 follower frame key",
};
_Static_assert(ARRAY_SIZE(labels) == RK__AUTH__COUNT, "every MAC needs a label");

bool rk__auth_available(void)
{
#ifdef RK_HAVE_OPENSSL
	return true;
#else
	return false;
#endif
}

int rk__auth_mac(const uint8_t *key, size_t keylen, enum rk__auth_label which,
		 const uint8_t transcript[RK__TRANSCRIPT_LEN], uint8_t out[RK_WIRE_MAC_LEN])
{
#ifdef RK_HAVE_OPENSSL
	uint8_t msg[32 + RK__TRANSCRIPT_LEN];
	size_t n = strlen(labels[which]);
	unsigned int len = 0;
	int ret = 0;

	memcpy(msg, labels[which], n);
	memcpy(msg + n, transcript, RK__TRANSCRIPT_LEN);
	if (!HMAC(EVP_sha256(), key, (int)keylen, msg, n + RK__TRANSCRIPT_LEN, out, &len) ||
	    len != RK_WIRE_MAC_LEN)
		ret = -EIO;
	OPENSSL_cleanse(msg, sizeof(msg));
	return ret;
#else
	(void)key, (void)keylen, (void)which, (void)transcript, (void)out;
	return -EOPNOTSUPP;
#endif
}

bool rk__auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
#ifdef RK_HAVE_OPENSSL
	return CRYPTO_memcmp(a, b, n) == 0;
#else
	uint8_t d = 0;
	size_t i;

	for (i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d == 0;
#endif
}

int rk__auth_random(void *buf, size_t n)
{
#ifdef RK_HAVE_OPENSSL
	return RAND_bytes(buf, (int)n) == 1 ? 0 : -EIO;
#else
	uint8_t *p = buf;
	ssize_t r;

	while (n) {
		r = getrandom(p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		p += r;
		n -= (size_t)r;
	}
	return 0;
#endif
}

void rk__secure_zero(void *p, size_t n)
{
#ifdef RK_HAVE_OPENSSL
	OPENSSL_cleanse(p, n);
#else
	explicit_bzero(p, n);
#endif
}

/* ---- frame tags ---------------------------------------------------------------------- */

/*
 * GCM over the AES-256 block of an EVP context in ECB mode: libcrypto's own
 * GCM (modes.h) with its carry-less-multiply GHASH, and AES-NI through EVP.
 * A frame's tag needs one AES block and GHASH over the frame; EVP's AEAD
 * interface would also rebuild its parameters at each call (twice the time).
 */
#ifdef RK_HAVE_OPENSSL
static void tag_block(const unsigned char in[16], unsigned char out[16], const void *key)
{
	int len;

	/* an initialised ECB context takes a whole block: no failure to report
	 * (one would only make a tag that does not verify: the link fails) */
	EVP_EncryptUpdate((EVP_CIPHER_CTX *)key, out, &len, in, 16);
}

/* The 96-bit GCM nonce: the sequence number, little-endian, then zeros. Each key
 * serves one direction of one link, whose sequence never repeats. */
static void tag_nonce(uint8_t iv[12], uint64_t seq)
{
	int i;

	for (i = 0; i < 8; i++)
		iv[i] = (uint8_t)(seq >> (8 * i));
	memset(iv + 8, 0, 4);
}
#endif

int rk__tagger_init(struct rk__tagger *t, const uint8_t key[RK_WIRE_MAC_LEN])
{
#ifdef RK_HAVE_OPENSSL
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();

	if (!c)
		return -ENOMEM;
	if (EVP_EncryptInit_ex(c, EVP_aes_256_ecb(), NULL, key, NULL) != 1 ||
	    EVP_CIPHER_CTX_set_padding(c, 0) != 1) {
		EVP_CIPHER_CTX_free(c);
		return -EIO;
	}
	t->gcm = CRYPTO_gcm128_new(c, tag_block);
	if (!t->gcm) {
		EVP_CIPHER_CTX_free(c);
		return -ENOMEM;
	}
	t->ctx = c;
	return 0;
#else
	(void)t, (void)key;
	return -EOPNOTSUPP;
#endif
}

void rk__tagger_fini(struct rk__tagger *t)
{
#ifdef RK_HAVE_OPENSSL
	if (t->gcm)
		CRYPTO_gcm128_release(t->gcm);	/* cleanses H and the state */
	EVP_CIPHER_CTX_free(t->ctx);		/* ...and the key schedule */
#endif
	t->gcm = NULL;
	t->ctx = NULL;
}

int rk__tag_seal(struct rk__tagger *t, uint64_t seq, const uint8_t *p, size_t n,
		 uint8_t tag[RK__TAG_LEN])
{
#ifdef RK_HAVE_OPENSSL
	uint8_t iv[12];

	tag_nonce(iv, seq);
	CRYPTO_gcm128_setiv(t->gcm, iv, sizeof(iv));
	if (CRYPTO_gcm128_aad(t->gcm, p, n))
		return -EIO;	/* past GCM's bound on associated data */
	CRYPTO_gcm128_tag(t->gcm, tag, RK__TAG_LEN);
	return 0;
#else
	(void)t, (void)seq, (void)p, (void)n, (void)tag;
	return -EOPNOTSUPP;
#endif
}

int rk__tag_open(struct rk__tagger *t, uint64_t seq, const uint8_t *p, size_t n,
		 const uint8_t tag[RK__TAG_LEN])
{
#ifdef RK_HAVE_OPENSSL
	uint8_t iv[12];

	tag_nonce(iv, seq);
	CRYPTO_gcm128_setiv(t->gcm, iv, sizeof(iv));
	if (CRYPTO_gcm128_aad(t->gcm, p, n))
		return -RK_EFRAMEAUTH;
	/* compares in constant time */
	return CRYPTO_gcm128_finish(t->gcm, tag, RK__TAG_LEN) ? -RK_EFRAMEAUTH : 0;
#else
	(void)t, (void)seq, (void)p, (void)n, (void)tag;
	return -EOPNOTSUPP;
#endif
}
