/* SPDX-License-Identifier: MIT */
/*
 * rankrt runtime: the per-rank io_uring event loop, its wait policy, timers,
 * cross-thread posts, signals, event sources, links and the world bootstrap.
 *
 * Threads: a loop and everything attached to it (timers, sources, links, the
 * world) belong to the thread that runs the loop and are not thread-safe.
 * Only rk_loop_post() and rk_loop_wake() may be called from other threads.
 * Calls documented "loop thread" must come from the thread that runs (or will
 * run) rk_loop_run() for that loop.
 *
 * Errors: negative -errno or -RK_E* codes, named by rk_strerror().
 *
 * Callbacks and re-entrancy. A callback of the loop (timer, post, source,
 * fd watch, rk_world_ops) runs on the loop thread, inside rk_loop_run() (or
 * rk_world_wait_ready(), which runs the loop). From inside any of them every
 * "loop thread" call may be made, except these, which return -EBUSY and do
 * nothing: rk_loop_run() (no nested runs), rk_world_wait_ready() (unless the
 * world is ready already), rk_loop_destroy() and rk_world_destroy(). A timer may stop or restart any
 * timer, itself included; a post's callback may free or re-post its post; a
 * source may remove itself from its own poll(), arm() or verdict() (not another source);
 * an fd watch may start itself again. The log handler (rk_log_set_handler())
 * may be called on any thread and must call nothing of rankrt.
 *
 * Lifetimes (libuv's handle rules are the model). Timers, sources, fd watches
 * and posts live in the caller's storage; timers, sources and fd watches are
 * handles: stop or remove them before their storage goes, and before
 * rk_loop_destroy(), which refuses (-EBUSY) while any handle, link or world
 * is attached. A post is a request: the loop owns it from rk_loop_post() until
 * its callback starts, and a post cannot be taken back, so whatever its
 * callback touches must outlive the callback. Posts and timers run only
 * inside the application's rk_loop_run() and rk_world_wait_ready(), never
 * inside rk_world_destroy(). The world is destroyed before its loop and after
 * every scheduler built on it (rk_world_destroy() refuses, -EBUSY, while a
 * scheduler exists): rk_sched.h gives the whole order.
 *
 * A zeroed struct is not a default one: initialise every struct the caller
 * fills with its init function (rk_config_init(), rk_wait_policy_init(),
 * rk_timer_init(), rk_post_init(), rk_source_init(), rk_fd_watch_init()).
 * Each struct says what a zeroed one gets wrong. Stats structs are output only,
 * and every stats getter takes the caller's sizeof(*out): a later release
 * adds counters at a struct's end only, and a caller built against either
 * gets the counters both know (the rest zeroed), so no binding guesses a size;
 * ops tables (rk_source_ops, rk_world_ops) are const tables in which a NULL
 * member means "none", so a zeroed member is right.
 */
#ifndef RK_RUNTIME_H
#define RK_RUNTIME_H

#include <stdbool.h>
#include "rk_common.h"
#include "rk_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rk_loop;
struct rk_link;
struct rk_world;

/* ---- configuration ------------------------------------------------------- */

#define RK_RDMA_DEV_MAX 64	/* an RDMA device name, with its NUL */
#define RK_SECRET_MIN	32	/* bytes: the shortest secret accepted */
#define RK_SECRET_MAX	512	/* bytes: the longest */

/* Whether ranks prove to each other that they hold the job's secret (README "Security"). */
enum rk_auth_mode {
	RK_AUTH_AUTO = 0,	/* with a secret, always; without one, only on loopback */
	RK_AUTH_ON = 1,		/* a secret is required, whatever the address */
	RK_AUTH_OFF = 2,	/* never (anyone who reaches the port can join; logs a warning) */
};

/* Whether links between ranks of one host use shared memory (README "Same-host links"). */
enum rk_shm_mode {
	RK_SHM_AUTO = 0,	/* a link whose ends share a host moves to shared memory */
	RK_SHM_ON = 1,		/* every link must: one that cannot fails with RK_ENOSHM */
	RK_SHM_OFF = 2,		/* never: every link stays on its transport */
};

enum rk_wait_mode {
	RK_WAIT_ADAPTIVE = 0,	/* spin for the busy window, then block; predictive sleeps */
	RK_WAIT_SPIN = 1,	/* never block (a core per loop, always) */
	RK_WAIT_BLOCK = 2,	/* always block (lowest CPU, highest wake latency) */
};

/*
 * The wait policy's stable part. After every busy event the loop spins for
 * spin_ns (peeking at the completion queue and polling every source, with a
 * pause instruction), then blocks until the next event or timer; adaptive
 * mode also sleeps until shortly before an event a source predicts. How it
 * predicts and learns is the tuning tier's (README "Tuning (may change)"),
 * set by name with rk_config_set(), not here. Zeroed, spin_ns is 0 (no busy
 * window): start from rk_wait_policy_init() (or a loop's
 * rk_loop_config()->wait).
 */
struct rk_wait_policy {
	enum rk_wait_mode mode;		/* RK_WAIT */
	uint64_t spin_ns;		/* RK_SPIN_US: busy window */
};

/* Words of struct rk_config's private tuning storage. */
#define RK_CONFIG_TUNING_WORDS	64

/*
 * The stable knobs (README "Knobs"), one field each, and the tuning tier's
 * storage. Copy a config by assignment; it holds no pointer and needs no
 * fini (rk_config_destroy() is for one from rk_config_create()).
 *
 * The tuning tier (README "Tuning (may change)": RK_SPIN_YIELD, RK_PREDICT,
 * RK_RING_ENTRIES, RK_HEARTBEAT_MS, ...) has no fields: set and read those
 * knobs by name (rk_config_set(), rk_config_from_env(), rk_config_print()).
 * tuning[] holds them in a layout of the library's own, which may change in
 * any release; never read or write it.
 *
 * Zeroed, nearly every field is wrong (rank 0 instead of "not set",
 * max_frame 0, no timeouts, rdma_gid 0 instead of "not set") and the tuning
 * tier is missing (rk_loop_create() refuses such a config): always start
 * from rk_config_init(). A binding that cannot see this layout takes one
 * from rk_config_create() and sets every knob by name.
 */
