/* node_barrier(), node_resumed(), node_quiet(): barrier.c's futex barrier, waited on with the GIL released. */
#include "bind.h"

/* The barrier at the start of a shared buffer, or NULL with ValueError (the buffer released) */
static struct iodl_node_barrier *barrier_of(Py_buffer *buf)
{
	if (buf->len < (Py_ssize_t)sizeof(struct iodl_node_barrier) || ((uintptr_t)buf->buf % 8)) {
		PyBuffer_Release(buf);
		PyErr_SetString(PyExc_ValueError, "the node barrier needs an aligned shared buffer");
		return NULL;
	}
	return buf->buf;
}

/* node_barrier(shared_buffer, nranks, flag) -> OR of every rank's flag for this round */
PyObject *iodl_py_node_barrier(PyObject *Py_UNUSED(m), PyObject *args)
{
	Py_buffer buf;
	unsigned int nranks, flag;
	uint32_t gen, result;
	struct iodl_node_barrier *b;
	int rc;

	if (!PyArg_ParseTuple(args, "w*II:node_barrier", &buf, &nranks, &flag))
		return NULL;
	if (!(b = barrier_of(&buf)))
		return NULL;
	if (nranks < 1) {
		PyBuffer_Release(&buf);
		return PyErr_Format(PyExc_ValueError, "node_barrier needs nranks >= 1");
	}
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

/* node_resumed(shared_buffer): this rank is back at work since the last release */
PyObject *iodl_py_node_resumed(PyObject *Py_UNUSED(m), PyObject *arg)
{
	Py_buffer buf;
	struct iodl_node_barrier *b;

	if (PyObject_GetBuffer(arg, &buf, PyBUF_WRITABLE) < 0)
		return NULL;
	if (!(b = barrier_of(&buf)))
		return NULL;
	iodl_barrier_resumed(b);
	PyBuffer_Release(&buf);
	Py_RETURN_NONE;
}

/* node_quiet(shared_buffer, timeout_ns) -> True once every rank is back at work after a release
 * (the one under way, else the next), False when timeout_ns passed first; the GIL released while
 * it waits. A thread's wait, not the main thread's: it does not look for signals (the timeout
 * bounds it). */
PyObject *iodl_py_node_quiet(PyObject *Py_UNUSED(m), PyObject *args)
{
	Py_buffer buf;
	unsigned long long timeout_ns;
	struct iodl_node_barrier *b;
	int rc;

	if (!PyArg_ParseTuple(args, "w*K:node_quiet", &buf, &timeout_ns))
		return NULL;
	if (!(b = barrier_of(&buf)))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = iodl_barrier_quiet_wait(b, timeout_ns);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&buf);
	return PyBool_FromLong(rc == 1);
}
