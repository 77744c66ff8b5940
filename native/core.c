/*
 * The per-I/O loop: keep `depth` requests of a plan in flight through an engine, stamp
 * submit/completion on CLOCK_MONOTONIC, count bytes, ios, page-cache hits and errors, and
 * fill the latency and depth histograms. Engines never see the plan or the stats, and read the
 * clock only to stamp when a submit call returned (fio's issue_time, for slat/clat) or, null,
 * to make up a latency.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <linux/fs.h>

#include "core.h"
#include "sys.h"

#define UNKNOWN_SIZE UINT64_MAX
/*
 * How often the loop looks for a pending signal (Ctrl-C). It cannot rely on EINTR: the
 * process-directed signal may be taken by any thread (numpy's BLAS threads, MPI's progress
 * thread), leaving our wait untouched. Looking costs taking the GIL, so only every 100 ms.
 */
#define SIGNAL_CHECK_NS IODL_WAIT_SLICE_NS
/*
 * After a stop request (signal, cancel), how long the requests in flight may take to drain.
 * Past it the storage is taken to be hung: the run returns and leaves them to the kernel
 * (iodl_ctx.abandoned), so that a stop is never held up by a request that does not complete.
 */
#define DRAIN_LIMIT_NS 1000000000ull
/*
 * Asking the kernel what this thread's reads fetched from storage costs a getrusage (~0.5 us,
 * as much as a 4 KiB read from the cache). It is asked after a request that took long enough
 * to have waited for the storage, and otherwise at least every STORAGE_SAMPLE_NS; what a
 * quick read started (asynchronous readahead) is then charged to the next completions, which
 * are the ones it was read ahead for.
 */
#define STORAGE_WAIT_NS 8000ull
#define STORAGE_SAMPLE_NS 1000000ull

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/*
 * Write content. Storage that compresses or deduplicates must see neither chance: the pool is
 * filled with pseudo-random bytes once, at open; before a write, the first 8 bytes of each of its
 * 4 KiB blocks get the engine's next stamp, so no two 4 KiB blocks an engine writes are equal.
 * Apart from its stamps a slot repeats what it wrote last time, so its bytes are made again when
 * its last write started less than REPEAT_DISTANCE earlier in the stream of bytes this engine
 * writes (a compression record holding both would find the repeat: 1 MiB is the largest common
 * one, ZFS recordsize=1M; btrfs compresses 128 KiB extents), and where a read overwrote them
 * (file data may compress). Requests of 1 MiB or more never refill; smaller ones do when their
 * slot comes round again within 1 MiB (a 4 KiB write at depth 1: every time, ~0.5 us).
 */
#define REPEAT_DISTANCE (1ull << 20)
#define NEVER_WRITTEN UINT64_MAX
#define GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's output function (Steele, Lea, Flood 2014): a bijection of 64-bit values */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* splitmix64: ~1 ns per 8 bytes, so even a 4 GiB pool is filled in about a second */
static void fill_random(struct iodl_ctx *c, unsigned char *p, size_t n)
{
	uint64_t s = c->rand_state, v;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		v = mix64(s += GOLDEN);
		memcpy(p + i, &v, 8);
	}
	if (i < n) {
		v = mix64(s += GOLDEN);
		memcpy(p + i, &v, n - i);
	}
	c->rand_state = s;
}

/*
 * Per engine, so that two engines (ranks, nodes) writing the same storage do not share a
 * sequence: the wall clock, the process and the context's address differ between any two. Not
 * getrandom(): glibc has it only since 2.25, and distinct is all a seed must be here.
 */
