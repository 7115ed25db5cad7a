// SPDX-License-Identifier: MIT
/*
 * rankrt configuration: defaults, the RK_* knob table, strict value parsing,
 * the environment reader, the rules between knobs and the printer. The
 * launchers' variables are config_launch.c's, the secret config_secret.c's,
 * addresses addr.c's.
 *
 * Every knob lives in one designated table (knobs[] below), asserted complete,
 * so setting, printing and the "known variables" list cannot drift apart.
 * Parsing is strict on purpose: a typo in a launch script must fail at start,
 * not run a rank with a silently different wait policy.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "runtime_int.h"
#include "config_int.h"

extern char **environ;

#define NS_PER_US	((uint64_t)1000)
#define NS_PER_MS	((uint64_t)1000000)
/* The tier column and where a knob lives: S() a field of struct rk_config,
 * T() one of the private struct rk__tuning in its tuning[]. */
#define S(f)	TIER_STABLE, offsetof(struct rk_config, f), sizeof(((struct rk_config *)0)->f)
#define T(f)	TIER_TUNING, offsetof(struct rk__tuning, f), sizeof(((struct rk__tuning *)0)->f)

/*
 * Stable knobs are documented in README "Knobs" and kept from release to
 * release; tuning knobs (README "Tuning (may change)") may be renamed or go.
 * Both parse as strictly and are refused by name alike.
 */
enum knob_tier {
	TIER_STABLE,
	TIER_TUNING,
};

enum knob_kind {
	KIND_U64,	/* unsigned integer in the env units, stored times .scale */
	KIND_POW2,	/* as KIND_U64, and a power of two */
	KIND_INT,	/* signed int in [min, max]; below min means "unset" when printed */
	KIND_BOOL,
	KIND_WAIT,	/* adaptive | spin | block */
	KIND_LEADER,	/* an address rk__addr_parse() accepts */
	KIND_SESSION,	/* u64, decimal or 0x-hex */
	KIND_LOG,	/* error | warn | info | debug, or 0..3 */
	KIND_DEVNAME,	/* an RDMA device name: letters, digits, '-', '_', '.' */
	KIND_TRI,	/* auto | on | off */
	KIND_SECRET,	/* a path: the secret file, read at once into secret[] */
	KIND_SQPOLL,	/* a boolean into ring.sqpoll, or auto (ring.sqpoll_auto): tuning */
};

enum knob_id {
	K_RANK,
	K_WORLD_SIZE,
	K_LEADER,
	K_PORT,
	K_SESSION,
	K_LOCAL_RANK,
	K_RANKS_PER_POD,
	K_WAIT,
	K_SPIN_US,
	K_SPIN_YIELD,
	K_PREDICT,
	K_PREDICT_MARGIN_US,
	K_PREDICT_MIN_US,
	K_LEARN,
	K_LEARN_SPIN_MIN_US,
	K_POLL_US,
	K_POLL_FOR_MS,
	K_SQPOLL,
	K_SQPOLL_CPU,
	K_COOP_TASKRUN,
	K_DEFER_TASKRUN,
	K_RING_ENTRIES,
	K_RX_BUF_SIZE,
	K_RX_BUF_COUNT,
	K_MAX_FRAME,
	K_TX_LIMIT,
	K_HEARTBEAT_MS,
	K_PEER_TIMEOUT_MS,
	K_CONNECT_TIMEOUT_MS,
	K_HANDSHAKE_MS,
	K_ROUND_TIMEOUT_MS,
	K_RESIDENT,
	K_LOG,
	K_LOG_TIME,
	K_SIGNALS,
	K_RDMA_DEV,
	K_RDMA_GID,
	K_AUTH,
	K_SECRET_FILE,
	K_MAX_PENDING,
	K_REFUSED_LOG_MS,
	K_SHM,
	K_FRAME_AUTH,
	K_LANE,
	K__COUNT,
};

struct knob {
	const char *env;	/* "RK_SPIN_US" */
	const char *name;	/* "spin_us" */
	enum knob_kind kind;
	enum knob_tier tier;
	size_t off;		/* of the field in struct rk_config, or rk__tuning (tuning) */
	size_t size;		/* of the field (KIND_U64/POW2: 4 or 8) */
	uint64_t scale;		/* field = value * scale (KIND_U64/POW2) */
	long long min, max;	/* in the env units (KIND_U64/POW2/INT) */
	const char *help;
};

