/* SPDX-License-Identifier: MIT */
/*
 * rk-launch: start one rank of a rankrt program per host and supervise the job.
 *
 *   rk-launch --hosts node1,node2 -- rk-pingpong --count 2000
 *
 * Rank r runs on the r-th host: local hosts by fork/exec, remote ones over
 * ssh. Each rank gets RK_RANK, RK_WORLD_SIZE, RK_LEADER, RK_SESSION and, in
 * RK_SECRET_FILE, a fresh random secret for this job; its output comes back
 * through pipes, one "[rN] " prefix per line. The first rank
 * that fails ends the job: the others get SIGTERM, then SIGKILL after a grace
 * period. With --netns every rank runs in its own network namespace on this
 * machine, all of them joined by veth pairs to a bridge in one more namespace.
 *
 * The launcher is not a rank: it is one thread around poll(2), with SIGINT,
 * SIGTERM, SIGHUP and SIGCHLD read from a signalfd (no signal handlers).
 *
 * No orphan rule: every child is its own process group leader (the launcher
 * signals the group) and has PR_SET_PDEATHSIG = SIGKILL, so a launcher killed
 * with SIGKILL takes its ranks along. A remote rank is wrapped in a shell that
 * watches the ssh channel's stdin, a pipe the launcher never writes: when the
 * launcher or its ssh client dies, stdin reaches EOF and the wrapper sends
 * SIGTERM to the rank.
 *
 * No secret in any argv: ps shows every process's arguments to every user of
 * the host. A local rank inherits a sealed-off memfd (0600) holding the secret
 * and reads it as /proc/self/fd/N; a remote rank's wrapper reads the session
 * and the secret from the ssh channel's stdin before the liveness watch
 * starts, writes the secret to a 0600 temporary file, opens it for the rank and
 * unlinks it at once, so nothing is left on the disk even if the rank is killed.
 */
#define _GNU_SOURCE
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/capability.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"	/* PACKAGE_VERSION */
#include "clock.h"

extern char **environ;

#define PROG		"rk-launch"
#define MAX_RANKS	1024
#define MAX_NETNS_RANKS 253	      /* addresses .1 to .253 of one /24 */
#define STREAM_BUF	65536	      /* longer lines are cut, see stream_emit() */
#define LINGER_NS	1000000000ull /* wait this long for output after the last exit */
#define NETNS_DIR	"/run/netns"
#define IOV_BATCH	64

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* One of a rank's output pipes. */
struct stream {
	int fd;	      /* read end, O_NONBLOCK; -1 after EOF */
	int out;      /* where its lines go: 1 or 2 */
	bool midline; /* the last bytes written ended inside a line */
	size_t len;
	char *buf; /* STREAM_BUF bytes */
};

struct rank {
	int rank;
	const char *host; /* as given in --hosts */
	bool local;
	pid_t pid;	     /* also the process group id */
	bool running;	     /* started and not yet reaped */
	int status;	     /* waitpid() status once reaped */
	int stdin_fd;	     /* remote ranks: the write end of ssh's stdin, else -1 */
	struct stream io[2]; /* stdout, stderr */
	char prefix[16];     /* "[r12] " */
	size_t prefix_len;
	char netns[32]; /* --netns: "rkl<pid>-r<N>" */
	char addr[20];	/* --netns: "10.a.b.<N+1>" */
};

struct launch {
	/* options */
	char *hosts_arg;
	char **argv; /* PROGRAM ARGS... */
	const char *ssh;
	int port; /* 0: pick one */
	uint64_t grace_ns;
	bool netns, verbose;

	/* job */
	struct rank *ranks;
	int n;
	pid_t self;
	uint64_t session;
	char secret[72];    /* 64 hex digits and a newline; "" with RK_AUTH=off */
	int secret_fd;	    /* a memfd holding it, for local ranks; -1 when none */
	char leader[320];   /* RK_LEADER */
	sigset_t orig_mask; /* restored in every child */
	bool pipe_ignored;  /* SIGPIPE was ignored at start: keep it for the children */
	bool hup_ignored;   /* SIGHUP was ignored at start (nohup): keep ignoring it */
	int sfd;	    /* signalfd */
	int devnull;

	/* --netns */
	unsigned int net_a, net_b;
	char bridge_ns[32];
	bool bridge_made;

	/* supervision */
	int signals;	  /* SIGINT/SIGTERM/SIGHUP received */
	bool stopping;	  /* the job is being torn down */
	bool killed;	  /* SIGKILL sent to every live rank */
	uint64_t kill_at; /* when the grace period ends, if stopping */
	int exit_code;
	bool out_broken[3]; /* writes to fd 1 or 2 failed: drop further output */
};

