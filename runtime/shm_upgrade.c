/* SPDX-License-Identifier: MIT */
/*
 * The shm class: same-host links. It takes over the links of the tcp class
 * (rk__transport_class.over): a tcp:// link whose two ends share a host moves
 * its frames to shared-memory rings after its (authenticated) handshake, and
 * an shm:// link must. The TCP socket stays open as the side channel that
 * tells of the peer's end, as a verbs link's does, and a pidfd tells of it
 * sooner. The class decides whether a link may move (the same-host test,
 * NCCL's canConnect()), runs the upgrade over the link's own frames and, at
 * each side's switch frame, swaps the shm transport in (shm.c).
 *
 * The upgrade (WIRE.md, "Same-host links"), on a link that is up:
 *   follower -> SHM_REQUEST: its pid, uid, boot id, network and pid namespace
 *   leader   -> SHM_OFFER: a random unix socket name (in a directory only this
 *     user may enter, see private_dir()), or a refusal
 *   follower connects; the leader hands the segment's descriptors (a sealed
 *     memfd, two eventfds, the broadcast ring's memfd) over SCM_RIGHTS only to
 *     the process whose kernel-checked credentials are the requester's
 *   follower -> SHM_ANSWER: mapped (its last frame on TCP), or why not
 *   leader   -> SHM_SWITCH: its last frame on TCP, and where the follower starts
 *     reading the broadcast ring
 * Frames sent before a side's switch frame go on TCP, frames after it on the
 * ring, and the receiver reads the ring only after the switch frame, so the
 * link's one byte stream (and its sequence numbers) runs on unbroken. Any
 * failure before the switch leaves the link on TCP (one log line, a counter).
 * The leader only ever maps memory it created itself.
 *
 * Lifetime: up() makes each link's state (l->cpriv); until the swap this
 * class's link_shutdown() and link_free() end and free it, from the swap the
 * shm transport's ops do.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime_int.h"
#include "sock_int.h"
#include "shm_int.h"
#include "rk_sched.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD		77	/* Linux 6.5 */
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open		434
#endif
#define SHM_ACCEPT_BUDGET 16		/* connections one wake of the listener takes */
#define SHM_FD_MSG	"RKSHMFD1"

/* ---- logging and counting why a link stays on TCP --------------------------------- */

enum why {
	WHY_POLICY,		/* RK_SHM=off, or not authenticated: not a failure */
	WHY_REMOTE,		/* another host or namespace */
	WHY_FALLBACK,		/* same host, but a feature or the setup failed */
};

static enum why why_of(int err)
{
	if (err == -RK_ENOSHM)
		return WHY_REMOTE;
	if (err == -EOPNOTSUPP || err == -EPERM)
		return WHY_POLICY;
	return WHY_FALLBACK;
}

static void stays_tcp(struct rk__shm_link *s, int err, const char *what)
{
	struct rk__shm *c = s->ctx;
	struct rk_link *l = s->l;

	s->settled = true;
	switch (why_of(err)) {
	case WHY_REMOTE:
		c->remote++;
		rk__dbg(c->rank, "link to rank %d stays on TCP: %s", l->peer, what);
		break;
	case WHY_POLICY:
		rk__dbg(c->rank, "link to rank %d stays on TCP: %s (%s)", l->peer, what,
			rk_strerror(err));
		break;
	case WHY_FALLBACK:
		c->fallback++;
		if (!c->warned) {
			c->warned = true;
			rk__warn(c->rank, "same-host link to rank %d stays on TCP: %s: %s "
				 "(shm_fallback counts the others)", l->peer, what,
				 rk_strerror(err));
		} else {
			rk__dbg(c->rank, "link to rank %d stays on TCP: %s: %s", l->peer, what,
				rk_strerror(err));
		}
		break;
	}
	/* shm:// (RK_SHM=on): a link that cannot move must not run on TCP */
	if (c->required)
		rk__link_fail_msg(l, -RK_ENOSHM, true,
				  "RK_ENOSHM: this world requires shared-memory links (shm://, "
				  "RK_SHM=on)");
}

/* ---- identity ------------------------------------------------------------------ */

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static int read_boot_id(uint8_t out[RK_WIRE_BOOT_ID_LEN])
{
	char buf[64];
	ssize_t n;
	int fd, i = 0, hi = -1, v;
	char *p;

	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	for (p = buf; *p && i < RK_WIRE_BOOT_ID_LEN; p++) {
		if (*p == '-')
			continue;
		v = hexval(*p);
		if (v < 0)
			break;
		if (hi < 0) {
			hi = v;
		} else {
			out[i++] = (uint8_t)(hi << 4 | v);
			hi = -1;
		}
	}
	return i == RK_WIRE_BOOT_ID_LEN ? 0 : -EIO;
}

