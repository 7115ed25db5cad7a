/* SPDX-License-Identifier: MIT */
/*
 * Names for rankrt error codes and errno values.
 *
 * Every string returned is static and never written, so both functions are
 * thread-safe and the result may be kept forever. That rules out strerror()
 * (may use a shared buffer) and strerror_r() (needs the caller's buffer); glibc's
 * strerrordesc_np()/strerrorname_np() (2.32+) return static strings and are used
 * where they exist, behind a table that holds the errno values rankrt itself uses.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* strerrordesc_np(), strerrorname_np() */
#endif
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "rk_common.h"
#include "wire_int.h"

struct err_def {
	const char *name;
	const char *text;
};

static const struct err_def rk_errs[] = {
#define E(code, desc) [code - RK_E_BASE] = { #code, #code ": " desc }
	E(RK_EMAGIC, "bad frame magic"),
	E(RK_EVERSION, "unsupported wire version"),
	E(RK_ETYPE, "unknown frame type"),
	E(RK_EFLAGS, "flag bits not allowed for the frame type"),
	E(RK_ERESERVED, "reserved field not zero"),
	E(RK_ETOOBIG, "frame too big"),
	E(RK_EHDRCRC, "frame header CRC mismatch"),
	E(RK_EPAYCRC, "frame payload CRC mismatch"),
	E(RK_ESHORT, "payload too short"),
	E(RK_ETRAILING, "trailing bytes after payload"),
	E(RK_EFIELD, "field value out of range"),
	E(RK_EHANDSHAKE, "frame not allowed in handshake state"),
	E(RK_EPROTOVER, "protocol version mismatch"),
	E(RK_EWORLD, "world size mismatch"),
	E(RK_ESESSION, "session id mismatch"),
	E(RK_ERANK, "bad or unexpected rank"),
	E(RK_ESEQ, "frame sequence out of order"),
	E(RK_ESLOWPEER, "peer not reading: send bound exceeded"),
	E(RK_EPEERDEAD, "peer silent past its timeout"),
	E(RK_EPEERERR, "peer reported an error"),
	E(RK_EPEERBYE, "peer closed the link"),
	E(RK_ECONFIG, "bad configuration value"),
	E(RK_ETIMEOUT, "operation timed out"),
	E(RK_ESTOPPED, "stopping"),
	E(RK_EAUTH, "authentication failed"),
	E(RK_ENOSECRET, "no shared secret configured"),
	E(RK_ENOGPU, "GPU library not available"),
	E(RK_ENOSHM, "no shared-memory link possible"),
	E(RK_ESHMRING, "shared-memory ring corrupt"),
	E(RK_EPEEREXIT, "peer process exited"),
	E(RK_EFRAMEAUTH, "frame authentication tag did not verify"),
	E(RK_EROUNDTIMEOUT, "a rank did not finish a round in time"),
	E(RK_ENOVERBS, "verbs library not available"),
#undef E
};
_Static_assert(ARRAY_SIZE(rk_errs) == RK_E__END - RK_E_BASE, "every RK_E* code needs a text");

/* errno names rankrt returns or passes through; the rest come from libc if it can. */
static const char *const errno_names[] = {
#define N(e) [e] = #e
	N(EPERM),	N(ENOENT),	N(EINTR),	N(EIO),		N(E2BIG),
	N(EAGAIN),	N(ENOMEM),	N(EACCES),	N(EBUSY),	N(EEXIST),
	N(ENODEV),	N(EINVAL),	N(ENOSPC),	N(EPIPE),	N(ERANGE),
	N(ENOSYS),	N(ETIME),	N(EPROTO),	N(EBADMSG),	N(EMSGSIZE),
	N(EOPNOTSUPP),	N(EADDRINUSE),	N(ENETUNREACH),	N(ECONNRESET),	N(ENOBUFS),
	N(ENOTCONN),	N(ETIMEDOUT),	N(ECONNREFUSED), N(EHOSTUNREACH), N(EALREADY),
	N(ECANCELED),
#undef N
};

/* |err| without overflow on INT_MIN (which is then simply unknown). */
static unsigned int err_abs(int err)
{
	return err < 0 ? 0u - (unsigned int)err : (unsigned int)err;
}

static const struct err_def *rk_err_def(unsigned int e)
{
	if (e >= RK_E_BASE && e < RK_E__END)
		return &rk_errs[e - RK_E_BASE];
	return NULL;
}

const char *rk_strerror(int err)
{
	unsigned int e = err_abs(err);
	const struct err_def *d = rk_err_def(e);

	if (d)
		return d->text;
	if (e == 0)
		return "success";
	if (e >= RK_E_BASE)
		return "unknown rankrt error";
#ifdef __GLIBC__
	{
		const char *s = strerrordesc_np((int)e);

		if (s)
			return s;
	}
#endif
	return "unknown system error";
}

const char *rk_errname(int err)
{
	unsigned int e = err_abs(err);
	const struct err_def *d = rk_err_def(e);

	if (d)
		return d->name;
	if (e == 0)
		return "OK";
	if (e >= RK_E_BASE)
		return "RK_EUNKNOWN";
	if (e < ARRAY_SIZE(errno_names) && errno_names[e])
		return errno_names[e];
#ifdef __GLIBC__
	{
		const char *s = strerrorname_np((int)e);

		if (s)
			return s;
	}
#endif
	return "EUNKNOWN";
}
