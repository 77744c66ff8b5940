/*
 * errno -> OSError, raised one way for every binding (psutil's errors.c): the message names the
 * call that failed, or the file it failed on.
 */
#include "bind.h"

#include <string.h>

/* OSError(*args): the constructor picks the subclass from errno (FileNotFoundError...) */
static PyObject *raise_oserror(PyObject *args)
{
	PyObject *exc = args ? PyObject_Call(PyExc_OSError, args, NULL) : NULL;

	Py_XDECREF(args);
	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}

PyObject *iodl_oserror_wsyscall(int err, const char *syscall)
{
	return raise_oserror(Py_BuildValue("(iN)", err, PyUnicode_FromFormat("%s (originated from %s)",
									   strerror(err), syscall)));
}

PyObject *iodl_oserror_file(int err, const char *what, const char *filename)
{
	const char *msg = what && strchr(what, ' ') ? what : strerror(err);

	if (!filename)
		return raise_oserror(Py_BuildValue("(is)", err, msg));
	return raise_oserror(Py_BuildValue("(isN)", err, msg, PyUnicode_DecodeFSDefault(filename)));
}