static int ns_id(const char *path, uint64_t *out)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return -errno;
	*out = (uint64_t)st.st_ino;
	return 0;
}

static void identity(struct rk_wire_shm_request *me)
{
	int ret;

	memset(me, 0, sizeof(*me));
	me->pid = (uint32_t)getpid();
	me->uid = (uint32_t)geteuid();
	ret = read_boot_id(me->boot_id);
	if (!ret)
		ret = ns_id("/proc/self/ns/net", &me->net_ns);
	if (!ret)
		ret = ns_id("/proc/self/ns/pid", &me->pid_ns);
	me->status = ret;
}

/* One kernel, one network namespace (the abstract socket), one pid namespace
 * (the pids and pidfds), one user. */
static bool same_host(const struct rk_wire_shm_request *a, const struct rk_wire_shm_request *b)
{
	return !memcmp(a->boot_id, b->boot_id, sizeof(a->boot_id)) && a->net_ns == b->net_ns &&
	       a->pid_ns == b->pid_ns && a->uid == b->uid;
}

/* May this link move? Only on an authenticated link, or in a loopback world. */
static int policy(const struct rk__shm *c, const struct rk_link *l)
{
	if (c->mode == RK_SHM_OFF)
		return -EOPNOTSUPP;
	if (!l->authed && !c->loopback)
		return -EPERM;
	return 0;
}

/* ---- per-link state ---------------------------------------------------------- */

static void sock_done(struct rk__op *op, int res, unsigned int flags);
static void follower_request(struct rk__shm_link *s);

/* The link is up: its state, and the follower's request. Without memory for
 * the state the link fails (-ENOMEM). */
static void shm_up(void *ctx, struct rk_link *l)
{
	struct rk__shm_link *s = calloc(1, sizeof(*s));

	if (!s) {
		rk__link_fail(l, -ENOMEM, false);
		return;
	}
	s->l = l;
	s->ctx = ctx;
	s->leader = l->accepted;
	s->memfd = s->efd = s->peer_efd = s->usock = s->pidfd = -1;
	s->slot = -1;
	s->sock_op.fn = sock_done;
	/* the broadcast ring never carries the upgrade; a lane carries USER frames only */
	s->bstream.types = ~(uint32_t)RK__FRAME_CONTROL;
	s->bstream.err_type = -RK_EHANDSHAKE;
	s->bstream.err_record = -RK_ESHMRING;
	s->lstream.types = RK__FRAME_BIT(RK_FRAME_USER);
	s->lstream.err_type = -RK_ESHMRING;
	s->lstream.err_record = -RK_ESHMRING;
	l->cpriv = s;
	if (!s->leader)
		follower_request(s);	/* the leader answers requests */
}

/* The leader stops ringing the words, a follower's consumers are released and
 * its view dropped (its bell page is the view's own mapping, so a consumer
 * still holding it touches no freed memory). */
void rk__shm_epoch_detach(struct rk__shm_link *s)
{
	if (s->ep_rung) {
		rk__epoch_bell_del(s->ctx->ep, u32_at(s->base, LS_EP_BELL));
		s->ep_rung = false;
	}
	if (s->epv) {
		rk_epoch_close(s->epv);
		rk_epoch_release(s->epv);
		s->epv = NULL;
	}
}

/* Give back what the setup made (the link stays on TCP). Ops in flight end by
 * their cancellation; their descriptors close when the state is freed. */
static void setup_undo(struct rk__shm_link *s)
{
	rk__shm_op_cancel(s, &s->sock_op, s->sock_armed, &s->sock_cancel);
	rk__shm_op_cancel(s, &s->pid_op, s->pid_armed, &s->pid_cancel);
	if (!s->sock_armed)
		usock_close(s);
	if (!s->pid_armed)
		fd_close(&s->pidfd);
	rk__shm_epoch_detach(s);
	lane_shut(s);
	seg_unmap(&s->base, s->len);
	seg_unmap(&s->bbase, s->blen);
	fd_close(&s->memfd);
	if (!s->efd_armed)
		fd_close(&s->efd);
	fd_close(&s->peer_efd);
	s->bcast = false;
	s->st = SS_IDLE;
}

static int send_frame(struct rk_link *l, unsigned int type, const uint8_t *p, int n)
{
	return n < 0 ? n : rk__link_send_raw(l, type, 0, p, (uint32_t)n);
}

