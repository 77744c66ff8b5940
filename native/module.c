/*
 * iodl._native: the Python face of the C loop (see iodl/_native.pyi for the contract).
 * Parses arguments, releases the GIL around the loop, turns errno into OSError naming the
 * syscall (psutil style). Everything else lives in core.c and the engines.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "sys.h"

#define MAX_DEPTH 65536
#define MAX_BLOCK_SIZE (1u << 30)
/*
 * The buffer pool (depth x block size, rounded up to ALIGN) is allocated and touched at once:
 * an absurd request must be a ValueError, never an OOM kill. At most 4 GiB, and at most half
 * of this machine's RAM (a node runs several ranks).
 */
#define MAX_POOL_BYTES (4ull << 30)

/* OSError(errno, "<strerror> (originated from <syscall>)"); errno picks the subclass. */
static PyObject *oserror_wsyscall(int err, const char *syscall)
{
	PyObject *msg = PyUnicode_FromFormat("%s (originated from %s)", strerror(err), syscall);
	PyObject *exc = msg ? PyObject_CallFunction(PyExc_OSError, "iO", err, msg) : NULL;

	Py_XDECREF(msg);
	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}

typedef struct {
	PyObject_HEAD
	struct iodl_ctx *ctx;		/* NULL once closed */
	const struct iodl_engine_ops *ops;
	Py_ssize_t block_size;
	unsigned depth;			/* as the engine runs it (psync: 1) */
	long long rate_bps;
	unsigned submit_batch;		/* requests per submit call; 0: all that have a slot */
	unsigned reap_batch;		/* completions per reap at most; 0: all that are ready */
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

/*
 * A writable buffer of at least `len` bytes, 8-byte aligned: a shared word or counters that
 * other processes see (an mmap, a numpy view of one). Any format: an mmap's is bytes.
 */
static int get_shared(PyObject *obj, Py_buffer *view, Py_ssize_t len, const char *what)
{
	if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0) {
		PyErr_Clear();
		view->obj = NULL;
	} else if (view->len >= len && !((uintptr_t)view->buf % 8)) {
		return 0;
	} else {
		PyBuffer_Release(view);
	}
	PyErr_Format(PyExc_ValueError, "%s must be a writable, 8-byte aligned buffer of at least %zd bytes",
		     what, len);
	return -1;
}

static PyObject *Engine_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "depth", "block_size", "direct", "delay_ns", "rate_bps",
				  "cache_check", "device", "submit_batch", "reap_batch", "userspace_reap", NULL };
	const char *name;
	Py_ssize_t depth = 1, block_size = 1 << 20, submit_batch = 1, reap_batch = 0;
	int direct = 0, cache_check = 0, userspace_reap = 1, rc;
	long long delay_ns = 0, rate_bps = 0;
	PyObject *device = Py_None;
	const struct iodl_engine_ops *ops;
	const char *failed = NULL;
	EngineObject *self;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$nnpLLpOnnp:Engine", kwlist, &name, &depth,
					 &block_size, &direct, &delay_ns, &rate_bps, &cache_check, &device,
					 &submit_batch, &reap_batch, &userspace_reap))
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
	if (device != Py_None && get_shared(device, &self->device, sizeof(uint64_t), "device") < 0) {
		Py_DECREF(self);
		return NULL;
	}
	self->ops = ops;
	self->block_size = block_size;
	self->rate_bps = rate_bps;
	/* a batch as deep as the queue is the same as "all that have a slot" */
	self->submit_batch = submit_batch >= depth ? 0 : (unsigned)submit_batch;
	self->reap_batch = reap_batch >= depth ? 0 : (unsigned)reap_batch;
	self->direct = direct;
	self->cache_check = cache_check;
	Py_BEGIN_ALLOW_THREADS
	rc = iodl_ctx_open(&self->ctx, ops, (unsigned)depth, (size_t)block_size, direct,
			   (uint64_t)delay_ns, self->device.obj ? self->device.buf : NULL, &failed);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		Py_DECREF(self);
		return oserror_wsyscall(-rc, failed ? failed : name);
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

/* A buffer format without native little-endian markers ('@', '=', '<'): "L", "T{L:file:...}" */
static void format_bare(const char *fmt, char *out, size_t n)
{
	size_t k = 0;

	for (; fmt && *fmt && k + 1 < n; fmt++)
		if (*fmt != '@' && *fmt != '=' && *fmt != '<')
			out[k++] = *fmt;
	out[k] = 0;
}

/*
 * The plan, copied into C memory: the loop reads it with the GIL released, when another thread
 * could change the caller's array. A 1-d PLAN_DTYPE array, or a C-contiguous (n, 4) array of
 * uint64 (file, offset, length, op) or (n, 3) (reads), or the same of int64 without negative
 * values. Every row's op must be one of IODL_OP_*. Returns a PyMem block or NULL (exception set).
 */