static const struct knob knobs[] = {
	[K_RANK] = { "RK_RANK", "rank", KIND_INT, S(rank), 1, 0, RK__RANK_MAX,
		     "this process's rank (0 = leader)" },
	[K_WORLD_SIZE] = { "RK_WORLD_SIZE", "world_size", KIND_INT, S(world_size), 1, 1,
			   RK__WORLD_MAX, "number of ranks" },
	[K_LEADER] = { "RK_LEADER", "leader", KIND_LEADER, S(leader), 1, 0, 0,
		       "leader address: host:port, tcp://host:port or roce://host:port?query" },
	[K_PORT] = { "RK_PORT", "port", KIND_INT, S(port), 1, 1, 65535,
		     "the leader's port where a launcher gives only its host (torchrun, "
		     "LeaderWorkerSet, Slurm, PMIx; never torchrun's MASTER_PORT)" },
	[K_SESSION] = { "RK_SESSION", "session", KIND_SESSION, S(session_id), 1, 0, 0,
			"job id every rank must agree on (decimal or 0x-hex)" },
	[K_LOCAL_RANK] = { "RK_LOCAL_RANK", "local_rank", KIND_INT, T(local_rank), 1, 0,
			   RK__RANK_MAX, "LeaderWorkerSet: this rank within its pod, below "
			   "RK_RANKS_PER_POD" },
	[K_RANKS_PER_POD] = { "RK_RANKS_PER_POD", "ranks_per_pod", KIND_U64, T(ranks_per_pod), 1,
			      1, 256, "LeaderWorkerSet: ranks in each pod of the group" },
	[K_WAIT] = { "RK_WAIT", "wait", KIND_WAIT, S(wait.mode), 1, 0, 0,
		     "wait mode: adaptive, spin or block" },
	[K_SPIN_US] = { "RK_SPIN_US", "spin_us", KIND_U64, S(wait.spin_ns), NS_PER_US,
			0, 60000000, "busy window after an event, us" },
	[K_SPIN_YIELD] = { "RK_SPIN_YIELD", "spin_yield", KIND_U64, T(wait.spin_yield), 1,
			   0, 1000000, "sched_yield() every N empty spin iterations (0 = never)" },
	[K_PREDICT] = { "RK_PREDICT", "predict", KIND_BOOL, T(wait.predict), 1, 0, 0,
			"sleep until a source's predicted event less a margin, then spin" },
	[K_PREDICT_MARGIN_US] = { "RK_PREDICT_MARGIN_US", "predict_margin_us", KIND_U64,
				  T(wait.predict_margin_ns), NS_PER_US, 0, 1000000,
				  "wake this long before a predicted event (plus the measured "
				  "timer lateness), us" },
	[K_PREDICT_MIN_US] = { "RK_PREDICT_MIN_US", "predict_min_us", KIND_U64,
			       T(wait.predict_min_ns), NS_PER_US, 1, 1000000,
			       "no predictive sleep shorter than this, us" },
	[K_LEARN] = { "RK_LEARN", "learn", KIND_BOOL, T(wait.learn), 1, 0, 0,
		      "links learn their arrival gaps (predictive waits); the spin window "
		      "shrinks to the gaps seen" },
	[K_LEARN_SPIN_MIN_US] = { "RK_LEARN_SPIN_MIN_US", "learn_spin_min_us", KIND_U64,
				  T(wait.learn_spin_min_ns), NS_PER_US, 0, 60000000,
				  "floor of the learned spin window, us" },
	[K_POLL_US] = { "RK_POLL_US", "poll_us", KIND_U64, T(wait.poll_ns), NS_PER_US, 0,
			1000000, "a benchmark's baseline: where adaptive would block, timed "
			"polls of this long (0 = off), us" },
	[K_POLL_FOR_MS] = { "RK_POLL_FOR_MS", "poll_for_ms", KIND_U64, T(wait.poll_for_ns),
			    NS_PER_MS, 0, 3600000, "with RK_POLL_US: the timed polls end this long "
			    "after the last busy event, then block, ms" },
	[K_SQPOLL] = { "RK_SQPOLL", "sqpoll", KIND_SQPOLL, T(ring.sqpoll), 1, 0, 0,
		       "kernel SQ polling thread: 0/1, or auto (on when the affinity mask "
		       "holds at least 8 CPUs)" },
	[K_SQPOLL_CPU] = { "RK_SQPOLL_CPU", "sqpoll_cpu", KIND_INT, T(ring.sqpoll_cpu), 1,
			   -1, 4095, "CPU of the SQPOLL thread (-1 = not pinned)" },
	[K_COOP_TASKRUN] = { "RK_COOP_TASKRUN", "coop_taskrun", KIND_BOOL, T(ring.coop_taskrun),
			     1, 0, 0, "IORING_SETUP_COOP_TASKRUN|TASKRUN_FLAG" },
	[K_DEFER_TASKRUN] = { "RK_DEFER_TASKRUN", "defer_taskrun", KIND_BOOL,
			      T(ring.defer_taskrun), 1, 0, 0,
			      "IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN: only the first thread "
			      "that runs the loop may run it" },
	[K_RING_ENTRIES] = { "RK_RING_ENTRIES", "ring_entries", KIND_POW2, T(ring_entries), 1,
			     8, 32768, "submission queue entries (power of two)" },
	[K_RX_BUF_SIZE] = { "RK_RX_BUF_SIZE", "rx_buf_size", KIND_U64, T(rx_buf_size), 1,
			    4096, 1 << 20, "provided-buffer size for TCP receive, bytes" },
	[K_RX_BUF_COUNT] = { "RK_RX_BUF_COUNT", "rx_buf_count", KIND_POW2, T(rx_buf_count), 1,
			     1, 32768, "provided buffers per loop (power of two)" },
	[K_MAX_FRAME] = { "RK_MAX_FRAME", "max_frame", KIND_U64, S(max_frame), 1,
			  4096, RK_WIRE_MAX_PAYLOAD, "largest payload accepted, bytes" },
	[K_TX_LIMIT] = { "RK_TX_LIMIT", "tx_limit", KIND_U64, S(tx_limit), 1,
			 64 << 10, 1ll << 40, "unsent bytes per link before RK_ESLOWPEER" },
	[K_HEARTBEAT_MS] = { "RK_HEARTBEAT_MS", "heartbeat_ms", KIND_U64, T(heartbeat_ns),
			     NS_PER_MS, 1, 60000, "heartbeat period, ms" },
	[K_PEER_TIMEOUT_MS] = { "RK_PEER_TIMEOUT_MS", "peer_timeout_ms", KIND_U64,
				S(peer_timeout_ns), NS_PER_MS, 10, 3600000,
				"silence that declares a peer dead, ms (> heartbeat)" },
	[K_CONNECT_TIMEOUT_MS] = { "RK_CONNECT_TIMEOUT_MS", "connect_timeout_ms", KIND_U64,
				   S(connect_timeout_ns), NS_PER_MS, 1, 3600000,
				   "bootstrap bound, ms" },
	[K_HANDSHAKE_MS] = { "RK_HANDSHAKE_MS", "handshake_ms", KIND_U64,
			     T(handshake_timeout_ns), NS_PER_MS, 1, 600000,
			     "an accepted socket must HELLO within this, ms" },
	[K_ROUND_TIMEOUT_MS] = { "RK_ROUND_TIMEOUT_MS", "round_timeout_ms", KIND_U64,
				 T(round_timeout_ns), NS_PER_MS, 0, 86400000,
				 "a rank's share of a round fails with RK_EROUNDTIMEOUT after "
				 "the larger of this and 10x the slowest round seen, ms (0 = no "
				 "watchdog)" },
	[K_RESIDENT] = { "RK_RESIDENT", "resident", KIND_TRI, T(resident), 1, 0, 0,
			 "resident rounds: auto (where the backend measured better), on, off "
			 "(the launch path)" },
	[K_LOG] = { "RK_LOG", "log", KIND_LOG, S(log_level), 1, 0, 0,
		    "log threshold: error, warn, info, debug (or 0..3)" },
	[K_LOG_TIME] = { "RK_LOG_TIME", "log_time", KIND_BOOL, S(log_time), 1, 0, 0,
			 "start each log line with the UTC time (ISO 8601, microseconds)" },
	[K_SIGNALS] = { "RK_SIGNALS", "signals", KIND_BOOL, S(catch_signals), 1, 0, 0,
			"stop the loop on SIGINT/SIGTERM" },
	[K_RDMA_DEV] = { "RK_RDMA_DEV", "rdma_dev", KIND_DEVNAME, S(rdma_dev), 1, 0, 0,
			 "this rank's RDMA device for roce:// links (default: the address's dev=)" },
	[K_RDMA_GID] = { "RK_RDMA_GID", "rdma_gid", KIND_INT, S(rdma_gid), 1, 0, 255,
			 "this rank's GID index for roce:// links (default: the address's gid=)" },
	[K_AUTH] = { "RK_AUTH", "auth", KIND_TRI, S(auth), 1, 0, 0,
		     "peer authentication: auto (with a secret; none allowed on loopback only), "
		     "on (a secret is required), off (never; warns)" },
	[K_SECRET_FILE] = { "RK_SECRET_FILE", "secret_file", KIND_SECRET, S(secret), 1, 0, 0,
			    "file holding the job's shared secret (mode 0600 or stricter, "
			    ">= 32 bytes)" },
	[K_MAX_PENDING] = { "RK_MAX_PENDING", "max_pending", KIND_U64, T(max_pending), 1,
			    1, 65536, "connections a leader keeps before their handshake (at most "
			    "half of RLIMIT_NOFILE)" },
	[K_REFUSED_LOG_MS] = { "RK_REFUSED_LOG_MS", "refused_log_ms", KIND_U64,
			       T(refused_log_ns), NS_PER_MS, 1, 3600000,
			       "refused connections: at most one log line per this many ms" },
	[K_SHM] = { "RK_SHM", "shm", KIND_TRI, S(shm), 1, 0, 0,
		    "same-host links on shared memory: auto (when both ends share a host), "
		    "on (required on every link), off (never)" },
	[K_FRAME_AUTH] = { "RK_FRAME_AUTH", "frame_auth", KIND_BOOL, T(frame_auth), 1, 0, 0,
			   "with a secret: an AES-256-GCM tag on every frame after the handshake "
			   "(not on same-host shared memory); every rank must agree" },
	[K_LANE] = { "RK_LANE", "lane", KIND_BOOL, T(lane), 1, 0, 0,
		     "a same-host follower's threads may send USER frames to the leader "
		     "without its loop (rk_link_lane_open); 0: every frame goes by the loop" },
};
_Static_assert(ARRAY_SIZE(knobs) == K__COUNT, "every knob needs a table entry");