static int send_answer(struct rk_link *l, int status)
{
	struct rk_wire_shm_answer a = { .status = status };
	uint8_t b[RK_WIRE_SHM_ANSWER_LEN];

	return send_frame(l, RK_FRAME_SHM_ANSWER, b, rk_wire_encode_shm_answer(b, sizeof(b), &a));
}

/* A pidfd for the process at the other end of the unix socket @sock: from the
 * socket (kernel-checked), else pidfd_open() on its pid while that process
 * still holds its end (so the pid cannot have been reused). -errno otherwise:
 * the link then relies on the side channel and heartbeats alone. */
static int peer_pidfd(int sock, pid_t pid)
{
	struct pollfd p = { .fd = sock, .events = POLLRDHUP };
	socklen_t len = sizeof(int);
	int fd = -1;

	if (!(rk__shm_features() & RK__SHM_F_PIDFD))
		return -ENOSYS;
	if (!getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) && fd >= 0)
		return fd;
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -errno;
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
		close(fd);
		return -ESRCH;
	}
	return fd;
}

/*
 * Where the offer's socket lives. An abstract name has no permissions: every
 * local user sees it in /proc/net/unix and may connect, and filling its queue
 * would push the link back to TCP. A socket in a directory that only this user
 * may search is out of other users' reach, so both ends look for one: the
 * user's runtime directory, else /tmp/rankrt-UID (made 0700 if absent); it
 * must be a directory of ours that no one else may enter, or it is not used.
 * Both ends are the same user on the same host (same_host()), so they find
 * the same one; the abstract name remains where neither is usable.
 */
static int private_dir(char *buf, size_t cap)
{
	uid_t uid = geteuid();
	struct stat st;
	int i;

	for (i = 0; i < 2; i++) {
		snprintf(buf, cap, i ? "/tmp/rankrt-%u" : "/run/user/%u", (unsigned int)uid);
		if (i && mkdir(buf, 0700) < 0 && errno != EEXIST)
			continue;
		if (!lstat(buf, &st) && S_ISDIR(st.st_mode) && st.st_uid == uid &&
		    !(st.st_mode & 077))
			return 0;
	}
	buf[0] = '\0';
	return -EACCES;
}

/* The socket's address: in directory @dir, or the abstract name if @dir is "". */
static socklen_t sock_name(const uint8_t name[RK_WIRE_SHM_NAME_LEN], const char *dir,
			   struct sockaddr_un *sa)
{
	static const char hex[] = "0123456789abcdef";
	char tail[sizeof("rankrt-shm-") + 2 * RK_WIRE_SHM_NAME_LEN];
	size_t i, n;

	n = (size_t)snprintf(tail, sizeof(tail), "rankrt-shm-");
	for (i = 0; i < RK_WIRE_SHM_NAME_LEN; i++) {
		tail[n++] = hex[name[i] >> 4];
		tail[n++] = hex[name[i] & 15];
	}
	tail[n] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (dir[0]) {
		n = (size_t)snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/%s", dir, tail);
		return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	}
	memcpy(sa->sun_path + 1, tail, n);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static void arm_pid_watch(struct rk__shm_link *s)
{
	if (s->pidfd >= 0 && rk__shm_arm_poll(s, &s->pid_op, &s->pid_armed, s->pidfd))
		rk__dbg(s->l->rank, "shm: cannot watch rank %d's pidfd", s->l->peer);
}

/* ---- leader ------------------------------------------------------------------ */

/* A follower asks: create its segment, listen for it, offer. 0 or -errno. */
static int offer_setup(struct rk_link *l, struct rk__shm *c, const struct rk_wire_shm_request *r,
		       struct rk_wire_shm_offer *o)
{
	struct rk__shm_link *s = l->cpriv;
	struct sockaddr_un sa;
	char dir[64];
	socklen_t salen;
	int ret;

