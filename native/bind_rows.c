/* A batch's table rows in one call (rows.c), for iodl/data/tables.py TableRows.take. */
#include "bind.h"

#include <stdlib.h>
#include "rows.h"

PyObject *iodl_py_pread_rows(PyObject *Py_UNUSED(m), PyObject *args)
{
	int fd, rc;
	long long base, row_bytes, seen, stored;
	Py_buffer idx;
	PyObject *out = NULL;
	uint64_t *rows = NULL;

	if (!PyArg_ParseTuple(args, "iLLy*LL:pread_rows", &fd, &base, &row_bytes, &idx, &seen, &stored))
		return NULL;
	const int64_t *in = idx.buf;
	size_t n = (size_t)idx.len / 8;

	if (idx.len % 8 || base < 0 || row_bytes < 1 || stored < 1 || seen < stored) {
		PyErr_SetString(PyExc_ValueError, "pread_rows: rows must be int64 (a multiple of 8 bytes), base >= 0, "
				"row_bytes >= 1, 1 <= stored <= seen");
		goto out;
	}
	/* index i of a table seen `seen` rows long (its `stored` rows repeated): stored row
	 * (i mod seen) mod stored, negative i from the end as Python's; the bounds checked here, so that
	 * the caller needs no array operations of its own (TableRows.take: a few per step) */
	rows = malloc((n ? n : 1) * sizeof(*rows));
	if (!rows) {
		PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (in[i] < -seen || in[i] >= seen) {
			long long lo = in[0], hi = in[0];

			for (size_t k = 1; k < n; k++) {
				lo = in[k] < lo ? in[k] : lo;
				hi = in[k] > hi ? in[k] : hi;
			}
			PyErr_Format(PyExc_IndexError, "rows %lld..%lld of a table of %lld", lo, hi, seen);
			goto out;
		}
		rows[i] = (uint64_t)((in[i] < 0 ? in[i] + seen : in[i]) % stored);
	}
	out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * (size_t)row_bytes));
	if (!out)
		goto out;
	Py_BEGIN_ALLOW_THREADS
	rc = iodl_pread_rows(fd, (uint64_t)base, (size_t)row_bytes, rows, n, (unsigned char *)PyBytes_AS_STRING(out));
	Py_END_ALLOW_THREADS
	if (rc == IODL_ROWS_SHORT) {
		Py_CLEAR(out);
		PyErr_Format(PyExc_EOFError, "pread_rows: the file ends before a row asked for");
	} else if (rc < 0) {
		Py_CLEAR(out);
		iodl_oserror_wsyscall(-rc, "pread");
	}
out:
	free(rows);
	PyBuffer_Release(&idx);
	return out;
}
