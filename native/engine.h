/*
 * The engine interface: one small versioned ops table, shaped like fio's ioengine_ops.
 * core.c owns the loop, the clocks and the accounting; an engine only turns a request into
 * syscalls and hands completed requests back. Every request an engine accepts with
 * IODL_Q_QUEUED comes back exactly once through getevents/event, errors included.
 */
#ifndef IODL_ENGINE_H
#define IODL_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>	/* dev_t */

#define IODL_OPS_VERSION 8	/* 2: iodl_req.t_due_ns, iodl_ctx.device; 3: bounded getevents, EAGAIN kept;
				   4: async engines stamp t_issued_ns when asked (iodl_ctx.stamp_issued);
				   5: iodl_req.op: a request is a read or a write (an engine that
				      ignored it would read where the plan writes);
				   6: iodl_ctx.fresh_bufs: a read's buf may lie outside the pool (an
				      engine that registered the pool must not read into it then);
				   7: iodl_ctx.fio_ring, register_bufs (uring: fio's ring, its fixedbufs);
				   8: ready (optional) */
#define IODL_ALIGN 4096		/* O_DIRECT buffer/offset/length alignment */

enum iodl_q_status {
	IODL_Q_COMPLETED = 0,	/* done inline (sync engines): req->res is set */
	IODL_Q_QUEUED = 1,	/* staged: ->commit() submits it */
	IODL_Q_BUSY = 2,	/* no more room, call ->commit() and reap first */
};

enum {
	IODL_ENG_SYNC = 1u << 0,	/* ->queue completes inline; depth is 1 */
	IODL_ENG_FIXED_BUFS = 1u << 1,	/* may register the pool once (io_uring) */
	IODL_ENG_FAKE = 1u << 2,	/* does no I/O (null): no fds are looked at */
};

/*
 * What a plan row asks for (iodl.plan.OP_*). Engines only ever see IODL_OP_READ and
 * IODL_OP_WRITE: the core runs the syncs itself, synchronously, once nothing is in flight.
 */
enum { IODL_OP_READ, IODL_OP_WRITE, IODL_OP_FSYNC, IODL_OP_FDATASYNC, IODL_OP_COUNT };

/* One in-flight request; `depth` of them are preallocated, request i always uses pool slot i. */
struct iodl_req {
	int fd;
	int op;			/* IODL_OP_READ or IODL_OP_WRITE (the bytes at buf, len of them) */
	uint32_t slot;
	uint64_t offset;	/* of this issue */
	uint64_t len;		/* asked of the kernel: a direct read's is rounded up to IODL_ALIGN
				   (a direct write's is aligned already: bind_plan.c refuses it otherwise) */
	void *buf;
	void *own;		/* core-only, fresh_bufs: the read's own malloc'd block, buf aligned inside it */
	int64_t res;		/* bytes or -errno, set by the engine at completion */
	uint64_t t_submit_ns;	/* set by core before ->commit() (or ->queue() for sync engines) */
	/*
	 * fio's issue_time: when the submit call that handed this request to the kernel returned.
	 * Set by an async engine right after that call, only while c->stamp_issued (one clock
	 * read per submit call); it must be the engine, because only it knows which of the staged
	 * requests a call took (EAGAIN leaves the rest for a later call). Sync engines: core.
	 */
	uint64_t t_issued_ns;
	uint64_t t_due_ns;	/* engine-owned: when an engine that makes up its latency (null) completes it */

	/* core-only: the plan row this request belongs to, and how much of it is left */
	uint64_t row;
	uint32_t file;
	uint64_t got;		/* bytes of the row delivered so far (short reads re-issue the rest) */
	uint64_t want;		/* bytes of the row still wanted */
	uint64_t skip;		/* O_DIRECT continuation: bytes read (written) again before the wanted ones */
	/*
	 * Write content (core-only): bytes at the slot's start a read overwrote since its random
	 * content was made (refilled before a write), and the engine's written-bytes count when
	 * the slot's last write started (UINT64_MAX: never). See core.c, write_content().
	 */
	uint64_t stale;
	uint64_t last_written;
};

struct iodl_ctx {
	const struct iodl_engine_ops *ops;
	unsigned depth;
	size_t slot_size;		/* pool bytes per request, a multiple of IODL_ALIGN */
	unsigned char *pool;		/* depth * slot_size, IODL_ALIGN-aligned, allocated once */
	struct iodl_req *reqs;
	int direct;
	uint64_t delay_ns;		/* null engine: completion is due this long after submit */
	/*
	 * null engine: an emulated device shared with other engines (other processes, through a
	 * shared mapping): the CLOCK_MONOTONIC ns until which it is busy. NULL: no device, each
	 * request is delayed on its own. Owned by the caller, who keeps it mapped while we run.
	 */
	uint64_t *device;
	int fixed_bufs;			/* set by an engine that registered the pool */
	/*
	 * Each read gets a block of its own, malloc'd and zeroed when its row is taken, freed when
	 * the row is done; its buffer is the first IODL_ALIGN boundary inside. What DLIO's odirect
	 * readers do per file (a bytearray of the size rounded up plus 4095, then one readv): the
	 * pages a direct read pins decide its requests' sizes (the block layer joins physically
	 * adjacent ones), so the requests follow how the buffer was allocated. The pool is then
	 * not touched by reads, not faulted in and not registered. Set before ->init().
	 */
	int fresh_bufs;
	int stamp_issued;		/* set by core for a run that measures slat/clat: see t_issued_ns */
	int syscall_reap;		/* aio: every reap is an io_getevents call, never the mmapped ring
					   (fio libaio's default: fio-compare does the work fio does) */
	/*
	 * uring, set before ->init(): fio_ring makes the ring as fio 3.33's io_uring engine does
	 * (CQSIZE = depth, COOP_TASKRUN | SINGLE_ISSUER | DEFER_TASKRUN: completions are posted only
	 * when the issuing thread enters with GETEVENTS, which every submit passes), so that
	 * fio-compare's kernel does per request what it does for fio. A SINGLE_ISSUER ring belongs
	 * to one thread: it is made disabled and enabled by the thread of the first submit, and a
	 * run in another thread afterwards fails (EEXIST). register_bufs: register the pool once
	 * (READ_FIXED/WRITE_FIXED, no page pinning per request); fio registers only with fixedbufs=1.
	 */
	int fio_ring;
	int register_bufs;
	void *eng;			/* engine-private state, owned by ->init()/->cleanup() */
	const char *failed_syscall;	/* set when a call fails, for "(originated from X)" */
	/*
	 * Requests were still in the kernel when a stopped run gave up waiting for them (hung
	 * storage): the kernel may still write into the pool, so close never frees it nor tears
	 * down the engine (which would wait for them): both are left to the process's exit.
	 */
	int abandoned;
	/*
	 * Write content, owned by the core: the pool's pseudo-random state, the stamps given so far
	 * (each 4 KiB block a write sends out gets the next one) and the bytes written from the
	 * pool. Per engine, so no two engines share a sequence and nothing is global.
	 */
	uint64_t rand_state, stamp_seed, stamps, written;
	struct iodl_content *content;	/* NULL, or fio's write content as a job asked for it (content.c) */
	/*
	 * iodl_reads_accounted of the last regular file's filesystem (st_dev), kept across runs: the
	 * answer is the filesystem's, so an engine asks once per filesystem (an access of its sysfs
	 * entry and an fstatfs), not per run: a step's batch is a run, and the sysfs walk cost more
	 * than a close each step (1.4 % of a one-sample-per-file rank's CPU).
	 */
	dev_t accounted_dev;
	int accounted;			/* -1: not asked yet */
};

struct iodl_engine_ops {
	const char *name;
	int version;		/* must equal IODL_OPS_VERSION */
	unsigned flags;
	int (*probe)(void);	/* 0 if usable on this kernel, else -errno */
	int (*init)(struct iodl_ctx *);
	enum iodl_q_status (*queue)(struct iodl_ctx *, struct iodl_req *);
	/*
	 * 0 or -errno (fatal); NULL for sync engines. A transient refusal (EAGAIN) is not an
	 * error: the engine keeps what it could not submit and submits it again at its next
	 * commit or getevents, after completions made room (fio: "reap, then retry").
	 */
	int (*commit)(struct iodl_ctx *);
	/* wait until >= min completions are ready, return how many (<= max) or -errno. Every wait
	 * is bounded (IODL_WAIT_SLICE_NS, sys.h) so that the core can look for a stop request:
	 * fewer than min, 0 included, is a normal return */
	int (*getevents)(struct iodl_ctx *, unsigned min, unsigned max);
	/* optional: how many completions getevents would return now without a syscall (0 when it
	 * cannot tell without one): the core's early reap (iodl_run_args.reap_ready) */
	unsigned (*ready)(struct iodl_ctx *);
	struct iodl_req *(*event)(struct iodl_ctx *, unsigned i);
	void (*cleanup)(struct iodl_ctx *);
};

extern const struct iodl_engine_ops iodl_engine_null;
extern const struct iodl_engine_ops iodl_engine_psync;
extern const struct iodl_engine_ops iodl_engine_aio;
extern const struct iodl_engine_ops iodl_engine_uring;

/* engines.c: the compiled-in table, NULL-terminated, every entry checked at import */
extern const struct iodl_engine_ops *const iodl_engines[];
const struct iodl_engine_ops *iodl_engine_find(const char *name);
const char *iodl_check_engine_ops(const struct iodl_engine_ops *ops);

#endif