	if (rk__shm_begin(s))
		return -ENOMEM;
	s->ring_size = SHM_RING_SIZE;
	s->len = seg_len(SHM_RING_SIZE);
	ret = rk__shm_seg_create("rankrt-link", s->len, SHM_MAGIC_LINK, SHM_RING_SIZE, false,
				 &s->memfd, &s->base);
	if (ret)
		goto fail;
	rk__shm_seg_attach(s);
	s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->peer_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->efd < 0 || s->peer_efd < 0) {
		ret = -errno;
		goto fail;
	}
	rk__shm_bcast_create(c);
	s->usock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->usock < 0) {
		ret = -errno;
		goto fail;
	}
	ret = rk__auth_random(o->name, sizeof(o->name));
	if (ret)
		goto fail;
	if (!private_dir(dir, sizeof(dir))) {
		salen = sock_name(o->name, dir, &sa);
		if (!bind(s->usock, (struct sockaddr *)&sa, salen))
			snprintf(s->sock_path, sizeof(s->sock_path), "%s", sa.sun_path);
	}
	if (!s->sock_path[0]) {
		rk__dbg(l->rank, "shm: no private directory for rank %d's segment socket: "
			"an abstract name", l->peer);
		salen = sock_name(o->name, "", &sa);
		if (bind(s->usock, (struct sockaddr *)&sa, salen) < 0) {
			ret = -errno;
			goto fail;
		}
	}
	if (listen(s->usock, 4) < 0) {
		ret = -errno;
		goto fail;
	}
	ret = rk__shm_arm_poll(s, &s->sock_op, &s->sock_armed, s->usock);
	if (ret)
		goto fail;
	s->want_pid = (pid_t)r->pid;
	s->want_uid = (uid_t)r->uid;
	s->st = SS_OFFERED;
	o->status = 0;
	o->pid = c->me.pid;
	o->ring_size = SHM_RING_SIZE;
	o->bcast_size = c->bbase ? SHM_BCAST_SIZE : 0;
	return 0;
fail:
	setup_undo(s);
	return ret;
}

static int leader_request(struct rk_link *l, struct rk__shm *c, const uint8_t *payload,
			  uint32_t len)
{
	struct rk__shm_link *s = l->cpriv;
	struct rk_wire_shm_request r;
	struct rk_wire_shm_offer o;
	uint8_t b[RK_WIRE_SHM_OFFER_LEN];
	const char *what;
	int ret, status;

	ret = rk_wire_decode_shm_request(payload, len, &r);
	if (ret)
		return ret;
	if (s->begun)
		return -RK_EHANDSHAKE;	/* one request per link */
	memset(&o, 0, sizeof(o));
	if (r.status) {
		/* it waits for no answer: it stays on TCP, as the leader's link does */
		stays_tcp(s, r.status, "the follower does not ask");
		return 0;
	}
	if ((status = policy(c, l))) {
		what = "not offered";
	} else if (c->me.status) {
		status = c->me.status;
		what = "cannot read this host's identity";
	} else if (!same_host(&c->me, &r)) {
		status = -RK_ENOSHM;
		what = "another host or namespace";
	} else {
		what = "setting up the segment";
		status = offer_setup(l, c, &r, &o);
	}
	if (status) {
		memset(&o, 0, sizeof(o));
		o.status = status;
	}
	ret = send_frame(l, RK_FRAME_SHM_OFFER, b, rk_wire_encode_shm_offer(b, sizeof(b), &o));
	if (ret)
		return ret;
	if (status)
		stays_tcp(s, status, what);
	return 0;
}

/* The fds go to the connection whose credentials are the requester's. */
static int send_fds(struct rk__shm_link *s, int fd)
{
	int fds[5] = { s->memfd, s->peer_efd, s->efd, s->ctx->bfd, s->ctx->epfd };
	size_t nfd = s->ctx->bbase ? (s->ctx->ep ? 5 : 4) : 3;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(fds))];
	} u;
	struct iovec iov = { .iov_base = (void *)SHM_FD_MSG, .iov_len = 8 };
	struct msghdr m = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = CMSG_SPACE(nfd * sizeof(int)),
	};
	struct cmsghdr *cm;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(nfd * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, nfd * sizeof(int));
	if (sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) != 8)
		return errno ? -errno : -EIO;
	return 0;
}

/* Connections on the offer's socket: only the requester's process gets the
 * descriptors; anyone else is closed at once (no state, no reading). */
static void leader_accept(struct rk__shm_link *s)
{
	struct rk_link *l = s->l;
	struct ucred cr = { .pid = 0 };
	socklen_t len;
	int i, fd, ret;

	for (i = 0; i < SHM_ACCEPT_BUDGET && s->st == SS_OFFERED; i++) {
		fd = accept4(s->usock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			break;
		len = sizeof(cr);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
		    cr.pid != s->want_pid || cr.uid != s->want_uid) {
			rk__dbg(l->rank, "shm: refused a connection for rank %d's segment from "
				"pid %d", l->peer, (int)cr.pid);
			close(fd);
			continue;
		}
		ret = peer_pidfd(fd, cr.pid);
		if (ret >= 0)
			s->pidfd = ret;
		ret = send_fds(s, fd);
		close(fd);
		usock_close(s);	/* one follower, once */
		if (ret) {
			rk__dbg(l->rank, "shm: sending rank %d its segment: %s", l->peer,
				rk_strerror(ret));
			return;		/* it sees the socket close and answers why */
		}
		s->st = SS_SENT;
		return;
	}
	if (s->st == SS_OFFERED && rk__shm_arm_poll(s, &s->sock_op, &s->sock_armed, s->usock))
		usock_close(s);	/* the follower's wait ends with the socket */
}

