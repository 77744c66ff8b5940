/*
 * The Engine type: an engine's buffers and kernel contexts (core.c), and run(), which hands a
 * plan to the loop with the GIL released. Also the engine registry's face: engines(), probe(),
 * and the engine's clock.
 */
#include "bind.h"

#include <string.h>
#include <unistd.h>

#include "opener.h"
#include "sys.h"

#define MAX_DEPTH 65536
#define MAX_BLOCK_SIZE (1u << 30)
/*
 * The buffer pool (depth x block size, rounded up to ALIGN) is allocated and touched at once:
 * an absurd request must be a ValueError, never an OOM kill. At most 4 GiB, and at most half
 * of this machine's RAM (a node runs several ranks).
 */
#define MAX_POOL_BYTES (4ull << 30)

typedef struct {
	PyObject_HEAD
	struct iodl_ctx *ctx;		/* NULL once closed */
	const struct iodl_engine_ops *ops;
	Py_ssize_t block_size;
	unsigned depth;			/* as the engine runs it (psync: 1) */
	long long rate_bps;
	unsigned submit_batch;		/* requests per submit call; 0: all that have a slot */
	unsigned reap_batch;		/* completions per reap at most; 0: all that are ready */
	int reap_ready;			/* core.h: iodl_run_args.reap_ready */
	int direct, cache_check, busy;
	int cancelled;			/* set by cancel() from any thread, read without the GIL */
	uint64_t cancel_ns;		/* when cancel() was called (core.h: iodl_run_args.cancel_ns) */
	uint64_t storage_pending;	/* cache_check: storage bytes not yet charged (core.h) */
	Py_buffer device;		/* null's shared device word, held (kept mapped) while open */
} EngineObject;

static void engine_release(EngineObject *self)
{
	iodl_ctx_close(self->ctx);
	self->ctx = NULL;
	if (self->device.obj)
		PyBuffer_Release(&self->device);
}