/* RK_* variables the project's tools use that are not knobs: skipped by from_env. */
static const char *const ignore_prefixes[] = { "RK_BENCH_", "RK_TEST_" };

static const char *const wait_names[] = {
	[RK_WAIT_ADAPTIVE] = "adaptive",
	[RK_WAIT_SPIN] = "spin",
	[RK_WAIT_BLOCK] = "block",
};

/* auto | on | off knobs (RK_AUTH, RK_RESIDENT, RK_SHM): the enums share these values */
static const char *const tri_names[] = {
	[RK_AUTH_AUTO] = "auto",
	[RK_AUTH_ON] = "on",
	[RK_AUTH_OFF] = "off",
};
_Static_assert((int)RK_RESIDENT_AUTO == (int)RK_AUTH_AUTO &&
		       (int)RK_RESIDENT_ON == (int)RK_AUTH_ON &&
		       (int)RK_RESIDENT_OFF == (int)RK_AUTH_OFF &&
		       sizeof(enum rk_resident_mode) == sizeof(enum rk_auth_mode),
	       "RK_RESIDENT parses as RK_AUTH does");
_Static_assert((int)RK_SHM_AUTO == (int)RK_AUTH_AUTO && (int)RK_SHM_ON == (int)RK_AUTH_ON &&
		       (int)RK_SHM_OFF == (int)RK_AUTH_OFF &&
		       sizeof(enum rk_shm_mode) == sizeof(enum rk_auth_mode),
	       "RK_SHM parses as RK_AUTH does");