static void vlog(const struct launch *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* --verbose messages, on stderr. */
static void vlog(const struct launch *l, const char *fmt, ...)
{
	va_list ap;

	if (!l->verbose)
		return;
	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const char *sig_name(int sig, char *buf, size_t len)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev)
		snprintf(buf, len, "SIG%s", abbrev);
	else
		snprintf(buf, len, "%d", sig);
	return buf;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [options] --hosts HOST[,HOST...] -- PROGRAM [ARGS...]\n"
		"Start one rank of PROGRAM per host (rank r on the r-th host; rank 0 is the\n"
		"leader) and supervise the job.\n\n"
		"  -H, --hosts=LIST   comma-separated hosts, one rank each (a host may repeat);\n"
		"                     localhost, 127.0.0.0/8, ::1 and this machine's name run\n"
		"                     here by fork/exec, others over ssh\n"
		"  -p, --port=P       the leader's port (default: a free port on this machine;\n"
		"                     needed when rank 0 is remote)\n"
		"      --grace=S      after the first failure, or a signal, the ranks get\n"
		"                     SIGTERM and S seconds later SIGKILL (default 5)\n"
		"      --netns        run every rank here, each in its own network namespace,\n"
		"                     the namespaces joined by a bridge (needs root)\n"
		"      --ssh=PROG     ssh client for remote hosts (default: ssh), run as\n"
		"                     PROG -o BatchMode=yes HOST COMMAND\n"
		"  -v, --verbose      say what is done: namespaces, pids, exits\n"
		"  -h, --help         this text\n"
		"      --version      print the version and exit\n\n"
		"Each rank's environment is the launcher's plus RK_RANK, RK_WORLD_SIZE,\n"
		"RK_LEADER=host:port, RK_SESSION (random per job) and RK_SECRET_FILE, a file\n"
		"holding a random secret made for this job, with which the ranks prove to\n"
		"each other that they belong to it (none with RK_AUTH=off). The session and\n"
		"the secret never appear on a command line: remote ranks read them from the\n"
		"ssh channel. Remote ranks also get every RK_* variable set here (except\n"
		"RK_SECRET_FILE). Output lines come back prefixed \"[rN] \",\n"
		"stdout on stdout and stderr on stderr. SIGINT and SIGTERM are forwarded to\n"
		"every rank once (later ones are not; SIGKILL follows only after the grace\n"
		"period).\n\n"
		"Exit status: 0 when every rank exits 0; else the first failing rank's exit\n"
		"status, or 128+N if it was killed by signal N, or 128+N after this launcher\n"
		"was stopped by signal N; 1 when the job could not start; 2 for a usage error\n"
		"or a missing privilege.\n");
}

/* ---- option parsing ------------------------------------------------------------------ */

static int parse_int(const char *name, const char *s, long min, long max, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, PROG ": --%s='%s': expected an integer in [%ld, %ld]\n", name, s,
			min, max);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}

static int parse_seconds(const char *name, const char *s, double max, uint64_t *out_ns)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0 && v <= max)) {
		fprintf(stderr, PROG ": --%s='%s': expected seconds in [0, %g]\n", name, s, max);
		return -EINVAL;
	}
	*out_ns = (uint64_t)(v * 1e9);
	return 0;
}

/* The part of "user@host" that names the machine. */
static const char *host_part(const char *host)
{
	const char *at = strrchr(host, '@');

	return at ? at + 1 : host;
}

static bool is_local_host(const char *host)
{
	char name[HOST_NAME_MAX + 1], *dot;
	struct in6_addr a6;
	struct in_addr a4;

	if (strchr(host, '@')) /* a user name asks for ssh, even to this machine */
		return false;
	if (!strcmp(host, "localhost") || !strcmp(host, "localhost.localdomain"))
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	if (gethostname(name, sizeof(name)) < 0)
		return false;
	name[sizeof(name) - 1] = '\0';
	if (!strcmp(host, name))
		return true;
	dot = strchr(name, '.'); /* "node1" for "node1.example.org" */
	if (dot) {
		*dot = '\0';
		return !strcmp(host, name);
	}
	return false;
}

static int parse_hosts(struct launch *l)
{
	char *save = NULL, *tok, *s;
	int n = 1;

	for (s = l->hosts_arg; *s; s++)
		n += *s == ',';
	if (n > MAX_RANKS) {
		fprintf(stderr, PROG ": --hosts: %d hosts, at most %d\n", n, MAX_RANKS);
		return -EINVAL;
	}
	l->ranks = calloc((size_t)n, sizeof(*l->ranks));
	if (!l->ranks)
		return -ENOMEM;
	l->n = 0;
	/* strtok_r would skip empty entries: find them first */
	if (l->hosts_arg[0] == ',' || strstr(l->hosts_arg, ",,") || !l->hosts_arg[0] ||
	    l->hosts_arg[strlen(l->hosts_arg) - 1] == ',') {
		fprintf(stderr, PROG ": --hosts='%s': empty host name\n", l->hosts_arg);
		return -EINVAL;
	}
	for (tok = strtok_r(l->hosts_arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct rank *r = &l->ranks[l->n];
		const char *c;

		for (c = tok; *c; c++) {
			if (!(*c == '.' || *c == '-' || *c == '_' || *c == ':' || *c == '@' ||
			      *c == '%' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
			      (*c >= 'A' && *c <= 'Z')))
				break;
		}
		if (*c || tok[0] == '-' || !host_part(tok)[0] || strlen(tok) > 255) {
			fprintf(stderr, PROG ": --hosts: '%s' is not a host name\n", tok);
			return -EINVAL;
		}
		r->rank = l->n;
		r->host = tok;
		r->local = is_local_host(tok);
		r->stdin_fd = -1;
		r->io[0].fd = r->io[1].fd = -1;
		r->io[0].out = 1;
		r->io[1].out = 2;
		r->prefix_len = (size_t)snprintf(r->prefix, sizeof(r->prefix), "[r%d] ", l->n);
		l->n++;
	}
	return 0;
}

/* ---- small helpers: strings, commands ------------------------------------------------- */

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = (b->len + n + 1) * 2;
		char *p = realloc(b->p, cap);

		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

/* Append s as one word for a POSIX shell: 'it'\''s' */
static void sb_quote(struct sbuf *b, const char *s)
{
	const char *q;

	sb_add(b, "'", 1);
	while ((q = strchr(s, '\''))) {
		sb_add(b, s, (size_t)(q - s));
		sb_add(b, "'\\''", 4);
		s = q + 1;
	}
	sb_str(b, s);
	sb_add(b, "'", 1);
}

/* In a fresh child: become a process that cannot outlive the launcher. */
static void child_common(const struct launch *l)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != l->self)
		_exit(127); /* the launcher is already gone */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	if (!l->hup_ignored)
		signal(SIGHUP, SIG_DFL);
	if (!l->pipe_ignored)
		signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, &l->orig_mask, NULL);
}