struct rk_config {
	/* identity (RK_RANK, RK_WORLD_SIZE, RK_LEADER, RK_PORT, RK_SESSION) */
	int rank;			/* -1 = not set */
	int world_size;			/* 0 = not set */
	char leader[256];		/* "tcp://host:port", "host:port",
					 * "shm://host:port" (every link on shared memory)
					 * or "roce://host:port?dev=rxe0&gid=1" */
	int port;			/* the leader's port where a launcher gives only its
					 * host (rk_config_from_launcher_env()); 18000 */
	uint64_t session_id;		/* a job id: every rank must have the same (rk-launch sets one) */

	struct rk_wait_policy wait;	/* RK_WAIT, RK_SPIN_US */

	/* same-host links: after the handshake, two ranks that find they share a
	 * host (boot id, network and pid namespace) move their tcp:// link to
	 * shared-memory rings; the socket stays to notice a dead peer */
	enum rk_shm_mode shm;		/* RK_SHM */

	/* links */
	uint32_t max_frame;		/* RK_MAX_FRAME: largest payload accepted */
	uint64_t tx_limit;		/* RK_TX_LIMIT: unsent bytes per link before RK_ESLOWPEER */
	uint64_t peer_timeout_ns;	/* RK_PEER_TIMEOUT_MS: silence that declares a peer dead */
	uint64_t connect_timeout_ns;	/* RK_CONNECT_TIMEOUT_MS: bootstrap bound */

	int log_level;			/* RK_LOG: error=0 warn=1 info=2 debug=3 */
	bool log_time;			/* RK_LOG_TIME: each line starts with the UTC time */
	bool catch_signals;		/* RK_SIGNALS: the loop stops on SIGINT/SIGTERM */

	/* roce:// links: this rank's own device and GID index. Empty / -1 take
	 * the leader address's dev= / gid= (so one address serves every rank
	 * that shares a device; a rank on another device sets these). */
	char rdma_dev[RK_RDMA_DEV_MAX];	/* RK_RDMA_DEV, e.g. "rxe0", "mlx5_0" */
	int rdma_gid;			/* RK_RDMA_GID: 0..255, -1 = not set */

	/*
	 * Authentication. Every rank of a job holds the same secret; the
	 * handshake proves it both ways (HMAC-SHA256 over fresh nonces, WIRE.md)
	 * without sending it. Set it with RK_SECRET_FILE (rk_config_from_env()),
	 * rk_config_load_secret() or rk_config_set_secret(); never print it.
	 * rk_loop_destroy() wipes the loop's copy.
	 */
	enum rk_auth_mode auth;		/* RK_AUTH */
	uint32_t secret_len;		/* bytes of secret[] in use, 0 = none */
	uint8_t secret[RK_SECRET_MAX];

	/* private: the tuning tier, by name only (above) */
	uint64_t tuning[RK_CONFIG_TUNING_WORDS];
};

/**
 * rk_config_init() - fill @cfg with the defaults, the tuning tier's too (no
 * environment read). Any thread; never fails.
 */
RK_EXPORT void rk_config_init(struct rk_config *cfg);

/**
 * rk_config_create() - allocate a config filled with the defaults (as
 * rk_config_init()), for a caller that does not know sizeof(struct
 * rk_config) (a binding through a foreign-function interface): set its knobs
 * with rk_config_set(), pass it to rk_loop_create(), free it with
 * rk_config_destroy(). Return: 0 and *@out, or -ENOMEM. Any thread.
 */
RK_EXPORT int rk_config_create(struct rk_config **out);

/**
 * rk_config_destroy() - wipe the secret @cfg holds and free it; @cfg must
 * come from rk_config_create(). NULL is a no-op. Any thread.
 */
RK_EXPORT void rk_config_destroy(struct rk_config *cfg);

/**
 * rk_config_set() - set one knob, stable or tuning tier, by its environment
 * name ("RK_SPIN_US") or its short name ("spin_us"), parsing @value strictly
 * (whole string, range checked, units as the name says).
 * @err: optional buffer that receives "RK_SPIN_US='abc': not a number" on error.
 * Return: 0, -RK_ECONFIG for a malformed value, -ENOENT for an unknown name.
 */
RK_EXPORT int rk_config_set(struct rk_config *cfg, const char *name, const char *value,
			    char *err, size_t errlen);

/**
 * rk_config_from_env() - apply every RK_* variable present in the environment.
 * An unknown RK_* variable is refused too (a typo must not pass silently), and
 * so is RK_AUTH=on when @cfg ends with no secret (set RK_SECRET_FILE, or set
 * the secret in code before this call).
 * Return: 0, or -RK_ECONFIG with @err naming the first bad variable. Call it
 * before any device work; nothing is changed in @cfg past the bad variable.
 */
RK_EXPORT int rk_config_from_env(struct rk_config *cfg, char *err, size_t errlen);

/**
 * rk_config_from_launcher_env() - fill what the RK_* variables left unset of
 * rank, world size and leader from the launcher that started the process:
 * the first present of torchrun (TORCHELASTIC_*), LeaderWorkerSet (LWS_*),
 * PMIx (PMIX_RANK, PMIX_NAMESPACE: rank 0 posts its address, every rank
 * fences), Open MPI (OMPI_COMM_WORLD_*), a Slurm step (SLURM_PROCID, the
 * node list's first host) and RANK/WORLD_SIZE/MASTER_ADDR answers them all.
 * A launcher that names only the leader's host gets cfg->port (RK_PORT);
 * MASTER_PORT is never read. Call it after rk_config_from_env(), once per
 * process under PMIx. Return: 0 or -RK_ECONFIG with @err naming the variable.
 */
RK_EXPORT int rk_config_from_launcher_env(struct rk_config *cfg, char *err, size_t errlen);

/**
 * rk_config_set_secret() - hold @len bytes at @key as the job's secret (copied;
 * @len 0 removes it). For embedders that keep the key in memory.
 * Return: 0, or -RK_ECONFIG when @len is outside [RK_SECRET_MIN, RK_SECRET_MAX].
 * Any thread, on a config no loop uses yet.
 */
RK_EXPORT int rk_config_set_secret(struct rk_config *cfg, const void *key, size_t len);

/**
 * rk_config_load_secret() - read the secret from the file @path (what
 * RK_SECRET_FILE does): a regular file that group and others can neither read
 * nor write (chmod 600), whose content less a trailing newline is 32 to 512
 * bytes. The bytes are copied into @cfg; the error text names the path, never
 * the content.
 * Return: 0, or -RK_ECONFIG with @err saying why. Any thread.
 */