static const char *const level_names[] = {
	[RK_LOG_ERROR] = "error",
	[RK_LOG_WARN] = "warn",
	[RK_LOG_INFO] = "info",
	[RK_LOG_DEBUG] = "debug",
};

void rk__seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

void rk_config_init(struct rk_config *cfg)
{
	struct rk__tuning *t = rk__config_tuning(cfg);

	memset(cfg, 0, sizeof(*cfg));
	cfg->rank = -1;
	cfg->world_size = 0;
	cfg->leader[0] = '\0';
	cfg->port = RK_DEF_PORT;
	cfg->session_id = 0;
	cfg->wait.mode = RK_WAIT_ADAPTIVE;
	cfg->wait.spin_ns = RK_DEF_SPIN_US * NS_PER_US;
	cfg->shm = RK_SHM_AUTO;
	cfg->max_frame = RK_DEF_MAX_FRAME;
	cfg->tx_limit = RK_DEF_TX_LIMIT;
	cfg->peer_timeout_ns = RK_DEF_PEER_TIMEOUT_MS * NS_PER_MS;
	cfg->connect_timeout_ns = RK_DEF_CONNECT_MS * NS_PER_MS;
	cfg->log_level = RK_LOG_WARN;
	cfg->log_time = false;
	cfg->catch_signals = false;
	cfg->rdma_dev[0] = '\0';
	cfg->rdma_gid = -1;
	cfg->auth = RK_AUTH_AUTO;
	cfg->secret_len = 0;

	t->magic = RK__TUNING_MAGIC;
	t->wait.spin_yield = RK_DEF_SPIN_YIELD;
	t->wait.predict = RK_DEF_PREDICT;
	t->wait.predict_margin_ns = RK_DEF_PREDICT_MARGIN_US * NS_PER_US;
	t->wait.predict_min_ns = RK_DEF_PREDICT_MIN_US * NS_PER_US;
	t->wait.learn = RK_DEF_LEARN;
	t->wait.learn_spin_min_ns = RK_DEF_LEARN_SPIN_MIN_US * NS_PER_US;
	t->ring.sqpoll_auto = false;
	t->ring.sqpoll = false;
	t->ring.sqpoll_cpu = -1;
	t->ring.coop_taskrun = true;
	t->ring.defer_taskrun = false;
	t->ring_entries = RK_DEF_RING_ENTRIES;
	t->rx_buf_size = RK_DEF_RX_BUF_SIZE;
	t->rx_buf_count = RK_DEF_RX_BUF_COUNT;
	t->heartbeat_ns = RK_DEF_HEARTBEAT_MS * NS_PER_MS;
	t->handshake_timeout_ns = RK_DEF_HANDSHAKE_MS * NS_PER_MS;
	t->round_timeout_ns = RK_DEF_ROUND_TIMEOUT_MS * NS_PER_MS;
	t->max_pending = RK_DEF_MAX_PENDING;
	t->refused_log_ns = RK_DEF_REFUSED_LOG_MS * NS_PER_MS;
	t->lane = true;
	t->frame_auth = false;
	t->resident = RK_RESIDENT_AUTO;
	t->local_rank = -1;
	t->ranks_per_pod = 1;
}