/*
 * Run "ip ARGS..." and wait for it. Returns 0, -ENOENT when there is no ip
 * command, -EIO when it failed (it has said why on stderr).
 */
static int run_ip(const struct launch *l, ...)
{
	const char *argv[24];
	struct sbuf line = { 0 };
	va_list ap;
	size_t n = 0;
	pid_t pid;
	int status;

	argv[n++] = "ip";
	va_start(ap, l);
	while (n < ARRAY_SIZE(argv) - 1 && (argv[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	if (l->verbose) {
		for (size_t i = 0; i < n; i++) {
			sb_str(&line, i ? " " : "+ ");
			sb_str(&line, argv[i]);
		}
		vlog(l, "%s", line.oom ? "+ ip ..." : line.p);
		free(line.p);
	}
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		child_common(l);
		dup2(l->devnull, 0);
		execvp("ip", (char **)argv);
		execv("/usr/sbin/ip", (char **)argv);
		execv("/sbin/ip", (char **)argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		return -ENOENT;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* ---- network namespaces --------------------------------------------------------------- */

static bool have_cap(int cap)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) < 0)
		return false;
	return data[CAP_TO_INDEX(cap)].effective & CAP_TO_MASK(cap);
}

/*
 * Namespaces left by a launcher that was killed with SIGKILL: rkl<pid>-* where
 * <pid> no longer exists. A live pid (even a reused one) keeps its names.
 */
static void netns_remove_stale(const struct launch *l)
{
	struct dirent *de;
	DIR *d = opendir(NETNS_DIR);

	if (!d)
		return;
	while ((de = readdir(d))) {
		char *end;
		long pid;

		if (strncmp(de->d_name, "rkl", 3))
			continue;
		pid = strtol(de->d_name + 3, &end, 10);
		if (end == de->d_name + 3 || *end != '-' || pid <= 0 || pid == l->self)
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		fprintf(stderr, PROG ": removing stale namespace %s (launcher %ld is gone)\n",
			de->d_name, pid);
		run_ip(l, "netns", "delete", de->d_name, NULL);
	}
	closedir(d);
}

static void netns_teardown(struct launch *l)
{
	int i;

	for (i = l->n - 1; i >= 0; i--) {
		if (l->ranks[i].netns[0]) {
			run_ip(l, "netns", "delete", l->ranks[i].netns, NULL);
			l->ranks[i].netns[0] = '\0';
		}
	}
	if (l->bridge_made) {
		run_ip(l, "netns", "delete", l->bridge_ns, NULL);
		l->bridge_made = false;
	}
}

/*
 * A bridge namespace "rkl<pid>-b" with br0, and per rank "rkl<pid>-r<N>" with
 * eth0 = 10.a.b.<N+1>/24, whose veth peer "r<N>" is a port of br0. The subnet
 * is drawn from the pid inside 10.200.0.0/13; the namespaces are reachable
 * only from each other, so even equal subnets of two jobs never meet.
 */
static int netns_setup(struct launch *l)
{
	char cidr[32], peer[16], *ns;
	int i, ret;

	l->net_a = 200 + ((unsigned int)l->self >> 8) % 8;
	l->net_b = (unsigned int)l->self & 0xff;
	snprintf(l->bridge_ns, sizeof(l->bridge_ns), "rkl%d-b", (int)l->self);
	ret = run_ip(l, "netns", "add", l->bridge_ns, NULL);
	if (ret)
		return ret;
	l->bridge_made = true;
	ret = run_ip(l, "-n", l->bridge_ns, "link", "add", "br0", "type", "bridge", NULL);
	if (!ret)
		ret = run_ip(l, "-n", l->bridge_ns, "link", "set", "br0", "up", NULL);
	for (i = 0; !ret && i < l->n; i++) {
		struct rank *r = &l->ranks[i];

		snprintf(r->addr, sizeof(r->addr), "10.%u.%u.%d", l->net_a, l->net_b, i + 1);
		snprintf(cidr, sizeof(cidr), "%s/24", r->addr);
		snprintf(peer, sizeof(peer), "r%d", i);
		snprintf(r->netns, sizeof(r->netns), "rkl%d-r%d", (int)l->self, i);
		ns = r->netns;
		ret = run_ip(l, "netns", "add", ns, NULL);
		if (ret) {
			r->netns[0] = '\0'; /* not ours to delete */
			break;
		}
		ret = run_ip(l, "-n", ns, "link", "set", "lo", "up", NULL);
		if (!ret)
			ret = run_ip(l, "-n", ns, "link", "add", "eth0", "type", "veth", "peer",
				     "name", peer, "netns", l->bridge_ns, NULL);
		if (!ret)
			ret = run_ip(l, "-n", l->bridge_ns, "link", "set", peer, "master", "br0",
				     "up", NULL);
		if (!ret)
			ret = run_ip(l, "-n", ns, "addr", "add", cidr, "dev", "eth0", NULL);
		if (!ret)
			ret = run_ip(l, "-n", ns, "link", "set", "eth0", "up", NULL);
	}
	if (ret)
		netns_teardown(l);
	return ret;
}

/* ---- the job -------------------------------------------------------------------------- */

/* A port nobody listens on now, for a leader on this machine (or in a fresh netns). */
static int pick_port(const char *host)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd, ret;

	ret = getaddrinfo(host, "0", &hints, &res);
	if (ret)
		return -EADDRNOTAVAIL;
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		goto out_free;
	}
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		ret = -errno;
		goto out_close;
	}
	ret = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					     : ((struct sockaddr_in *)&ss)->sin_port);
