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

/* Wait in 100 ms slices with the GIL released, so that a signal (Ctrl-C) is seen while we wait:
 * wait(arg, slice) returns 1 done, 0 the slice passed, < 0 interrupted. -1 with the exception set. */
static int wait_in_slices(int (*wait)(void *, uint64_t), void *arg)
{
	int rc = 0;

	while (rc <= 0) {
		Py_BEGIN_ALLOW_THREADS
		rc = wait(arg, 100000000u);
		Py_END_ALLOW_THREADS
		if (rc <= 0 && PyErr_CheckSignals() < 0)
			return -1;
	}
	return 0;
}

struct round { struct iodl_node_barrier *b; uint32_t gen; uint64_t until_ns; };

static int released(void *arg, uint64_t slice_ns)
{
	struct round *r = arg;

	return iodl_barrier_wait(r->b, r->gen, slice_ns);
}

static int computed(void *arg, uint64_t slice_ns)
{
	return iodl_barrier_sleep(((struct round *)arg)->until_ns, slice_ns);
}

/* node_barrier(shared_buffer, nranks, flag, until_ns=0) -> OR of every rank's flag for this round,
 * once every rank of the node arrived and the latest of their until_ns (CLOCK_MONOTONIC) passed.
 * A step loop arrives as its compute begins with the compute's end: the ranks that are not last
 * sleep once (to the release), where a compute sleep and then a barrier woke them twice. */
PyObject *iodl_py_node_barrier(PyObject *Py_UNUSED(m), PyObject *args)
{
	Py_buffer buf;
	unsigned int nranks, flag;
	unsigned long long until_ns = 0;
	uint32_t result;
	struct round r;
	int rc;

	if (!PyArg_ParseTuple(args, "w*II|K:node_barrier", &buf, &nranks, &flag, &until_ns))
		return NULL;
	if (!(r.b = barrier_of(&buf)))
		return NULL;
	if (nranks < 1) {
		PyBuffer_Release(&buf);
		return PyErr_Format(PyExc_ValueError, "node_barrier needs nranks >= 1");
	}
	if (iodl_barrier_arrive(r.b, nranks, flag, until_ns, &r.gen, &r.until_ns)) {
		/* last: nobody can arrive again before the release, so the sleep holds the round */
		rc = wait_in_slices(computed, &r);
		if (!rc)
			iodl_barrier_release(r.b, nranks);
	} else {
		rc = wait_in_slices(released, &r);
	}
	result = __atomic_load_n(&r.b->result, __ATOMIC_ACQUIRE);
	PyBuffer_Release(&buf);
	return rc < 0 ? NULL : PyLong_FromUnsignedLong(result);
}

/* node_resumed(shared_buffer, wait_ns=0) -> bool: this rank is back at work since the last release;
 * wait_ns: then wait (the GIL released, at most that long: no signal is looked for) until the
 * round's others are too. True: they are. */
PyObject *iodl_py_node_resumed(PyObject *Py_UNUSED(m), PyObject *args)
{
	Py_buffer buf;
	unsigned long long wait_ns = 0;
	struct iodl_node_barrier *b;
	int rc;

	if (!PyArg_ParseTuple(args, "w*|K:node_resumed", &buf, &wait_ns))
		return NULL;
	if (!(b = barrier_of(&buf)))
		return NULL;
	if (wait_ns) {
		Py_BEGIN_ALLOW_THREADS
		rc = iodl_barrier_resumed(b, wait_ns);
		Py_END_ALLOW_THREADS
	} else {
		rc = iodl_barrier_resumed(b, 0);
	}
	PyBuffer_Release(&buf);
	return PyBool_FromLong(rc);
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