static PyObject *Engine_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "depth", "block_size", "direct", "delay_ns", "rate_bps",
				  "cache_check", "device", "submit_batch", "reap_batch", "fresh_buffers", "userspace_reap", "fio_ring",
				  "fixed_buffers", "reap_ready", NULL };
	const char *name;
	Py_ssize_t depth = 1, block_size = 1 << 20, submit_batch = 1, reap_batch = 0;
	int direct = 0, cache_check = 0, fresh_buffers = 0, userspace_reap = 1, fio_ring = 0, fixed_buffers = 1;
	int reap_ready = 0, rc;
	long long delay_ns = 0, rate_bps = 0;
	PyObject *device = Py_None;
	const struct iodl_engine_ops *ops;
	const char *failed = NULL;
	EngineObject *self;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$nnpLLpOnnppppp:Engine", kwlist, &name, &depth,
					 &block_size, &direct, &delay_ns, &rate_bps, &cache_check, &device,
					 &submit_batch, &reap_batch, &fresh_buffers, &userspace_reap, &fio_ring,
					 &fixed_buffers, &reap_ready))
		return NULL;
	ops = iodl_engine_find(name);
	if (!ops)
		return PyErr_Format(PyExc_ValueError, "unknown engine '%s'", name);
	if (depth < 1 || depth > MAX_DEPTH)
		return PyErr_Format(PyExc_ValueError, "depth must be 1..%d, not %zd", MAX_DEPTH, depth);
	if (block_size < 1 || block_size > MAX_BLOCK_SIZE)
		return PyErr_Format(PyExc_ValueError, "block_size must be 1..%u, not %zd", MAX_BLOCK_SIZE,
				    block_size);
	if (delay_ns < 0 || rate_bps < 0)
		return PyErr_Format(PyExc_ValueError, "delay_ns and rate_bps must be >= 0");
	if (submit_batch < 0 || submit_batch > MAX_DEPTH)
		return PyErr_Format(PyExc_ValueError, "submit_batch must be 0..%d, not %zd", MAX_DEPTH, submit_batch);
	if (reap_batch < 0 || reap_batch > MAX_DEPTH)
		return PyErr_Format(PyExc_ValueError, "reap_batch must be 0..%d, not %zd", MAX_DEPTH, reap_batch);
	{
		uint64_t slots = ops->flags & IODL_ENG_SYNC ? 1 : (uint64_t)depth;
		uint64_t pool = slots * (((uint64_t)block_size + IODL_ALIGN - 1) / IODL_ALIGN * IODL_ALIGN);
		uint64_t limit = MAX_POOL_BYTES;
		long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

		if (pages > 0 && page > 0 && (uint64_t)pages * (uint64_t)page / 2 < limit)
			limit = (uint64_t)pages * (uint64_t)page / 2;
		if (pool > limit)
			return PyErr_Format(PyExc_ValueError, "depth %zd x block_size %zd needs %llu bytes of buffers, "
					    "more than the limit of %llu (4 GiB or half of RAM)", depth, block_size,
					    (unsigned long long)pool, (unsigned long long)limit);
	}
	if (delay_ns && !(ops->flags & IODL_ENG_FAKE))
		return PyErr_Format(PyExc_ValueError, "delay_ns is for the null engine only");
	if (device != Py_None && !(ops->flags & IODL_ENG_FAKE))
		return PyErr_Format(PyExc_ValueError, "device= is for the null engine only");

	self = (EngineObject *)type->tp_alloc(type, 0);
	if (!self)
		return NULL;
	if (device != Py_None && iodl_get_shared(device, &self->device, sizeof(uint64_t), "device") < 0) {
		Py_DECREF(self);
		return NULL;
	}
	self->ops = ops;
	self->block_size = block_size;
	self->rate_bps = rate_bps;
	/* a batch as deep as the queue is the same as "all that have a slot" */
	self->submit_batch = submit_batch >= depth ? 0 : (unsigned)submit_batch;
	self->reap_batch = reap_batch >= depth ? 0 : (unsigned)reap_batch;
	self->reap_ready = reap_ready;
	self->direct = direct;
	self->cache_check = cache_check;
	Py_BEGIN_ALLOW_THREADS
	rc = iodl_ctx_open(&self->ctx, ops, (unsigned)depth, (size_t)block_size, direct, fresh_buffers,
			   fio_ring, fixed_buffers, (uint64_t)delay_ns, self->device.obj ? self->device.buf : NULL, &failed);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		Py_DECREF(self);
		return iodl_oserror_wsyscall(-rc, failed ? failed : name);
	}
	self->depth = self->ctx->depth;
	self->ctx->syscall_reap = !userspace_reap;
	return (PyObject *)self;
}

static void Engine_dealloc(EngineObject *self)
{
	engine_release(self);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_open(EngineObject *self)
{
	if (!self->ctx) {
		PyErr_SetString(PyExc_ValueError, "engine is closed");
		return -1;
	}
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "engine is running in another thread");
		return -1;
	}
	return 0;
}

/* A wait came back with EINTR: take the GIL, run Python's signal handlers (Ctrl-C). */
struct interrupt_state {
	PyThreadState *tstate;
	PyObject *type, *value, *tb;
	const int *cancelled;		/* Engine.cancel() */
};

static int interrupted(void *arg)
{
	struct interrupt_state *s = arg;
	int stop;

	if (s->type || __atomic_load_n(s->cancelled, __ATOMIC_ACQUIRE))
		return 1;
	PyEval_RestoreThread(s->tstate);
	stop = PyErr_CheckSignals() < 0;
	if (stop)
		PyErr_Fetch(&s->type, &s->value, &s->tb);
	s->tstate = PyEval_SaveThread();
	return stop;
}