static struct iodl_plan_row *get_plan(PyObject *obj, size_t *nrows)
{
	Py_buffer view;
	struct iodl_plan_row *rows = NULL;
	char fmt[64];
	int is_signed = 0, ok = 0;
	Py_ssize_t cols = 4;

	if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
		PyErr_Clear();
		goto bad;
	}
	format_bare(view.format ? view.format : "B", fmt, sizeof(fmt));
	if (view.ndim == 1 && view.itemsize == sizeof(struct iodl_plan_row))
		ok = !strcmp(fmt, "T{L:file:L:offset:L:length:L:op:}") || !strcmp(fmt, "T{Q:file:Q:offset:Q:length:Q:op:}");
	else if (view.ndim == 2 && (view.shape[1] == 3 || view.shape[1] == 4) && view.itemsize == 8 && fmt[0] &&
		 !fmt[1] && strchr("LQlq", fmt[0])) {
		ok = 1;
		cols = view.shape[1];
		is_signed = fmt[0] == 'l' || fmt[0] == 'q';
	}
	if (!ok) {
		PyBuffer_Release(&view);
		goto bad;
	}
	*nrows = (size_t)view.len / (size_t)(cols * 8);
	rows = PyMem_Calloc(*nrows ? *nrows : 1, sizeof(*rows));
	if (!rows) {
		PyBuffer_Release(&view);
		PyErr_NoMemory();
		return NULL;
	}
	if (cols == 4) {
		memcpy(rows, view.buf, *nrows * sizeof(*rows));
	} else {		/* (n, 3): reads; op stays 0 (IODL_OP_READ) */
		const uint64_t *in = view.buf;

		for (size_t i = 0; i < *nrows; i++) {
			rows[i].file = in[3 * i];
			rows[i].offset = in[3 * i + 1];
			rows[i].length = in[3 * i + 2];
		}
	}
	PyBuffer_Release(&view);
	for (size_t i = 0; i < *nrows; i++) {
		if (is_signed && ((int64_t)rows[i].file < 0 || (int64_t)rows[i].offset < 0 ||
				  (int64_t)rows[i].length < 0 || (int64_t)rows[i].op < 0)) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: negative file, offset, length or op", i);
			PyMem_Free(rows);
			return NULL;
		}
		if (rows[i].op >= IODL_OP_COUNT) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: op %llu is not read (0), write (1), fsync (2) "
				     "or fdatasync (3)", i, (unsigned long long)rows[i].op);
			PyMem_Free(rows);
			return NULL;
		}
	}
	return rows;
bad:
	PyErr_SetString(PyExc_ValueError, "plan must be a contiguous array of PLAN_DTYPE rows, or of shape "
			"(n, 4) or (n, 3) with dtype uint64 or int64 (file, offset, length[, op])");
	return NULL;
}

static int get_hist(PyObject *obj, Py_buffer *view, const char *what)
{
	if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
		return -1;
	if (view->itemsize == 8 && view->len == IODL_HIST_BUCKETS * 8 && view->format &&
	    strchr("qlQL", view->format[strlen(view->format) - 1]))
		return 0;
	PyBuffer_Release(view);
	PyErr_Format(PyExc_TypeError, "%s must be a writable contiguous int64 array of %d buckets", what,
		     IODL_HIST_BUCKETS);
	return -1;
}

/* int64 as numpy spells it in the buffer protocol: "l" or "q", native byte order */
static int is_int64(const Py_buffer *view)
{
	const char *fmt = view->format;

	if (!fmt || view->itemsize != 8)
		return 0;
	if (*fmt == '@' || *fmt == '=')
		fmt++;
	return (*fmt == 'l' || *fmt == 'q') && !fmt[1];
}

static int get_series(PyObject *obj, Py_buffer *view)
{
	if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
		PyErr_Clear();
		view->obj = NULL;
		goto bad;
	}
	if (view->ndim == 2 && view->shape[0] >= 1 && view->shape[1] == IODL_SERIES_WIDTH && is_int64(view))
		return 0;
	PyBuffer_Release(view);
bad:
	PyErr_Format(PyExc_ValueError, "series must be a writable C-contiguous int64 array of shape "
		     "(n, SERIES_WIDTH=%d), n >= 1", IODL_SERIES_WIDTH);
	return -1;
}

