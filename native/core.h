/* The run loop, its accounting, and the helpers the bindings (bind.h) expose. */
#ifndef IODL_CORE_H
#define IODL_CORE_H

#include <stdint.h>
#include <sys/types.h>

#include "engine.h"

/*
 * Latency histogram: fio's plat_val_to_idx with 6 sub-bucket bits, extended to 32 groups so
 * that it reaches 2^37 ns (~137 s). Values < 128 ns have their own bucket; above that each
 * power of two is split into 64 linear buckets, so a bucket midpoint is within 1/128 (0.78%)
 * of any value in it. iodl/histogram.py mirrors this function; tests hold them together.
 */
#define IODL_HIST_BITS 6
#define IODL_HIST_VAL (1u << IODL_HIST_BITS)
#define IODL_HIST_GROUPS 32
#define IODL_HIST_BUCKETS (IODL_HIST_GROUPS * IODL_HIST_VAL)
#define IODL_DEPTH_BUCKETS 7	/* fio iodepth_level: 1, 2, 4, 8, 16, 32, >=64 */

/*
 * Time series: one row per series_bucket_ns of completion time, holding bytes, ios, cached
 * bytes and a coarse latency histogram. A coarse bucket merges 2^IODL_SERIES_SHIFT fine ones
 * (~6% wide): enough for a per-second p99 at 1/8 of the memory, which matters at one row per
 * second per rank over a long run.
 */
#define IODL_SERIES_SHIFT 3
#define IODL_SERIES_LAT_BUCKETS (IODL_HIST_BUCKETS >> IODL_SERIES_SHIFT)
enum { IODL_SERIES_BYTES, IODL_SERIES_IOS, IODL_SERIES_CACHED, IODL_SERIES_LAT };
#define IODL_SERIES_WIDTH (IODL_SERIES_LAT + IODL_SERIES_LAT_BUCKETS)

/* The live counters another process may read while we run (progress, also during a ramp). */
enum { IODL_LIVE_BYTES, IODL_LIVE_IOS, IODL_LIVE_CACHED, IODL_LIVE_N };

static inline unsigned iodl_hist_index(uint64_t ns)
{
	unsigned msb, error_bits, idx;

	if (ns < 2 * IODL_HIST_VAL)
		return (unsigned)ns;
	msb = 63u - (unsigned)__builtin_clzll(ns);
	error_bits = msb - IODL_HIST_BITS;
	idx = ((error_bits + 1) << IODL_HIST_BITS) + (unsigned)((ns >> error_bits) & (IODL_HIST_VAL - 1));
	return idx < IODL_HIST_BUCKETS ? idx : IODL_HIST_BUCKETS - 1;
}

/* fio's io_u_mark_depth bins: floor(log2(depth)), capped at ">= 64". */
static inline unsigned iodl_depth_index(unsigned depth)
{
	unsigned i = depth <= 1 ? 0 : 31u - (unsigned)__builtin_clz(depth);
	return i < IODL_DEPTH_BUCKETS - 1 ? i : IODL_DEPTH_BUCKETS - 1;
}

/* pagecache.c: page-cache figures that hold for any caller (see there) */
#define IODL_NOT_MEASURABLE 1	/* the kernel will not tell this caller */
struct stat;
int iodl_task_io_accounting(void);
uint64_t iodl_thread_read_bytes(void);
int iodl_reads_accounted(int fd, const struct stat *sb);
/* 0 (*out set), IODL_NOT_MEASURABLE, or -errno (*failed names the call) */
int iodl_resident_bytes(int fd, uint64_t offset, uint64_t len, uint64_t *out, const char **failed);

struct iodl_plan_row {		/* iodl.plan.PLAN_DTYPE; op is IODL_OP_* (engine.h) */
	uint64_t file, offset, length, op;
};

struct iodl_io_record {		/* iodl.fio.logs.RECORD_DTYPE */
	uint64_t t_ns, lat_ns, clat_ns, slat_ns, bytes, offset, op;
};

struct iodl_records {
	struct iodl_io_record *buf;
	size_t cap, n, lost;
};

