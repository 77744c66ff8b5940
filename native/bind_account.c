/*
 * account(): completions a Python engine recorded (the asyncio engine), counted by account.c's
 * iodl_account exactly as the loop counts its own; hist_index(): the bucket that function uses.
 */
#include "bind.h"

#include <limits.h>
#include <string.h>

#include "sys.h"

PyObject *iodl_py_hist_index(PyObject *Py_UNUSED(m), PyObject *arg)
{
	unsigned long long ns = PyLong_AsUnsignedLongLong(arg);

	if (ns == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	return PyLong_FromUnsignedLong(iodl_hist_index(ns));
}

PyObject *iodl_depth_list(const struct iodl_stats *st)
{
	PyObject *depth = PyList_New(IODL_DEPTH_BUCKETS);

	if (!depth)
		return NULL;
	for (int i = 0; i < IODL_DEPTH_BUCKETS; i++)
		PyList_SET_ITEM(depth, i, PyLong_FromUnsignedLongLong(st->depth[i]));
	return depth;
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
	iodl_format_bare(view->format ? view->format : "B", fmt, sizeof(fmt));
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
PyObject *iodl_py_account(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
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
	struct iodl_outputs o = { 0 };
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
	if (iodl_outputs_get(&o, hist_obj, clat_obj, slat_obj, Py_None, series_obj, live_obj, &a, series_origin_ns,
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
		PyObject *depth = iodl_depth_list(&st);

		if (!depth)
			goto out;
		result = Py_BuildValue("{sKsKsKsKsKsKsKsNsK}", "ios", st.ios, "bytes", st.bytes,
				       "cached_bytes", st.cached_bytes, "cache_unmeasured_bytes",
				       st.cache_unmeasured_bytes, "t_start_ns", st.t_start_ns, "t_end_ns", st.t_end_ns,
				       "max_ns", st.max_ns, "depth", depth, "series_clamped", st.series_clamped);
	}
out:
	for (int i = 0; i < NCOLS; i++)
		if (cols[i].obj)
			PyBuffer_Release(&cols[i]);
	iodl_outputs_release(&o);
	return result;
}
