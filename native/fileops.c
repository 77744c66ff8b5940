/*
 * file_ops: fio's metadata engines (engines/fileoperations.c: filecreate, filestat, filedelete),
 * one call per file, timed as fio times them: only the create, stat or unlink call itself goes in
 * the latency histogram (fio's clat), one I/O per file.
 *
 * Safety (iodl writes only files it made): a create is O_CREAT|O_EXCL|O_NOFOLLOW (fio's open is
 * O_CREAT without O_EXCL and would open a file already there; iodl refuses it) and the new file
 * gets iodl's lay-out mark before it is closed, outside the timed part. A delete first opens the
 * file without following a link and removes it only if it carries that mark. The GIL is released
 * for the whole loop: the clones of a job run on their own threads.
 */
#include "bind.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "sys.h"

/* iodl/fio/layout.py MARK, MARK_VALUE */
#define MARK "user.iodl.layout"
#define MARK_VALUE "iodl fio-compare layout"

enum { OP_CREATE, OP_STAT, OP_LSTAT, OP_STATX, OP_DELETE };

/* 1 if the file at path (not followed) carries iodl's mark, 0 if not, -1 with errno */
static int marked(const char *path)
{
	char value[sizeof(MARK_VALUE)];
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = fgetxattr(fd, MARK, value, sizeof(value));
	close(fd);
	return n == (ssize_t)strlen(MARK_VALUE) && !memcmp(value, MARK_VALUE, (size_t)n);
}

/* one file's operation: 0, or -errno with *what naming the call; *lat the timed call in ns */
static int one(int op, const char *path, uint64_t *lat, const char **what)
{
	struct stat st;
	struct statx sx;
	uint64_t t;
	int fd, rc, err;

	switch (op) {
	case OP_CREATE:
		t = iodl_now_ns();
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		*lat = iodl_now_ns() - t;
		if (fd < 0) {
			*what = errno == EEXIST ? "exists already (iodl creates only new files)" : "open";
			return -errno;
		}
		if (fsetxattr(fd, MARK, MARK_VALUE, strlen(MARK_VALUE), 0) < 0) {
			err = errno;
			close(fd);
			unlink(path);   /* ours: made just now by the exclusive create */
			*what = "fsetxattr (iodl marks the files it creates)";
			return -err;
		}
		if (close(fd) < 0) {
			*what = "close";
			return -errno;
		}
		return 0;
	case OP_DELETE:
		rc = marked(path);
		if (rc <= 0) {
			*what = rc < 0 ? "open" : "has no iodl lay-out mark (iodl removes only its own files)";
			return rc < 0 ? -errno : -EPERM;
		}
		t = iodl_now_ns();
		rc = unlink(path);
		*lat = iodl_now_ns() - t;
		*what = "unlink";
		return rc < 0 ? -errno : 0;
	default:   /* fio's stat_type: stat, lstat, statx */
		t = iodl_now_ns();
		rc = op == OP_STAT ? stat(path, &st) : op == OP_LSTAT ? lstat(path, &st)
			: statx(AT_FDCWD, path, 0, STATX_ALL, &sx);
		*lat = iodl_now_ns() - t;
		*what = "stat";
		return rc < 0 ? -errno : 0;
	}
}

/* file_ops(op, paths, hist) -> (files done, t_start_ns, t_end_ns); paths: NUL-terminated names packed */
PyObject *iodl_py_file_ops(PyObject *Py_UNUSED(m), PyObject *args)
{
	int op, rc = 0;
	Py_buffer paths = { 0 }, hist = { 0 };
	const char *p, *end, *what = NULL, *failed = NULL;
	long long done = 0;
	uint64_t t0 = 0, t1 = 0;

	if (!PyArg_ParseTuple(args, "iy*w*:file_ops", &op, &paths, &hist))
		return NULL;
	if (op < OP_CREATE || op > OP_DELETE || hist.len != IODL_HIST_BUCKETS * 8 ||
	    (paths.len && ((const char *)paths.buf)[paths.len - 1])) {
		PyErr_SetString(PyExc_ValueError, "file_ops: an op 0-4, NUL-terminated paths, an int64 histogram");
		goto out;
	}
	p = paths.buf;
	end = p + paths.len;
	Py_BEGIN_ALLOW_THREADS
	t0 = iodl_now_ns();
	for (; p < end; p += strlen(p) + 1) {
		uint64_t lat = 0;

		rc = one(op, p, &lat, &what);
		if (rc) {
			failed = p;
			break;
		}
		((long long *)hist.buf)[iodl_hist_index(lat)]++;
		done++;
	}
	t1 = iodl_now_ns();
	Py_END_ALLOW_THREADS
	if (rc)
		iodl_oserror_file(-rc, what, failed);
out:
	PyBuffer_Release(&paths);
	PyBuffer_Release(&hist);
	if (PyErr_Occurred())
		return NULL;
	return Py_BuildValue("LKK", done, (unsigned long long)t0, (unsigned long long)t1);
}