static int leader_answer(struct rk_link *l, struct rk__shm *c, const uint8_t *payload,
			 uint32_t len)
{
	struct rk__shm_link *s = l->cpriv;
	struct rk_wire_shm_answer a;
	struct rk_wire_shm_switch sw;
	uint8_t b[RK_WIRE_SHM_SWITCH_LEN];
	int ret, i;

	ret = rk_wire_decode_shm_answer(payload, len, &a);
	if (ret)
		return ret;
	if (s->st != SS_SENT && s->st != SS_OFFERED)
		return -RK_EHANDSHAKE;
	if (a.status) {
		setup_undo(s);
		stays_tcp(s, a.status, "the follower could not map its segment");
		return 0;
	}
	if (s->st != SS_SENT)
		return -RK_EHANDSHAKE;	/* "mapped" what it was never sent */
	/* its frames come on the ring from the next one on; this was the last on TCP */
	s->rx_ring = true;
	rk__link_rx_switch(l, &rk__shm_ops);
	sw.slot = RK_WIRE_SHM_NO_SLOT;
	if (c->bbase) {
		for (i = 0; i < RK_WIRE_SHM_SLOTS; i++) {
			if (!c->readers[i]) {
				c->readers[i] = s;
				s->slot = i;
				s->marks = true;	/* its chunks carry marks from now on */
				sw.slot = (uint32_t)i;
				break;
			}
		}
	}
	sw.bcast_pos = c->bbase ? c->btx.pos : 0;
	sw.bcast_seq = c->bseq;
	atomic_store_explicit(s->bhead, sw.bcast_pos, memory_order_relaxed);
	ret = send_frame(l, RK_FRAME_SHM_SWITCH, b, rk_wire_encode_shm_switch(b, sizeof(b), &sw));
	if (ret)
		return ret;
	rk__shm_swap(s);	/* SWITCH is our last frame on TCP */
	s->st = SS_ACTIVE;
	s->settled = true;
	c->links++;
	arm_pid_watch(s);
	/* a broadcast reader that was sent the epoch region may sleep on its
	 * bell now (one that did not map it never counts itself in
	 * LS_EP_WAITERS); a follower without a slot drops its view, as there
	 * are as many bells as slots */
	if (c->ep && s->slot >= 0) {
		ret = rk__epoch_bell_add(c->ep, u32_at(s->base, LS_EP_WAITERS),
					 u32_at(s->base, LS_EP_BELL));
		if (!ret)
			s->ep_rung = true;
		else	/* a bell per slot (the _Static_assert): a broken invariant */
			rk__warn(l->rank, "link to rank %d: epoch bell: %s", l->peer,
				 rk_strerror(ret));
	}
	rk__info(l->rank, "link to rank %d: on shared memory (%s wake-ups, %s)", l->peer,
		 s->use_futex ? "futex" : "eventfd",
		 s->slot >= 0 ? "broadcast ring" : "broadcasts on the link");
	return 0;
}

/* ---- follower ---------------------------------------------------------------- */

/* The follower asks (the leader answers requests): SHM_REQUEST. */
static void follower_request(struct rk__shm_link *s)
{
	struct rk__shm *c = s->ctx;
	struct rk_link *l = s->l;
	struct rk_wire_shm_request r;
	uint8_t b[RK_WIRE_SHM_REQUEST_LEN];
	int ret;

	r = c->me;
	if (!r.status)
		r.status = policy(c, l);
	if (!r.status && rk__shm_begin(s))
		r.status = -ENOMEM;
	ret = send_frame(l, RK_FRAME_SHM_REQUEST, b, rk_wire_encode_shm_request(b, sizeof(b), &r));
	if (ret) {
		rk__link_fail(l, ret, false);
		return;
	}
	if (r.status) {
		stays_tcp(s, r.status, "not asked for");
		return;
	}
	s->st = SS_REQUESTED;
}

