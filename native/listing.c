/*
 * list_dir: one directory of a plain (foreign) dataset root listed at the speed of the syscalls.
 *
 * Reading a directory of files iodl did not generate needs each regular file's size: a stat per
 * file. In Python (os.scandir, DirEntry.stat) that costs several microseconds of interpreter work
 * per file on one core; here the names come from readdir (getdents64), the sizes from
 * fstatat(AT_SYMLINK_NOFOLLOW) on `threads` threads (a cold inode cache waits on the disk: many
 * stats in flight help there), the GIL released throughout. Links are never followed: they are
 * returned by name with directories and anything else, for the caller to judge (iodl.dataset).
 */
#include "bind.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK 256          /* entries a stat thread takes at a time */
#define MAX_THREADS 64
#define PARALLEL_FROM 2048 /* fewer files than this: one thread (spawning costs more than it saves) */

struct ent {
	size_t name;       /* offset of its NUL-terminated name in the arena */
	long long size;
	unsigned char kind; /* 'f' regular file, 'd' directory, 'l' symlink, 'o' other, '?' not yet known, 'g' gone */
};

struct listing {
	int dirfd;
	char *arena;
	size_t arena_len, arena_cap;
	struct ent *ents;
	size_t n, cap;
	int threads;
	int err;            /* first errno of a stat, 0 if none */
	size_t err_ent;
};

struct stat_job {
	struct listing *l;
	int index;
};

static int grow(void **p, size_t *cap, size_t need, size_t item)
{
	size_t c = *cap ? *cap : 1024;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*p, c * item);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static unsigned char kind_of_mode(mode_t m)
{
	return S_ISREG(m) ? 'f' : S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'l' : 'o';
}

static unsigned char kind_of_dtype(unsigned char t)
{
	switch (t) {
	case DT_REG:
		return '?';   /* its size still needs a stat */
	case DT_DIR:
		return 'd';
	case DT_LNK:
		return 'l';
	case DT_UNKNOWN:
		return '?';   /* some filesystems do not fill d_type: the stat tells */
	default:
		return 'o';
	}
}

static int read_names(struct listing *l)
{
	int fd = dup(l->dirfd);
	DIR *d;
	struct dirent *e;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		int err = errno;

		close(fd);
		return -err;
	}
	rewinddir(d);   /* the dup shares the caller's offset: start from the first entry whatever it was */
	for (;;) {
		size_t len;

		errno = 0;
		e = readdir(d);
		if (!e)
			break;
		if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		len = strlen(e->d_name) + 1;
		if (grow((void **)&l->arena, &l->arena_cap, l->arena_len + len, 1) ||
		    grow((void **)&l->ents, &l->cap, l->n + 1, sizeof(struct ent))) {
			closedir(d);
			return -ENOMEM;
		}
		memcpy(l->arena + l->arena_len, e->d_name, len);
		l->ents[l->n].name = l->arena_len;
		l->ents[l->n].size = 0;
		l->ents[l->n].kind = kind_of_dtype(e->d_type);
		l->arena_len += len;
		l->n++;
	}
	{
		int err = errno;

		closedir(d);   /* closes the dup; the caller's descriptor shares its offset, left at the end */
		return err ? -err : 0;
	}
}

