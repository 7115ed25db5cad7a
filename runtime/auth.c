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
#include <limits.h>
#include <string.h>
#include <sys/random.h>

#include "runtime_int.h"

#ifdef RK_HAVE_OPENSSL
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
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

#ifdef RK_HAVE_OPENSSL
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

int rk__tagger_init(struct rk__tagger *t, const uint8_t key[RK_WIRE_MAC_LEN], bool seal)
{
#ifdef RK_HAVE_OPENSSL
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();

	if (!c)
		return -ENOMEM;
	if (EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, key, NULL, seal ? 1 : 0) != 1) {
		EVP_CIPHER_CTX_free(c);
		return -EIO;
	}
	t->ctx = c;
	return 0;
#else
	(void)t, (void)key, (void)seal;
	return -EOPNOTSUPP;
#endif
}

void rk__tagger_fini(struct rk__tagger *t)
{
#ifdef RK_HAVE_OPENSSL
	EVP_CIPHER_CTX_free(t->ctx);	/* cleanses the key schedule */
#endif
	t->ctx = NULL;
}

int rk__tag_seal(struct rk__tagger *t, uint64_t seq, const uint8_t *p, size_t n,
		 uint8_t tag[RK__TAG_LEN])
{
#ifdef RK_HAVE_OPENSSL
	uint8_t iv[12], none[16];
	int len;

	tag_nonce(iv, seq);
	if (n > INT_MAX || EVP_EncryptInit_ex(t->ctx, NULL, NULL, NULL, iv) != 1 ||
	    EVP_EncryptUpdate(t->ctx, NULL, &len, p, (int)n) != 1 ||
	    EVP_EncryptFinal_ex(t->ctx, none, &len) != 1 ||
	    EVP_CIPHER_CTX_ctrl(t->ctx, EVP_CTRL_AEAD_GET_TAG, RK__TAG_LEN, tag) != 1)
		return -EIO;
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
	uint8_t iv[12], none[16];
	int len;

	tag_nonce(iv, seq);
	if (n > INT_MAX || EVP_DecryptInit_ex(t->ctx, NULL, NULL, NULL, iv) != 1 ||
	    EVP_CIPHER_CTX_ctrl(t->ctx, EVP_CTRL_AEAD_SET_TAG, RK__TAG_LEN, (void *)tag) != 1 ||
	    EVP_DecryptUpdate(t->ctx, NULL, &len, p, (int)n) != 1)
		return -RK_EFRAMEAUTH;
	/* the final step compares the tags, in constant time */
	return EVP_DecryptFinal_ex(t->ctx, none, &len) == 1 ? 0 : -RK_EFRAMEAUTH;
#else
	(void)t, (void)seq, (void)p, (void)n, (void)tag;
	return -EOPNOTSUPP;
#endif
}
