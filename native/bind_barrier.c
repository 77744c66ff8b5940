/* node_barrier(): barrier.c's futex barrier, waited on with the GIL released. */
#include "bind.h"

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