static uint64_t engine_seed(const struct iodl_ctx *c)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
	       mix64(iodl_now_ns() + GOLDEN) ^ mix64(((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c);
}

static void write_content(struct iodl_ctx *c, struct iodl_req *r, uint64_t len)
{
	unsigned char *buf = c->pool + (size_t)r->slot * c->slot_size;

	if (c->content) {
		iodl_content_write(c, r, len);
		return;
	}
	if (r->stale || (r->last_written != NEVER_WRITTEN && c->written - r->last_written < REPEAT_DISTANCE))
		fill_random(c, buf, r->stale > len ? r->stale : len);
	r->stale = 0;
	r->last_written = c->written;	/* where this write starts in the stream */
	/* stamp k is mix64(seed + k * GOLDEN): distinct k (GOLDEN is odd), so distinct stamps */
	for (uint64_t off = 0; off < len; off += IODL_ALIGN) {
		uint64_t v = mix64(c->stamp_seed + ++c->stamps * GOLDEN);

		memcpy(buf + off, &v, len - off < 8 ? len - off : 8);
	}
	c->written += len;
}

int iodl_ctx_open(struct iodl_ctx **out, const struct iodl_engine_ops *ops, unsigned depth,
		  size_t block_size, int direct, int fresh_bufs, int fio_ring, int register_bufs,
		  uint64_t delay_ns, uint64_t *device, const char **failed)
{
	struct iodl_ctx *c;
	int rc;

	if (ops->flags & IODL_ENG_SYNC)
		depth = 1;	/* one pread at a time: a deeper pool would only waste memory */
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->ops = ops;
	c->depth = depth;
	c->slot_size = round_up(block_size ? block_size : 1, IODL_ALIGN);
	c->direct = direct;
	c->fresh_bufs = fresh_bufs && !(ops->flags & IODL_ENG_FAKE);
	c->fio_ring = fio_ring;
	c->register_bufs = register_bufs;
	c->delay_ns = delay_ns;
	c->device = device;
	c->accounted = -1;
	c->reqs = calloc(depth, sizeof(*c->reqs));
	rc = posix_memalign((void **)&c->pool, IODL_ALIGN, (size_t)depth * c->slot_size);
	if (rc || !c->reqs) {
		c->pool = rc ? NULL : c->pool;
		*failed = "posix_memalign";
		iodl_ctx_close(c);
		return -ENOMEM;
	}
	/* Fault the pool in now, once, so that the first run does not pay for it inside the clock,
	 * with the bytes writes send (the null engine never touches it: leave it untouched, and out
	 * of every rank's RSS; so do fresh buffers, whose reads never use it: a write fills its slot
	 * first, the slot being stale). */
	if (!(ops->flags & IODL_ENG_FAKE)) {
		c->rand_state = engine_seed(c);
		c->stamp_seed = mix64(c->rand_state ^ 0x5bd1e9955bd1e995ull);	/* its own sequence */
		if (!c->fresh_bufs)
			fill_random(c, c->pool, (size_t)depth * c->slot_size);
	}
	for (unsigned i = 0; i < depth; i++) {
		c->reqs[i].slot = i;
		c->reqs[i].buf = c->pool + (size_t)i * c->slot_size;
		c->reqs[i].last_written = NEVER_WRITTEN;
		c->reqs[i].stale = c->fresh_bufs ? c->slot_size : 0;
	}
	rc = ops->init(c);
	if (rc < 0) {
		*failed = c->failed_syscall ? c->failed_syscall : ops->name;
		c->ops = NULL;	/* init cleans up after itself on failure */
		iodl_ctx_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

void iodl_ctx_close(struct iodl_ctx *c)
{
	if (!c)
		return;
	if (c->abandoned) {
		/* the kernel may still write into the pool, and tearing the engine down would wait
		 * for the hung requests (io_destroy does): both are left to the process's exit */
		iodl_content_free(c);
		free(c->reqs);
		free(c);
		return;
	}
	if (c->ops)
		c->ops->cleanup(c);
	for (unsigned i = 0; i < c->depth && c->reqs; i++)
		free(c->reqs[i].own);	/* a run's rows are done when it returns: none, normally */
	iodl_content_free(c);
	free(c->pool);
	free(c->reqs);
	free(c);
}

struct file_state {
	int seen;
	int measured;			/* cache_check: the kernel accounts this file's reads to us */
	uint64_t size;			/* EOF: a short read that reaches it ends the row */
};

struct loop {
	struct iodl_ctx *c;
	const struct iodl_run_args *a;
	struct iodl_stats *st;
	struct file_state *files;
	uint32_t *free_slots;
	struct iodl_req **reissue;	/* rows whose short read must be continued */
	struct iodl_req **staged;
	unsigned nfree, nreissue, nstaged, inflight;
	uint64_t next_row;
	uint64_t paced_bytes;		/* planned bytes issued so far: the rate schedule */
	uint64_t t_origin;		/* when the first row was issued: the schedule's zero */
	int stop;			/* no new rows (deadline, error or signal) */
	int cache_check;		/* buffered reads whose cache hits are counted */
	uint64_t storage_seen;		/* this thread's read-bytes counter when last looked at */
	uint64_t storage_seen_ns;	/* and when */
};

static void first_use(struct loop *L, uint32_t file)
{
	struct file_state *f = &L->files[file];
	int fd = L->a->fds[file];
	struct stat sb;

	f->seen = 1;
	f->size = UNKNOWN_SIZE;
	if (L->c->ops->flags & IODL_ENG_FAKE)
		return;
	if (L->a->opened && L->a->opened[file][0] >= 0) {
		/* what the opener's fstat of this fd found: a regular file, its size and device */
		memset(&sb, 0, sizeof(sb));
		sb.st_mode = S_IFREG;
		sb.st_size = (off_t)L->a->opened[file][0];
		sb.st_dev = (dev_t)L->a->opened[file][1];
	} else if (fstat(fd, &sb) < 0) {
		return;		/* a bad fd is reported by the read itself */
	}
	if (L->cache_check && S_ISREG(sb.st_mode)) {
		struct iodl_ctx *c = L->c;

		if (c->accounted < 0 || c->accounted_dev != sb.st_dev) {
			c->accounted_dev = sb.st_dev;
			c->accounted = iodl_task_io_accounting() && iodl_reads_accounted(fd, &sb);
		}
		f->measured = c->accounted;
	} else if (L->cache_check) {
		f->measured = iodl_task_io_accounting() && iodl_reads_accounted(fd, &sb);
	}
	if (S_ISREG(sb.st_mode)) {
		f->size = (uint64_t)sb.st_size;
	} else if (S_ISBLK(sb.st_mode)) {
		uint64_t bytes;

		if (ioctl(fd, BLKGETSIZE64, &bytes) == 0)
			f->size = bytes;
	}
}

/* Where a request's row lands: its slot of the pool, or its own block's first aligned byte */
static unsigned char *row_buf(const struct iodl_ctx *c, const struct iodl_req *r)
{
	if (r->own)
		return (unsigned char *)round_up((uintptr_t)r->own, IODL_ALIGN);
	return c->pool + (size_t)r->slot * c->slot_size;
}

/*
 * fresh_bufs: a block of the read's own, as DLIO's odirect reader makes one per file (Python's
 * bytearray(size + 4095): malloc, then zeroed, which faults its pages in, in order). Without
 * memory for it the read goes to the pool slot, which always has room.
 */
static void fresh_buf(struct iodl_req *r)
{
	size_t n = r->len + IODL_ALIGN - 1;

	r->own = malloc(n);
	if (r->own)
		memset(r->own, 0, n);
}

/* The row is done with its slot (and its block). */
static void release(struct loop *L, struct iodl_req *r)
{
	if (r->own) {	/* fresh_bufs only: the pool's rows skip a call into libc per completion */
		free(r->own);
		r->own = NULL;
	}
	L->free_slots[L->nfree++] = r->slot;
}

static void complete(struct loop *L, struct iodl_req *r, uint64_t now);

/* The n completions the engine's last getevents returned. */
static void take_events(struct loop *L, unsigned n)
{
	uint64_t now = iodl_now_ns();

	L->st->t_end_ns = now;
	for (unsigned i = 0; i < n; i++) {
		L->inflight--;
		complete(L, L->c->ops->event(L->c, i), now);
	}
}

static struct iodl_req *take_row(struct loop *L)
{
	const struct iodl_plan_row *row = &L->a->plan[L->next_row];
	struct iodl_req *r = &L->c->reqs[L->free_slots[--L->nfree]];

	if (!L->files[row->file].seen)
		first_use(L, (uint32_t)row->file);
	r->row = L->next_row++;
	r->op = (int)row->op;
	r->file = (uint32_t)row->file;
	r->fd = L->a->fds[row->file];
	r->offset = row->offset;
	r->want = row->length;
	r->got = 0;
	r->skip = 0;
	/* a direct write is aligned already (bind_plan.c refuses it otherwise): it writes no more */
	r->len = L->c->direct && r->op == IODL_OP_READ ? round_up(row->length, IODL_ALIGN) : row->length;
	if (L->c->fresh_bufs && r->op == IODL_OP_READ)
		fresh_buf(r);
	r->buf = row_buf(L->c, r);
	if (!(L->c->ops->flags & IODL_ENG_FAKE)) {
		if (r->op == IODL_OP_WRITE)
			write_content(L->c, r, r->len);
		else if (!r->own && r->len > r->stale)
			r->stale = r->len;	/* the read will overwrite the random bytes */
	}
	L->paced_bytes += row->length;
	return r;
}

static void untake(struct loop *L, struct iodl_req *r, int was_reissue)
{
	if (was_reissue) {
		L->reissue[L->nreissue++] = r;
		return;
	}
	L->next_row--;
	L->paced_bytes -= L->a->plan[L->next_row].length;
	release(L, r);
}

/*
 * The row met EOF before its length: the file is shorter than the plan (truncated since the
 * plan was made). Counted, not an error here: a plan may read past EOF on purpose (whole files
 * in fixed blocks); iodl.engine.raise_for_errors makes it one for plans made from sizes.
 */
static void short_row(struct loop *L, const struct iodl_req *r, uint64_t eof)
{
	struct iodl_stats *st = L->st;
	struct stat sb;

	st->short_rows++;
	if (st->first_short_row >= 0 && (int64_t)r->row > st->first_short_row)
		return;
	st->first_short_row = (int64_t)r->row;
	st->short_file_size = fstat(r->fd, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : eof;
}

/*
 * Of n bytes just delivered from file f, those the storage did not have to deliver. Whatever
 * this thread's reads made the storage deliver since we last looked (the misses of the requests
 * that just completed, and the readahead they started) is owed; each completion is charged with
 * as much of it as it delivered, so that a page brought in by our own readahead, hit later by
 * another request, is still a miss. Over a run the charges add up to the storage's bytes, less
 * what readahead fetched past the last byte read.
 */
static void storage_sample(struct loop *L, uint64_t now)
{
	uint64_t seen = iodl_thread_read_bytes();

	*L->a->storage_pending += seen - L->storage_seen;
	L->storage_seen = seen;
	L->storage_seen_ns = now;
}

static uint64_t cached_of(struct loop *L, const struct file_state *f, uint64_t n, uint64_t lat, uint64_t now,
			  int *unmeasured)
{
	uint64_t miss;

	if (!L->cache_check)
		return 0;
	if (!f->measured) {
		*unmeasured = 1;
		return 0;
	}
	/* once per batch of completions at most (they share `now`) */
	if (now != L->storage_seen_ns && (lat >= STORAGE_WAIT_NS || now - L->storage_seen_ns >= STORAGE_SAMPLE_NS))
		storage_sample(L, now);
	miss = n < *L->a->storage_pending ? n : *L->a->storage_pending;
	*L->a->storage_pending -= miss;
	return n - miss;
}

/* A row failed: the lowest such row and its errno are what the run reports; no new rows. */
static void row_error(struct loop *L, uint64_t row, int err)
{
	struct iodl_stats *st = L->st;

	st->errors++;
	if (!st->first_errno || (int64_t)row < st->first_error_row) {
		st->first_errno = err;
		st->first_error_row = (int64_t)row;
	}
	L->stop = 1;
}

static void complete(struct loop *L, struct iodl_req *r, uint64_t now)
{
	const struct iodl_run_args *a = L->a;
	const struct file_state *f = &L->files[r->file];
	struct iodl_done d = { .op = r->op, .t_ns = now, .lat_ns = now - r->t_submit_ns };
	uint64_t n, end, row_offset;

	if (r->res == -EINTR) {		/* nothing was read: ask again */
		L->reissue[L->nreissue++] = r;
		return;
	}
	if (r->res < 0) {
		row_error(L, r->row, (int)-r->res);
		release(L, r);
		return;
	}
	/* O_DIRECT rounds the length up and a continuation starts early (r->skip): only the bytes
	 * the plan asked for, and not yet delivered, are delivered */
	n = (uint64_t)r->res > r->skip ? (uint64_t)r->res - r->skip : 0;
	if (n > r->want)
		n = r->want;
	d.bytes = n;
	d.offset = a->plan[r->row].offset;
	/* what was cached is a read's question: a write never counts cached bytes */
	if (r->op == IODL_OP_READ)
		d.cached = cached_of(L, f, n, d.lat_ns, now, &d.unmeasured);
	/* fio's split at the submit call's return (clamped: both clocks are ours, but a stamp an
	 * engine forgot must not wrap into the last bucket) */
	d.clat_ns = now > r->t_issued_ns ? now - r->t_issued_ns : 0;
	d.slat_ns = r->t_issued_ns > r->t_submit_ns ? r->t_issued_ns - r->t_submit_ns : 0;
	d.has_slat = !(L->c->ops->flags & IODL_ENG_SYNC);
	iodl_account(a, L->st, &d);
	r->got += n;
	r->want -= n;
	row_offset = a->plan[r->row].offset;
	end = row_offset + r->got;
	if (r->want && n && (r->op == IODL_OP_WRITE || end < f->size)) {
		/* short read before EOF, or short write: the rest, from the rest of the slot */
		uint64_t start = end;

		/* O_DIRECT needs an aligned offset and buffer: start at the aligned offset at or
		 * below the rest (the slot holds the row from its start, so that place in the slot
		 * is aligned too) and skip what was already delivered (a write sends those bytes
		 * again, the same ones: they are not stamped again) */
		if (L->c->direct)
			start -= (end - row_offset) % IODL_ALIGN;
		r->skip = end - start;
		r->offset = start;
		r->len = L->c->direct ? round_up(r->skip + r->want, IODL_ALIGN) : r->want;
		r->buf = row_buf(L->c, r) + (start - row_offset);
		L->reissue[L->nreissue++] = r;
		return;
	}
	if (r->want && r->op == IODL_OP_WRITE)
		row_error(L, r->row, EIO);	/* wrote nothing: asking again could loop forever */
	else if (r->want)
		short_row(L, r, end);
	release(L, r);
}

static int is_sync(const struct iodl_plan_row *row)
{
	return row->op == IODL_OP_FSYNC || row->op == IODL_OP_FDATASYNC;
}

/*
 * A sync row, run once nothing is in flight: fsync means "what was written to this file before
 * it is on stable storage", and a write still in flight was written before it. So the loop
 * drains first, then calls fsync/fdatasync itself, synchronously, for every engine: what fio's
 * libaio engine does with an fsync (quiesce, then sync). Timed on its own; the row's offset and
 * length are not used. The null engine makes no call (it has no files) but drains all the same.
 */
static void sync_row(struct loop *L)
{
	const struct iodl_plan_row *row = &L->a->plan[L->next_row];
	struct iodl_done d = { .op = (int)row->op };
	uint64_t t0 = iodl_now_ns(), t1;
	int rc = 0;

	if (!(L->c->ops->flags & IODL_ENG_FAKE)) {
		int fd = L->a->fds[row->file];

		do
			rc = row->op == IODL_OP_FDATASYNC ? fdatasync(fd) : fsync(fd);
		while (rc < 0 && errno == EINTR);
		rc = rc < 0 ? -errno : 0;
	}
	t1 = iodl_now_ns();
	if (!L->st->t_start_ns)
		L->st->t_start_ns = t0;
	L->st->t_end_ns = t1;
	if (rc < 0) {
		row_error(L, L->next_row, -rc);
	} else {
		d.t_ns = t1;
		d.lat_ns = t1 - t0;
		iodl_account(L->a, L->st, &d);
	}
	L->next_row++;
}

/* The lowest row whose request still holds a slot (in flight or to be continued). */
static uint64_t first_unfinished(const struct loop *L)
{
	unsigned char *free_slot = calloc(L->c->depth, 1);
	uint64_t row = L->next_row;

	if (!free_slot)
		return 0;	/* claim nothing rather than too much */
	for (unsigned i = 0; i < L->nfree; i++)
		free_slot[L->free_slots[i]] = 1;
	for (unsigned i = 0; i < L->c->depth; i++)
		if (!free_slot[i] && L->c->reqs[i].row < row)
			row = L->c->reqs[i].row;
	free(free_slot);
	return row;
}

static int was_interrupted(struct loop *L)
{
	if (L->a->interrupted && L->a->interrupted(L->a->interrupted_arg)) {
		L->st->interrupted = 1;
		L->stop = 1;
		return 1;
	}
	return 0;
}

int iodl_run(struct iodl_ctx *c, const struct iodl_run_args *a, struct iodl_stats *st)
{
	const struct iodl_engine_ops *ops = c->ops;
	const int sync = ops->flags & IODL_ENG_SYNC;
	struct loop L = { .c = c, .a = a, .st = st };
	int ret = 0, slack = -1;
	uint64_t now, drain_until = 0;

	memset(st, 0, sizeof(*st));
	st->first_error_row = -1;
	st->first_short_row = -1;
	/* O_DIRECT never reads from the page cache: there is nothing to measure */
	if (a->cache_check && a->storage_pending && !c->direct && !(ops->flags & IODL_ENG_FAKE)) {
		L.cache_check = 1;
		L.storage_seen = iodl_thread_read_bytes();
		L.storage_seen_ns = iodl_now_ns();
	}
	L.files = calloc(a->nfds ? a->nfds : 1, sizeof(*L.files));
	L.free_slots = calloc(c->depth, sizeof(*L.free_slots));
	L.reissue = calloc(c->depth, sizeof(*L.reissue));
	L.staged = calloc(c->depth, sizeof(*L.staged));
	if (!L.files || !L.free_slots || !L.reissue || !L.staged) {
		ret = -ENOMEM;
		c->failed_syscall = "malloc";
		goto out;
	}
	for (unsigned i = 0; i < c->depth; i++)
		L.free_slots[L.nfree++] = c->depth - 1 - i;
	c->stamp_issued = a->clat_hist || a->slat_hist || a->records;
	/*
	 * Sleeps (null delay, rate pacing) must end on time: the default 50 us timer slack would
	 * bias every delayed completion and every paced gap. Per thread, restored below.
	 */
	if (c->delay_ns || c->device || a->rate_bps) {
		slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
		prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
	}

	uint64_t next_signal_check = iodl_now_ns() + SIGNAL_CHECK_NS;

	for (;;) {
		uint64_t pace_until = 0;
		int syncing = 0;	/* the next row is a sync: drain what is in flight first */
		int synced = 0;		/* a sync row ran in this round */

		now = iodl_now_ns();
		if (a->deadline_ns && now >= a->deadline_ns)
			L.stop = 1;
		if (now >= next_signal_check && !L.stop) {
			was_interrupted(&L);
			next_signal_check = now + SIGNAL_CHECK_NS;
		}
		if (st->interrupted && !drain_until)
			drain_until = now + DRAIN_LIMIT_NS;

		/* stage and submit in batches of submit_batch until the slots or the rows run out */
		for (;;) {
			unsigned batched;

			while (L.nreissue || (!L.stop && L.next_row < a->nrows && L.nfree)) {
				struct iodl_req *r;
				int reissue = L.nreissue > 0;

				if (reissue) {
					r = L.reissue[--L.nreissue];
				} else {
					if (is_sync(&a->plan[L.next_row])) {
						if (L.inflight || L.nstaged) {
							syncing = 1;
							break;
						}
						sync_row(&L);
						now = iodl_now_ns();
						if (a->deadline_ns && now >= a->deadline_ns)
							L.stop = 1;
						synced = 1;
						if (now >= next_signal_check)
							break;	/* back to the top, which looks for signals */
						continue;
					}
					if (a->rate_bps && L.t_origin) {
						/* fio's rate: due when the bytes issued so far were allowed */
						uint64_t due = L.t_origin + (uint64_t)((unsigned __int128)L.paced_bytes
										* 1000000000u / a->rate_bps);
						if (due > now) {
							pace_until = due;
							break;
						}
					}
					r = take_row(&L);
					if (!L.t_origin)
						L.t_origin = now;
				}
				if (sync) {
					/* fio (FIO_SYNCIO): issue_time is before the call, clat is all of it;
					 * after a write's content was made, which is not the call's */
					if (r->op == IODL_OP_WRITE && !reissue)
						now = iodl_now_ns();
					r->t_submit_ns = r->t_issued_ns = now;
					if (!st->t_start_ns)
						st->t_start_ns = now;
					iodl_account_submit(a, st, now, 1, 1);
					ops->queue(c, r);
					now = iodl_now_ns();
					st->t_end_ns = now;
					complete(&L, r, now);
					if (a->deadline_ns && now >= a->deadline_ns)
						L.stop = 1;
					if (now >= next_signal_check)
						break;	/* back to the top, which looks for signals */
					continue;
				}
				if (ops->queue(c, r) == IODL_Q_BUSY) {
					untake(&L, r, reissue);
					break;
				}
				L.staged[L.nstaged++] = r;
				if (L.nstaged == a->submit_batch)
					break;
			}

			batched = L.nstaged;
			if (L.nstaged) {
				now = iodl_now_ns();
				if (!st->t_start_ns)
					st->t_start_ns = now;
				for (unsigned i = 0; i < L.nstaged; i++)
					L.staged[i]->t_submit_ns = now;
				L.inflight += L.nstaged;
				iodl_account_submit(a, st, now, L.inflight, L.nstaged);
				L.nstaged = 0;
				ret = ops->commit(c);
				if (ret < 0) {
					/* the engine hands back what it could not submit as failed requests */
					L.stop = 1;
					ret = 0;
				}
				/* done inside the submit (a cache hit): its slot goes to the next row (reap_ready) */
				if (a->reap_ready && ops->ready && ops->ready(c)) {
					int n = ops->getevents(c, 1, c->depth);

					if (n > 0)
						take_events(&L, (unsigned)n);
				}
			}
			/* a sync engine never waits below: go back to the top for its signal check */
			if (batched != a->submit_batch || pace_until || L.stop || syncing ||
			    ((sync || synced) && now >= next_signal_check) ||
			    !(L.nreissue || (L.next_row < a->nrows && L.nfree)))
				break;
		}

		if (!L.inflight) {
			if (pace_until) {
				/* in slices, so that a signal is noticed while we sleep */
				if (pace_until > next_signal_check)
					pace_until = next_signal_check;
				if (iodl_sleep_until(pace_until) == -EINTR)
					was_interrupted(&L);
				continue;
			}
			if (L.nreissue || (!L.stop && L.next_row < a->nrows))
				continue;
			break;
		}

		if (drain_until && now >= drain_until) {
			/* stopped, and what is in flight did not finish in time: hung storage */
			st->abandoned = L.inflight;
			c->abandoned = 1;
			break;
		}

		/* under pacing fio quiesces: drain everything in flight before sleeping; so does a sync */
		unsigned min_ev = pace_until || syncing ? L.inflight : 1;
		unsigned max_ev = a->reap_batch && a->reap_batch < c->depth ? a->reap_batch : c->depth;
		int n = ops->getevents(c, min_ev, max_ev > min_ev ? max_ev : min_ev);
		if (n == -EINTR) {
			was_interrupted(&L);
			continue;
		}
		if (n < 0) {
			ret = n;
			if (!c->failed_syscall)
				c->failed_syscall = "getevents";
			break;
		}
		if (n == 0)
			continue;
		take_events(&L, (unsigned)n);
	}

	if (L.cache_check)
		storage_sample(&L, iodl_now_ns());	/* what no completion was charged with: the next run's */
	st->done = st->errors ? (uint64_t)st->first_error_row : L.next_row;
	if (st->abandoned && !st->errors)
		st->done = first_unfinished(&L);
	iodl_account_finish(a, st, iodl_now_ns());
out:
	if (slack >= 0)
		prctl(PR_SET_TIMERSLACK, slack ? slack : 1, 0, 0, 0);
	free(L.files);
	free(L.free_slots);
	free(L.reissue);
	free(L.staged);
	return ret;
}