RK_EXPORT int rk_config_load_secret(struct rk_config *cfg, const char *path, char *err,
				    size_t errlen);

/** rk_config_print() - write every knob with its value to @f (a FILE *), the
 * stable ones first, then the tuning tier after a "# tuning (may change)"
 * line; the secret is shown only as "set, N bytes". */
RK_EXPORT void rk_config_print(const struct rk_config *cfg, void *f);

/** rk_wait_mode_name() - "adaptive", "spin", "block". */
RK_EXPORT const char *rk_wait_mode_name(enum rk_wait_mode mode);

/* ---- logging ------------------------------------------------------------- */

enum rk_log_level { RK_LOG_ERROR = 0, RK_LOG_WARN, RK_LOG_INFO, RK_LOG_DEBUG };

typedef void (*rk_log_fn)(int level, int rank, const char *msg, void *arg);

/**
 * rk_log_set_handler() - route rankrt's log lines (default: stderr, as
 * "rankrt[r1] warn: ..."). Set it before any loop exists; NULL restores the
 * default. Not thread-safe with respect to running loops.
 */
RK_EXPORT void rk_log_set_handler(rk_log_fn fn, void *arg);

/**
 * rk_log() - write an application's log line as rankrt writes its own:
 * "TAG[r<rank>] <level>: <message>" (@tag NULL or "": "rankrt"; @rank < 0:
 * "[-]"), with the UTC time first under RK_LOG_TIME, one write(2) per line, or
 * to the handler of rk_log_set_handler() (which gets the message alone).
 * Dropped when @level is above the RK_LOG threshold. A message longer than
 * 1 KiB with its prefix ends in "...". Any thread; also from loop callbacks.
 */