/* fds as C ints, each 0..INT_MAX; `fake`: the null engine looks at none, so -1 ("no file") too */
static int *get_fds(PyObject *obj, size_t *n, int fake)
{
	PyObject *seq = PySequence_Fast(obj, "fds must be a sequence of file descriptors");
	int *fds;

	if (!seq)
		return NULL;
	*n = (size_t)PySequence_Fast_GET_SIZE(seq);
	fds = PyMem_Calloc(*n ? *n : 1, sizeof(int));
	if (!fds) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return NULL;
	}
	for (size_t i = 0; i < *n; i++) {
		int overflow;
		long v = PyLong_AsLongAndOverflow(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i), &overflow);

		if ((v == -1 && PyErr_Occurred()) || overflow || v < (fake ? -1 : 0) || v > INT_MAX) {
			if (!PyErr_Occurred())
				PyErr_Format(PyExc_ValueError, "fds[%zu] is not a file descriptor (0..%d%s)", i, INT_MAX,
					     fake ? ", or -1 for the null engine" : "");
			PyMem_Free(fds);
			Py_DECREF(seq);
			return NULL;
		}
		fds[i] = (int)v;
	}
	Py_DECREF(seq);
	return fds;
}

static PyObject *stats_dict(const struct iodl_stats *st)
{
	PyObject *depth = PyList_New(IODL_DEPTH_BUCKETS);

	if (!depth)
		return NULL;
	for (int i = 0; i < IODL_DEPTH_BUCKETS; i++)
		PyList_SET_ITEM(depth, i, PyLong_FromUnsignedLongLong(st->depth[i]));
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
 * The arrays a run counts into (Engine.run and account take the same ones): borrowed for the
 * call, then given back by outputs_release, also after an error part way through.
 */
struct outputs {
	Py_buffer hist, clat, slat, fsync, series, live, whist, wclat, wslat;
};

static int outputs_get(struct outputs *o, PyObject *hist, PyObject *clat, PyObject *slat, PyObject *fsync,
		       PyObject *series, PyObject *live, struct iodl_run_args *a, long long series_origin_ns,
		       long long series_bucket_ns)
{
	if (get_hist(hist, &o->hist, "hist") < 0)
		return -1;
	if (fsync != Py_None && get_hist(fsync, &o->fsync, "fsync_hist") < 0)
		return -1;
	if (clat != Py_None && get_hist(clat, &o->clat, "clat_hist") < 0)
		return -1;
	if (slat != Py_None && get_hist(slat, &o->slat, "slat_hist") < 0)
		return -1;
	if (series != Py_None && get_series(series, &o->series) < 0)
		return -1;
	if (live != Py_None && get_shared(live, &o->live, IODL_LIVE_N * sizeof(int64_t), "live") < 0)
		return -1;
	a->hist = o->hist.buf;
	a->clat_hist = o->clat.obj ? o->clat.buf : NULL;
	a->slat_hist = o->slat.obj ? o->slat.buf : NULL;
	a->fsync_hist = o->fsync.obj ? o->fsync.buf : NULL;
	if (o->series.obj) {
		a->series = o->series.buf;
		a->series_rows = (size_t)o->series.shape[0];
		a->series_origin_ns = (uint64_t)series_origin_ns;
		a->series_bucket_ns = (uint64_t)series_bucket_ns;
	}
	a->live = o->live.obj ? o->live.buf : NULL;
	return 0;
}

/* Engine.run's write_hist, write_clat_hist, write_slat_hist: the writes' own histograms, or None */
static int outputs_get_writes(struct outputs *o, PyObject *whist, PyObject *wclat, PyObject *wslat,
			      struct iodl_run_args *a)
{
	if (whist != Py_None && get_hist(whist, &o->whist, "write_hist") < 0)
		return -1;
	if (wclat != Py_None && get_hist(wclat, &o->wclat, "write_clat_hist") < 0)
		return -1;
	if (wslat != Py_None && get_hist(wslat, &o->wslat, "write_slat_hist") < 0)
		return -1;
	a->write_hist = o->whist.obj ? o->whist.buf : NULL;
	a->write_clat_hist = o->wclat.obj ? o->wclat.buf : NULL;
	a->write_slat_hist = o->wslat.obj ? o->wslat.buf : NULL;
	return 0;
}

static void outputs_release(struct outputs *o)
{
	Py_buffer *all[] = { &o->hist, &o->clat, &o->slat, &o->fsync, &o->series, &o->live, &o->whist, &o->wclat,
			     &o->wslat };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i]->obj)
			PyBuffer_Release(all[i]);
}