out_close:
	close(fd);
out_free:
	freeaddrinfo(res);
	return ret;
}

/* RK_LEADER: rank 0's address as every rank can reach it, and the port. */
static int choose_leader(struct launch *l)
{
	const struct rank *r0 = &l->ranks[0];
	char name[HOST_NAME_MAX + 1];
	const char *host = host_part(r0->host);
	bool all_local = true;
	int i, port;

	for (i = 0; i < l->n; i++)
		all_local &= l->ranks[i].local;
	if (l->netns) {
		host = r0->addr;
	} else if (r0->local && all_local) {
		struct in6_addr a6;
		struct in_addr a4;

		/* an address literal as given; names become IPv4 loopback, always there */
		if (inet_pton(AF_INET, host, &a4) != 1 && inet_pton(AF_INET6, host, &a6) != 1)
			host = "127.0.0.1";
	} else if (r0->local) {
		/* remote ranks must reach the leader: this machine's name, not loopback */
		if (gethostname(name, sizeof(name)) < 0)
			return -errno;
		name[sizeof(name) - 1] = '\0';
		host = name;
	}
	port = l->port;
	if (!port && !r0->local) {
		fprintf(stderr,
			PROG ": rank 0 runs on remote host '%s': give its port with --port\n",
			r0->host);
		return -EINVAL;
	}
	if (!port) {
		port = pick_port(l->netns ? "127.0.0.1" : host);
		if (port < 0) {
			fprintf(stderr, PROG ": cannot find a free port on %s: %s\n", host,
				strerror(-port));
			return port;
		}
	}
	if (strchr(host, ':'))
		snprintf(l->leader, sizeof(l->leader), "[%s]:%d", host, port);
	else
		snprintf(l->leader, sizeof(l->leader), "%s:%d", host, port);
	return 0;
}

/*
 * The command line a remote shell runs for rank r: a POSIX sh that starts the
 * rank, and in the background reads its stdin (the ssh channel) until EOF,
 * then sends the rank SIGTERM. An async list's stdin is /dev/null unless
 * redirected, hence the copy on fd 3. The wrapper exits with the rank's status.
 */
