/* fio's log text (iodl/fio/logs.py) from the records Engine.run fills. */
#include "bind.h"

#include <stdio.h>

/*
 * format_rows(rows) -> bytes: an (n, k) C-contiguous int64 array as text, one line per row, values
 * joined by ", " (fio's log lines): logs of every I/O are written without a Python step per I/O.
 */
PyObject *iodl_py_format_rows(PyObject *Py_UNUSED(m), PyObject *arg)
{
	Py_buffer v;
	PyObject *out = NULL;
	char *text, *p;
	size_t cap;

	if (PyObject_GetBuffer(arg, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
		return NULL;
	if (v.ndim != 2 || !iodl_is_int64(&v)) {
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