static PyObject *stats_dict(const struct iodl_stats *st)
{
	PyObject *depth = iodl_depth_list(st);

	if (!depth)
		return NULL;
	return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsisLsKsKsKsNsKsNsKsLsKsK}",
			     "done", st->done, "ios", st->ios, "bytes", st->bytes,
			     "write_ios", st->write_ios, "write_bytes", st->write_bytes,
			     "fsyncs", st->fsyncs, "fsync_ns", st->fsync_ns,
			     "cached_bytes", st->cached_bytes, "cache_unmeasured_bytes", st->cache_unmeasured_bytes,
			     "errors", st->errors,
			     "first_errno", st->first_errno, "first_error_row", (long long)st->first_error_row,
			     "t_start_ns", st->t_start_ns, "t_end_ns", st->t_end_ns, "max_ns", st->max_ns,
			     "depth", depth, "series_clamped", st->series_clamped,
			     "interrupted", PyBool_FromLong(st->interrupted), "short_rows", st->short_rows,
			     "first_short_row", (long long)st->first_short_row, "short_file_size", st->short_file_size,
			     "abandoned", st->abandoned);
}

/*
 * Files opened or closed, (when each returned, how long it took) at base[i * stride] and
 * base[i * stride + 1]: counted into hist as _native.account counts them (iodl_account, the
 * window without the cancel), so that a batch's opens and closes cost no call of their own.
 */
static void count_files(int64_t *hist, uint64_t window_start_ns, uint64_t window_end_ns, const int64_t *base,
			size_t stride, size_t n, unsigned long long *count, unsigned long long *slowest)
{
	struct iodl_run_args a = { .hist = hist, .window_start_ns = window_end_ns ? window_start_ns : 0,
				   .window_end_ns = window_end_ns };
	struct iodl_stats st = { 0 };

	for (size_t i = 0; i < n; i++) {
		struct iodl_done d = { .t_ns = (uint64_t)base[i * stride], .lat_ns = (uint64_t)base[i * stride + 1] };

		d.clat_ns = d.lat_ns;
		iodl_account(&a, &st, &d);
	}
	*count = st.ios;
	*slowest = st.max_ns;
}

/* What a run given an opener did with its files, put in its stats (or in a stop's stats) */
struct taken_files {
	struct iodl_open_result *res;	/* the take's results, one per ticket */
	size_t n;
	int closed;			/* their fds closed (and counted) */
	uint64_t took_at_ns, wait_ns;	/* when the take returned, how long the caller waited for it */
	unsigned long long opens, open_max_ns, closes, close_max_ns;
};

/* close every fd of the batch, each timed, and count the opens and the closes */
static void close_taken(struct taken_files *tf, int64_t *open_hist, int64_t *close_hist, uint64_t ws, uint64_t we)
{
	int64_t (*times)[2];
	int64_t *fds;

	if (tf->closed || !tf->res)
		return;
	tf->closed = 1;
	count_files(open_hist, ws, we, &tf->res[0].done_ns, sizeof(tf->res[0]) / sizeof(int64_t), tf->n, &tf->opens,
		    &tf->open_max_ns);
	times = PyMem_Calloc(tf->n ? tf->n : 1, sizeof(*times));
	fds = PyMem_Calloc(tf->n ? tf->n : 1, sizeof(*fds));
	if (!times || !fds) {	/* closed all the same, uncounted */
		for (size_t i = 0; i < tf->n; i++)
			close((int)tf->res[i].fd);
	} else {
		for (size_t i = 0; i < tf->n; i++)
			fds[i] = tf->res[i].fd;
		Py_BEGIN_ALLOW_THREADS
		iodl_close_fds(fds, tf->n, times);
		Py_END_ALLOW_THREADS
		count_files(close_hist, ws, we, &times[0][0], 2, tf->n, &tf->closes, &tf->close_max_ns);
	}
	PyMem_Free(times);
	PyMem_Free(fds);
}

static int put_taken(PyObject *stats, const struct taken_files *tf)
{
	PyObject *v = Py_BuildValue("{sKsKsKsKsKsK}", "opens", tf->opens, "open_max_ns", tf->open_max_ns,
				    "closes", tf->closes, "close_max_ns", tf->close_max_ns,
				    "open_wait_ns", (unsigned long long)tf->wait_ns,
				    "open_waited_at_ns", (unsigned long long)tf->took_at_ns);
	int rc = v ? PyDict_Update(stats, v) : -1;

	Py_XDECREF(v);
	return rc;
}