static int follower_offer(struct rk_link *l, struct rk__shm *c, const uint8_t *payload,
			  uint32_t len)
{
	struct rk__shm_link *s = l->cpriv;
	struct rk_wire_shm_offer o;
	struct sockaddr_un sa;
	struct ucred cr;
	char dir[64];
	socklen_t salen, crlen = sizeof(cr);
	int ret;

	ret = rk_wire_decode_shm_offer(payload, len, &o);
	if (ret)
		return ret;
	if (s->st != SS_REQUESTED)
		return -RK_EHANDSHAKE;
	if (o.status) {
		s->st = SS_IDLE;
		stays_tcp(s, o.status, "the leader declined");
		return 0;
	}
	s->ring_size = o.ring_size;
	s->bcast_size = o.bcast_size;
	s->want_pid = (pid_t)o.pid;
	s->usock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->usock < 0) {
		ret = -errno;
		goto fail;
	}
	/* where the leader could, its socket is in our private directory */
	ret = -ENOENT;
	if (!private_dir(dir, sizeof(dir))) {
		salen = sock_name(o.name, dir, &sa);
		ret = connect(s->usock, (struct sockaddr *)&sa, salen) < 0 ? -errno : 0;
	}
	if (ret == -ENOENT) {
		salen = sock_name(o.name, "", &sa);
		ret = connect(s->usock, (struct sockaddr *)&sa, salen) < 0 ? -errno : 0;
	}
	if (ret)
		goto fail;
	/* the socket is the leader's: its process, our user */
	if (getsockopt(s->usock, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0) {
		ret = -errno;
		goto fail;
	}
	if (cr.pid != (pid_t)o.pid || cr.uid != geteuid()) {
		ret = -EACCES;
		goto fail;
	}
	ret = peer_pidfd(s->usock, cr.pid);
	if (ret >= 0)
		s->pidfd = ret;
	ret = rk__shm_arm_poll(s, &s->sock_op, &s->sock_armed, s->usock);
	if (ret)
		goto fail;
	s->st = SS_FETCHING;
	return 0;
fail:
	setup_undo(s);
	ret = ret ? ret : -EIO;
	stays_tcp(s, ret, "connecting to the leader's segment socket");
	return send_answer(l, ret);
}

/*
 * The leader's epoch region in memfd @fd (not taken), read-only, its bell on
 * our segment's control page through a mapping of that page which the view
 * owns. Optional: without it (RK_RESIDENT=off here, or it cannot be mapped)
 * the link moves all the same and this rank publishes its own rounds.
 */
static void epoch_map(struct rk__shm_link *s, int fd)
{
	long page = sysconf(_SC_PAGESIZE);
	uint32_t dmax;
	uint8_t *ctl;
	int ret;

	if (!s->ctx->resident)
		return;
	if (page <= 0 || (size_t)page < SHM_HDR_SIZE)
		page = SHM_HDR_SIZE;
	/* the leader's bound is ours (rk_sched_create()'s): a world of one max_frame */
	dmax = rk__epoch_desc_bound(s->ctx->max_frame);
	ctl = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0);
	if (ctl == MAP_FAILED) {
		ret = -errno;
		goto fail;
	}
	/* -RK_EFIELD: another size, another max_frame */
	ret = rk__epoch_map(fd, dmax, u32_at(ctl, LS_EP_WAITERS), u32_at(ctl, LS_EP_BELL),
			    &s->epv);
	if (ret) {
		munmap(ctl, (size_t)page);
		goto fail;
	}
	rk__epoch_own(s->epv, ctl, (size_t)page);
	return;
fail:
	s->epv = NULL;
	rk__info(s->l->rank, "shm: the leader's epoch region not mapped (%s): this rank "
		 "publishes its own rounds", rk_strerror(ret));
}

/* Receive the descriptors, check and map them. 0 or -errno. */
static int follower_fetch(struct rk__shm_link *s)
{
	int fds[8], nfd = 0, i, ret;
	size_t want = s->bcast_size ? 4 : 3;
	bool epoch = false;
	char data[16];
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(fds))];
	} u;
	struct iovec iov = { .iov_base = data, .iov_len = sizeof(data) };
	struct msghdr m = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm;
	ssize_t n;

	n = recvmsg(s->usock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		size_t k, cnt;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		cnt = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < cnt && nfd < (int)ARRAY_SIZE(fds); k++)
			memcpy(&fds[nfd++], CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
	}
	ret = 0;
	if (n == 0)
		ret = -ECONNRESET;
	else if (n != 8 || memcmp(data, SHM_FD_MSG, 8) || (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ||
		 ((size_t)nfd != want && !(s->bcast_size && (size_t)nfd == want + 1)))
		ret = -RK_EFIELD;
	else
		epoch = (size_t)nfd == want + 1;	/* the leader's round epochs too */
	if (!ret) {
		s->memfd = fds[0];
		s->efd = fds[1];
		s->peer_efd = fds[2];
		fds[0] = fds[1] = fds[2] = -1;
		s->len = seg_len(s->ring_size);
		ret = rk__shm_seg_map(s->memfd, s->len, SHM_MAGIC_LINK, s->ring_size, false,
				      &s->base);
	}
	if (!ret)
		ret = rk__shm_efd_check(s->efd);
	if (!ret)
		ret = rk__shm_efd_check(s->peer_efd);
	if (!ret && s->bcast_size) {
		s->blen = SHM_HDR_SIZE + (size_t)s->bcast_size;
		ret = rk__shm_seg_map(fds[3], s->blen, SHM_MAGIC_BCAST, s->bcast_size, true,
				      &s->bbase);
	}
	if (!ret && epoch)
		epoch_map(s, fds[4]);
	for (i = 0; i < nfd; i++)
		if (fds[i] >= 0)
			close(fds[i]);	/* the broadcast memfd: its mapping is enough */
	if (ret)
		return ret;
	rk__shm_seg_attach(s);
	if (s->bbase) {
		s->brx.data = s->bbase + SHM_HDR_SIZE;
		s->brx.size = s->bcast_size;
		s->brx.tail = u64_at(s->bbase, BS_TAIL);
		s->brx.head = s->bhead;	/* our position lives in our own link segment */
	}
	return 0;
}