RK_EXPORT void rk_log(int level, int rank, const char *tag, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- the loop ------------------------------------------------------------ */

/* Counters of one loop. Times are nanoseconds of the loop's monotonic clock. */
struct rk_loop_stats {
	uint64_t iterations;
	uint64_t events;		/* what the loop handled, each once: a frame a link
					 * delivered (any transport, ring or spin), another
					 * completion, a post, a timer firing, a source's
					 * event, a link coming up or failing */
	uint64_t busy_events;		/* of them, those that restarted the busy window */
	uint64_t spin_iters;		/* spin iterations that found nothing */
	uint64_t blocks;		/* blocking waits entered */
	uint64_t wakeups;		/* blocking waits ended by a cross-thread wake */
	uint64_t posts;			/* posts delivered */
	uint64_t eintr;			/* waits interrupted by a signal (counted as empty) */
	uint64_t ns_spin;		/* time spent spinning */
	uint64_t ns_blocked;		/* time spent blocked */
	uint64_t ns_run;		/* time spent in handlers */
	/* predictive waits (rk_source_ops.expect) */
	uint64_t predict_waits;		/* sleeps until a predicted event less the margin */
	uint64_t predict_early;		/* ...that woke before the event (then spun) */
	uint64_t predict_late;		/* ...whose event was already there at the wake */
	uint64_t predict_cut;		/* ...ended earlier by another event */
	uint64_t ns_oversleep;		/* sum of how late the timed wakes came */
	uint64_t predict_margin_ns;	/* the margin in use now (base + measured) */
	/* learned waits (RK_LEARN) */
	uint64_t learn_waits;		/* predictive sleeps for a link's learned gaps */
	uint64_t learn_holds;		/* ...cut by other busy work: that link held off */
	uint64_t window_cuts;		/* spin windows ended early by the learned window */
	uint64_t spin_window_ns;	/* the spin window in use now */
	uint64_t prewarms;		/* TCP rehearsals after predictive sleeps */
	/* of ns_spin: what the spin was for */
	uint64_t ns_spin_predict;	/* the rest of a predicted event's or timer's margin */
	uint64_t ns_spin_window;	/* the spin window after busy work */
	uint64_t learn_woken;		/* a link's bursts first seen right after a sleep:
					 * the frames that waited for a wake (of them,
					 * predict_late woke for that link) */
	uint64_t predict_overslept;	/* of predict_late: the timer's wake came at or
					 * after its deadline (the rest: the event woke
					 * the sleep before it, earlier than predicted) */
	uint64_t learn_overdue;		/* a link's bursts that came after its learned
					 * overdue point (the spin for it had ended) */
	uint64_t learn_restarts;	/* a link's learner started over: a gap off
					 * its pace and the next agreed on a new one */
};

/**
 * rk_loop_create() - create a loop (one io_uring, an eventfd for wakes, a
 * provided-buffer ring for TCP receive when the kernel has it).
 * @cfg: the configuration, copied; NULL = defaults.
 * Return: 0 and *@out; -RK_ECONFIG (@cfg breaks a rule between knobs, as
 * rk_config_from_env() checks them, or no rk_config_init() filled it); or
 * -errno (-ENOMEM, io_uring_setup's error).
 * Any thread; the loop then belongs to the thread that runs it.
 */
RK_EXPORT int rk_loop_create(const struct rk_config *cfg, struct rk_loop **out);

/**
 * rk_loop_destroy() - free a loop. Sources, timers and links must be removed or
 * closed first. Return: 0, or -EBUSY (nothing freed) while any are attached or
 * when called from inside one of the loop's callbacks. Posts still queued are
 * never delivered (their storage is the poster's). Loop thread.
 */
RK_EXPORT int rk_loop_destroy(struct rk_loop *loop);

enum rk_run_mode {
	RK_RUN_DEFAULT = 0,	/* until rk_loop_stop() */
	RK_RUN_ONCE = 1,	/* one iteration; waits per the policy if nothing is ready */
	RK_RUN_NOWAIT = 2,	/* one iteration; never waits */
};

/**
 * rk_loop_run() - run the loop. A stop asked for before the call (rk_loop_stop()
 * while no run is under way) makes it return at once, without an iteration, in
 * every mode (as libuv's uv_run()); the run that a stop ends consumes it.
 * One iteration runs the handlers of what was ready when it began, what they
 * start inline and the flush, then (ONCE, when none had work) one wait and the
 * handlers of what it returned. Work deferred to the loop runs in a later
 * iteration: a timer started from a timer callback (the scheduler's next round
 * after one completed inside launch()), a post made from a post's callback.
 * Return: 0 when stopped (or after one iteration for ONCE/NOWAIT),
 * -RK_ESTOPPED once a caught signal stopped the loop (every later run returns
 * it too, after its iteration), -EBUSY (nothing run) when called from
 * inside one of this loop's callbacks: it does not nest, or -EEXIST (nothing
 * run) on a thread other than the first that ran a loop created with
 * RK_DEFER_TASKRUN=1 (its ring takes one thread's
 * submissions and waits only; tear its links and world down there too). A
 * failed ring wait is not returned: it is logged, counts as an empty wait, and
 * the next iteration decides again. Loop thread.
 */
RK_EXPORT int rk_loop_run(struct rk_loop *loop, enum rk_run_mode mode);

/**
 * rk_loop_stop() - make rk_loop_run() return after the current iteration, or,
 * called while no run is under way, make the next rk_loop_run() return at once.
 * Loop thread, from a callback or outside a run.
 */
RK_EXPORT void rk_loop_stop(struct rk_loop *loop);

/**
 * rk_loop_wake() - wake the loop from another thread (it re-runs its
 * iteration). Costs nothing while the loop spins; one eventfd write when it
 * sleeps. Any thread, async-signal-safe.
 */
RK_EXPORT void rk_loop_wake(struct rk_loop *loop);

/** rk_loop_now() - the loop's cached monotonic time in ns (read once an iteration; while
 * spinning empty, every fourth: rk_loop_now.3). */
RK_EXPORT uint64_t rk_loop_now(const struct rk_loop *loop);

/**
 * rk_loop_stats() - copy the counters into @out, a struct rk_loop_stats of
 * @size bytes (pass sizeof(*out)): the library writes min(@size, its own
 * size) bytes of counters and zeroes the rest of @out. Return: the bytes of
 * counters written. Loop thread (or after the loop thread joined).
 */
RK_EXPORT size_t rk_loop_stats(const struct rk_loop *loop, struct rk_loop_stats *out,
			       size_t size);

/** rk_wait_policy_init() - fill @w with the defaults (rk_config_init()'s). Any thread. */
RK_EXPORT void rk_wait_policy_init(struct rk_wait_policy *w);

/**
 * rk_loop_set_wait() - change the wait mode and the busy window of a running
 * loop (@w's mode and spin_ns). The tuning tier (RK_PREDICT, RK_LEARN, ring
 * flags such as RK_SQPOLL) stays as it is (rk_loop_set_wait_config() changes
 * the wait's part of it too). Loop thread.
 */
RK_EXPORT void rk_loop_set_wait(struct rk_loop *loop, const struct rk_wait_policy *w);

/**
 * rk_loop_set_wait_config() - change the whole wait policy of a running loop
 * to @cfg's: its wait (mode, spin_ns) and the tuning knobs each wait reads
 * (RK_SPIN_YIELD, RK_PREDICT, RK_PREDICT_MARGIN_US, RK_PREDICT_MIN_US,
 * RK_LEARN, RK_LEARN_SPIN_MIN_US, RK_POLL_US, RK_POLL_FOR_MS), in effect from
 * the next wait; what the links learned stays. The ring's knobs (RK_SQPOLL,
 * RK_COOP_TASKRUN, RK_DEFER_TASKRUN) and every other knob stay as the loop
 * was created with. Start @cfg from rk_loop_config()'s copy and change knobs
 * with rk_config_set(). Return: 0, or -EINVAL when neither rk_config_init()
 * nor rk_config_create() filled @cfg. Loop thread.
 */
RK_EXPORT int rk_loop_set_wait_config(struct rk_loop *loop, const struct rk_config *cfg);

/** rk_loop_config() - the loop's configuration (read-only view). */
RK_EXPORT const struct rk_config *rk_loop_config(const struct rk_loop *loop);

/**
 * rk_loop_set_clock() - replace the clock (tests inject time). @fn returns ns.
 * Loop thread, before running.
 */
RK_EXPORT void rk_loop_set_clock(struct rk_loop *loop, uint64_t (*fn)(void *arg), void *arg);

/**
 * rk_loop_signal_stopped() - the signal that stopped the loop (SIGINT, SIGTERM),
 * or 0. Loop thread.
 */
RK_EXPORT int rk_loop_signal_stopped(const struct rk_loop *loop);

/* ---- timers -------------------------------------------------------------- */

struct rk_timer;
typedef enum rk_activity (*rk_timer_cb)(struct rk_timer *t, uint64_t now);

/* A timer, embedded in the caller's storage. Fields are private; a zeroed one
 * has no callback: rk_timer_init() it. */
struct rk_timer {
	/* public */
	void *data;
	/* private */
	rk_timer_cb cb;
	struct rk_loop *loop;
	uint64_t due;
	uint64_t period;
	struct rk_timer *next, *prev;
	bool active;
	bool fresh;		/* started in this iteration's timer step: runs in the next */
};

/** rk_timer_init() - prepare a timer. Any thread, before use. */
RK_EXPORT void rk_timer_init(struct rk_timer *t, rk_timer_cb cb, void *data);

/**
 * rk_timer_start() - fire @t after @delay_ns, then every @period_ns (0 = once).
 * The delay counts from rk_loop_now(), the time cached at the start of the
 * current iteration (as in libuv). Restarting an active timer moves it. A timer
 * started from a timer callback fires in a later iteration, never in the timer
 * step that started it, so a callback that restarts itself with no delay runs
 * once per iteration. Return: 0. Loop thread.
 */
RK_EXPORT int rk_timer_start(struct rk_loop *loop, struct rk_timer *t, uint64_t delay_ns,
			     uint64_t period_ns);

/** rk_timer_stop() - stop @t (no-op when inactive). Loop thread. */
RK_EXPORT void rk_timer_stop(struct rk_timer *t);

/* ---- cross-thread posts -------------------------------------------------- */

struct rk_post;
typedef enum rk_activity (*rk_post_cb)(struct rk_post *p);

/*
 * A message to the loop, in the poster's storage (no allocation on either side:
 * the CUDA host-callback path may not allocate). Owned by the loop from
 * rk_loop_post() until its callback starts; the callback may free or re-post it.
 * A zeroed one is right once cb is set; rk_post_init() sets both public fields.
 */
struct rk_post {
	/* public */
	rk_post_cb cb;
	void *data;
	/* private */
	struct rk_post *next;
};

/** rk_post_init() - prepare @p with its callback and data. Any thread. */
RK_EXPORT void rk_post_init(struct rk_post *p, rk_post_cb cb, void *data);

/**
 * rk_loop_post() - queue @p; its callback runs on the loop thread, in post
 * order per posting thread. Lock-free; never blocks or allocates; wakes the
 * loop only if it has published that it sleeps. Any thread.
 */
RK_EXPORT void rk_loop_post(struct rk_loop *loop, struct rk_post *p);

/* ---- event sources ------------------------------------------------------- */

struct rk_source;

/* How a predictive sleep ended, as rk_source_ops.verdict() hears it. */
enum rk_verdict {
	RK_VERDICT_EARLY = 1,	/* the sleep for this source's expect() woke before its
				 * event, as meant: the loop spins for it now */
	RK_VERDICT_CUT = 2,	/* ...was ended before its event by other busy work */
	RK_VERDICT_LATE = 3,	/* ...woke to find its event in, or was ended by it */
	RK_VERDICT_SPIN = 4,	/* a sleep for another source's expect() or for a timer
				 * woke early, as meant: the loop spins for that now */
};

/*
 * How the loop drives a source (the seam for verbs CQs and GPU completion words):
 * - poll(): called every spin iteration and once before and after each wait;
 *   cheap and syscall-free. Handle what is ready. Return the number of events
 *   handled that were busy (> 0 restarts the busy window), 0, or -errno
 *   (logged; the source stays). May be NULL for a source that only predicts
 *   or listens (expect(), verdict()): it is never polled, and costs a spin
 *   iteration nothing.
 * - arm(): called before the loop blocks: make the next event wake the ring
 *   (e.g. rk_fd_watch_start() on a completion channel), then check once more.
 *   Return 0 when armed, > 0 when an event is already pending (the loop will not
 *   block), or -errno. May be NULL for a source whose producer calls
 *   rk_loop_wake() or rk_loop_post() after publishing an event.
 * - expect(): optional: the loop-clock time (ns, as rk_loop_now()) at which
 *   poll() is expected to find the next event, or 0 for "no prediction".
 *   Called with the iteration's @now before the loop decides how to wait.
 *   While it names a time T, the loop (with RK_PREDICT, in adaptive mode)
 *   never sleeps past T: it sleeps until T less its margin, then spins, even
 *   inside its spin window. So while its expect() gives a time, a
 *   source's arm() may return 0 without arming anything; once the prediction
 *   is overdue it must return 0 from expect() and really arm (or answer > 0).
 *   Rely on that only while rk_loop_predicts() is true (RK_PREDICT may be off,
 *   or the mode switched by rk_loop_set_wait()). Cheap and syscall-free like poll().
 * - verdict(): optional: how a predictive sleep ended (adaptive mode, with
 *   RK_PREDICT), told after the first iteration that follows it polled the
 *   sources: RK_VERDICT_EARLY, _CUT or _LATE to the source whose expect()
 *   the sleep was for (nothing when another event, not busy work, ended it),
 *   and, when the sleep woke early, RK_VERDICT_SPIN to every other source
 *   that has this hook (e.g. to warm a path a sleep lets go cold before the
 *   event the loop now spins for). At most one call per source and sleep.
 */
struct rk_source_ops {
	const char *name;
	int (*poll)(struct rk_source *src, uint64_t now);
	int (*arm)(struct rk_source *src);
	uint64_t (*expect)(struct rk_source *src, uint64_t now);
	void (*verdict)(struct rk_source *src, enum rk_verdict v);
};

/* A source in the caller's storage. A zeroed one is right once ops is set
 * (garbage in the private fields makes rk_loop_add_source() say -EALREADY). */
struct rk_source {
	/* public */
	const struct rk_source_ops *ops;
	void *data;
	/* private */
	struct rk_source *next;
	struct rk_loop *loop;
};

/** rk_source_init() - prepare @src with its ops and data. Any thread. */
RK_EXPORT void rk_source_init(struct rk_source *src, const struct rk_source_ops *ops, void *data);

/**
 * rk_loop_predicts() - whether the loop now honours rk_source_ops.expect()
 * (RK_PREDICT on, wait mode adaptive). A source may answer arm()
 * with 0 on the strength of its prediction only while this is true. Loop thread.
 */
RK_EXPORT bool rk_loop_predicts(const struct rk_loop *loop);

/** rk_loop_add_source() - attach @src. Return: 0, -EALREADY. Loop thread. */
RK_EXPORT int rk_loop_add_source(struct rk_loop *loop, struct rk_source *src);
/** rk_loop_remove_source() - detach @src. Return: 0, -ENOENT. Loop thread. */
RK_EXPORT int rk_loop_remove_source(struct rk_loop *loop, struct rk_source *src);

struct rk_fd_watch;
typedef enum rk_activity (*rk_fd_watch_cb)(struct rk_fd_watch *w, int revents);

/* A one-shot readiness watch on a file descriptor through the ring (poll SQE).
 * Zeroed, it watches fd 0 with no callback: rk_fd_watch_init() it. */
struct rk_fd_watch {
	/* public */
	void *data;
	/* private */
	rk_fd_watch_cb cb;
	struct rk_loop *loop;
	int fd;
	bool armed;
	bool cancelling;
	uint64_t op[2];
};

/** rk_fd_watch_init() - prepare a watch for @fd. Any thread. */
RK_EXPORT void rk_fd_watch_init(struct rk_fd_watch *w, int fd, rk_fd_watch_cb cb, void *data);

/**
 * rk_fd_watch_start() - arm one readiness notification (@events: POLLIN...).
 * A no-op while already armed. The callback runs once, on the loop thread.
 * Return: 0, -EBUSY (the ring is full even after a submit). Loop thread.
 */
RK_EXPORT int rk_fd_watch_start(struct rk_loop *loop, struct rk_fd_watch *w, unsigned int events);

/**
 * rk_fd_watch_stop() - cancel an armed watch. Its storage may be reused once
 * rk_fd_watch_busy() is false (the cancellation completes on a later iteration).
 * Loop thread.
 */
RK_EXPORT void rk_fd_watch_stop(struct rk_fd_watch *w);
RK_EXPORT bool rk_fd_watch_busy(const struct rk_fd_watch *w);

/* ---- links --------------------------------------------------------------- */

/* Counters of one link. */
struct rk_link_stats {
	uint64_t tx_frames, tx_bytes, rx_frames, rx_bytes;
	uint64_t tx_flushes;		/* send operations submitted (frames are batched) */
	uint64_t heartbeats_tx, heartbeats_rx;
	uint64_t tx_queued_max;		/* high-water mark of unsent bytes */
	/* roce:// links only (zero on tcp): the verbs transport below the frames */
	uint64_t tx_sends;		/* SEND work requests posted (frames chunked/batched) */
	uint64_t tx_inline;		/* of them, inline sends */
	uint64_t tx_credit_msgs;	/* of them, credit-only messages (no data) */
	uint64_t credit_stalls;		/* flushes that stopped for want of peer receive credits */
	uint64_t cq_polls;		/* CQ polls that found completions */
	uint64_t cq_events;		/* completion-channel events (the loop had blocked) */
	uint64_t rnr_errors;		/* receiver-not-ready completions: must stay 0 */
	int64_t credits_min;		/* lowest send-credit count seen: never below 0 */
	/* shared-memory links only (rk_link_transport() says "shm"; zero elsewhere) */
	uint64_t shm_bcast_frames;	/* frames that went through the world's broadcast ring
					 * (leader: written once for every reader; follower: read) */
	uint64_t shm_wakes;		/* wake-ups this side made because the peer slept */
	uint64_t shm_sleeps;		/* times this side said it sleeps (its bell), before
					 * blocking: the peer's shm_wakes never exceed them */
	uint64_t shm_ring_full;		/* flushes stopped by a full ring (until the peer reads) */
	/* tcp:// links only: which path moved the bytes (ARCHITECTURE.md, "The TCP busy path") */
	uint64_t tcp_rx_direct;		/* recv() calls from the loop's poll that read bytes */
	uint64_t tcp_rx_ring;		/* io_uring receive completions that carried bytes */
	uint64_t tcp_tx_direct;		/* send() calls from a flush that wrote bytes */
	uint64_t tcp_tx_ring;		/* sends submitted to io_uring (shm side channel, or
					 * the rest of a flush the socket could not take
					 * whole) */
	/* shared-memory links only, after the fields above (which keep their offsets) */
	uint64_t shm_tx_direct;		/* frames the commit that encoded them published
					 * into the ring (nothing queued before them, one
					 * record with room): no flush; the others went
					 * through the batch */
	/* tcp:// links only, after the fields above (which keep their offsets) */
	uint64_t tcp_tx_commit;		/* send() calls from the commit that encoded a frame
					 * (the first frame of the link in a loop iteration,
					 * nothing queued before it) that wrote bytes: no
					 * flush; a part the socket did not take went on as a
					 * flush's */
	/* shared-memory links only, after the fields above (which keep their offsets) */
	uint64_t shm_lane_rx;		/* leader: frames that came on the follower's lane
					 * (rk_link_lane_open()), not on the link's ring */
};

/**
 * rk_link_send() - queue one frame; the loop flushes queued frames in one send
 * before it next waits (on a shared-memory link a frame with nothing queued
 * before it goes into the ring at once; the order holds). @payload is copied.
 * Return: 0; -RK_ETOOBIG past max_frame; -RK_ESLOWPEER when the unsent bytes
 * would pass tx_limit (the link is then failed and closed); -ENOTCONN when the
 * link is down. Loop thread.
 */
RK_EXPORT int rk_link_send(struct rk_link *link, unsigned int type, unsigned int flags,
			   const void *payload, uint32_t len);

/**
 * rk_link_reserve() / rk_link_commit() - encode a frame in place, without a
 * copy: reserve @len payload bytes, write them, then commit the final length
 * (<= @len) with its type and flags. Nothing else may be sent in between.
 * Return: reserve: a pointer, or NULL with *@err set (as rk_link_send);
 * commit: 0 or -errno. Loop thread.
 */
RK_EXPORT uint8_t *rk_link_reserve(struct rk_link *link, uint32_t len, int *err);
RK_EXPORT int rk_link_commit(struct rk_link *link, unsigned int type, unsigned int flags,
			     uint32_t len);

/** rk_link_peer() - the peer's rank, or -1 before the handshake. */
RK_EXPORT int rk_link_peer(const struct rk_link *link);
/** rk_link_up() - true once the handshake completed and until the link fails. */
RK_EXPORT bool rk_link_up(const struct rk_link *link);
/** rk_link_stats() - copy the link's counters into @out of @size bytes (sizeof(*out)), as
 * rk_loop_stats() does. Return: the bytes of counters written. Loop thread. */
RK_EXPORT size_t rk_link_stats(const struct rk_link *link, struct rk_link_stats *out,
			       size_t size);
/** rk_link_transport() - "tcp", "shm" (a link on shared memory) or "roce". */
RK_EXPORT const char *rk_link_transport(const struct rk_link *link);

/*
 * Lanes: a follower's worker thread sends to the leader without its loop.
 *
 * On a same-host link (rk_link_transport() says "shm") the follower's end of
 * the segment has a third ring, its lane, which the leader's loop polls beside
 * the link's own rings. A lane carries RK_FRAME_USER frames only, in its own
 * order (its own sequence numbers): a lane frame is not ordered against the
 * link's frames, only against the lane's. The leader checks each one as it
 * checks a link frame and hands it on as if it had come on the link (to the
 * scheduler when its backend's tag is on it, else to the world's frame
 * callback; a bad one fails the link). Use it for what is on a
 * round's critical path and carries its own key (a worker's partial results,
 * tagged with the round): the follower's loop may then sleep while its
 * workers compute and send.
 */
struct rk_lane;

struct rk_lane_stats {
	uint64_t frames;		/* frames published on the lane */
	uint64_t bytes;			/* their bytes, headers included */
	uint64_t full;			/* commits refused for want of room (-EAGAIN) */
	uint64_t wakes;			/* the leader's loop slept: this lane woke it */
};

/**
 * rk_link_lane_open() - the lane of a follower's same-host link.
 * @link: the follower's link to the leader (rk_world_link(w, 0)).
 * @out: the lane, owned by the caller until rk_lane_close().
 * One lane per link at a time; a lane closed and opened again goes on where
 * the last one stopped. The lane holds its own mapping: it stays safe to use
 * after the link failed or was destroyed (its commits then fail -EPIPE).
 * Return: 0; -EOPNOTSUPP when the link is not on shared memory (yet), is the
 * leader's end, or RK_LANE=0; -ENOTCONN when the link is not up; -EBUSY when
 * another lane of the link is open; -ENOMEM or -errno of mmap()/dup().
 * Loop thread; from any callback of that loop.
 */
RK_EXPORT int rk_link_lane_open(struct rk_link *link, struct rk_lane **out);

/**
 * rk_lane_reserve() / rk_lane_commit() - encode a frame in the lane's buffer
 * and publish it: reserve @len payload bytes, write them, then commit the
 * final length (<= @len) with the frame's type (RK_FRAME_USER only) and flags.
 * One thread at a time uses a lane (any one: the lane does no locking).
 * Return: reserve: a pointer valid until the commit, or NULL with *@err set:
 * -EBUSY (a reservation is open), -RK_ETOOBIG (@len past rk_lane_max());
 * commit: 0 (published, the leader's loop woken if it slept); -EAGAIN when the
 * lane has no room now (nothing was sent: send it another way or again
 * later); -EPIPE once the link ended at either end; -EINVAL for another type,
 * a length past the reservation, or no reservation; -RK_ESHMRING when the
 * leader's head makes no sense. Every commit ends the reservation.
 */
RK_EXPORT uint8_t *rk_lane_reserve(struct rk_lane *lane, uint32_t len, int *err);
RK_EXPORT int rk_lane_commit(struct rk_lane *lane, unsigned int type, unsigned int flags,
			     uint32_t len);
/** rk_lane_max() - the largest payload a lane frame may have, bytes. Any thread. */
RK_EXPORT uint32_t rk_lane_max(const struct rk_lane *lane);
/** rk_lane_stats() - copy the lane's counters into @out of @size bytes (sizeof(*out)), as
 * rk_loop_stats() does. Return: the bytes of counters written. The lane's thread. */
RK_EXPORT size_t rk_lane_stats(const struct rk_lane *lane, struct rk_lane_stats *out,
			       size_t size);
/**
 * rk_lane_close() - let the lane go (NULL: nothing). Any thread, once no
 * other call on the lane runs; the link may be gone already. Its frames
 * already published stay published.
 */
RK_EXPORT void rk_lane_close(struct rk_lane *lane);

/* ---- the world ----------------------------------------------------------- */

/*
 * Callbacks of a world. All run on the loop thread, inside rk_loop_run() or
 * rk_world_wait_ready(), never inside rk_world_destroy(). Frames handled by the
 * runtime itself (HELLO, WELCOME, HEARTBEAT, BYE, ERROR) are not delivered,
 * nor are those a module built on the world takes for itself: ROUND,
 * ROUND_DONE and its backend's USER tags while a scheduler exists
 * (rk_sched.h), NCCL_ID while an NCCL bootstrap does (rk_gpu.h).
 * Any of them may send or stop the loop; none may destroy the world
 * (rk_world_destroy() says -EBUSY there).
 */
struct rk_world_ops {
	/* every link this rank needs is up (leader: all followers; follower: the leader) */
	void (*ready)(struct rk_world *w, void *arg);
	/* a frame of the application: a USER frame no scheduler's backend takes,
	 * or a ROUND, ROUND_DONE or NCCL_ID no module takes (above); @payload
	 * valid during the call */
	enum rk_activity (*frame)(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				  const uint8_t *payload, void *arg);
	/*
	 * a rank failed or left: @rank is the peer (or, on a follower, a rank the
	 * leader reported dead); @err is -RK_EPEERDEAD, -RK_EPEERBYE, -ECONNRESET,
	 * a wire error, ... After it the world is degraded; most servers stop.
	 */
	void (*peer_error)(struct rk_world *w, int rank, int err, void *arg);
};

/**
 * rk_world_create() - start the bootstrap: the leader (rank 0) listens on
 * cfg->leader and accepts world_size - 1 followers; a follower connects to the
 * leader (retrying until connect_timeout) and sends HELLO.
 *
 * Peers authenticate when the config holds a secret: a follower joins only
 * after both sides proved they hold it (a stranger who knows the port gets
 * RK_EAUTH and never takes a rank). Without a secret a world of more than one
 * rank must live on loopback, or set RK_AUTH=off.
 *
 * Return: 0 and *@out, -RK_ECONFIG (rank/size/leader missing or invalid,
 * RK_AUTH=off with a secret), -RK_ENOSECRET (no secret, and the leader's
 * address is not loopback or RK_AUTH=on), -EOPNOTSUPP (a secret, but rankrt
 * was built without OpenSSL), -errno from socket setup (-EADDRINUSE...); for a
 * roce:// leader also -ENODEV, -ENOENT, -EOPNOTSUPP (see rk_rdma.h). Each
 * failure is logged with what to change. Loop thread.
 */
RK_EXPORT int rk_world_create(struct rk_loop *loop, const struct rk_world_ops *ops, void *arg,
			      struct rk_world **out);

/**
 * rk_world_wait_ready() - run the loop until the world is ready, failed, or
 * connect_timeout passed; on the leader, when it had to wait, then until
 * every link that may move to shared memory (same host) has moved or stayed
 * on TCP, within connect_timeout, so frames sent after it go on the rings (a
 * world already ready returns at once). Return: 0, -RK_ETIMEOUT, -RK_ESTOPPED (a signal),
 * or the first peer error. Loop thread, not from a callback.
 */
RK_EXPORT int rk_world_wait_ready(struct rk_world *w);

/**
 * rk_world_send() - send a frame to @rank (the leader reaches everyone;
 * a follower reaches rank 0). @payload must be a payload of @type as the
 * rk_wire_encode_*() functions write it: the receiver validates it and drops
 * the link when it does not decode. Application bytes go with
 * rk_world_send_user(). Return: as rk_link_send(), -ENOTCONN when no link to
 * @rank is up. Loop thread.
 */
RK_EXPORT int rk_world_send(struct rk_world *w, int rank, unsigned int type,
			    unsigned int flags, const void *payload, uint32_t len);

/**
 * rk_world_send_user() - send the application message @data (@len bytes, any
 * content, copied) to @rank as a USER frame tagged @tag. The receiver's frame
 * callback gets h->type == RK_FRAME_USER; rk_wire_decode_user() gives back the
 * tag and a view of the bytes (a tag of the receiver's scheduler backend goes
 * to that backend's frame op instead, rk_sched.h). Return: 0; -ENOTCONN when no link to @rank is
 * up; -RK_ETOOBIG past RK_WIRE_MAX_PAYLOAD or the link's max_frame;
 * -RK_ESLOWPEER as rk_link_send(); -EBUSY between rk_link_reserve() and
 * rk_link_commit() on that link. Loop thread.
 */
RK_EXPORT int rk_world_send_user(struct rk_world *w, int rank, uint32_t tag, const void *data,
				 uint32_t len);

/**
 * rk_world_recv_user() - run the loop until a USER frame tagged @tag arrives
 * and copy its bytes into @buf: a receive for an embedder that would rather
 * not take frames in a callback (a language binding, where each call back
 * into the language costs more than the frame). Only the frame that ends the
 * run is taken; while it runs every other frame, event and callback goes on
 * as in rk_loop_run(), and a second frame of @tag that the same iteration
 * finds goes to the frame callback. A tag of a scheduler's backend cannot be
 * received here.
 * @buf, @cap: where the bytes go, and its room; @peer, @len (may be NULL):
 * the sender's rank and the message's length. @timeout_ns: give up after it
 * (negative: no limit).
 * Return: 1 and the message in @buf; -EMSGSIZE when it is longer than @cap
 * (*@len says how long; the frame went to the world's frame callback instead,
 * and the run ended); 0 when the run ended with no frame (a callback called
 * rk_loop_stop(), e.g. on a peer's error; a stop asked for before the call
 * ends it at once); -RK_ETIMEOUT; -RK_ESTOPPED (a signal); -EBUSY (a
 * scheduler takes @tag, or called from a callback); -EINVAL (@buf NULL with
 * @cap > 0); -ENOMEM or the loop's -errno for the timer. Loop thread, not
 * from a callback.
 */
RK_EXPORT int rk_world_recv_user(struct rk_world *w, uint32_t tag, void *buf, uint32_t cap,
				 int *peer, uint32_t *len, int64_t timeout_ns);

/**
 * rk_world_broadcast() - leader: send a frame to every follower (the payload
 * is encoded once, copied into each link's batch). Return: 0 or the first
 * error (-ENOTCONN on a follower). Loop thread.
 */
RK_EXPORT int rk_world_broadcast(struct rk_world *w, unsigned int type, unsigned int flags,
				 const void *payload, uint32_t len);

/** rk_world_link() - the link to @rank while it is up, or NULL (rk_world_link_stats() reads
 * the counters of one that went). */
RK_EXPORT struct rk_link *rk_world_link(struct rk_world *w, int rank);
/**
 * rk_world_link_stats() - copy the counters of the link to @rank into @out of @size bytes
 * (sizeof(*out)), as rk_link_stats() does: the link's while it is up and while it is being
 * closed after it failed or left; after that, the counters it had when it was freed, kept
 * by the world until rk_world_destroy() (a rank that joins again replaces them).
 * Return: the bytes of counters written; -EINVAL for a rank out of range or this rank's
 * own; -ENOENT when no link to @rank has been up (a follower's ranks other than 0).
 * Loop thread; from any callback of the world (peer_error included).
 */
RK_EXPORT int rk_world_link_stats(const struct rk_world *w, int rank, struct rk_link_stats *out,
				  size_t size);
RK_EXPORT int rk_world_rank(const struct rk_world *w);
RK_EXPORT int rk_world_size(const struct rk_world *w);
RK_EXPORT struct rk_loop *rk_world_loop(const struct rk_world *w);
/** rk_world_port() - leader: the TCP port it listens on; -ENOTCONN elsewhere. */
RK_EXPORT int rk_world_port(const struct rk_world *w);
/** rk_world_failed() - the first peer error (negative), or 0. */
RK_EXPORT int rk_world_failed(const struct rk_world *w);

/*
 * Counters of a world: what came to the leader's port. "Refused" counts
 * connections dropped before their handshake completed, by cause; a cause's
 * log lines are rate-limited (RK_REFUSED_LOG_MS), these counts are not.
 */
struct rk_world_stats {
	uint64_t accepted;		/* connections accepted on the leader's port */
	uint64_t joined;		/* followers that completed the handshake */
	uint64_t pending;		/* handshakes in progress now */
	uint64_t pending_max;		/* the most at once */
	uint64_t refused_magic;		/* not rankrt: bad magic or header CRC (scanners) */
	uint64_t refused_version;	/* another wire or protocol version */
	uint64_t refused_frame;		/* a malformed or out-of-order handshake frame */
	uint64_t refused_job;		/* another job: world size or session id differ */
	uint64_t refused_rank;		/* rank out of range, the leader's, or taken */
	uint64_t refused_auth;		/* RK_EAUTH: no proof, a wrong one, or no secret */
	uint64_t refused_timeout;	/* no complete handshake within RK_HANDSHAKE_MS */
	uint64_t refused_evicted;	/* dropped for a newer connection (table full) */
	uint64_t refused_closed;	/* the peer closed or reset before completing */
	uint64_t refused_other;		/* anything else (a peer's ERROR, no memory) */
	uint64_t log_suppressed;	/* refusals counted but not logged one by one */
	/* same-host links (README "Same-host links") */
	uint64_t shm_links;		/* links that moved to shared memory */
	uint64_t shm_remote;		/* links whose ends are on different hosts or namespaces */
	uint64_t shm_fallback;		/* same host, but a kernel feature or the setup failed:
					 * the link stayed on TCP (logged once per world) */
};

/** rk_world_stats() - copy the world's counters into @out of @size bytes (sizeof(*out)), as
 * rk_loop_stats() does. Return: the bytes of counters written. Loop thread. */
RK_EXPORT size_t rk_world_stats(const struct rk_world *w, struct rk_world_stats *out,
				size_t size);

/**
 * rk_world_destroy() - send BYE on every link, flush briefly (bounded by
 * 100 ms), close the sockets and free the world. Meanwhile only I/O runs (ring
 * completions and sources): no callback of @w, no post and no timer; posts
 * queued for the loop wait for the next rk_loop_run(). Return: 0; -EBUSY
 * (nothing done) while a scheduler built on @w exists (rk_sched_destroy() it
 * first) or when called from inside a callback of the loop; -EEXIST (nothing
 * done) on a thread other than the one a RK_DEFER_TASKRUN loop is bound to
 * (rk_loop_run()). NULL is a no-op. Loop thread.
 */
RK_EXPORT int rk_world_destroy(struct rk_world *w);

#ifdef __cplusplus
}
#endif
#endif /* RK_RUNTIME_H */
