/* Page-cache figures that hold for any caller (pagecache.c), for iodl.cache. */
#include "bind.h"

#include <sys/stat.h>

PyObject *iodl_py_resident_bytes(PyObject *Py_UNUSED(m), PyObject *args)
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
		return iodl_oserror_wsyscall(-rc, failed ? failed : "cachestat");
	if (rc == IODL_NOT_MEASURABLE)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(out);
}

PyObject *iodl_py_cache_measurable(PyObject *Py_UNUSED(m), PyObject *arg)
{
	int fd;
	struct stat sb;

	if (!PyArg_Parse(arg, "i:cache_measurable", &fd))
		return NULL;
	if (fstat(fd, &sb) < 0)
		return iodl_oserror_wsyscall(errno, "fstat");
	return PyBool_FromLong(iodl_task_io_accounting() && iodl_reads_accounted(fd, &sb));
}

PyObject *iodl_py_thread_read_bytes(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
	return PyLong_FromUnsignedLongLong(iodl_thread_read_bytes());
}

