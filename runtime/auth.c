/* SPDX-License-Identifier: MIT */
/*
 * Handshake authentication: the HMAC-SHA256 proofs of WIRE.md ("Authentication"),
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
#include <openssl/rand.h>
#endif

/* Each label prefixes the transcript; their lengths differ, and the transcript's
 * is fixed, so no proof of one kind can ever be read as another. */
static const char *const labels[] = {
	[RK__AUTH_LEADER] = "rankrt v2 leader proof",
	[RK__AUTH_FOLLOWER] = "rankrt v2 follower proof",
	[RK__AUTH_LINK_KEY] = "rankrt v2 link key",
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