static void follower_fetched(struct rk__shm_link *s)
{
	struct rk_link *l = s->l;
	int ret;

	ret = follower_fetch(s);
	if (ret == -EAGAIN) {
		if (!rk__shm_arm_poll(s, &s->sock_op, &s->sock_armed, s->usock))
			return;
		ret = -EBUSY;
	}
	usock_close(s);
	if (!ret) {
		ret = send_answer(l, 0);
		if (ret) {
			rk__link_fail(l, ret, false);
			return;
		}
		rk__shm_swap(s);	/* ANSWER is our last frame on TCP */
		s->st = SS_MAPPED;
		arm_pid_watch(s);
		return;
	}
	setup_undo(s);
	stays_tcp(s, ret, "mapping the leader's segment");
	ret = send_answer(l, ret);
	if (ret)
		rk__link_fail(l, ret, false);
}

static int follower_switch(struct rk_link *l, struct rk__shm *c, const uint8_t *payload,
			   uint32_t len)
{
	struct rk__shm_link *s = l->cpriv;
	struct rk_wire_shm_switch sw;
	int ret;

	ret = rk_wire_decode_shm_switch(payload, len, &sw);
	if (ret)
		return ret;
	if (s->st != SS_MAPPED)
		return -RK_EHANDSHAKE;
	if (sw.slot != RK_WIRE_SHM_NO_SLOT && !s->bbase)
		return -RK_EFIELD;	/* a reader of a ring it was not given */
	s->bcast = sw.slot != RK_WIRE_SHM_NO_SLOT;
	s->slot = s->bcast ? (int)sw.slot : -1;
	s->brx.pos = sw.bcast_pos;
	s->last_mark = sw.bcast_pos;
	s->bstream.seq = sw.bcast_seq;
	if (s->bcast)
		atomic_store_explicit(s->bhead, sw.bcast_pos, memory_order_release);
	else
		rk__shm_epoch_detach(s);	/* no slot, no bell: the leader would not ring it */
	s->rx_ring = true;
	rk__link_rx_switch(l, &rk__shm_ops);	/* SWITCH was the leader's last frame on TCP */
	s->st = SS_ACTIVE;
	s->settled = true;
	c->links++;
	rk__info(l->rank, "link to rank %d: on shared memory (%s wake-ups, %s)", l->peer,
		 s->use_futex ? "futex" : "eventfd",
		 s->bcast ? "broadcast ring" : "broadcasts on the link");
	return 0;
}

static void sock_done(struct rk__op *op, int res, unsigned int flags)
{
	struct rk__shm_link *s = rk__container_of(op, struct rk__shm_link, sock_op);
	struct rk_link *l = s->l;

	(void)flags;
	s->sock_armed = false;
	s->sock_cancel = false;
	l->in_dispatch++;
	if (s->closing || res == -ECANCELED || l->state != RK_LINK_UP) {
		usock_close(s);
	} else if (s->leader && s->st == SS_OFFERED) {
		leader_accept(s);
	} else if (!s->leader && s->st == SS_FETCHING) {
		follower_fetched(s);
	} else {
		usock_close(s);
	}
	rk__loop_note(l->loop, RK_IDLE);
	l->in_dispatch--;
	rk__link_op_done(l);
}

/* ---- the class ------------------------------------------------------------------- */

/* Until the swap the state is the class's to end and free; from it, the
 * transport's (shm.c: its shutdown() and destroy()). */