static PyObject *Engine_run(EngineObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "fds", "plan", "hist", "deadline_ns", "window_start_ns", "window_end_ns",
				  "series", "series_origin_ns", "series_bucket_ns", "live", "clat_hist", "slat_hist",
				  "fsync_hist", "write_hist", "write_clat_hist", "write_slat_hist", "records", "opened",
				  "opener", "tickets", "open_hist", "close_hist", NULL };
	PyObject *fds_obj, *plan_obj, *hist_obj, *series_obj = Py_None, *live_obj = Py_None, *result = NULL;
	PyObject *clat_obj = Py_None, *slat_obj = Py_None, *fsync_obj = Py_None;
	PyObject *whist_obj = Py_None, *wclat_obj = Py_None, *wslat_obj = Py_None, *rec_obj = Py_None;
	PyObject *opened_obj = Py_None, *opener_obj = Py_None, *tickets_obj = Py_None;
	PyObject *ohist_obj = Py_None, *chist_obj = Py_None;
	Py_buffer rec_view = { 0 }, opened_view = { 0 }, tickets_view = { 0 }, ohist_view = { 0 }, chist_view = { 0 };
	struct taken_files tf = { 0 };
	int64_t (*taken_opened)[2] = NULL;
	struct iodl_records records = { 0 };
	long long deadline_ns = 0, window_start_ns = 0, window_end_ns = 0;
	long long series_origin_ns = 0, series_bucket_ns = 1000000000;
	struct iodl_outputs o = { 0 };
	struct iodl_plan_row *plan = NULL;
	struct iodl_run_args a = { 0 };
	struct interrupt_state intr = { 0 };
	struct iodl_stats st;
	int *fds = NULL, rc;
	size_t nfds = 0, nrows = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$LLLOLLOOOOOOOOOOOOO:run", kwlist, &fds_obj, &plan_obj,
					 &hist_obj, &deadline_ns, &window_start_ns, &window_end_ns, &series_obj,
					 &series_origin_ns, &series_bucket_ns, &live_obj, &clat_obj, &slat_obj, &fsync_obj,
					 &whist_obj, &wclat_obj, &wslat_obj, &rec_obj, &opened_obj, &opener_obj, &tickets_obj,
					 &ohist_obj, &chist_obj))
		return NULL;
	if (check_open(self) < 0)
		return NULL;
	if (deadline_ns < 0 || window_start_ns < 0 || window_end_ns < 0)
		return PyErr_Format(PyExc_ValueError, "deadline_ns and the window must be >= 0");
	if (series_origin_ns < 0 || series_bucket_ns <= 0)
		return PyErr_Format(PyExc_ValueError, "series_origin_ns must be >= 0 and series_bucket_ns > 0");
	if (opener_obj != Py_None) {
		/*
		 * The batch's files from the open-ahead pool: taken, read, closed and counted in this
		 * one call (no Python between). A failed or refused open runs nothing: the take's
		 * results come back ("taken") for the caller to word the error and go on its own way.
		 */
		if (fds_obj != Py_None || opened_obj != Py_None || tickets_obj == Py_None || ohist_obj == Py_None ||
		    chist_obj == Py_None)
			return PyErr_Format(PyExc_ValueError, "run: an opener takes tickets, open_hist and close_hist, "
					    "and no fds or opened");
		if (PyObject_GetBuffer(tickets_obj, &tickets_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
			goto out;
		if (tickets_view.ndim > 1 || !iodl_is_int64(&tickets_view)) {
			PyErr_SetString(PyExc_TypeError, "tickets must be a contiguous 1-d int64 array");
			goto out;
		}
		if (iodl_get_hist(ohist_obj, &ohist_view, "open_hist") < 0 ||
		    iodl_get_hist(chist_obj, &chist_view, "close_hist") < 0)
			goto out;
		tf.n = (size_t)(tickets_view.len / 8);
		tf.res = PyMem_Calloc(tf.n ? tf.n : 1, sizeof(*tf.res));
		fds = PyMem_Calloc(tf.n ? tf.n : 1, sizeof(*fds));
		taken_opened = PyMem_Calloc(tf.n ? tf.n : 1, sizeof(*taken_opened));
		if (!tf.res || !fds || !taken_opened) {
			PyErr_NoMemory();
			goto out;
		}
		tf.took_at_ns = iodl_now_ns();
		if (iodl_py_opener_take(opener_obj, tickets_view.buf, tf.n, tf.res) < 0) {
			PyMem_Free(tf.res);	/* nothing taken: the tickets stay waiting */
			tf.res = NULL;
			goto out;
		}
		tf.wait_ns = iodl_now_ns() - tf.took_at_ns;
		tf.took_at_ns += tf.wait_ns;
		for (size_t i = 0; i < tf.n; i++) {
			if (tf.res[i].err) {
				result = Py_BuildValue("{sy#sKsK}", "taken", (const char *)tf.res,
						       (Py_ssize_t)(tf.n * sizeof(*tf.res)), "open_wait_ns",
						       (unsigned long long)tf.wait_ns, "open_waited_at_ns",
						       (unsigned long long)tf.took_at_ns);
				tf.closed = result != NULL;	/* the fds are the caller's through "taken" */
				goto out;
			}
			fds[i] = (int)tf.res[i].fd;
			taken_opened[i][0] = tf.res[i].size;
			taken_opened[i][1] = tf.res[i].dev;
		}
		nfds = tf.n;
		a.opened = (const int64_t (*)[2])taken_opened;
	} else {
		fds = iodl_get_fds(fds_obj, &nfds, !!(self->ops->flags & IODL_ENG_FAKE));
		if (!fds)
			return NULL;
	}
	plan = iodl_get_plan(plan_obj, &nrows);
	if (!plan)
		goto out;
	if (iodl_outputs_get(&o, hist_obj, clat_obj, slat_obj, fsync_obj, series_obj, live_obj, &a, series_origin_ns,
			     series_bucket_ns) < 0 || iodl_outputs_get_writes(&o, whist_obj, wclat_obj, wslat_obj, &a) < 0)
		goto out;
	if (rec_obj != Py_None) {
		/* a writable C-contiguous uint64 array of shape (n, 7): iodl.fio.logs.RECORD_FIELDS */
		if (PyObject_GetBuffer(rec_obj, &rec_view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
			goto out;
		if (rec_view.ndim != 2 || rec_view.shape[1] != 7 || rec_view.itemsize != 8) {
			PyErr_SetString(PyExc_ValueError, "records must be a writable C-contiguous uint64 array of shape (n, 7)");
			goto out;
		}
		records.buf = rec_view.buf;
		records.cap = (size_t)rec_view.shape[0];
		a.records = &records;
	}
	if (opened_obj != Py_None) {
		/* an int64 (len(fds), 2) array: each fd's (st_size, st_dev) from its open, st_size -1: unknown */
		if (PyObject_GetBuffer(opened_obj, &opened_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
			goto out;
		if (!iodl_is_int64(&opened_view) || (size_t)opened_view.len != nfds * 2 * sizeof(int64_t)) {
			PyErr_SetString(PyExc_ValueError, "opened must be a C-contiguous int64 array of (st_size, st_dev) per fd");
			goto out;
		}
		a.opened = (const int64_t (*)[2])opened_view.buf;
	}
	a.plan = plan;
	if (iodl_check_plan(plan, nrows, nfds, self->block_size, self->direct) < 0)
		goto out;
	a.fds = fds;
	a.nfds = nfds;
	a.nrows = nrows;
	a.deadline_ns = (uint64_t)deadline_ns;
	a.window_start_ns = (uint64_t)window_start_ns;
	a.window_end_ns = (uint64_t)window_end_ns;
	a.rate_bps = (uint64_t)self->rate_bps;
	a.submit_batch = self->submit_batch;
	a.reap_batch = self->reap_batch;
	a.reap_ready = self->reap_ready;
	a.cache_check = self->cache_check;
	a.storage_pending = &self->storage_pending;
	a.interrupted = interrupted;
	a.interrupted_arg = &intr;
	a.cancel_ns = &self->cancel_ns;
	intr.cancelled = &self->cancelled;

	if (__atomic_load_n(&self->cancelled, __ATOMIC_ACQUIRE)) {
		/* cancelled before: nothing is started */
		memset(&st, 0, sizeof(st));
		st.first_error_row = st.first_short_row = -1;
		st.t_start_ns = st.t_end_ns = iodl_now_ns();
		st.interrupted = 1;
		result = stats_dict(&st);
		if (tf.res) {
			close_taken(&tf, ohist_view.buf, chist_view.buf, a.window_start_ns, a.window_end_ns);
			if (result && put_taken(result, &tf) < 0)
				Py_CLEAR(result);
		}
		goto out;
	}
	self->busy = 1;
	intr.tstate = PyEval_SaveThread();
	rc = iodl_run(self->ctx, &a, &st);
	PyEval_RestoreThread(intr.tstate);
	self->busy = 0;
	if (self->ctx->abandoned)	/* its requests may still complete: never start another run */
		__atomic_store_n(&self->cancelled, 1, __ATOMIC_RELEASE);
	if (tf.res)
		close_taken(&tf, ohist_view.buf, chist_view.buf, a.window_start_ns, a.window_end_ns);

	if (rc < 0) {
		const char *syscall = self->ctx->failed_syscall;

		/* the engine's kernel state is unknown now: tear it down rather than reuse it */
		engine_release(self);
		iodl_oserror_wsyscall(-rc, syscall ? syscall : self->ops->name);
		goto out;
	}
	if (intr.type) {
		/* the signal's exception carries what was counted, so a partial result keeps it */
		PyObject *stats = stats_dict(&st);

		PyErr_NormalizeException(&intr.type, &intr.value, &intr.tb);
		if (stats && tf.res && put_taken(stats, &tf) < 0)
			PyErr_Clear();
		if (stats && intr.value && PyObject_SetAttrString(intr.value, "stats", stats) < 0)
			PyErr_Clear();
		Py_XDECREF(stats);
		PyErr_Restore(intr.type, intr.value, intr.tb);
		goto out;
	}
	result = stats_dict(&st);
	if (result && tf.res && put_taken(result, &tf) < 0)
		Py_CLEAR(result);
	if (result && a.records) {
		PyObject *n = PyLong_FromSize_t(records.n), *lost = PyLong_FromSize_t(records.lost);

		if (!n || !lost || PyDict_SetItemString(result, "records", n) < 0 ||
		    PyDict_SetItemString(result, "records_lost", lost) < 0)
			Py_CLEAR(result);
		Py_XDECREF(n);
		Py_XDECREF(lost);
	}
out:
	if (tf.res && !tf.closed)	/* taken, never run (a bad plan, no memory): closed, uncounted */
		for (size_t i = 0; i < tf.n; i++)
			if (tf.res[i].fd >= 0)
				close((int)tf.res[i].fd);
	PyMem_Free(tf.res);
	PyMem_Free(taken_opened);
	if (tickets_view.obj)
		PyBuffer_Release(&tickets_view);
	if (ohist_view.obj)
		PyBuffer_Release(&ohist_view);
	if (chist_view.obj)
		PyBuffer_Release(&chist_view);
	if (rec_view.obj)
		PyBuffer_Release(&rec_view);
	if (opened_view.obj)
		PyBuffer_Release(&opened_view);
	PyMem_Free(plan);
	iodl_outputs_release(&o);
	PyMem_Free(fds);
	return result;
}

static PyObject *Engine_set_content(EngineObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "compress_pct", "chunk", "dedupe_pct", "pattern", "zero", "refill", "scramble",
				  "min_write", "seed", NULL };
	unsigned compress_pct = 0, dedupe_pct = 0;
	unsigned long long chunk = 512, min_write = 4096, seed = 0;
	int zero = 0, refill = 0, scramble = 1, rc;
	Py_buffer pattern = { 0 };

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$IKIy*pppKK:set_content", kwlist, &compress_pct, &chunk,
					 &dedupe_pct, &pattern, &zero, &refill, &scramble, &min_write, &seed))
		return NULL;
	if (check_open(self) < 0 || compress_pct > 100 || dedupe_pct > 100 || pattern.len > (1 << 20)) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "compress_pct and dedupe_pct are 0..100, a pattern at most 1 MiB");
		if (pattern.obj)
			PyBuffer_Release(&pattern);
		return NULL;
	}
	rc = iodl_content_set(self->ctx, compress_pct, chunk, dedupe_pct, pattern.buf, pattern.obj ? (size_t)pattern.len : 0,
			      zero, refill, scramble, min_write, seed);
	if (pattern.obj)
		PyBuffer_Release(&pattern);
	if (rc < 0)
		return PyErr_NoMemory();
	Py_RETURN_NONE;
}

