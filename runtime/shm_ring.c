/* SPDX-License-Identifier: MIT */
/*
 * The same-host links' kernel primitives: what this kernel can do (probed
 * once per process: sealed memfds, F_SEAL_FUTURE_WRITE, pidfds, io_uring's
 * futex wait), and the segments themselves: sealed memfds that the leader
 * creates and maps read-write and a follower maps after checking their seals,
 * size and header. The rings and bells laid out in them are shm_int.h's
 * inline primitives (the data path's).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime_int.h"
#include "memfd_int.h"
#include "shm_int.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open		434
#endif

/* ---- what this kernel can do ------------------------------------------------------ */

static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;
static unsigned int g_have;
atomic_uint rk__shm_masked;	/* tests: features to pretend missing */

static void probe(void)
{
	struct io_uring_probe *p;
	int fd;

	fd = (int)syscall(SYS_memfd_create, "rankrt-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd >= 0) {
		if (!ftruncate(fd, 4096) &&
		    !fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW))
			g_have |= RK__SHM_F_MEMFD;
		if (!fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE))
			g_have |= RK__SHM_F_FUTURE_WRITE;
		close(fd);
	}
	fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (fd >= 0) {
		g_have |= RK__SHM_F_PIDFD;
		close(fd);
	}
	p = io_uring_get_probe();
	if (p) {
		if (io_uring_opcode_supported(p, SHM_OP_FUTEX_WAIT))
			g_have |= RK__SHM_F_FUTEX;
		io_uring_free_probe(p);
	}
}

unsigned int rk__shm_features(void)
{
	pthread_once(&g_probe_once, probe);
	return g_have & ~atomic_load_explicit(&rk__shm_masked, memory_order_relaxed);
}

/* ---- segments ------------------------------------------------------------------ */

/* Each segment kind has its own layout version: a peer of another link layout
 * fails rk__shm_seg_map() and the link stays on TCP. */
static uint32_t seg_version(uint32_t magic)
{
	return magic == SHM_MAGIC_LINK ? SHM_VERSION : SHM_BCAST_VERSION;
}

int rk__shm_seg_create(const char *name, size_t len, uint32_t magic, uint32_t ring,
		       bool future_write, int *fdp, uint8_t **basep)
{
	unsigned int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	uint8_t *base;
	int fd, ret;

	if (!(rk__shm_features() & RK__SHM_F_MEMFD))
		return -ENOSYS;
	fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		ret = -errno;
		goto err_close;
	}
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		goto err_close;
	}
	rk__le32_store(base + SEG_MAGIC, magic);
	rk__le32_store(base + SEG_MAGIC + 4, seg_version(magic));
	rk__le32_store(base + SEG_MAGIC + 8, ring);
	if (future_write)
		seals |= F_SEAL_FUTURE_WRITE;
	if (fcntl(fd, F_ADD_SEALS, seals) < 0) {
		ret = -errno;
		munmap(base, len);
		goto err_close;
	}
	*fdp = fd;
	*basep = base;
	return 0;
err_close:
	close(fd);
	return ret;
}

int rk__shm_seg_map(int fd, size_t len, uint32_t magic, uint32_t ring, bool ro, uint8_t **basep)
{
	unsigned int want = F_SEAL_SHRINK | F_SEAL_GROW | (ro ? F_SEAL_FUTURE_WRITE : 0);
	uint8_t *base;
	int ret;

	ret = rk__memfd_check(fd, len, want);
	if (ret)
		return ret;
	base = mmap(NULL, len, ro ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	if (rk__le32_load(base + SEG_MAGIC) != magic ||
	    rk__le32_load(base + SEG_MAGIC + 4) != seg_version(magic) ||
	    rk__le32_load(base + SEG_MAGIC + 8) != ring) {
		munmap(base, len);
		return -RK_EFIELD;
	}
	*basep = base;
	return 0;
}

int rk__shm_efd_check(int fd)
{
	char path[64], what[64];
	ssize_t n;
	int fl;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, what, sizeof(what) - 1);
	if (n < 0)
		return -errno;
	what[n] = '\0';
	if (strcmp(what, "anon_inode:[eventfd]"))
		return -RK_EFIELD;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0))
		return -errno;
	return 0;
}

void rk__shm_seg_attach(struct rk__shm_link *s)
{
	uint8_t *d = s->base + SHM_HDR_SIZE;

	if (s->leader) {
		ring_init(&s->tx, d, s->ring_size, s->base, LS_LF_TAIL, LS_LF_HEAD);
		ring_init(&s->rx, d + s->ring_size, s->ring_size, s->base, LS_FL_TAIL, LS_FL_HEAD);
		lane_ring(&s->lrx, s->base, s->ring_size);
		s->bell = u32_at(s->base, LS_L_BELL);
		s->peer_bell = u32_at(s->base, LS_F_BELL);
	} else {
		ring_init(&s->tx, d + s->ring_size, s->ring_size, s->base, LS_FL_TAIL, LS_FL_HEAD);
		ring_init(&s->rx, d, s->ring_size, s->base, LS_LF_TAIL, LS_LF_HEAD);
		s->bell = u32_at(s->base, LS_F_BELL);
		s->peer_bell = u32_at(s->base, LS_L_BELL);
	}
	s->bhead = u64_at(s->base, LS_B_HEAD);
}
