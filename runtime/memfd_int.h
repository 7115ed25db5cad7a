/* SPDX-License-Identifier: MIT */
/*
 * Sealed memfds, as the same-host links (shm_ring.c) and the epoch regions other
 * processes map (epoch.c) use them: the flags older libc headers lack, and the
 * one check a mapper makes of a descriptor a peer handed it. After runtime_int.h
 * (RK_EFIELD). Never installed.
 */
#ifndef RK_MEMFD_INT_H
#define RK_MEMFD_INT_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC		0x0001u
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING	0x0002u
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS		1033
#define F_GET_SEALS		1034
#define F_SEAL_SEAL		0x0001
#define F_SEAL_SHRINK		0x0002
#define F_SEAL_GROW		0x0004
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE	0x0010
#endif

/*
 * @fd is a memfd carrying at least the seals @want, exactly @len bytes long
 * (a sealed size: no SIGBUS on a mapping of it later). Return: 0, -errno (not
 * a memfd: F_GET_SEALS's error), -EPERM (a seal missing) or -RK_EFIELD (the
 * size). Any thread.
 */
static inline int rk__memfd_check(int fd, size_t len, unsigned int want)
{
	struct stat st;
	int seals;

	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return -errno;
	if (((unsigned int)seals & want) != want)
		return -EPERM;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size != len)
		return -RK_EFIELD;
	return 0;
}

#endif /* RK_MEMFD_INT_H */