static char *remote_command(const struct launch *l, const struct rank *r, const char *env[3])
{
	/* The first two lines on stdin are the session and the secret (may be
	 * empty); printf and read are shell builtins, so neither is ever an
	 * argument of a process. */
	static const char wrapper[] =
		"exec 3<&0 </dev/null; "
		"IFS= read -r s <&3 && IFS= read -r k <&3 || exit 125; "
		"if [ -n \"$k\" ]; then f=$(mktemp) || exit 125; "
		"printf '%s\\n' \"$k\" >\"$f\"; k=; exec 4<\"$f\"; rm -f \"$f\"; "
		"RK_SECRET_FILE=/proc/self/fd/4; export RK_SECRET_FILE; fi; "
		"RK_SESSION=$s; export RK_SESSION; "
		"\"$@\" 3<&- & p=$!; "
		"{ while read -r _; do :; done; kill -TERM $p; } <&3 >/dev/null 2>&1 4<&- & w=$!; "
		"exec 3<&- 4<&-; wait $p; s=$?; kill $w 2>/dev/null; exit $s";
	struct sbuf b = { 0 };
	char **e;
	int i;

	sb_str(&b, "exec sh -c ");
	sb_quote(&b, wrapper);
	sb_str(&b, " " PROG " env --"); /* no assignment or PROGRAM is read as an option */
	for (i = 0; i < 3; i++) {
		sb_str(&b, " ");
		sb_quote(&b, env[i]);
	}
	/* the local RK_* knobs (RK_WAIT, RK_LOG, ...) follow the ranks */
	for (e = environ; *e; e++) {
		if (strncmp(*e, "RK_", 3) || !strncmp(*e, "RK_RANK=", 8) ||
		    !strncmp(*e, "RK_WORLD_SIZE=", 14) || !strncmp(*e, "RK_LEADER=", 10) ||
		    !strncmp(*e, "RK_SESSION=", 11) || !strncmp(*e, "RK_SECRET_FILE=", 15))
			continue;
		sb_str(&b, " ");
		sb_quote(&b, *e);
	}
	for (i = 0; l->argv[i]; i++) {
		sb_str(&b, " ");
		sb_quote(&b, l->argv[i]);
	}
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/*
 * The job's secret: 32 random bytes as 64 hex digits, in a memfd that only
 * this user may read, which local ranks inherit. None with RK_AUTH=off, or
 * where the ranks' library cannot authenticate (built without OpenSSL).
 */
static int make_secret(struct launch *l)
{
	const char *auth = getenv("RK_AUTH");
	uint8_t raw[32];
	size_t i, n;
	int fd;

	l->secret[0] = '\0';
#ifndef RK_HAVE_OPENSSL
	vlog(l, "built without OpenSSL: the ranks cannot authenticate, no secret");
	return 0;
#endif
	if (auth && !strcmp(auth, "off"))
		return 0;
	if (getrandom(raw, sizeof(raw), 0) != sizeof(raw)) {
		fprintf(stderr, PROG ": getrandom: %s\n", strerror(errno));
		return -EIO;
	}
	for (i = 0; i < sizeof(raw); i++)
		snprintf(l->secret + 2 * i, 3, "%02x", raw[i]);
	explicit_bzero(raw, sizeof(raw));
	strcat(l->secret, "\n");
	n = strlen(l->secret);
	fd = memfd_create("rk-secret", MFD_CLOEXEC);
	if (fd < 0 || fchmod(fd, 0600) < 0 || write(fd, l->secret, n) != (ssize_t)n) {
		fprintf(stderr, PROG ": cannot hold the job's secret in a memfd: %s\n",
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -EIO;
	}
	l->secret[n - 1] = '\0'; /* the ssh channel gets the newline from the format */
	l->secret_fd = fd;
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static int start_rank(struct launch *l, struct rank *r)
{
	char rank_s[32], size_s[32], leader_s[352], session_s[48], secret_s[48];
	const char *env[5] = { rank_s, size_s, leader_s, session_s, secret_s };
	int out[2], err[2], in[2] = { -1, -1 }, nsfd = -1, ret, i;
	char *cmd = NULL;
	pid_t pid;

	snprintf(rank_s, sizeof(rank_s), "RK_RANK=%d", r->rank);
	snprintf(size_s, sizeof(size_s), "RK_WORLD_SIZE=%d", l->n);
	snprintf(leader_s, sizeof(leader_s), "RK_LEADER=%s", l->leader);
	snprintf(session_s, sizeof(session_s), "RK_SESSION=0x%016" PRIx64, l->session);
	snprintf(secret_s, sizeof(secret_s), "RK_SECRET_FILE=/proc/self/fd/%d", l->secret_fd);
	for (i = 0; i < 2; i++) {
		r->io[i].buf = malloc(STREAM_BUF);
		if (!r->io[i].buf)
			return -ENOMEM;
	}
	if (!r->local) {
		cmd = remote_command(l, r, env);
		if (!cmd)
			return -ENOMEM;
	}
	if (r->netns[0]) {
		char path[sizeof(NETNS_DIR) + 40];

		snprintf(path, sizeof(path), NETNS_DIR "/%s", r->netns);
		nsfd = open(path, O_RDONLY | O_CLOEXEC);
		if (nsfd < 0) {
			ret = -errno;
			fprintf(stderr, PROG ": rank %d: %s: %s\n", r->rank, path, strerror(-ret));
			goto err_free_cmd;
		}
	}
	if (pipe2(out, O_CLOEXEC) < 0) {
		ret = -errno;
		goto err_close_ns;
	}
	if (pipe2(err, O_CLOEXEC) < 0) {
		ret = -errno;
		goto err_close_out;
	}
	if (!r->local && pipe2(in, O_CLOEXEC) < 0) {
		ret = -errno;
		goto err_close_err;
	}
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		goto err_close_in;
	}
	if (pid == 0) {
		setpgid(0, 0);
		child_common(l);
		if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) < 0) {
			dprintf(err[1], PROG ": rank %d: cannot enter namespace %s: %s\n", r->rank,
				r->netns, strerror(errno));
			_exit(126);
		}
		if (dup2(in[0] >= 0 ? in[0] : l->devnull, 0) < 0 || dup2(out[1], 1) < 0 ||
		    dup2(err[1], 2) < 0)
			_exit(126);
		if (r->local) {
			for (i = 0; i < 4; i++)
				putenv((char *)env[i]); /* this child's copy of the strings */
			if (l->secret_fd >= 0) {
				/* the one descriptor the rank inherits, kept open for it */
				if (fcntl(l->secret_fd, F_SETFD, 0) < 0)
					_exit(126);
				putenv((char *)env[4]);
			} else {
				unsetenv("RK_SECRET_FILE");
			}
			execvp(l->argv[0], l->argv);
			dprintf(2, PROG ": rank %d: cannot run '%s': %s\n", r->rank, l->argv[0],
				strerror(errno));
		} else {
			const char *argv[] = { l->ssh, "-o", "BatchMode=yes", r->host, cmd, NULL };

			execvp(l->ssh, (char **)argv);
			dprintf(2, PROG ": rank %d: cannot run '%s': %s\n", r->rank, l->ssh,
				strerror(errno));
		}
		_exit(127);
	}
	/* both sides set the group, so it exists before either goes on */
	setpgid(pid, pid);
	r->pid = pid;
	r->running = true;
	r->io[0].fd = out[0];
	r->io[1].fd = err[0];
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	fcntl(err[0], F_SETFL, O_NONBLOCK);
	close(out[1]);
	close(err[1]);
	close_fd(&in[0]);
	if (in[1] >= 0) {
		char head[16 + 2 + sizeof(l->secret)];
		int n = snprintf(head, sizeof(head), "0x%016" PRIx64 "\n%s\n", l->session,
				 l->secret);

		/* fits the pipe's buffer: never blocks; the rest stays unwritten */
		if (n < 0 || write(in[1], head, (size_t)n) != n)
			vlog(l, "rank %d: cannot hand the session to the remote shell", r->rank);
		explicit_bzero(head, sizeof(head));
	}
	r->stdin_fd = in[1]; /* kept open, never written again: EOF tells the remote to stop */
	close_fd(&nsfd);
	free(cmd);
	if (r->netns[0])
		vlog(l, "rank %d: pid %d on %s (netns %s, %s)", r->rank, (int)pid, r->host,
		     r->netns, r->addr);
	else
		vlog(l, "rank %d: pid %d on %s%s", r->rank, (int)pid, r->host,
		     r->local ? "" : " (ssh)");
	return 0;

err_close_in:
	close_fd(&in[0]);
	close_fd(&in[1]);
err_close_err:
	close(err[0]);
	close(err[1]);
err_close_out:
	close(out[0]);
	close(out[1]);
err_close_ns:
	close_fd(&nsfd);
err_free_cmd:
	free(cmd);
	return ret;
}