int rk_config_create(struct rk_config **out)
{
	struct rk_config *cfg = malloc(sizeof(*cfg));

	if (!cfg)
		return -ENOMEM;
	rk_config_init(cfg);
	*out = cfg;
	return 0;
}

void rk_config_destroy(struct rk_config *cfg)
{
	if (!cfg)
		return;
	rk__secure_zero(cfg, sizeof(*cfg));
	free(cfg);
}

const char *rk_wait_mode_name(enum rk_wait_mode mode)
{
	if ((unsigned int)mode >= ARRAY_SIZE(wait_names))
		return "unknown";
	return wait_names[mode];
}

/* ---- strict parsers ------------------------------------------------------ */

int rk__parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!s || !*s)
		return -RK_ECONFIG;
	for (; *s; s++) {
		unsigned int d;

		if (*s < '0' || *s > '9')
			return -RK_ECONFIG;
		d = (unsigned int)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -RK_ECONFIG;
		v = v * 10 + d;
	}
	if (v < min || v > max)
		return -RK_ECONFIG;
	*out = v;
	return 0;
}

int rk__parse_int(const char *s, long long min, long long max, long long *out)
{
	bool neg = s && *s == '-';
	uint64_t mag;
	long long v;

	if (rk__parse_u64(s ? s + neg : s, 0, (uint64_t)INT64_MAX, &mag))
		return -RK_ECONFIG;
	v = neg ? -(long long)mag : (long long)mag;
	if (v < min || v > max)
		return -RK_ECONFIG;
	*out = v;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "yes", "true", "on" };
	static const char *const no[] = { "0", "no", "false", "off" };
	size_t i;

	for (i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -RK_ECONFIG;
}

static int parse_name(const char *s, const char *const *names, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (names[i] && !strcmp(s, names[i]))
			return (int)i;
	return -RK_ECONFIG;
}

static int parse_session(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	size_t n;

	if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
		return rk__parse_u64(s, 0, UINT64_MAX, out);
	s += 2;
	n = strlen(s);
	if (n < 1 || n > 16 || strspn(s, "0123456789abcdefABCDEF") != n)
		return -RK_ECONFIG;
	for (; *s; s++)
		v = v << 4 | (uint64_t)(isdigit((unsigned char)*s) ? *s - '0' :
					(tolower((unsigned char)*s) - 'a' + 10));
	*out = v;
	return 0;
}

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

