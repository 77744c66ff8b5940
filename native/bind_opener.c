/*
 * opener(threads, direct, inside) -> Opener: opener.c's open-ahead pool as a Python object. A
 * batch is one call each way (submit its paths, take its fds, close them), the GIL released
 * while the caller waits for opens, so that the step loop never waits behind the reader.
 * Contract: iodl/_native.pyi.
 */
#include "bind.h"

#include <string.h>

#include "opener.h"

/* how long take() waits in the kernel between looks for a signal (Ctrl-C) */
#define TAKE_SLICE_NS 100000000ull

typedef struct {
	PyObject_HEAD
	struct iodl_opener *op;		/* NULL once closed */
} OpenerObject;

/* a C-contiguous int64 array borrowed for the call */
static int get_int64(PyObject *obj, Py_buffer *view, const char *what)
{
	if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
		return -1;
	if (view->ndim <= 1 && iodl_is_int64(view))
		return 0;
	PyBuffer_Release(view);
	PyErr_Format(PyExc_TypeError, "%s must be a contiguous 1-d int64 array", what);
	return -1;
}

static struct iodl_opener *open_pool(OpenerObject *self)
{
	if (!self->op)
		PyErr_SetString(PyExc_ValueError, "the opener is closed");
	return self->op;
}

static PyObject *Opener_submit(OpenerObject *self, PyObject *args)
{
	Py_buffer paths, sizes, out = { 0 };
	Py_ssize_t nul = 0;
	PyObject *out_obj = Py_None, *ret = NULL;
	int64_t first;

	/* paths: any bytes-like object (a memoryview slice of a chunk's paths made once, too) */
	if (!open_pool(self) || !PyArg_ParseTuple(args, "y*O|O:submit", &paths, &sizes.obj, &out_obj))
		return NULL;
	if (get_int64(sizes.obj, &sizes, "sizes") < 0) {
		PyBuffer_Release(&paths);
		return NULL;
	}
	const char *p = paths.buf;

	for (Py_ssize_t i = 0; i < paths.len; i++)
		nul += !p[i];
	if (nul != sizes.len / 8 || (paths.len && p[paths.len - 1])) {
		PyErr_Format(PyExc_ValueError, "submit: %zd NUL-terminated paths for %zd sizes", nul, sizes.len / 8);
		goto out;
	}
	if (out_obj != Py_None) {
		/* the tickets written there, one per path: a caller that keeps them in an array makes
		 * none of its own (a numpy arange a batch, with the caches cold) */
		if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
			goto out;
		if (out.ndim > 1 || !iodl_is_int64(&out) || out.len != sizes.len) {
			PyErr_SetString(PyExc_ValueError, "submit: out must be a writable int64 array of one ticket a path");
			goto out;
		}
	}
	/* the GIL released even for this: the pool's lock may be held by a thread the scheduler
	 * preempted, and the step loop must not wait behind it */
	Py_BEGIN_ALLOW_THREADS
	first = iodl_opener_submit(self->op, p, sizes.buf, (size_t)(sizes.len / 8));
	Py_END_ALLOW_THREADS
	if (first < 0) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; out.obj && i < out.len / 8; i++)
		((int64_t *)out.buf)[i] = first + i;
	ret = PyLong_FromLongLong(first);
out:
	PyBuffer_Release(&paths);
	PyBuffer_Release(&sizes);
	if (out.obj)
		PyBuffer_Release(&out);
	return ret;
}

static PyTypeObject opener_type;

int iodl_py_opener_take(PyObject *opener, const int64_t *tickets, size_t n, struct iodl_open_result *out)
{
	OpenerObject *self = (OpenerObject *)opener;
	int done = 0;

	if (Py_TYPE(opener) != &opener_type) {
		PyErr_SetString(PyExc_TypeError, "opener must be an Opener (_native.opener)");
		return -1;
	}
	if (!open_pool(self))
		return -1;
	while (!done) {
		Py_BEGIN_ALLOW_THREADS
		done = iodl_opener_take(self->op, tickets, n, out, TAKE_SLICE_NS);
		Py_END_ALLOW_THREADS
		if (done < 0) {
			PyErr_SetString(PyExc_ValueError, "take: a ticket that is not waiting (taken, dropped or never given)");
			return -1;
		}
		if (!done && PyErr_CheckSignals() < 0)
			return -1;
	}
	return 0;
}