static PyObject *Engine_run(EngineObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "fds", "plan", "hist", "deadline_ns", "window_start_ns", "window_end_ns",
				  "series", "series_origin_ns", "series_bucket_ns", "live", "clat_hist", "slat_hist",
				  "fsync_hist", "write_hist", "write_clat_hist", "write_slat_hist", "records", NULL };
	PyObject *fds_obj, *plan_obj, *hist_obj, *series_obj = Py_None, *live_obj = Py_None, *result = NULL;
	PyObject *clat_obj = Py_None, *slat_obj = Py_None, *fsync_obj = Py_None;
	PyObject *whist_obj = Py_None, *wclat_obj = Py_None, *wslat_obj = Py_None, *rec_obj = Py_None;
	Py_buffer rec_view = { 0 };
	struct iodl_records records = { 0 };
	long long deadline_ns = 0, window_start_ns = 0, window_end_ns = 0;
	long long series_origin_ns = 0, series_bucket_ns = 1000000000;
	struct outputs o = { 0 };
	struct iodl_plan_row *plan = NULL;
	struct iodl_run_args a = { 0 };
	struct interrupt_state intr = { 0 };
	struct iodl_stats st;
	int *fds = NULL, rc;
	size_t nfds = 0, nrows = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$LLLOLLOOOOOOOO:run", kwlist, &fds_obj, &plan_obj,
					 &hist_obj, &deadline_ns, &window_start_ns, &window_end_ns, &series_obj,
					 &series_origin_ns, &series_bucket_ns, &live_obj, &clat_obj, &slat_obj, &fsync_obj,
					 &whist_obj, &wclat_obj, &wslat_obj, &rec_obj))
		return NULL;
	if (check_open(self) < 0)
		return NULL;
	if (deadline_ns < 0 || window_start_ns < 0 || window_end_ns < 0)
		return PyErr_Format(PyExc_ValueError, "deadline_ns and the window must be >= 0");
	if (series_origin_ns < 0 || series_bucket_ns <= 0)
		return PyErr_Format(PyExc_ValueError, "series_origin_ns must be >= 0 and series_bucket_ns > 0");
	fds = get_fds(fds_obj, &nfds, !!(self->ops->flags & IODL_ENG_FAKE));
	if (!fds)
		return NULL;
	plan = get_plan(plan_obj, &nrows);
	if (!plan)
		goto out;
	if (outputs_get(&o, hist_obj, clat_obj, slat_obj, fsync_obj, series_obj, live_obj, &a, series_origin_ns,
			series_bucket_ns) < 0 || outputs_get_writes(&o, whist_obj, wclat_obj, wslat_obj, &a) < 0)
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
	a.plan = plan;
	for (size_t i = 0; i < nrows; i++) {
		if (a.plan[i].file >= nfds) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: file %llu but only %zu fds", i,
				     (unsigned long long)a.plan[i].file, nfds);
			goto out;
		}
		if (a.plan[i].op == IODL_OP_FSYNC || a.plan[i].op == IODL_OP_FDATASYNC)
			continue;	/* a sync's offset and length are not used */
		if (a.plan[i].length > (uint64_t)self->block_size) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: length %llu exceeds block_size %zd", i,
				     (unsigned long long)a.plan[i].length, self->block_size);
			goto out;
		}
		/*
		 * A direct read may round its length up (the tail past EOF is not counted); a direct
		 * write may not: it would write bytes the plan did not ask for, and the kernel refuses
		 * an unaligned one (EINVAL) part way through the run. So it is refused here, before any.
		 */
		if (self->direct && a.plan[i].op == IODL_OP_WRITE &&
		    (a.plan[i].offset % IODL_ALIGN || a.plan[i].length % IODL_ALIGN)) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: a direct write's offset and length must be "
				     "multiples of %d, not offset %llu, length %llu", i, IODL_ALIGN,
				     (unsigned long long)a.plan[i].offset, (unsigned long long)a.plan[i].length);
			goto out;
		}
	}
	a.fds = fds;
	a.nfds = nfds;
	a.nrows = nrows;
	a.deadline_ns = (uint64_t)deadline_ns;
	a.window_start_ns = (uint64_t)window_start_ns;
	a.window_end_ns = (uint64_t)window_end_ns;
	a.rate_bps = (uint64_t)self->rate_bps;
	a.submit_batch = self->submit_batch;
	a.reap_batch = self->reap_batch;
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
		goto out;
	}
	self->busy = 1;
	intr.tstate = PyEval_SaveThread();
	rc = iodl_run(self->ctx, &a, &st);
	PyEval_RestoreThread(intr.tstate);
	self->busy = 0;
	if (self->ctx->abandoned)	/* its requests may still complete: never start another run */
		__atomic_store_n(&self->cancelled, 1, __ATOMIC_RELEASE);

	if (rc < 0) {
		const char *syscall = self->ctx->failed_syscall;

		/* the engine's kernel state is unknown now: tear it down rather than reuse it */
		engine_release(self);
		oserror_wsyscall(-rc, syscall ? syscall : self->ops->name);
		goto out;
	}
	if (intr.type) {
		/* the signal's exception carries what was counted, so a partial result keeps it */
		PyObject *stats = stats_dict(&st);

		PyErr_NormalizeException(&intr.type, &intr.value, &intr.tb);
		if (stats && intr.value && PyObject_SetAttrString(intr.value, "stats", stats) < 0)
			PyErr_Clear();
		Py_XDECREF(stats);
		PyErr_Restore(intr.type, intr.value, intr.tb);
		goto out;
	}
	result = stats_dict(&st);
	if (result && a.records) {
		PyObject *n = PyLong_FromSize_t(records.n), *lost = PyLong_FromSize_t(records.lost);

		if (!n || !lost || PyDict_SetItemString(result, "records", n) < 0 ||
		    PyDict_SetItemString(result, "records_lost", lost) < 0)
			Py_CLEAR(result);
		Py_XDECREF(n);
		Py_XDECREF(lost);
	}
