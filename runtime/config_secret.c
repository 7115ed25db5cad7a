// SPDX-License-Identifier: MIT
/*
 * The job's secret in a config: set from memory, or read from a file
 * (RK_SECRET_FILE) as ssh reads a private key. Its bytes are never printed
 * nor named in a message, and copies that go are wiped.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime_int.h"
#include "config_int.h"

int rk_config_set_secret(struct rk_config *cfg, const void *key, size_t len)
{
	if (len && (len < RK_SECRET_MIN || len > RK_SECRET_MAX || !key))
		return -RK_ECONFIG;
	rk__secure_zero(cfg->secret, sizeof(cfg->secret));
	if (len)
		memcpy(cfg->secret, key, len);
	cfg->secret_len = (uint32_t)len;
	return 0;
}

/*
 * Read the secret like ssh reads a private key: a regular file that only its
 * owner may read or write, opened once and checked on the open descriptor (no
 * window between the check and the read). Its bytes are the key, less the
 * line ending an editor or "openssl rand -hex 32 > file" leaves. Errors name
 * the variable and the path, never a byte of the content.
 */
/*
 * A secret handed down as an inherited descriptor (rk-launch's memfd:
 * /proc/self/fd/N or /dev/fd/N): once read, it is set close-on-exec, so no
 * program the rank runs inherits the key. The descriptor stays open (the
 * configuration may be read again); any other path is left alone.
 */
static void secret_fd_cloexec(const char *path)
{
	const char *d = !strncmp(path, "/proc/self/fd/", 14) ? path + 14 :
			!strncmp(path, "/dev/fd/", 8) ? path + 8 : NULL;
	char *end;
	long n;
	int fl;

	if (!d || !(*d >= '0' && *d <= '9'))
		return;
	errno = 0;
	n = strtol(d, &end, 10);
	if (errno || *end || n < 0 || n > INT32_MAX)
		return;
	fl = fcntl((int)n, F_GETFD);
	if (fl >= 0 && !(fl & FD_CLOEXEC))
		(void)fcntl((int)n, F_SETFD, fl | FD_CLOEXEC);
}

int rk_config_load_secret(struct rk_config *cfg, const char *path, char *err, size_t errlen)
{
	uint8_t buf[RK_SECRET_MAX + 3];
	size_t len = 0;
	struct stat st;
	ssize_t n;
	int fd, ret = -RK_ECONFIG;

	if (!path || !*path) {
		rk__seterr(err, errlen, "RK_SECRET_FILE='': not a file name");
		return -RK_ECONFIG;
	}
	/* O_NONBLOCK: a FIFO (or a device) must not hold the rank in open() until a
	 * writer comes; it is refused as not a regular file below */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rk__seterr(err, errlen, "RK_SECRET_FILE='%.200s': cannot open it: %s", path,
			   rk_strerror(-errno));
		return -RK_ECONFIG;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rk__seterr(err, errlen, "RK_SECRET_FILE='%.200s': not a regular file", path);
		goto out;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		rk__seterr(err, errlen,
			   "RK_SECRET_FILE='%.200s': mode %04o lets group or others read or write "
			   "it: chmod 600 it", path, (unsigned int)(st.st_mode & 07777));
		goto out;
	}
	while (len < sizeof(buf)) {
		n = read(fd, buf + len, sizeof(buf) - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rk__seterr(err, errlen, "RK_SECRET_FILE='%.200s': cannot read it: %s", path,
				   rk_strerror(-errno));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	if (len > RK_SECRET_MAX) {
		rk__seterr(err, errlen, "RK_SECRET_FILE='%.200s': longer than %d bytes", path,
			   RK_SECRET_MAX);
		goto out;
	}
	if (len < RK_SECRET_MIN) {
		rk__seterr(err, errlen,
			   "RK_SECRET_FILE='%.200s': holds %zu bytes, a secret needs at least %d "
			   "(make one with: openssl rand -hex 32)", path, len, RK_SECRET_MIN);
		goto out;
	}
	ret = rk_config_set_secret(cfg, buf, len);
	if (!ret)
		secret_fd_cloexec(path);
out:
	rk__secure_zero(buf, sizeof(buf));
	close(fd);
	return ret;
}