/* ---- output --------------------------------------------------------------------------- */

static void write_all(struct launch *l, int fd, struct iovec *iov, int n)
{
	ssize_t w;

	while (n > 0 && !l->out_broken[fd]) {
		w = writev(fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			l->out_broken[fd] = true; /* EPIPE and the like: keep draining */
			return;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
}

/*
 * Write every complete line in s->buf with the rank's prefix, in one writev
 * per batch (whole lines from different ranks do not interleave). At EOF a
 * partial line is finished with a newline. A line longer than the buffer is
 * written in pieces, the prefix before the first piece only.
 */
static void stream_emit(struct launch *l, struct rank *r, struct stream *s, bool eof)
{
	struct iovec iov[IOV_BATCH + 3];
	char *p = s->buf, *end = s->buf + s->len, *nl;
	int n = 0;

	while (p < end && (nl = memchr(p, '\n', (size_t)(end - p)))) {
		if (!s->midline)
			iov[n++] = (struct iovec){ r->prefix, r->prefix_len };
		iov[n++] = (struct iovec){ p, (size_t)(nl + 1 - p) };
		s->midline = false;
		p = nl + 1;
		if (n >= IOV_BATCH) {
			write_all(l, s->out, iov, n);
			n = 0;
		}
	}
	if (p < end && (eof || s->len == STREAM_BUF)) {
		if (!s->midline)
			iov[n++] = (struct iovec){ r->prefix, r->prefix_len };
		iov[n++] = (struct iovec){ p, (size_t)(end - p) };
		s->midline = true;
		p = end;
	}
	if (eof && s->midline) {
		iov[n++] = (struct iovec){ "\n", 1 };
		s->midline = false;
	}
	write_all(l, s->out, iov, n);
	s->len = (size_t)(end - p);
	memmove(s->buf, p, s->len);
}

/* Read what the pipe holds now: one buffer, or with drain, what is there (bounded). */
static void stream_read(struct launch *l, struct rank *r, struct stream *s, bool drain)
{
	int reads = drain ? 64 : 1;
	ssize_t got;

	while (s->fd >= 0 && reads-- > 0) {
		got = read(s->fd, s->buf + s->len, STREAM_BUF - s->len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == EAGAIN)
			return;
		if (got <= 0) { /* EOF, or an error that is as final */
			stream_emit(l, r, s, true);
			close_fd(&s->fd);
			return;
		}
		s->len += (size_t)got;
		stream_emit(l, r, s, false);
	}
}

/* ---- supervision ---------------------------------------------------------------------- */

static void signal_ranks(struct launch *l, int sig)
{
	int i;

	for (i = 0; i < l->n; i++) {
		if (l->ranks[i].running)
			killpg(l->ranks[i].pid, sig);
	}
}

static void begin_stop(struct launch *l)
{
	l->stopping = true;
	l->kill_at = now_ns() + l->grace_ns;
}

static void on_signal(struct launch *l, int sig)
{
	char name[32];

	if (sig == SIGHUP && l->hup_ignored)
		return;
	if (++l->signals > 1) {
		/*
		 * The ranks have theirs and are stopping; SIGKILL waits for the
		 * grace period (timeout(1) sends its signal twice: to us, then to
		 * its process group, which we are in).
		 */
		vlog(l, "%s again: the ranks are stopping (SIGKILL after the grace period)",
		     sig_name(sig, name, sizeof(name)));
		return;
	}
	if (!l->stopping) {
		l->exit_code = 128 + sig;
		begin_stop(l);
	}
	vlog(l, "%s: forwarding it to every rank", sig_name(sig, name, sizeof(name)));
	/* a hangup means the terminal is gone: the ranks get an ordinary SIGTERM */
	signal_ranks(l, sig == SIGHUP ? SIGTERM : sig);
}

static void on_exit_status(struct launch *l, struct rank *r)
{
	char name[32];
	bool failed = !WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0;
	bool report = failed && !l->stopping;

	if (report || l->verbose) {
		if (WIFSIGNALED(r->status))
			fprintf(stderr, PROG ": rank %d killed by signal %s\n", r->rank,
				sig_name(WTERMSIG(r->status), name, sizeof(name)));
		else
			fprintf(stderr, PROG ": rank %d exited with status %d%s\n", r->rank,
				WEXITSTATUS(r->status),
				!r->local && WEXITSTATUS(r->status) == 255 ? " (ssh failed?)" : "");
	}
	if (failed && !l->stopping) {
		l->exit_code =
			WIFSIGNALED(r->status) ? 128 + WTERMSIG(r->status) : WEXITSTATUS(r->status);
		begin_stop(l);
		signal_ranks(l, SIGTERM);
	}
	/* tearing down: whatever the rank left in its group goes too */
	if (l->stopping)
		killpg(r->pid, SIGKILL);
}

static void reap(struct launch *l)
{
	int i, status;
	pid_t pid;

	for (i = 0; i < l->n; i++) {
		struct rank *r = &l->ranks[i];

		if (!r->running)
			continue;
		pid = waitpid(r->pid, &status, WNOHANG);
		if (pid != r->pid)
			continue;
		r->running = false;
		r->status = status;
		close_fd(&r->stdin_fd); /* a remote wrapper stops whatever it left */
		/* its last words come before the launcher's report */
		stream_read(l, r, &r->io[0], true);
		stream_read(l, r, &r->io[1], true);
		on_exit_status(l, r);
	}
}

static int running_ranks(const struct launch *l)
{
	int i, n = 0;

	for (i = 0; i < l->n; i++)
		n += l->ranks[i].running;
	return n;
}

static int supervise(struct launch *l)
{
	struct pollfd *pfd;
	struct stream **owner;
	struct rank **owner_rank;
	uint64_t linger_until = 0, now;
	int i, j, n, timeout, ret = 0;

	pfd = calloc((size_t)l->n * 2 + 1, sizeof(*pfd));
	owner = calloc((size_t)l->n * 2 + 1, sizeof(*owner));
	owner_rank = calloc((size_t)l->n * 2 + 1, sizeof(*owner_rank));
	if (!pfd || !owner || !owner_rank) {
		free(pfd);
		free(owner);
		free(owner_rank);
		return -ENOMEM;
	}
	for (;;) {
		now = now_ns();
		if (l->stopping && !l->killed && now >= l->kill_at && running_ranks(l)) {
			fprintf(stderr, PROG ": %d rank(s) left after the grace period: SIGKILL\n",
				running_ranks(l));
			signal_ranks(l, SIGKILL);
			l->killed = true;
		}
		n = 0;
		pfd[n++] = (struct pollfd){ .fd = l->sfd, .events = POLLIN };
		for (i = 0; i < l->n; i++) {
			for (j = 0; j < 2; j++) {
				if (l->ranks[i].io[j].fd < 0)
					continue;
				owner[n] = &l->ranks[i].io[j];
				owner_rank[n] = &l->ranks[i];
				pfd[n].fd = owner[n]->fd;
				pfd[n].events = POLLIN;
				pfd[n++].revents = 0;
			}
		}
		if (!running_ranks(l)) {
			/* an exited rank's children may hold its pipes: wait a little only */
			if (!linger_until)
				linger_until = now + LINGER_NS;
			if (n == 1 || now >= linger_until)
				break;
		}
		timeout = -1;
		if (linger_until)
			timeout = (int)((linger_until - now) / 1000000 + 1);
		else if (l->stopping && !l->killed)
			timeout = (int)((l->kill_at > now ? l->kill_at - now : 0) / 1000000 + 1);
		if (poll(pfd, (nfds_t)n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno; /* the caller kills and reaps the ranks */
			fprintf(stderr, PROG ": poll: %s\n", strerror(-ret));
			goto out_free;
		}
		/* output first, so a rank's last lines precede the report of its exit */
		for (i = 1; i < n; i++) {
			if (pfd[i].revents)
				stream_read(l, owner_rank[i], owner[i], false);
		}
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(l->sfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGCHLD)
					reap(l);
				else
					on_signal(l, (int)si.ssi_signo);
			}
			reap(l); /* SIGCHLDs coalesce: look at every rank anyway */
		}
	}
	/* flush partial lines of pipes still held open by a rank's descendants */
	for (i = 0; i < l->n; i++) {
		for (j = 0; j < 2; j++) {
			struct stream *s = &l->ranks[i].io[j];

			if (s->fd >= 0) {
				stream_read(l, &l->ranks[i], s, true);
				if (s->fd >= 0)
					stream_emit(l, &l->ranks[i], s, true);
				close_fd(&s->fd);
			}
		}
	}
out_free:
	free(pfd);
	free(owner);
	free(owner_rank);
	return ret;
}

/* Stop and reap every started rank (startup failed half-way). */
static void abort_ranks(struct launch *l)
{
	int i;

	signal_ranks(l, SIGKILL);
	for (i = 0; i < l->n; i++) {
		if (l->ranks[i].running) {
			while (waitpid(l->ranks[i].pid, NULL, 0) < 0 && errno == EINTR)
				;
			l->ranks[i].running = false;
		}
	}
}

static void free_ranks(struct launch *l)
{
	int i;

	for (i = 0; i < l->n; i++) {
		close_fd(&l->ranks[i].stdin_fd);
		close_fd(&l->ranks[i].io[0].fd);
		close_fd(&l->ranks[i].io[1].fd);
		free(l->ranks[i].io[0].buf);
		free(l->ranks[i].io[1].buf);
	}
	free(l->ranks);
}

/* --netns: every rank here, one address each, and the privilege to do it. */
static int netns_check(const struct launch *l)
{
	int i;

	for (i = 0; i < l->n; i++) {
		if (!l->ranks[i].local) {
			fprintf(stderr, PROG ": --netns: host '%s' is not local\n",
				l->ranks[i].host);
			return -EINVAL;
		}
	}
	if (l->n > MAX_NETNS_RANKS) {
		fprintf(stderr, PROG ": --netns: at most %d ranks\n", MAX_NETNS_RANKS);
		return -EINVAL;
	}
	if (!have_cap(CAP_SYS_ADMIN) || !have_cap(CAP_NET_ADMIN)) {
		fprintf(stderr, PROG ": --netns needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN), "
				     "which this process does not have\n");
		return -EINVAL;
	}
	return 0;
}

static int parse_args(struct launch *l, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "hosts", required_argument, NULL, 'H' }, { "port", required_argument, NULL, 'p' },
		{ "grace", required_argument, NULL, 'g' }, { "netns", no_argument, NULL, 'N' },
		{ "ssh", required_argument, NULL, 's' },   { "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },	   { "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	/* '+': the program's own options are not ours */
	while ((c = getopt_long(argc, argv, "+H:p:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'H':
			if (l->hosts_arg) {
				fprintf(stderr, PROG ": --hosts given twice\n");
				return -EINVAL;
			}
			l->hosts_arg = optarg;
			break;
		case 'p':
			if (parse_int("port", optarg, 1, 65535, &l->port))
				return -EINVAL;
			break;
		case 'g':
			if (parse_seconds("grace", optarg, 3600, &l->grace_ns))
				return -EINVAL;
			break;
		case 'N':
			l->netns = true;
			break;
		case 's':
			if (!optarg[0]) {
				fprintf(stderr, PROG ": --ssh='': expected a program\n");
				return -EINVAL;
			}
			l->ssh = optarg;
			break;
		case 'v':
			l->verbose = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf(PROG " (rankrt) " PACKAGE_VERSION "\n");
			exit(0);
		default: /* getopt has named the option */
			fprintf(stderr, "Try '" PROG " --help'.\n");
			return -EINVAL;
		}
	}
	if (!l->hosts_arg) {
		fprintf(stderr, PROG ": --hosts is required\nTry '" PROG " --help'.\n");
		return -EINVAL;
	}
	if (optind >= argc) {
		fprintf(stderr, PROG ": no program given\nTry '" PROG " --help'.\n");
		return -EINVAL;
	}
	l->argv = argv + optind;
	return 0;
}

int main(int argc, char **argv)
{
	struct launch l = { .ssh = "ssh", .grace_ns = 5000000000ull, .sfd = -1, .devnull = -1,
			    .secret_fd = -1 };
	struct sigaction old;
	sigset_t mask;
	int i, ret;

	ret = parse_args(&l, argc, argv);
	if (!ret)
		ret = parse_hosts(&l);
	if (!ret && l.netns)
		ret = netns_check(&l);
	if (ret)
		goto out_free;
	l.self = getpid();

	/* every signal of interest is read from the signalfd, from here to the end */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, &l.orig_mask);
	/* an ignored signal never reaches a signalfd ('cmd &' ignores SIGINT) */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	sigaction(SIGHUP, NULL, &old);
	l.hup_ignored = old.sa_handler == SIG_IGN;
	sigaction(SIGPIPE, NULL, &old);
	l.pipe_ignored = old.sa_handler == SIG_IGN;
	signal(SIGPIPE, SIG_IGN); /* a closed stdout: keep supervising */
	l.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (l.sfd < 0) {
		ret = -errno;
		fprintf(stderr, PROG ": signalfd: %s\n", strerror(-ret));
		goto out_free;
	}
	l.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (l.devnull < 0) {
		ret = -errno;
		fprintf(stderr, PROG ": /dev/null: %s\n", strerror(-ret));
		goto out_close_sfd;
	}
	if (getrandom(&l.session, sizeof(l.session), 0) != sizeof(l.session)) {
		ret = -errno;
		fprintf(stderr, PROG ": getrandom: %s\n", strerror(-ret));
		goto out_close_null;
	}
	if (!l.session)
		l.session = 1; /* 0 means "no session" to the ranks */
	ret = make_secret(&l);
	if (ret)
		goto out_close_null;

	if (l.netns) {
		netns_remove_stale(&l);
		ret = netns_setup(&l);
		if (ret == -ENOENT) {
			fprintf(stderr, PROG ": --netns needs the ip command (iproute2)\n");
			ret = -EINVAL; /* exit 2: a missing prerequisite */
			goto out_close_null;
		}
		if (ret) {
			fprintf(stderr, PROG ": --netns: cannot set up the namespaces\n");
			goto out_close_null;
		}
	}
	ret = choose_leader(&l);
	if (ret)
		goto out_netns;
	vlog(&l, "%d rank(s), leader %s, %s", l.n, l.leader,
	     l.secret[0] ? "a fresh secret" : "no secret (RK_AUTH=off)");

	/* a signal during the setup: nothing started yet, just undo it */
	for (;;) {
		struct signalfd_siginfo si;

		if (read(l.sfd, &si, sizeof(si)) != sizeof(si))
			break;
		if (si.ssi_signo == SIGCHLD || (si.ssi_signo == SIGHUP && l.hup_ignored))
			continue; /* the ip commands, reaped already */
		l.exit_code = 128 + (int)si.ssi_signo;
		ret = 1;
		goto out_netns;
	}
	for (i = 0; i < l.n; i++) {
		ret = start_rank(&l, &l.ranks[i]);
		if (ret) {
			fprintf(stderr, PROG ": cannot start rank %d: %s\n", i, strerror(-ret));
			abort_ranks(&l);
			goto out_netns;
		}
	}
	ret = supervise(&l);
	if (ret) {
		fprintf(stderr, PROG ": %s\n", strerror(-ret));
		abort_ranks(&l);
	}

out_netns:
	netns_teardown(&l);
out_close_null:
	if (l.secret_fd >= 0)
		close(l.secret_fd);
	explicit_bzero(l.secret, sizeof(l.secret));
	close(l.devnull);
out_close_sfd:
	close(l.sfd);
out_free:
	free_ranks(&l);
	if (ret == -EINVAL)
		return 2;
	if (ret && !l.exit_code)
		return 1;
	return l.exit_code;
}