/* From any thread, GIL or not in the run's thread: the run stops and returns its stats. */
static PyObject *Engine_cancel(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
	uint64_t unset = 0;

	/* the first cancel's time: completions after it are not counted (they only drain) */
	__atomic_compare_exchange_n(&self->cancel_ns, &unset, iodl_now_ns(), 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	__atomic_store_n(&self->cancelled, 1, __ATOMIC_RELEASE);
	Py_RETURN_NONE;
}

static PyObject *Engine_get_cancelled(EngineObject *self, void *Py_UNUSED(c))
{
	return PyBool_FromLong(__atomic_load_n(&self->cancelled, __ATOMIC_ACQUIRE));
}

static PyObject *Engine_close(EngineObject *self, PyObject *Py_UNUSED(ignored))
{
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "engine is running in another thread");
		return NULL;
	}
	engine_release(self);
	Py_RETURN_NONE;
}

static PyObject *Engine_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
	return Py_NewRef(self);
}

static PyObject *Engine_exit(EngineObject *self, PyObject *Py_UNUSED(args))
{
	return Engine_close(self, NULL);
}

static PyObject *Engine_get_name(EngineObject *self, void *Py_UNUSED(c))
{
	return PyUnicode_FromString(self->ops->name);
}

static PyObject *Engine_get_depth(EngineObject *self, void *Py_UNUSED(c))
{
	return PyLong_FromUnsignedLong(self->depth);
}