uint64_t rk__fnv1a64(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	while (n--) {
		h ^= *b++;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* ---- the table's accessors ----------------------------------------------- */

static const struct knob *knob_find(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(knobs); i++) {
		const struct knob *k = &knobs[i];

		if ((strlen(k->env) == len && !strncmp(k->env, name, len)) ||
		    (strlen(k->name) == len && !strncmp(k->name, name, len)))
			return k;
	}
	return NULL;
}

static void *field(struct rk_config *cfg, const struct knob *k)
{
	if (k->tier == TIER_TUNING)
		return (char *)rk__config_tuning(cfg) + k->off;
	return (char *)cfg + k->off;
}

static const void *cfield(const struct rk_config *cfg, const struct knob *k)
{
	if (k->tier == TIER_TUNING)
		return (const char *)rk__config_ctuning(cfg) + k->off;
	return (const char *)cfg + k->off;
}

static uint64_t load_uint(const struct rk_config *cfg, const struct knob *k)
{
	if (k->size == sizeof(uint32_t))
		return *(const uint32_t *)cfield(cfg, k);
	return *(const uint64_t *)cfield(cfg, k);
}

/* The explanation after "NAME='value': " for a refused value. */
static void explain(const struct knob *k, const char *value, char *err, size_t errlen)
{
	switch (k->kind) {
	case KIND_U64:
		rk__seterr(err, errlen, "%s='%.64s': not an unsigned integer in [%lld, %lld]",
			   k->env, value, k->min, k->max);
		break;
	case KIND_POW2:
		rk__seterr(err, errlen, "%s='%.64s': not a power of two in [%lld, %lld]",
			   k->env, value, k->min, k->max);
		break;
	case KIND_INT:
		rk__seterr(err, errlen, "%s='%.64s': not an integer in [%lld, %lld]",
			   k->env, value, k->min, k->max);
		break;
	case KIND_BOOL:
		rk__seterr(err, errlen,
			   "%s='%.64s': not a boolean (1/0, yes/no, true/false, on/off)", k->env,
			   value);
		break;
	case KIND_WAIT:
		rk__seterr(err, errlen, "%s='%.64s': not one of adaptive, spin, block", k->env,
			   value);
		break;
	case KIND_LEADER:
		rk__seterr(err, errlen,
			   "%s='%.64s': not an address (host:port, [v6]:port, tcp://host:port, "
			   "shm://host:port, roce://host:port?dev=NAME&gid=N)", k->env, value);
		break;
	case KIND_SESSION:
		rk__seterr(err, errlen,
			   "%s='%.64s': not an unsigned 64-bit integer (decimal or 0x-hex)", k->env,
			   value);
		break;
	case KIND_LOG:
		rk__seterr(err, errlen, "%s='%.64s': not one of error, warn, info, debug or 0..3",
			   k->env, value);
		break;
	case KIND_DEVNAME:
		rk__seterr(err, errlen,
			   "%s='%.64s': not a device name (letters, digits, '-', '_', '.', "
			   "< %zu chars)", k->env, value, k->size);
		break;
	case KIND_TRI:
		rk__seterr(err, errlen, "%s='%.64s': not one of auto, on, off", k->env, value);
		break;
	case KIND_SQPOLL:
		rk__seterr(err, errlen,
			   "%s='%.64s': not a boolean (1/0, yes/no, true/false, on/off) or auto",
			   k->env, value);
		break;
	case KIND_SECRET:
		rk__seterr(err, errlen, "%s='%.200s': not a readable file", k->env, value);
		break;
	}
}

/* Parse @value for @k and store it; @cfg is untouched on error. */
static int knob_set(struct rk_config *cfg, const struct knob *k, const char *value)
{
	struct rk__addr addr;
	uint64_t u;
	long long i;
	bool b;
	int ret;

	switch (k->kind) {
	case KIND_U64:
	case KIND_POW2:
		ret = rk__parse_u64(value, (uint64_t)k->min, (uint64_t)k->max, &u);
		if (ret || (k->kind == KIND_POW2 && !is_pow2(u)))
			return -RK_ECONFIG;
		u *= k->scale;	/* the table keeps max * scale within the field */
		if (k->size == sizeof(uint32_t))
			*(uint32_t *)field(cfg, k) = (uint32_t)u;
		else
			*(uint64_t *)field(cfg, k) = u;
		return 0;
	case KIND_INT:
		if (rk__parse_int(value, k->min, k->max, &i))
			return -RK_ECONFIG;
		*(int *)field(cfg, k) = (int)i;
		return 0;
	case KIND_BOOL:
		if (parse_bool(value, &b))
			return -RK_ECONFIG;
		*(bool *)field(cfg, k) = b;
		return 0;
	case KIND_SQPOLL:
		if (!strcasecmp(value, "auto")) {
			rk__config_tuning(cfg)->ring.sqpoll = false;
			rk__config_tuning(cfg)->ring.sqpoll_auto = true;
			return 0;
		}
		if (parse_bool(value, &b))
			return -RK_ECONFIG;
		rk__config_tuning(cfg)->ring.sqpoll = b;
		rk__config_tuning(cfg)->ring.sqpoll_auto = false;
		return 0;
	case KIND_WAIT:
		ret = parse_name(value, wait_names, ARRAY_SIZE(wait_names));
		if (ret < 0)
			return ret;
		*(enum rk_wait_mode *)field(cfg, k) = (enum rk_wait_mode)ret;
		return 0;
	case KIND_LEADER:
		if (strlen(value) >= k->size || rk__addr_parse(value, &addr))
			return -RK_ECONFIG;
		if (!strcmp(addr.scheme, "roce")) {
			char dev[RK_RDMA_DEV_MAX];
			int gid;

			if (rk__roce_query_parse(addr.query, dev, sizeof(dev), &gid))
				return -RK_ECONFIG;
		} else if (addr.query[0]) {
			return -RK_ECONFIG;	/* tcp takes no options */
		}
		strcpy(field(cfg, k), value);
		return 0;
	case KIND_DEVNAME:
		if (strlen(value) >= k->size || !rk__name_ok(value, strlen(value)))
			return -RK_ECONFIG;
		strcpy(field(cfg, k), value);
		return 0;
	case KIND_TRI:
		ret = parse_name(value, tri_names, ARRAY_SIZE(tri_names));
		if (ret < 0)
			return ret;
		*(enum rk_auth_mode *)field(cfg, k) = (enum rk_auth_mode)ret;
		return 0;
	case KIND_SECRET:
		return -RK_ECONFIG;	/* loaded by secret_load(), which explains itself */
	case KIND_SESSION:
		if (parse_session(value, &u))
			return -RK_ECONFIG;
		*(uint64_t *)field(cfg, k) = u;
		return 0;
	case KIND_LOG:
		ret = parse_name(value, level_names, ARRAY_SIZE(level_names));
		if (ret < 0 && !rk__parse_int(value, RK_LOG_ERROR, RK_LOG_DEBUG, &i))
			ret = (int)i;
		if (ret < 0)
			return ret;
		*(int *)field(cfg, k) = ret;
		return 0;
	}
	return -RK_ECONFIG;
}

int rk_config_set(struct rk_config *cfg, const char *name, const char *value, char *err,
		  size_t errlen)
{
	const struct knob *k = name ? knob_find(name, strlen(name)) : NULL;

	if (!k) {
		rk__seterr(err, errlen, "unknown setting '%.64s'", name ? name : "(null)");
		return -ENOENT;
	}
	if (k->kind == KIND_SECRET)
		return rk_config_load_secret(cfg, value, err, errlen);
	if (!value || knob_set(cfg, k, value)) {
		explain(k, value ? value : "", err, errlen);
		return -RK_ECONFIG;
	}
	return 0;
}

/* ---- whole-config rules ---------------------------------------------------- */

int rk__config_check(const struct rk_config *c, char *err, size_t errlen)
{
	const struct rk__tuning *t = rk__config_ctuning(c);
	uint64_t pool = (uint64_t)t->rx_buf_size * t->rx_buf_count;
	long ncpu;

	if (t->magic != RK__TUNING_MAGIC) {
		rk__seterr(err, errlen, "a config not made by rk_config_init() or "
			   "rk_config_create() (its tuning knobs are missing)");
		return -RK_ECONFIG;
	}
	if (c->peer_timeout_ns <= t->heartbeat_ns) {
		rk__seterr(err, errlen, "RK_PEER_TIMEOUT_MS=%" PRIu64
			   ": must be greater than RK_HEARTBEAT_MS=%" PRIu64,
			   c->peer_timeout_ns / NS_PER_MS, t->heartbeat_ns / NS_PER_MS);
		return -RK_ECONFIG;
	}
	if (pool > RK_RX_POOL_MAX) {
		rk__seterr(err, errlen,
			   "RK_RX_BUF_COUNT=%u x RK_RX_BUF_SIZE=%u: a receive pool of %" PRIu64
			   " MiB, over the %llu MiB a loop may take", t->rx_buf_count,
			   t->rx_buf_size, pool >> 20, (unsigned long long)(RK_RX_POOL_MAX >> 20));
		return -RK_ECONFIG;
	}
	ncpu = sysconf(_SC_NPROCESSORS_CONF);
	if (t->ring.sqpoll_cpu >= 0 && ncpu > 0 && t->ring.sqpoll_cpu >= ncpu) {
		rk__seterr(err, errlen, "RK_SQPOLL_CPU=%d: this machine has CPUs 0..%ld",
			   t->ring.sqpoll_cpu, ncpu - 1);
		return -RK_ECONFIG;
	}
	if (c->secret_len && (c->secret_len < RK_SECRET_MIN || c->secret_len > RK_SECRET_MAX)) {
		rk__seterr(err, errlen, "secret: %u bytes, must be %d to %d", c->secret_len,
			   RK_SECRET_MIN, RK_SECRET_MAX);
		return -RK_ECONFIG;
	}
	if ((unsigned int)c->auth > RK_AUTH_OFF) {
		rk__seterr(err, errlen, "RK_AUTH=%d: not one of auto, on, off", (int)c->auth);
		return -RK_ECONFIG;
	}
	if (c->auth == RK_AUTH_OFF && c->secret_len) {
		rk__seterr(err, errlen, "RK_AUTH=off, but a secret is set (RK_SECRET_FILE): "
			   "drop one of them");
		return -RK_ECONFIG;
	}
	if (t->max_pending < 1) {
		rk__seterr(err, errlen,
			   "RK_MAX_PENDING=0: a leader must admit at least one connection");
		return -RK_ECONFIG;
	}
	if ((unsigned int)c->shm > RK_SHM_OFF) {
		rk__seterr(err, errlen, "RK_SHM=%d: not one of auto, on, off", (int)c->shm);
		return -RK_ECONFIG;
	}
	if (c->shm == RK_SHM_OFF && !strncmp(c->leader, "shm://", 6)) {
		rk__seterr(err, errlen, "RK_SHM=off, but RK_LEADER='%.64s' asks for shared memory: "
			   "drop one of them", c->leader);
		return -RK_ECONFIG;
	}
	return 0;
}

/* ---- environment --------------------------------------------------------- */

int rk__config_check_rank(const struct rk_config *cfg, const char *rank_var, char *err,
			  size_t errlen)
{
	if (cfg->rank >= 0 && cfg->world_size > 0 && cfg->rank >= cfg->world_size) {
		rk__seterr(err, errlen, "%s=%d: rank must be below the world size %d", rank_var,
			   cfg->rank, cfg->world_size);
		return -RK_ECONFIG;
	}
	return 0;
}

static void unknown_var(const char *name, size_t len, char *err, size_t errlen)
{
	size_t i, n;

	if (!err || !errlen)
		return;
	rk__seterr(err, errlen, "unknown variable %.*s (known:", (int)(len > 64 ? 64 : len), name);
		   for (i = 0; i < ARRAY_SIZE(knobs); i++) {
		   n = strlen(err);
		   snprintf(err + n, errlen - n, " %s", knobs[i].env);
		   }
		   n = strlen(err);
		   snprintf(err + n, errlen - n, ")");
}

int rk_config_from_env(struct rk_config *cfg, char *err, size_t errlen)
{
	struct rk_config c = *cfg;	/* committed only when everything passed */
	bool auth_env = false;
	char **e;
	size_t i;

	for (e = environ; e && *e; e++) {
		const char *var = *e, *eq = strchr(var, '=');
		const struct knob *k;
		bool skip = false;

		if (strncmp(var, "RK_", 3) || !eq)
			continue;
		for (i = 0; i < ARRAY_SIZE(ignore_prefixes); i++)
			if (!strncmp(var, ignore_prefixes[i], strlen(ignore_prefixes[i])))
				skip = true;
		if (skip)
			continue;
		k = knob_find(var, (size_t)(eq - var));
		if (!k || strncmp(var, k->env, (size_t)(eq - var))) {	/* env names only */
			unknown_var(var, (size_t)(eq - var), err, errlen);
			goto fail;
		}
		if (k->kind == KIND_SECRET) {
			if (rk_config_load_secret(&c, eq + 1, err, errlen))
				goto fail;
			continue;
		}
		if (knob_set(&c, k, eq + 1)) {
			explain(k, eq + 1, err, errlen);
			goto fail;
		}
		if (k == &knobs[K_AUTH])
			auth_env = true;
	}
	/* The environment is the whole story for a launched rank: RK_AUTH=on
	 * with no secret is refused here, before any device work, rather than at
	 * rk_world_create(). A secret set in code must come first. */
	if (auth_env && c.auth == RK_AUTH_ON && !c.secret_len) {
		rk__seterr(err, errlen, "RK_AUTH=on, but no secret is set: set RK_SECRET_FILE");
		goto fail;
	}
	if (rk__config_check(&c, err, errlen))
		goto fail;
	if (rk__config_check_rank(&c, "RK_RANK", err, errlen))
		goto fail;
	*cfg = c;
	rk__secure_zero(&c, sizeof(c));
	rk__log_set_level(cfg->log_level);
	rk__log_set_time(cfg->log_time);
	return 0;
fail:
	rk__secure_zero(&c, sizeof(c));
	return -RK_ECONFIG;
}

/* ---- printing ------------------------------------------------------------ */

static void knob_print(FILE *out, const struct rk_config *cfg, const struct knob *k)
{
	const void *p = cfield(cfg, k);
	int v;

	switch (k->kind) {
	case KIND_U64:
	case KIND_POW2:
		fprintf(out, "%s=%" PRIu64 "\n", k->env, load_uint(cfg, k) / k->scale);
		break;
	case KIND_INT:
		v = *(const int *)p;
		if (v < k->min || v > k->max)	/* rank -1, world_size 0: not set */
			fprintf(out, "# %s unset\n", k->env);
		else
			fprintf(out, "%s=%d\n", k->env, v);
		break;
	case KIND_BOOL:
		fprintf(out, "%s=%d\n", k->env, *(const bool *)p ? 1 : 0);
		break;
	case KIND_SQPOLL:
		if (rk__config_ctuning(cfg)->ring.sqpoll_auto)
			fprintf(out, "%s=auto\n", k->env);
		else
			fprintf(out, "%s=%d\n", k->env, *(const bool *)p ? 1 : 0);
		break;
	case KIND_WAIT:
		fprintf(out, "%s=%s\n", k->env,
			rk_wait_mode_name(*(const enum rk_wait_mode *)p));
		break;
	case KIND_LEADER:
	case KIND_DEVNAME:
		if (*(const char *)p)
			fprintf(out, "%s=%.*s\n", k->env, (int)k->size, (const char *)p);
		else
			fprintf(out, "# %s unset\n", k->env);
		break;
	case KIND_SESSION:
		fprintf(out, "%s=0x%" PRIx64 "\n", k->env, *(const uint64_t *)p);
		break;
	case KIND_TRI:
		v = *(const int *)p;
		fprintf(out, "%s=%s\n", k->env,
			v >= 0 && (size_t)v < ARRAY_SIZE(tri_names) ? tri_names[v] : "?");
		break;
	case KIND_SECRET:
		/* the secret itself is never printed, nor where it came from */
		if (cfg->secret_len)
			fprintf(out, "# %s: a secret of %u bytes is set\n", k->env,
				cfg->secret_len);
		else
			fprintf(out, "# %s unset\n", k->env);
		break;
	case KIND_LOG:
		v = *(const int *)p;
		if (v >= 0 && (size_t)v < ARRAY_SIZE(level_names))
			fprintf(out, "%s=%s\n", k->env, level_names[v]);
		else
			fprintf(out, "%s=%d\n", k->env, v);
		break;
	}
}

void rk_config_print(const struct rk_config *cfg, void *f)
{
	FILE *out = f;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(knobs); i++)
		if (knobs[i].tier == TIER_STABLE)
			knob_print(out, cfg, &knobs[i]);
	fprintf(out, "# tuning (may change)\n");
	for (i = 0; i < ARRAY_SIZE(knobs); i++)
		if (knobs[i].tier == TIER_TUNING)
			knob_print(out, cfg, &knobs[i]);
}