static PyObject *Opener_take(OpenerObject *self, PyObject *arg)
{
	Py_buffer t;
	PyObject *out;

	if (!open_pool(self) || get_int64(arg, &t, "tickets") < 0)
		return NULL;
	out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((size_t)(t.len / 8) * sizeof(struct iodl_open_result)));
	if (out && iodl_py_opener_take((PyObject *)self, t.buf, (size_t)(t.len / 8),
				       (struct iodl_open_result *)PyBytes_AS_STRING(out)) < 0)
		Py_CLEAR(out);
	PyBuffer_Release(&t);
	return out;
}

static PyObject *Opener_drop(OpenerObject *self, PyObject *arg)
{
	Py_buffer t;

	if (!open_pool(self) || get_int64(arg, &t, "tickets") < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	iodl_opener_drop(self->op, t.buf, (size_t)(t.len / 8));
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&t);
	Py_RETURN_NONE;
}

static PyObject *Opener_close_fds(OpenerObject *self, PyObject *arg)
{
	Py_buffer fds;
	PyObject *out;

	if (get_int64(arg, &fds, "fds") < 0)
		return NULL;
	out = PyBytes_FromStringAndSize(NULL, fds.len * 2);
	if (out) {
		Py_BEGIN_ALLOW_THREADS
		iodl_close_fds(fds.buf, (size_t)(fds.len / 8), (int64_t (*)[2])PyBytes_AS_STRING(out));
		Py_END_ALLOW_THREADS
	}
	PyBuffer_Release(&fds);
	return out;
}

static PyObject *Opener_close(OpenerObject *self, PyObject *Py_UNUSED(a))
{
	if (self->op)
		iodl_opener_free(self->op);
	self->op = NULL;
	Py_RETURN_NONE;
}

static void Opener_dealloc(OpenerObject *self)
{
	if (self->op)
		iodl_opener_free(self->op);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef opener_methods[] = {
	{ "submit", (PyCFunction)Opener_submit, METH_VARARGS,
	  "submit(paths, sizes, out=None) -> the first one's ticket: queue opens, in order; out: each one's ticket "
	  "written there" },
	{ "take", (PyCFunction)Opener_take, METH_O,
	  "take(tickets) -> bytes of (fd, err, done_ns, took_ns) int64 per ticket, once all are done" },
	{ "drop", (PyCFunction)Opener_drop, METH_O, "drop(tickets): they will not be taken; their fds are closed" },
	{ "close_fds", (PyCFunction)Opener_close_fds, METH_O,
	  "close_fds(fds) -> bytes of (done_ns, took_ns) int64 per fd, each close timed" },
	{ "close", (PyCFunction)Opener_close, METH_NOARGS,
	  "stop the threads (never waits for an open) and close every fd not taken" },
	{ NULL }
};

static PyTypeObject opener_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "iodl._native.Opener",
	.tp_basicsize = sizeof(OpenerObject),
	.tp_dealloc = (destructor)Opener_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "an open-ahead pool: opener(threads, direct, inside)",
	.tp_methods = opener_methods,
};

PyObject *iodl_py_opener(PyObject *Py_UNUSED(m), PyObject *args)
{
	int threads, direct;
	PyObject *inside_obj, *inside_bytes = NULL;
	OpenerObject *self;

	if (!PyArg_ParseTuple(args, "ipO:opener", &threads, &direct, &inside_obj))
		return NULL;
	if (threads < 1 || threads > 1024)
		return PyErr_Format(PyExc_ValueError, "opener: threads must be 1..1024, not %d", threads);
	if (inside_obj != Py_None && !PyUnicode_FSConverter(inside_obj, &inside_bytes))
		return NULL;
	/* the type is readied on first use: one method table entry, nothing at import */
	if (PyType_Ready(&opener_type) < 0 || !(self = PyObject_New(OpenerObject, &opener_type))) {
		Py_XDECREF(inside_bytes);
		return NULL;
	}
	self->op = iodl_opener_new((unsigned)threads, direct, inside_bytes ? PyBytes_AS_STRING(inside_bytes) : NULL);
	Py_XDECREF(inside_bytes);
	if (!self->op) {
		Py_DECREF(self);
		return iodl_oserror_wsyscall(errno, "pthread_create");
	}
	return (PyObject *)self;
}