out:
	if (rec_view.obj)
		PyBuffer_Release(&rec_view);
	PyMem_Free(plan);
	outputs_release(&o);
	PyMem_Free(fds);
	return result;
}

/* From any thread, GIL or not in the run's thread: the run stops and returns its stats. */
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
	  "fsync_hist=None, write_hist=None, write_clat_hist=None, write_slat_hist=None, records=None) -> RunStats: "
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

static PyTypeObject EngineType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "iodl._native.Engine",
	.tp_doc = "Engine(name, *, depth=1, block_size=1<<20, direct=False, delay_ns=0, rate_bps=0, "
		  "cache_check=False, device=None, submit_batch=1, reap_batch=0): keeps `depth` requests of a plan in "
		  "flight, handing them to the kernel `submit_batch` at a time (0: all that have a slot) and "
		  "taking at most `reap_batch` completions per reap (0: all that are ready)",
	.tp_basicsize = sizeof(EngineObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = Engine_new,
	.tp_dealloc = (destructor)Engine_dealloc,
	.tp_methods = Engine_methods,
	.tp_getset = Engine_getset,
};

static PyObject *py_engines(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
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

static PyObject *py_probe(PyObject *Py_UNUSED(m), PyObject *arg)
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

/*
 * format_rows(rows) -> bytes: an (n, k) C-contiguous int64 array as text, one line per row, values
 * joined by ", " (fio's log lines): logs of every I/O are written without a Python step per I/O.
 */
static PyObject *py_format_rows(PyObject *Py_UNUSED(m), PyObject *arg)
{
	Py_buffer v;
	PyObject *out = NULL;
	char *text, *p;
	size_t cap;

	if (PyObject_GetBuffer(arg, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
		return NULL;
	if (v.ndim != 2 || !is_int64(&v)) {
		PyErr_SetString(PyExc_ValueError, "rows must be a C-contiguous int64 array of shape (n, k)");
		goto done;
	}
	cap = (size_t)(v.shape[0] * v.shape[1]) * 22 + 1;	/* 20 digits, a sign and a separator each */
	text = PyMem_Malloc(cap ? cap : 1);
	if (!text) {
		PyErr_NoMemory();
		goto done;
	}
	p = text;
	for (Py_ssize_t i = 0; i < v.shape[0]; i++) {
		const int64_t *row = (const int64_t *)v.buf + i * v.shape[1];

		for (Py_ssize_t j = 0; j < v.shape[1]; j++)
			p += sprintf(p, j ? ", %lld" : "%lld", (long long)row[j]);
		*p++ = '\n';
	}
	out = PyBytes_FromStringAndSize(text, p - text);
	PyMem_Free(text);
done:
	PyBuffer_Release(&v);
	return out;
}

static PyObject *py_hist_index(PyObject *Py_UNUSED(m), PyObject *arg)
{
	unsigned long long ns = PyLong_AsUnsignedLongLong(arg);

	if (ns == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	return PyLong_FromUnsignedLong(iodl_hist_index(ns));
}

static PyObject *py_resident_bytes(PyObject *Py_UNUSED(m), PyObject *args)
{
	int fd, rc;
	long long offset, length;
	uint64_t out = 0;
	const char *failed = NULL;

	if (!PyArg_ParseTuple(args, "iLL:resident_bytes", &fd, &offset, &length))
		return NULL;
	if (offset < 0 || length < 0)
		return PyErr_Format(PyExc_ValueError, "offset and length must be >= 0");
	Py_BEGIN_ALLOW_THREADS
	rc = iodl_resident_bytes(fd, (uint64_t)offset, (uint64_t)length, &out, &failed);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return oserror_wsyscall(-rc, failed ? failed : "cachestat");
	if (rc == IODL_NOT_MEASURABLE)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(out);
}

static PyObject *py_cache_measurable(PyObject *Py_UNUSED(m), PyObject *arg)
{
	int fd;
	struct stat sb;

	if (!PyArg_Parse(arg, "i:cache_measurable", &fd))
		return NULL;
	if (fstat(fd, &sb) < 0)
		return oserror_wsyscall(errno, "fstat");
	return PyBool_FromLong(iodl_task_io_accounting() && iodl_reads_accounted(fd, &sb));
}

static PyObject *py_thread_read_bytes(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
	return PyLong_FromUnsignedLongLong(iodl_thread_read_bytes());
}

static PyObject *py_monotonic_ns(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
	return PyLong_FromUnsignedLongLong(iodl_now_ns());
}

/*
 * One column of _native.account: None (when optional), or a 1-d C-contiguous array of 8-byte
 * integers of n entries (n < 0: this one sets n). int64 and uint64 alike: values are taken as
 * uint64, as the loop's own stamps are.
 */
static int get_column(PyObject *obj, Py_buffer *view, Py_ssize_t *n, const char *what)
{
	char fmt[8];

	view->obj = NULL;
	if (obj == Py_None)
		return 0;
	if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
		PyErr_Clear();
		view->obj = NULL;
		goto bad;
	}
	format_bare(view->format ? view->format : "B", fmt, sizeof(fmt));
	if (view->ndim != 1 || view->itemsize != 8 || !fmt[0] || fmt[1] || !strchr("LQlq", fmt[0])) {
		PyBuffer_Release(view);
		goto bad;
	}
	if (*n < 0) {
		*n = view->shape[0];
	} else if (view->shape[0] != *n) {
		PyErr_Format(PyExc_ValueError, "%s has %zd entries, not %zd", what, view->shape[0], *n);
		PyBuffer_Release(view);
		return -1;
	}
	return 0;
bad:
	PyErr_Format(PyExc_ValueError, "%s must be a 1-d contiguous int64 or uint64 array", what);
	return -1;
}

/* entry i of a column, or dflt when the column was not given */
static uint64_t col(const Py_buffer *view, Py_ssize_t i, uint64_t dflt)
{
	return view->obj ? ((const uint64_t *)view->buf)[i] : dflt;
}

/*
 * account(times_ns, nbytes, cached, lat_ns, hist, ...) -> dict: completions a Python engine
 * recorded, counted by iodl_account exactly as the loop counts its own (see _native.pyi).
 */
static PyObject *py_account(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "times_ns", "nbytes", "cached", "lat_ns", "hist", "window_start_ns",
				  "window_end_ns", "series", "series_origin_ns", "series_bucket_ns", "live",
				  "clat_ns", "slat_ns", "clat_hist", "slat_hist", "unmeasured", "submit_ns",
				  "inflight", "t_start_ns", "t_end_ns", NULL };
	enum { TIMES, BYTES, CACHED, LAT, CLAT, SLAT, UNMEASURED, SUBMIT, INFLIGHT, NCOLS };
	static const char *names[NCOLS] = { "times_ns", "nbytes", "cached", "lat_ns", "clat_ns", "slat_ns",
					    "unmeasured", "submit_ns", "inflight" };
	PyObject *obj[NCOLS], *hist_obj, *series_obj = Py_None, *live_obj = Py_None;
	PyObject *clat_obj = Py_None, *slat_obj = Py_None, *result = NULL;
	long long window_start_ns = 0, window_end_ns = 0, series_origin_ns = 0, series_bucket_ns = 1000000000;
	long long t_start_ns = 0, t_end_ns = 0;
	Py_buffer cols[NCOLS] = { { 0 } };
	struct outputs o = { 0 };
	Py_ssize_t n = -1, nsub = -1;
	struct iodl_run_args a = { 0 };
	struct iodl_stats st = { 0 };

	for (int i = 0; i < NCOLS; i++)
		obj[i] = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|$LLOLLOOOOOOOOLL:account", kwlist, &obj[TIMES],
					 &obj[BYTES], &obj[CACHED], &obj[LAT], &hist_obj, &window_start_ns,
					 &window_end_ns, &series_obj, &series_origin_ns, &series_bucket_ns, &live_obj,
					 &obj[CLAT], &obj[SLAT], &clat_obj, &slat_obj, &obj[UNMEASURED], &obj[SUBMIT],
					 &obj[INFLIGHT], &t_start_ns, &t_end_ns))
		return NULL;
	if (window_start_ns < 0 || window_end_ns < 0 || t_start_ns < 0 || t_end_ns < 0)
		return PyErr_Format(PyExc_ValueError, "the window, t_start_ns and t_end_ns must be >= 0");
	if (series_origin_ns < 0 || series_bucket_ns <= 0)
		return PyErr_Format(PyExc_ValueError, "series_origin_ns must be >= 0 and series_bucket_ns > 0");
	if (obj[TIMES] == Py_None || obj[BYTES] == Py_None || obj[LAT] == Py_None)
		return PyErr_Format(PyExc_ValueError, "times_ns, nbytes and lat_ns are required (cached may be None)");
	if ((obj[SUBMIT] == Py_None) != (obj[INFLIGHT] == Py_None))
		return PyErr_Format(PyExc_ValueError, "submit_ns and inflight go together");
	for (int i = 0; i < NCOLS; i++)
		if (get_column(obj[i], &cols[i], i < SUBMIT ? &n : &nsub, names[i]) < 0)
			goto out;
	if (outputs_get(&o, hist_obj, clat_obj, slat_obj, Py_None, series_obj, live_obj, &a, series_origin_ns,
			series_bucket_ns) < 0)
		goto out;
	a.window_start_ns = (uint64_t)window_start_ns;
	a.window_end_ns = (uint64_t)window_end_ns;
	/* the loop's order: depth is sampled at submit, the rest at completion, then the ends clipped */
	for (Py_ssize_t i = 0; i < nsub; i++) {
		uint64_t inflight = col(&cols[INFLIGHT], i, 1);

		iodl_account_submit(&a, &st, col(&cols[SUBMIT], i, 0), inflight > UINT_MAX ? UINT_MAX : (unsigned)inflight, 1);
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		struct iodl_done d = {
			.t_ns = col(&cols[TIMES], i, 0),
			.bytes = col(&cols[BYTES], i, 0),
			.cached = col(&cols[CACHED], i, 0),
			.lat_ns = col(&cols[LAT], i, 0),
			.has_slat = cols[SLAT].obj != NULL,
			.unmeasured = col(&cols[UNMEASURED], i, 0) != 0,
		};

		/* without clat_ns a request is a sync read: clat is all of it (fio's sync engines) */
		d.clat_ns = col(&cols[CLAT], i, d.lat_ns);
		d.slat_ns = col(&cols[SLAT], i, 0);
		iodl_account(&a, &st, &d);
	}
	st.t_start_ns = (uint64_t)t_start_ns;
	st.t_end_ns = (uint64_t)t_end_ns;
	iodl_account_finish(&a, &st, iodl_now_ns());
	{
		PyObject *depth = PyList_New(IODL_DEPTH_BUCKETS);

		if (!depth)
			goto out;
		for (int i = 0; i < IODL_DEPTH_BUCKETS; i++)
			PyList_SET_ITEM(depth, i, PyLong_FromUnsignedLongLong(st.depth[i]));
		result = Py_BuildValue("{sKsKsKsKsKsKsKsNsK}", "ios", st.ios, "bytes", st.bytes,
				       "cached_bytes", st.cached_bytes, "cache_unmeasured_bytes",
				       st.cache_unmeasured_bytes, "t_start_ns", st.t_start_ns, "t_end_ns", st.t_end_ns,
				       "max_ns", st.max_ns, "depth", depth, "series_clamped", st.series_clamped);
	}
out:
	for (int i = 0; i < NCOLS; i++)
		if (cols[i].obj)
			PyBuffer_Release(&cols[i]);
	outputs_release(&o);
	return result;
}