static PyObject *Engine_get_block_size(EngineObject *self, void *Py_UNUSED(c))
{
	return PyLong_FromSsize_t(self->block_size);
}

static PyObject *Engine_get_direct(EngineObject *self, void *Py_UNUSED(c))
{
	return PyBool_FromLong(self->direct);
}

static PyObject *Engine_get_fixed_buffers(EngineObject *self, void *Py_UNUSED(c))
{
	return PyBool_FromLong(self->ctx && self->ctx->fixed_bufs);
}

static PyObject *Engine_get_closed(EngineObject *self, void *Py_UNUSED(c))
{
	return PyBool_FromLong(!self->ctx);
}

static PyMethodDef Engine_methods[] = {
	{ "run", (PyCFunction)(void (*)(void))Engine_run, METH_VARARGS | METH_KEYWORDS,
	  "run(fds, plan, hist, *, deadline_ns=0, window_start_ns=0, window_end_ns=0, series=None, "
	  "series_origin_ns=0, series_bucket_ns=1_000_000_000, live=None, clat_hist=None, slat_hist=None, "
	  "fsync_hist=None, write_hist=None, write_clat_hist=None, write_slat_hist=None, records=None, opened=None) "
	  "-> RunStats: "
	  "the whole plan "
	  "(reads, writes, fsyncs), GIL released" },
	{ "set_content", (PyCFunction)(void (*)(void))Engine_set_content, METH_VARARGS | METH_KEYWORDS,
	  "set_content(*, compress_pct=0, chunk=512, dedupe_pct=0, pattern=b'', zero=False, refill=False, "
	  "scramble=True, min_write=4096, seed=0): later writes carry fio's buffer contents (content.c)" },
	{ "cancel", (PyCFunction)Engine_cancel, METH_NOARGS,
	  "cancel(): from any thread; the run in progress stops within ~100 ms, drains and returns its "
	  "stats (interrupted=True); later runs return at once" },
	{ "close", (PyCFunction)Engine_close, METH_NOARGS, "free the buffers and kernel contexts" },
	{ "__enter__", Engine_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Engine_exit, METH_VARARGS, NULL },
	{ NULL }
};

