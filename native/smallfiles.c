/*
 * write_files: many small files into one directory at the speed of the syscalls (iodl generate).
 *
 * For each index: openat(dirfd, NAME[.suffix], O_CREAT|O_EXCL|O_NOFOLLOW) (a stale file of ours or
 * a planted link is unlinked first, never followed; anything else there is refused), write its
 * bytes from one buffer, close, and with a temp suffix renameat to NAME. Without one the file is
 * made under its final name: a rename per file doubles the metadata work of a small file. Names are built here from the dataset's pattern
 * (prefix, zero-padded index, tail), so Python does no work per file. The GIL is released for the
 * whole loop: several threads write several batches at once.
 */
#include "bind.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_MAX_LEN 512

static int create_excl(int dirfd, const char *tmp)
{
	int tries, fd;

	for (tries = 0; tries < 2; tries++) {
		struct stat st;

		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EEXIST)
			return fd;
		if (fstatat(dirfd, tmp, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return -1;
		if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
			errno = EEXIST;
			return -2;   /* not ours to remove */
		}
		if (unlinkat(dirfd, tmp, 0) < 0)
			return -1;
	}
	errno = EEXIST;
	return -1;
}

/* 0, or -errno with *what naming the call and name/tmp holding the file concerned */
static int write_one(int dirfd, const char *name, const char *tmp, const unsigned char *data, long long len,
		     const char **what)
{
	long long done = 0;
	int fd = create_excl(dirfd, tmp), err;

	if (fd < 0) {
		*what = fd == -2 ? "exists and is not a regular file" : "openat";
		return -errno;
	}
	while (done < len) {
		ssize_t n = write(fd, data + done, (size_t)(len - done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? errno : EIO;
			close(fd);
			unlinkat(dirfd, tmp, 0);
			*what = "write";
			return -err;
		}
		done += n;
	}
	if (close(fd) < 0) {   /* a network filesystem may report ENOSPC or EIO only here */
		err = errno;
		unlinkat(dirfd, tmp, 0);
		*what = "close";
		return -err;
	}
	if (tmp != name && renameat(dirfd, tmp, dirfd, name) < 0) {
		err = errno;
		unlinkat(dirfd, tmp, 0);
		*what = "renameat";
		return -err;
	}
	return 0;
}

PyObject *iodl_py_write_files(PyObject *Py_UNUSED(m), PyObject *args)
{
	int dirfd, width, rc = 0;
	const char *prefix, *tail, *suffix, *what = NULL;
	Py_buffer idx = { 0 }, buf = { 0 }, off = { 0 }, len = { 0 };
	Py_ssize_t i, n;
	char name[NAME_MAX_LEN], tmp[NAME_MAX_LEN];

	if (!PyArg_ParseTuple(args, "isiszy*y*y*y*:write_files", &dirfd, &prefix, &width, &tail, &suffix,
			      &idx, &buf, &off, &len))
		return NULL;
	n = idx.len / 8;
	if (idx.len % 8 || off.len != idx.len || len.len != idx.len || width < 0 || width > 32) {
		PyErr_SetString(PyExc_ValueError, "write_files: indices, offsets and lengths are int64 arrays of one length");
		goto out;
	}
	{
		const long long *ix = idx.buf, *o = off.buf, *l = len.buf;

		for (i = 0; i < n; i++)
			if (o[i] < 0 || l[i] < 0 || o[i] > buf.len || l[i] > buf.len - o[i] || ix[i] < 0) {
				PyErr_SetString(PyExc_ValueError, "write_files: a file's bytes lie outside the buffer");
				goto out;
			}
		Py_BEGIN_ALLOW_THREADS
		for (i = 0; i < n && !rc; i++) {
			int k = snprintf(name, sizeof(name), "%s%0*lld%s", prefix, width, ix[i], tail);

			if (k < 0 || k + (suffix ? strlen(suffix) : 0) + 1 > sizeof(name)) {
				rc = -ENAMETOOLONG;
				what = "snprintf";
				break;
			}
			memcpy(tmp, name, (size_t)k + 1);
			if (suffix)
				strcpy(tmp + k, suffix);
			rc = write_one(dirfd, name, suffix ? tmp : name, (const unsigned char *)buf.buf + o[i], l[i], &what);
		}
		Py_END_ALLOW_THREADS
	}
	if (rc)
		iodl_oserror_file(-rc, what, tmp);
out:
	PyBuffer_Release(&idx);
	PyBuffer_Release(&buf);
	PyBuffer_Release(&off);
	PyBuffer_Release(&len);
	if (PyErr_Occurred())
		return NULL;
	Py_RETURN_NONE;
}