/* node_barrier(shared_buffer, nranks, flag) -> OR of every rank's flag for this round */
static PyObject *py_node_barrier(PyObject *Py_UNUSED(m), PyObject *args)
{
	Py_buffer buf;
	unsigned int nranks, flag;
	uint32_t gen, result;
	struct iodl_node_barrier *b;
	int rc;

	if (!PyArg_ParseTuple(args, "w*II:node_barrier", &buf, &nranks, &flag))
		return NULL;
	if (buf.len < (Py_ssize_t)sizeof(*b) || ((uintptr_t)buf.buf % 8) || nranks < 1) {
		PyBuffer_Release(&buf);
		return PyErr_Format(PyExc_ValueError, "node_barrier needs an aligned shared buffer and nranks >= 1");
	}
	b = buf.buf;
	rc = iodl_barrier_arrive(b, nranks, flag, &gen);
	while (!rc) {
		Py_BEGIN_ALLOW_THREADS
		/* in 100 ms slices, so that a signal (Ctrl-C) is seen while we wait */
		rc = iodl_barrier_wait(b, gen, 100000000u);
		Py_END_ALLOW_THREADS
		if (rc <= 0 && PyErr_CheckSignals() < 0) {
			PyBuffer_Release(&buf);
			return NULL;
		}
		if (rc < 0)
			rc = 0;
	}
	result = __atomic_load_n(&b->result, __ATOMIC_ACQUIRE);
	PyBuffer_Release(&buf);
	return PyLong_FromUnsignedLong(result);
}