static void *stat_some(void *arg)
{
	struct stat_job *job = arg;
	struct listing *l = job->l;
	size_t start, i;

	for (start = (size_t)job->index * CHUNK; start < l->n; start += (size_t)l->threads * CHUNK) {
		for (i = start; i < start + CHUNK && i < l->n; i++) {
			struct ent *e = &l->ents[i];
			struct stat st;

			if (e->kind != '?')
				continue;
			if (fstatat(l->dirfd, l->arena + e->name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
				if (errno == ENOENT) {   /* removed since it was listed: not there to read */
					e->kind = 'g';
					continue;
				}
				if (!__atomic_load_n(&l->err, __ATOMIC_RELAXED)) {
					l->err_ent = i;
					__atomic_store_n(&l->err, errno, __ATOMIC_RELAXED);
				}
				return NULL;
			}
			e->kind = kind_of_mode(st.st_mode);
			e->size = st.st_size;
		}
	}
	return NULL;
}

static void stat_all(struct listing *l)
{
	pthread_t tid[MAX_THREADS];
	struct stat_job jobs[MAX_THREADS];
	int t, started = 1;

	if (l->n < PARALLEL_FROM)
		l->threads = 1;
	for (t = 0; t < l->threads; t++)
		jobs[t] = (struct stat_job){ l, t };
	for (t = 1; t < l->threads; t++, started++)
		if (pthread_create(&tid[t], NULL, stat_some, &jobs[t]))
			break;
	if (started < l->threads) {   /* no thread to be had: this one takes the missing threads' chunks */
		for (t = started; t < l->threads; t++)
			stat_some(&jobs[t]);
	}
	stat_some(&jobs[0]);
	for (t = 1; t < started; t++)
		pthread_join(tid[t], NULL);
}

static int by_name(const void *a, const void *b, void *arena)
{
	return strcmp((const char *)arena + ((const struct ent *)a)->name, (const char *)arena + ((const struct ent *)b)->name);
}

static void free_listing(struct listing *l)
{
	free(l->arena);
	free(l->ents);
}

/* (regular files' prefixed names packed, their int64 offsets (n + 1), their int64 sizes, [(name, kind) of the rest]) */
static PyObject *pack(struct listing *l, const char *prefix, Py_ssize_t plen)
{
	size_t i, files = 0, blob_len = 0;
	PyObject *blob = NULL, *offsets = NULL, *sizes = NULL, *rest = NULL, *out = NULL;
	char *b;
	long long *o, *s;

	for (i = 0; i < l->n; i++)
		if (l->ents[i].kind == 'f') {
			files++;
			blob_len += (size_t)plen + strlen(l->arena + l->ents[i].name);
		}
	blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)blob_len);
	offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((files + 1) * 8));
	sizes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(files * 8));
	rest = PyList_New(0);
	if (!blob || !offsets || !sizes || !rest)
		goto out;
	b = PyBytes_AS_STRING(blob);
	o = (long long *)PyBytes_AS_STRING(offsets);
	s = (long long *)PyBytes_AS_STRING(sizes);
	o[0] = 0;
	files = 0;
	for (i = 0; i < l->n; i++) {
		struct ent *e = &l->ents[i];
		const char *name = l->arena + e->name;
		size_t len = strlen(name);

		if (e->kind == 'f') {
			memcpy(b, prefix, (size_t)plen);
			memcpy(b + plen, name, len);
			b += (size_t)plen + len;
			s[files] = e->size;
			o[files + 1] = o[files] + plen + (long long)len;
			files++;
		} else if (e->kind != 'g') {
			PyObject *item = Py_BuildValue("(y#C)", name, (Py_ssize_t)len, (int)e->kind);

			if (!item || PyList_Append(rest, item)) {
				Py_XDECREF(item);
				goto out;
			}
			Py_DECREF(item);
		}
	}
	out = PyTuple_Pack(4, blob, offsets, sizes, rest);
out:
	Py_XDECREF(blob);
	Py_XDECREF(offsets);
	Py_XDECREF(sizes);
	Py_XDECREF(rest);
	return out;
}

PyObject *iodl_py_list_dir(PyObject *Py_UNUSED(m), PyObject *args)
{
	struct listing l = { 0 };
	const char *prefix;
	Py_ssize_t plen;
	int rc;
	PyObject *out;

	if (!PyArg_ParseTuple(args, "iy#i:list_dir", &l.dirfd, &prefix, &plen, &l.threads))
		return NULL;
	if (l.threads < 1 || l.threads > MAX_THREADS) {
		PyErr_Format(PyExc_ValueError, "list_dir: threads must be 1 to %d", MAX_THREADS);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = read_names(&l);
	if (!rc) {
		stat_all(&l);
		rc = -l.err;
	}
	if (!rc && l.n)   /* by name, bytewise (strcmp): the order Python's sorted() gives the same bytes */
		qsort_r(l.ents, l.n, sizeof(struct ent), by_name, l.arena);
	Py_END_ALLOW_THREADS
	if (rc) {
		iodl_oserror_file(-rc, NULL, l.err ? l.arena + l.ents[l.err_ent].name : NULL);
		free_listing(&l);
		return NULL;
	}
	out = pack(&l, prefix, plen);
	free_listing(&l);
	return out;
}
