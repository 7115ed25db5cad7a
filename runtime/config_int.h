/* SPDX-License-Identifier: MIT */
/*
 * The configuration's internals: the tuning tier's private struct, which
 * every module that reads a tuning knob takes from its config with
 * rk__config_tuning(); and what the configuration's own files share (the knob
 * table and its parsers: config.c; the launchers' variables:
 * config_launch.c, and PMIx's exchange: config_pmix.c; the secret:
 * config_secret.c; addresses: addr.c). Never installed.
 */
#ifndef RK_CONFIG_INT_H
#define RK_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rk_runtime.h"
#include "rk_sched.h"

/*
 * The tuning tier (README "Tuning (may change)"): knobs with names
 * (rk_config_set(), RK_* variables) but no public field, held in struct
 * rk_config's tuning[] so that a change here is no ABI change. Each knob's
 * default is rk_config_init()'s, its parsing the knob table's (config.c).
 */

/* The wait policy's tuning (its stable part is struct rk_wait_policy). */
struct rk__wait_tuning {
	uint32_t spin_yield;		/* RK_SPIN_YIELD: sched_yield() every N empty spin
					 * iterations, 0 = never (more threads than cores) */
	bool predict;			/* RK_PREDICT: honour sources' expect() */
	uint64_t predict_margin_ns;	/* RK_PREDICT_MARGIN_US: base wake margin */
	uint64_t predict_min_ns;	/* RK_PREDICT_MIN_US: no predictive sleep shorter */
	bool learn;			/* RK_LEARN: links learn their gaps; window cut */
	uint64_t learn_spin_min_ns;	/* RK_LEARN_SPIN_MIN_US: floor of the cut window */
	uint64_t poll_ns;		/* RK_POLL_US: a benchmark's baseline, timed polls of
					 * this long where adaptive would block, 0 = off */
	uint64_t poll_for_ns;		/* RK_POLL_FOR_MS: ...until this long after the
					 * last busy event */
};

/* The ring's knobs: they shape the ring at rk_loop_create() and stay. */
struct rk__ring_tuning {
	bool sqpoll;			/* RK_SQPOLL: kernel SQ polling thread */
	bool sqpoll_auto;		/* RK_SQPOLL=auto: sqpoll decided at rk_loop_create() */
	int sqpoll_cpu;			/* RK_SQPOLL_CPU: pin the SQPOLL thread, -1 = no */
	bool coop_taskrun;		/* RK_COOP_TASKRUN: COOP_TASKRUN|TASKRUN_FLAG */
	bool defer_taskrun;		/* RK_DEFER_TASKRUN: SINGLE_ISSUER|DEFER_TASKRUN, bound
					 * to the first thread that runs the loop; false in
					 * the loop's config when the kernel refused it */
};

struct rk__tuning {
	uint64_t magic;			/* RK__TUNING_MAGIC: rk_config_init() filled it */
	struct rk__wait_tuning wait;	/* read at every wait: a live loop takes them whole */
	struct rk__ring_tuning ring;
	/* the loop */
	unsigned int ring_entries;	/* RK_RING_ENTRIES */
	unsigned int rx_buf_size;	/* RK_RX_BUF_SIZE: provided-buffer size for TCP receive */
	unsigned int rx_buf_count;	/* RK_RX_BUF_COUNT: provided buffers per loop */
	/* links and the leader's port */
	uint64_t heartbeat_ns;		/* RK_HEARTBEAT_MS */
	uint64_t handshake_timeout_ns;	/* RK_HANDSHAKE_MS: an accepted socket's bound */
	unsigned int max_pending;	/* RK_MAX_PENDING: accepted, not yet handshaken */
	uint64_t refused_log_ns;	/* RK_REFUSED_LOG_MS: refused connections' log interval */
	bool lane;			/* RK_LANE: a same-host follower's lane */
	bool frame_auth;		/* RK_FRAME_AUTH: with a secret, tags on every frame */
	/* schedulers on this loop: the round watchdog's floor (0: off) */
	uint64_t round_timeout_ns;	/* RK_ROUND_TIMEOUT_MS */
	/* schedulers on this loop whose own config says auto (rk_sched.h) */
	enum rk_resident_mode resident;	/* RK_RESIDENT */
	/* LeaderWorkerSet with several ranks per pod (rk_config_from_launcher_env()) */
	int local_rank;			/* RK_LOCAL_RANK: this rank within its pod, -1 = not set */
	unsigned int ranks_per_pod;	/* RK_RANKS_PER_POD */
};

#define RK__TUNING_MAGIC	0x31454e55544b52ull	/* "RKTUNE1", little-endian */

_Static_assert(sizeof(struct rk__tuning) <= sizeof(((struct rk_config *)0)->tuning),
	       "the tuning tier outgrew struct rk_config's tuning[]: RK_CONFIG_TUNING_WORDS");
_Static_assert(_Alignof(struct rk__tuning) <= _Alignof(uint64_t),
	       "tuning[] is an array of uint64_t");

/* @cfg's tuning tier (the library builds with -fno-strict-aliasing). */
static inline struct rk__tuning *rk__config_tuning(struct rk_config *cfg)
{
	return (struct rk__tuning *)(void *)cfg->tuning;
}

static inline const struct rk__tuning *rk__config_ctuning(const struct rk_config *cfg)
{
	return (const struct rk__tuning *)(const void *)cfg->tuning;
}

#define RK__RANK_MAX	65535	/* RK_RANK, and a launcher's rank */
#define RK__WORLD_MAX	65536	/* RK_WORLD_SIZE, and a launcher's size */

/* snprintf() into @err when there is one (the messages of rk_config_set() and its kin). */
void rk__seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Strict signed parse of the whole string within [@min, @max]; 0 or -RK_ECONFIG. */
int rk__parse_int(const char *s, long long min, long long max, long long *out);
/* A host name, an IPv4 address, a device name: letters, digits, '-', '.', '_'; @n > 0. */
bool rk__name_ok(const char *s, size_t n);
/* Rank below the world size when both are set; the message names @rank_var. */
int rk__config_check_rank(const struct rk_config *cfg, const char *rank_var, char *err,
			  size_t errlen);

/* What one launcher says: rank -1, size 0 or leader "" where it says nothing. */
struct rk__launch_id {
	int rank;
	int world_size;
	char leader[256];		/* a whole leader address, as struct rk_config's */
};

/*
 * The first host of the Slurm hostlist @list ("gpu[01-04,07],cpu3" gives
 * "gpu01"), into @host. Return: 0, or -RK_ECONFIG with @err naming @var.
 */
int rk__hostlist_first(const char *var, const char *list, char *host, size_t cap, char *err,
		       size_t errlen);

/*
 * PMIx (config_pmix.c): rank, size and the leader address that rank 0 of the
 * PMIx job holds, @mine on rank 0, through a fence of every rank bounded by
 * @timeout_s. Return: 0 with @id filled; -EOPNOTSUPP when PMIx cannot be used
 * here (no libpmix, no server), @err saying why; -RK_ECONFIG with @err.
 */
int rk__pmix_exchange(const char *mine, unsigned int timeout_s, struct rk__launch_id *id,
		      char *err, size_t errlen);

#endif /* RK_CONFIG_INT_H */