static void shm_link_shutdown(void *ctx, struct rk_link *l)
{
	struct rk__shm_link *s = l->cpriv;

	(void)ctx;
	if (s && !s->swapped)
		rk__shm_link_shutdown(s);
}

static void shm_link_free(void *ctx, struct rk_link *l)
{
	struct rk__shm_link *s = l->cpriv;

	(void)ctx;
	if (s && !s->swapped)
		rk__shm_link_free(s);
}

static bool shm_settled(void *ctx, const struct rk_link *l)
{
	const struct rk__shm_link *s = l->cpriv;

	(void)ctx;
	return !s || s->settled;
}

static int shm_control(void *ctx, struct rk_link *l, const struct rk_wire_hdr *h,
		       const uint8_t *payload)
{
	struct rk__shm *c = ctx;

	if (!l->cpriv)
		return -RK_EHANDSHAKE;	/* its up() found no memory: the link is failing */
	switch (h->type) {
	case RK_FRAME_SHM_REQUEST:
		return l->accepted ? leader_request(l, c, payload, h->len) : -RK_EHANDSHAKE;
	case RK_FRAME_SHM_OFFER:
		return l->accepted ? -RK_EHANDSHAKE : follower_offer(l, c, payload, h->len);
	case RK_FRAME_SHM_ANSWER:
		return l->accepted ? leader_answer(l, c, payload, h->len) : -RK_EHANDSHAKE;
	case RK_FRAME_SHM_SWITCH:
		return l->accepted ? -RK_EHANDSHAKE : follower_switch(l, c, payload, h->len);
	default:
		return -RK_EHANDSHAKE;
	}
}

static void shm_stats(void *ctx, struct rk_world_stats *st)
{
	const struct rk__shm *c = ctx;

	if (!c)
		return;
	st->shm_links += c->links;
	st->shm_remote += c->remote;
	st->shm_fallback += c->fallback;
}

/* A world of this class's own scheme (shm://) requires every link to move; one
 * of tcp://, whose links it takes over, lets RK_SHM decide. */
static int shm_prepare(struct rk_loop *loop, const struct rk__addr *a, void **ctx)
{
	const struct rk_config *cfg = rk_loop_config(loop);
	struct sockaddr_storage ss;
	struct rk__shm *c;
	socklen_t len;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->loop = loop;
	c->rank = cfg->rank;
	c->mode = !strcmp(a->scheme, rk__shm_class.scheme) ? RK_SHM_ON : cfg->shm;
	c->required = c->mode == RK_SHM_ON;
	c->max_frame = cfg->max_frame;
	c->bfd = -1;
	c->epfd = -1;
	c->resident = rk__config_ctuning(cfg)->resident != RK_RESIDENT_OFF;
	c->lane = rk__config_ctuning(cfg)->lane;
	c->loopback = !rk__sock_resolve(a, cfg->rank == 0, &ss, &len) && rk__sock_loopback(&ss);
	identity(&c->me);
	if (c->mode != RK_SHM_OFF)
		(void)rk__shm_features();	/* the probe's few syscalls now, not on a link */
	*ctx = c;
	return 0;
}

static void shm_release(void *ctx)
{
	struct rk__shm *c = ctx;

	if (!c)
		return;
	seg_unmap(&c->bbase, c->blen);
	fd_close(&c->bfd);
	rk_epoch_release(c->ep);	/* a scheduler may hold its own reference */
	fd_close(&c->epfd);
	free(c->scratch);
	free(c);
}

static struct rk_epoch *shm_epoch(void *ctx)
{
	struct rk__shm *c = ctx;

	return c ? c->ep : NULL;
}

static struct rk_epoch *shm_link_epoch(void *ctx, const struct rk_link *l)
{
	const struct rk__shm_link *s = l->cpriv;

	(void)ctx;
	return s && s->st == SS_ACTIVE && !s->closing ? s->epv : NULL;
}

const struct rk__transport_class rk__shm_class = {
	.scheme = "shm",
	.over = "tcp",
	.prepare = shm_prepare,
	.release = shm_release,
	.up = shm_up,
	.control = shm_control,
	.link_shutdown = shm_link_shutdown,
	.link_free = shm_link_free,
	.settled = shm_settled,
	.broadcast = rk__shm_broadcast,
	.stats = shm_stats,
	.epoch = shm_epoch,
	.link_epoch = shm_link_epoch,
};

/* Also the symbol a static link names (rankrt.pc's Libs.private) to keep this
 * class: nothing else of it is named by a program that uses tcp:// links. */
void rk__shm_transport_register(void);
void __attribute__((constructor)) rk__shm_transport_register(void)
{
	rk__transport_register(&rk__shm_class);
}