PyObject *iodl_py_write_files(PyObject *m, PyObject *args);   /* smallfiles.c */
PyObject *iodl_py_list_dir(PyObject *m, PyObject *args);      /* listing.c */
PyObject *iodl_py_file_ops(PyObject *m, PyObject *args);      /* fileops.c */

static PyMethodDef module_methods[] = {
	{ "write_files", iodl_py_write_files, METH_VARARGS,
	  "write_files(dirfd, prefix, width, tail, temp_suffix, indices, buffer, offsets, lengths): files named "
	  "prefix + index (zero-padded to width) + tail in dirfd, each created exclusively under its temp name "
	  "(never through a link), written from buffer[offset:offset+length], closed and renamed" },
	{ "list_dir", iodl_py_list_dir, METH_VARARGS,
	  "list_dir(dirfd, prefix, threads) -> (names, offsets, sizes, rest): the directory's regular files by "
	  "name (prefix + name packed, int64 offsets and sizes as bytes), stat'ed on `threads` threads without "
	  "following links; rest: [(name, kind)] of the other entries, kind 'd' directory, 'l' link, 'o' other" },
	{ "file_ops", iodl_py_file_ops, METH_VARARGS,
	  "file_ops(op, paths, hist) -> (files done, t_start_ns, t_end_ns): fio's filecreate (op 0, exclusive, "
	  "marked), filestat (1 stat, 2 lstat, 3 statx) or filedelete (4, marked files only) on each NUL-terminated "
	  "path; each call's latency into the int64 histogram" },
	{ "node_barrier", py_node_barrier, METH_VARARGS,
	  "node_barrier(shared_buffer, nranks, flag) -> OR of the round's flags; waits in the kernel" },
	{ "engines", py_engines, METH_NOARGS, "compiled-in engine names" },
	{ "account", (PyCFunction)(void (*)(void))py_account, METH_VARARGS | METH_KEYWORDS,
	  "account(times_ns, nbytes, cached, lat_ns, hist, *, window_start_ns=0, window_end_ns=0, series=None, "
	  "series_origin_ns=0, series_bucket_ns=1_000_000_000, live=None, clat_ns=None, slat_ns=None, "
	  "clat_hist=None, slat_hist=None, unmeasured=None, submit_ns=None, inflight=None, t_start_ns=0, "
	  "t_end_ns=0) -> the counted part of RunStats, for completions a Python engine recorded" },
	{ "probe", py_probe, METH_O, "probe(engine) -> 0 if usable here, else an errno" },
	{ "format_rows", py_format_rows, METH_O, "format_rows(rows) -> bytes: (n, k) int64 rows as 'a, b, c' lines" },
	{ "hist_index", py_hist_index, METH_O, "latency histogram bucket of a value in ns" },
	{ "resident_bytes", py_resident_bytes, METH_VARARGS,
	  "resident_bytes(fd, offset, length) -> bytes of the range in the page cache, or None when the "
	  "kernel will not tell this caller (cachestat, or mincore before Linux 6.5)" },
	{ "cache_measurable", py_cache_measurable, METH_O,
	  "cache_measurable(fd) -> the kernel accounts this file's reads to the reader (cache hits are measured)" },
	{ "thread_read_bytes", py_thread_read_bytes, METH_NOARGS,
	  "bytes the calling thread's reads made the storage deliver so far (task I/O accounting)" },
	{ "monotonic_ns", py_monotonic_ns, METH_NOARGS, "the engine's clock: CLOCK_MONOTONIC in ns" },
	{ NULL }
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "iodl._native",
	.m_doc = "The per-I/O loop in C; see iodl/_native.pyi.",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
	PyObject *m;

	/* refuse to load with an ops table the core cannot drive (fio check_engine_ops) */
	for (const struct iodl_engine_ops *const *e = iodl_engines; *e; e++) {
		const char *why = iodl_check_engine_ops(*e);

		if (why)
			return PyErr_Format(PyExc_ImportError, "engine '%s': %s", (*e)->name, why);
	}
	if (PyType_Ready(&EngineType) < 0)
		return NULL;
	m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	if (PyModule_AddIntConstant(m, "HIST_BITS", IODL_HIST_BITS) < 0 ||
	    PyModule_AddIntConstant(m, "HIST_BUCKETS", IODL_HIST_BUCKETS) < 0 ||
	    PyModule_AddIntConstant(m, "DEPTH_BUCKETS", IODL_DEPTH_BUCKETS) < 0 ||
	    PyModule_AddIntConstant(m, "SERIES_SHIFT", IODL_SERIES_SHIFT) < 0 ||
	    PyModule_AddIntConstant(m, "SERIES_WIDTH", IODL_SERIES_WIDTH) < 0 ||
	    PyModule_AddIntConstant(m, "ALIGN", IODL_ALIGN) < 0 ||
	    PyModule_AddObjectRef(m, "Engine", (PyObject *)&EngineType) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