struct iodl_run_args {
	const int *fds;
	size_t nfds;
	/*
	 * NULL, or nfds rows: what fds[i]'s open found through the fd just before (the open-ahead
	 * pool's fstat, opener.c): (st_size, st_dev) of the regular file it is, or st_size -1 where
	 * not known. A known file is not fstat'ed again at its first row (one syscall a file less:
	 * a sample's, on one-sample-per-file datasets); a file cut since meets EOF early, which a
	 * short row reports from its own fstat as before.
	 */
	const int64_t (*opened)[2];
	const struct iodl_plan_row *plan;
	size_t nrows;
	int64_t *hist;			/* IODL_HIST_BUCKETS, accumulated into: "lat", submit call -> reaped */
	/*
	 * NULL, or IODL_HIST_BUCKETS accumulated into, for the same counted completions as hist,
	 * split at fio's issue_time (the submit call's return): clat = issued -> reaped, slat =
	 * submit call entered -> issued, so per request lat = slat + clat. Sync engines (pread):
	 * clat is the whole call and no slat is recorded, as fio. Asking for either makes async
	 * engines read the clock once more per submit call; iodl read asks for neither.
	 */
	int64_t *clat_hist, *slat_hist;
	/*
	 * NULL, or IODL_HIST_BUCKETS accumulated into: one sample per counted fsync/fdatasync row,
	 * the sync call alone (the wait for the requests in flight before it is not in it).
	 */
	int64_t *fsync_hist;
	/*
	 * NULL, or IODL_HIST_BUCKETS each: where the writes' samples go instead of hist, clat_hist and
	 * slat_hist (fio reports reads and writes apart: a mixed job's read and write latencies are
	 * not one histogram). Each NULL one leaves the writes' samples of that kind with the reads'.
	 */
	int64_t *write_hist, *write_clat_hist, *write_slat_hist;
	/*
	 * NULL, or room for cap records: one per counted data completion, in completion order, for logs
	 * of every I/O (fio's write_lat_log and friends). n says how many were filled; those past cap
	 * are counted in lost, never written.
	 */
	struct iodl_records *records;
	uint64_t deadline_ns;		/* 0: none */
	/*
	 * The measured window (0: unbounded). Only completions inside it are counted, and the
	 * start/end reported are clipped to it, so a ramp needs no separate run: the queue stays
	 * full across the ramp's end instead of draining, and a drain after the window's end does
	 * not stretch it.
	 */
	uint64_t window_start_ns, window_end_ns;
	/*
	 * NULL, or when Engine.cancel() was called (0: not yet), written from another thread. What
	 * completes after it only drains: the run ended there, like a window's end.
	 */
	const uint64_t *cancel_ns;
	uint64_t rate_bps;		/* 0: unpaced */
	/*
	 * Requests per submit call (fio's iodepth_batch_submit): 1, fio's default, hands each
	 * request to the kernel as soon as it has a slot; 0 stages every free slot and submits
	 * them in one call (fewer syscalls; on some devices, e.g. loop, a slower pipeline).
	 */
	unsigned submit_batch;
	/*
	 * Completions taken per reap at most (fio's iodepth_batch_complete_max, which fio 3.33 fixes
	 * up to iodepth_batch_complete_min = 1: one per io_getevents, so the queue is refilled to
	 * iodepth after every completion). 0: all that are ready (iodl's own default).
	 */
	unsigned reap_batch;
	/*
	 * 1: after each submit, take the completions already there without a syscall (the engine's
	 * ready op) before taking the next row. The pool's slots are a stack, so a read the kernel
	 * finished inside the submit (a page-cache hit) hands its slot, warm in the CPU's caches, to
	 * the next row: a batch of cached one-sample files then copies into one or two slots, not
	 * into all `depth` in turn (16 paced open-read-close loops in C: 63-65 us a 323 KB file into
	 * one buffer, 71-76 into 8 rotating 1 MiB ones). What the storage sees is unchanged: a
	 * request is reaped earlier, never submitted earlier. 0: fio's way, reaped when the slots
	 * run out (fio-compare keeps it).
	 */
	int reap_ready;
	/* NULL or series_rows x IODL_SERIES_WIDTH, accumulated into for counted completions */
	int64_t *series;
	size_t series_rows;
	uint64_t series_origin_ns, series_bucket_ns;	/* row = (completion - origin) / bucket */
	/* NULL or IODL_LIVE_N counters, shared: bumped at every completion, window or not */
	int64_t *live;
	/*
	 * cache_check: count which delivered bytes the storage did not have to deliver (buffered
	 * reads of files whose reads the kernel accounts to us, pagecache.c). The storage bytes
	 * this thread's reads made the device deliver and no completion has been charged with yet
	 * (readahead ahead of the reader): kept by the caller, so a next run charges them.
	 */
	int cache_check;
	uint64_t *storage_pending;
	/* called (GIL released) every 100 ms and after EINTR: nonzero = a signal or cancel() wants the
	 * run to stop */
	int (*interrupted)(void *arg);
	void *interrupted_arg;
};

struct iodl_stats {
	uint64_t done, ios, bytes, cached_bytes, errors;
	uint64_t write_ios, write_bytes;	/* of ios and bytes, the writes' */
	uint64_t fsyncs, fsync_ns;		/* sync rows run (fsync and fdatasync), time in the calls */
	uint64_t cache_unmeasured_bytes;	/* of bytes, those whose cache state cannot be measured */
	int first_errno;
	int64_t first_error_row;
	uint64_t t_start_ns, t_end_ns, max_ns;
	uint64_t t_first_ns, t_last_ns;	/* first and last counted completion */
	uint64_t depth[IODL_DEPTH_BUCKETS];
	uint64_t series_clamped;	/* counted completions past the series' last row, filed there */
	int interrupted;
	uint64_t short_rows;		/* rows that met EOF before their length */
	int64_t first_short_row;	/* lowest of them, -1 if none */
	uint64_t short_file_size;	/* that row's file size when its read met EOF */
	uint64_t abandoned;		/* requests left in the kernel by a stop on hung storage */
};

