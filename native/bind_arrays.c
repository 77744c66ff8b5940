/*
 * Arrays and buffers a call borrows from its caller: the histograms, series and live counters a
 * run counts into (Engine.run and account take the same ones), checked as _native.pyi says.
 */
#include "bind.h"

#include <string.h>

/*
 * A writable buffer of at least `len` bytes, 8-byte aligned: a shared word or counters that
 * other processes see (an mmap, a numpy view of one). Any format: an mmap's is bytes.
 */
int iodl_get_shared(PyObject *obj, Py_buffer *view, Py_ssize_t len, const char *what)
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

void iodl_format_bare(const char *fmt, char *out, size_t n)
{
	size_t k = 0;

	for (; fmt && *fmt && k + 1 < n; fmt++)
		if (*fmt != '@' && *fmt != '=' && *fmt != '<')
			out[k++] = *fmt;
	out[k] = 0;
}

int iodl_get_hist(PyObject *obj, Py_buffer *view, const char *what)
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

int iodl_is_int64(const Py_buffer *view)
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
	if (view->ndim == 2 && view->shape[0] >= 1 && view->shape[1] == IODL_SERIES_WIDTH && iodl_is_int64(view))
		return 0;
	PyBuffer_Release(view);
bad:
	PyErr_Format(PyExc_ValueError, "series must be a writable C-contiguous int64 array of shape "
		     "(n, SERIES_WIDTH=%d), n >= 1", IODL_SERIES_WIDTH);
	return -1;
}

/* An optional histogram: None leaves *out NULL (its samples go where the caller's default sends them) */
static int get_hist_or_none(PyObject *obj, Py_buffer *view, int64_t **out, const char *what)
{
	*out = NULL;
	if (obj == Py_None)
		return 0;
	if (iodl_get_hist(obj, view, what) < 0)
		return -1;
	*out = view->buf;
	return 0;
}

int iodl_outputs_get(struct iodl_outputs *o, PyObject *hist, PyObject *clat, PyObject *slat, PyObject *fsync,
		     PyObject *series, PyObject *live, struct iodl_run_args *a, long long series_origin_ns,
		     long long series_bucket_ns)
{
	if (iodl_get_hist(hist, &o->hist, "hist") < 0 ||
	    get_hist_or_none(fsync, &o->fsync, &a->fsync_hist, "fsync_hist") < 0 ||
	    get_hist_or_none(clat, &o->clat, &a->clat_hist, "clat_hist") < 0 ||
	    get_hist_or_none(slat, &o->slat, &a->slat_hist, "slat_hist") < 0)
		return -1;
	if (series != Py_None && get_series(series, &o->series) < 0)
		return -1;
	if (live != Py_None && iodl_get_shared(live, &o->live, IODL_LIVE_N * sizeof(int64_t), "live") < 0)
		return -1;
	a->hist = o->hist.buf;
	if (o->series.obj) {
		a->series = o->series.buf;
		a->series_rows = (size_t)o->series.shape[0];
		a->series_origin_ns = (uint64_t)series_origin_ns;
		a->series_bucket_ns = (uint64_t)series_bucket_ns;
	}
	a->live = o->live.obj ? o->live.buf : NULL;
	return 0;
}

int iodl_outputs_get_writes(struct iodl_outputs *o, PyObject *whist, PyObject *wclat, PyObject *wslat,
			    struct iodl_run_args *a)
{
	if (get_hist_or_none(whist, &o->whist, &a->write_hist, "write_hist") < 0 ||
	    get_hist_or_none(wclat, &o->wclat, &a->write_clat_hist, "write_clat_hist") < 0 ||
	    get_hist_or_none(wslat, &o->wslat, &a->write_slat_hist, "write_slat_hist") < 0)
		return -1;
	return 0;
}

void iodl_outputs_release(struct iodl_outputs *o)
{
	Py_buffer *all[] = { &o->hist, &o->clat, &o->slat, &o->fsync, &o->series, &o->live, &o->whist, &o->wclat,
			     &o->wslat };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i]->obj)
			PyBuffer_Release(all[i]);
}
