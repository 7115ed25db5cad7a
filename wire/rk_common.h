/* SPDX-License-Identifier: MIT */
/*
 * rankrt: common definitions shared by every module.
 *
 * Return convention (every fallible call in rankrt): >= 0 on success (often a
 * count), a negative error code on failure. A negative code is either -errno
 * (a system error, e.g. -ENOMEM, -ECONNRESET) or -RK_E* (a rankrt error named
 * below). rk_strerror() names both. Nothing in rankrt returns -1 and sets errno.
 */
#ifndef RK_COMMON_H
#define RK_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(RK_BUILDING_LIBRARY)
#define RK_EXPORT __attribute__((visibility("default")))
#else
#define RK_EXPORT
#endif

/* The version a program is compiled against; rk_version() gives the one it runs with. The
 * major is the ABI (librankrt.so.<major>), the minor grows with API (docs/STABILITY.md). */
#define RK_VERSION_MAJOR 2
#define RK_VERSION_MINOR 0

/* What an event handler reports to the wait policy. RK_BUSY restarts the busy
 * window (real work arrived: a ROUND, a USER frame, a completion); RK_IDLE does
 * not (housekeeping: a heartbeat, a timer that found nothing to do). */
enum rk_activity {
	RK_IDLE = 0,
	RK_BUSY = 1,
};

/*
 * rankrt's own error codes. They start above every errno value so that one int
 * carries either kind; functions return them negated (-RK_EMAGIC).
 */
enum rk_errcode {
	RK_E_BASE = 4096,
	RK_EMAGIC = RK_E_BASE,	/* frame does not start with the rankrt magic */
	RK_EVERSION,		/* wire version this build does not speak */
	RK_ETYPE,		/* unknown frame type */
	RK_EFLAGS,		/* flag bits not defined for this frame type */
	RK_ERESERVED,		/* a reserved field is not zero */
	RK_ETOOBIG,		/* payload longer than the type or the link allows */
	RK_EHDRCRC,		/* header integrity check failed */
	RK_EPAYCRC,		/* payload integrity check failed */
	RK_ESHORT,		/* payload shorter than its type's fixed part or its counts */
	RK_ETRAILING,		/* payload longer than its typed content */
	RK_EFIELD,		/* a field's value is out of range */
	RK_EHANDSHAKE,		/* frame not allowed in this handshake state */
	RK_EPROTOVER,		/* HELLO/WELCOME protocol version mismatch */
	RK_EWORLD,		/* HELLO/WELCOME world size mismatch */
	RK_ESESSION,		/* HELLO/WELCOME session id mismatch */
	RK_ERANK,		/* rank out of range, duplicate, or not the expected peer */
	RK_ESEQ,		/* sequence number out of order */
	RK_ESLOWPEER,		/* peer stopped reading: send bound exceeded */
	RK_EPEERDEAD,		/* no frame from the peer within the peer timeout */
	RK_EPEERERR,		/* peer sent an ERROR frame */
	RK_EPEERBYE,		/* peer closed the link with BYE */
	RK_ECONFIG,		/* malformed configuration value */
	RK_ETIMEOUT,		/* an operation did not finish in its time bound */
	RK_ESTOPPED,		/* the loop or world is stopping */
	RK_EAUTH,		/* handshake authentication failed: bad or missing proof */
	RK_ENOSECRET,		/* no secret where one is required (non-loopback world) */
	RK_ENOGPU,		/* a GPU library (CUDA driver, runtime, NCCL) is not loadable */
	RK_ENOSHM,		/* a shared-memory link is required but not possible here */
	RK_ESHMRING,		/* a shared-memory ring's index or record is out of bounds */
	RK_EPEEREXIT,		/* the peer's process exited (seen through its pidfd) */
	RK_EFRAMEAUTH,		/* a frame's authentication tag did not verify */
	RK_EROUNDTIMEOUT,	/* a rank did not finish a round within the round bound */
	RK_ENOVERBS,		/* the verbs library (libibverbs) is not loadable */
	RK_E__END,
};

/**
 * rk_strerror() - name an error code.
 * @err: a negative (or positive) errno or RK_E* code.
 *
 * Return: a static string, never NULL; "RK_EMAGIC: bad frame magic" for rankrt
 * codes, strerror()-style text for errno values. Thread-safe.
 */
RK_EXPORT const char *rk_strerror(int err);

/**
 * rk_errname() - the symbolic name of an error code ("RK_EMAGIC", "ECONNRESET").
 * Return: a static string, never NULL. Thread-safe.
 */
RK_EXPORT const char *rk_errname(int err);

/**
 * rk_version() - the version of the librankrt this process runs with (the
 * RK_VERSION_* macros are the one it was compiled against).
 * @major, @minor: if not NULL, receive the numbers, as in RK_VERSION_MAJOR/MINOR.
 *
 * Return: the version string, "2.0.0" (configure's PACKAGE_VERSION: major.minor.patch),
 * static, never NULL. Never fails. Any thread; may be called from any callback.
 */
RK_EXPORT const char *rk_version(int *major, int *minor);

#ifdef __cplusplus
}
#endif
#endif /* RK_COMMON_H */