/* content.c: write buffers as fio fills them (compressibility, dedupe, patterns), when a job asks */
int iodl_content_set(struct iodl_ctx *c, unsigned compress_pct, uint64_t chunk, unsigned dedupe_pct,
		     const void *pattern, size_t pattern_len, int zero, int refill, int scramble, uint64_t min_write,
		     uint64_t seed);
void iodl_content_write(struct iodl_ctx *c, struct iodl_req *r, uint64_t len);
void iodl_content_free(struct iodl_ctx *c);

/* barrier.c: lives in a page shared by the ranks of a node, zeroed by its creator */
struct iodl_node_barrier {
	uint32_t arrived;
	uint32_t generation;	/* the futex word: bumped when a round completes */
	uint32_t flags;		/* OR of this round's flags so far */
	uint32_t result;	/* OR of the last completed round's flags */
	uint32_t waking;	/* futex word: the node's ranks not yet back at work since the last release */
	uint32_t pad;
	uint64_t until_ns;	/* the latest compute end (CLOCK_MONOTONIC) of this round's arrivals so far */
};

/*
 * Arrive with this rank's compute end (CLOCK_MONOTONIC ns, 0: none). 0: wait for *gen to change;
 * 1: we were last: sleep to *until_ns (the round's latest compute end), then iodl_barrier_release.
 */
int iodl_barrier_arrive(struct iodl_node_barrier *b, uint32_t nranks, uint32_t flag, uint64_t until_ns,
			uint32_t *gen, uint64_t *latest_ns);
/* The last arriver releases the round: publishes the flags, resets, wakes every waiter */
void iodl_barrier_release(struct iodl_node_barrier *b, uint32_t nranks);
/* The last arriver's sleep to the round's compute end: 1 reached, 0 timeout_ns passed first, -EINTR */
int iodl_barrier_sleep(uint64_t until_ns, uint64_t timeout_ns);
/* 1: released; 0: timeout_ns passed first; -EINTR */
int iodl_barrier_wait(struct iodl_node_barrier *b, uint32_t gen, uint64_t timeout_ns);
/*
 * This rank is back at work after the last release (once a round); the last one wakes the
 * quiet-waiters. wait_ns > 0: then wait, at most that long, for this round's others to be back too
 * (a step loop's own work that can wait: done then, it delays none of them). 1: all are back (or no
 * round is under way); 0: not yet (no wait asked, or wait_ns passed first).
 */
int iodl_barrier_resumed(struct iodl_node_barrier *b, uint64_t wait_ns);
/*
 * Wait for the node's ranks to be back at work after a release: the one under way, or the next
 * when none is (every rank at work now). 1: they are; 0: timeout_ns passed first; -EINTR.
 */
int iodl_barrier_quiet_wait(struct iodl_node_barrier *b, uint64_t timeout_ns);

/*
 * account.c: what one completed request counts for, the single definition that core.c's loop
 * and _native.account (a Python engine's recorded completions) both use.
 */
struct iodl_done {
	int op;				/* IODL_OP_*: a sync counts only in fsyncs, fsync_ns and fsync_hist */
	uint64_t t_ns;			/* reaped: decides the window and the series row */
	uint64_t bytes, cached;		/* delivered, and of them not delivered by the storage */
	uint64_t lat_ns;		/* handed over -> reaped: hist, max_ns (a sync: the call) */
	uint64_t clat_ns, slat_ns;	/* issued -> reaped, handed over -> issued (see clat_hist) */
	uint64_t offset;		/* of the plan row (records only) */
	int has_slat;			/* 0: a sync read, which has no slat (fio) */
	int unmeasured;			/* cache_check on, but this file's hits cannot be measured */
};

/* Count d into st and a's histograms, series and live counters; 1 if inside the window. */
int iodl_account(const struct iodl_run_args *a, struct iodl_stats *st, const struct iodl_done *d);
/* n requests handed over at t_ns, bringing the requests in flight to inflight: the depth bins */
void iodl_account_submit(const struct iodl_run_args *a, struct iodl_stats *st, uint64_t t_ns, unsigned inflight,
			 unsigned n);
/* st->t_start_ns (first submit) and t_end_ns (last completion) as reported: clipped to the window */
void iodl_account_finish(const struct iodl_run_args *a, struct iodl_stats *st, uint64_t now);

int iodl_ctx_open(struct iodl_ctx **out, const struct iodl_engine_ops *ops, unsigned depth,
		  size_t block_size, int direct, int fresh_bufs, int fio_ring, int register_bufs,
		  uint64_t delay_ns, uint64_t *device, const char **failed);
void iodl_ctx_close(struct iodl_ctx *c);
/* 0, or -errno when the engine itself broke (c->failed_syscall says where) */
int iodl_run(struct iodl_ctx *c, const struct iodl_run_args *a, struct iodl_stats *st);

#endif
