/* A batch's table rows in one call (rows.c), for iodl/data/tables.py TableRows.take. */
#include "bind.h"
#include "rows.h"

PyObject *iodl_py_pread_rows(PyObject *Py_UNUSED(m), PyObject *args)
{
	int fd, rc;
	long long base, row_bytes;
	Py_buffer rows;
	PyObject *out;

	if (!PyArg_ParseTuple(args, "iLLy*:pread_rows", &fd, &base, &row_bytes, &rows))
		return NULL;
	if (rows.len % 8 || base < 0 || row_bytes < 1) {
		PyBuffer_Release(&rows);
		return PyErr_Format(PyExc_ValueError, "pread_rows: rows must be uint64 (a multiple of 8 bytes), "
				    "base >= 0, row_bytes >= 1");
	}
	size_t n = (size_t)rows.len / 8;

	out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * (size_t)row_bytes));
	if (!out) {
		PyBuffer_Release(&rows);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = iodl_pread_rows(fd, (uint64_t)base, (size_t)row_bytes, rows.buf, n, (unsigned char *)PyBytes_AS_STRING(out));
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&rows);
	if (rc == IODL_ROWS_SHORT) {
		Py_DECREF(out);
		return PyErr_Format(PyExc_EOFError, "pread_rows: the file ends before a row asked for");
	}
	if (rc < 0) {
		Py_DECREF(out);
		return iodl_oserror_wsyscall(-rc, "pread");
	}
	return out;
}