static PyGetSetDef Engine_getset[] = {
	{ "name", (getter)Engine_get_name, NULL, "engine name", NULL },
	{ "depth", (getter)Engine_get_depth, NULL, "requests kept in flight (1 for psync)", NULL },
	{ "block_size", (getter)Engine_get_block_size, NULL, "largest request a plan may hold", NULL },
	{ "direct", (getter)Engine_get_direct, NULL, "fds are O_DIRECT: read lengths rounded up to ALIGN, "
	  "writes aligned", NULL },
	{ "fixed_buffers", (getter)Engine_get_fixed_buffers, NULL, "the pool is registered (uring)", NULL },
	{ "closed", (getter)Engine_get_closed, NULL, NULL, NULL },
	{ "cancelled", (getter)Engine_get_cancelled, NULL, "cancel() was called (or a stop abandoned requests)", NULL },
	{ NULL }
};

PyTypeObject iodl_engine_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "iodl._native.Engine",
	.tp_doc = "Engine(name, *, depth=1, block_size=1<<20, direct=False, delay_ns=0, rate_bps=0, "
		  "cache_check=False, device=None, submit_batch=1, reap_batch=0, fresh_buffers=False, reap_ready=False): keeps `depth` "
		  "requests of a plan in flight, handing them to the kernel `submit_batch` at a time (0: all that have "
		  "a slot) and taking at most `reap_batch` completions per reap (0: all that are ready); fresh_buffers: "
		  "each read into a block malloc'd and zeroed for it; reap_ready: after each submit, the completions "
		  "already there (no syscall) are taken first, so a cache hit's slot goes to the next request",
	.tp_basicsize = sizeof(EngineObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = Engine_new,
	.tp_dealloc = (destructor)Engine_dealloc,
	.tp_methods = Engine_methods,
	.tp_getset = Engine_getset,
};

PyObject *iodl_py_engines(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
	PyObject *list = PyList_New(0);

	for (const struct iodl_engine_ops *const *e = iodl_engines; list && *e; e++) {
		PyObject *s = PyUnicode_FromString((*e)->name);

		if (!s || PyList_Append(list, s) < 0)
			Py_CLEAR(list);
		Py_XDECREF(s);
	}
	return list;
}

PyObject *iodl_py_probe(PyObject *Py_UNUSED(m), PyObject *arg)
{
	const char *name = PyUnicode_AsUTF8(arg);
	const struct iodl_engine_ops *ops;
	int rc;

	if (!name)
		return NULL;
	ops = iodl_engine_find(name);
	if (!ops)
		return PyErr_Format(PyExc_ValueError, "unknown engine '%s'", name);
	Py_BEGIN_ALLOW_THREADS
	rc = ops->probe();
	Py_END_ALLOW_THREADS
	return PyLong_FromLong(-rc);
}

/* the engine's clock, for deadlines */
PyObject *iodl_py_monotonic_ns(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
	return PyLong_FromUnsignedLongLong(iodl_now_ns());
}

