/* The plan and its fds, copied out of Python and checked against the engine before any I/O. */
#include "bind.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The plan, copied into C memory: the loop reads it with the GIL released, when another thread
 * could change the caller's array. A 1-d PLAN_DTYPE array, or a C-contiguous (n, 4) array of
 * uint64 (file, offset, length, op) or (n, 3) (reads), or the same of int64 without negative
 * values. Every row's op must be one of IODL_OP_*. Returns a PyMem block or NULL (exception set).
 */
struct iodl_plan_row *iodl_get_plan(PyObject *obj, size_t *nrows)
{
	Py_buffer view;
	struct iodl_plan_row *rows = NULL;
	char fmt[64];
	int is_signed = 0, ok = 0;
	Py_ssize_t cols = 4;

	if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
		PyErr_Clear();
		goto bad;
	}
	iodl_format_bare(view.format ? view.format : "B", fmt, sizeof(fmt));
	if (view.ndim == 1 && view.itemsize == sizeof(struct iodl_plan_row))
		ok = !strcmp(fmt, "T{L:file:L:offset:L:length:L:op:}") || !strcmp(fmt, "T{Q:file:Q:offset:Q:length:Q:op:}");
	else if (view.ndim == 2 && (view.shape[1] == 3 || view.shape[1] == 4) && view.itemsize == 8 && fmt[0] &&
		 !fmt[1] && strchr("LQlq", fmt[0])) {
		ok = 1;
		cols = view.shape[1];
		is_signed = fmt[0] == 'l' || fmt[0] == 'q';
	}
	if (!ok) {
		PyBuffer_Release(&view);
		goto bad;
	}
	*nrows = (size_t)view.len / (size_t)(cols * 8);
	rows = PyMem_Calloc(*nrows ? *nrows : 1, sizeof(*rows));
	if (!rows) {
		PyBuffer_Release(&view);
		PyErr_NoMemory();
		return NULL;
	}
	if (cols == 4) {
		memcpy(rows, view.buf, *nrows * sizeof(*rows));
	} else {		/* (n, 3): reads; op stays 0 (IODL_OP_READ) */
		const uint64_t *in = view.buf;

		for (size_t i = 0; i < *nrows; i++) {
			rows[i].file = in[3 * i];
			rows[i].offset = in[3 * i + 1];
			rows[i].length = in[3 * i + 2];
		}
	}
	PyBuffer_Release(&view);
	for (size_t i = 0; i < *nrows; i++) {
		if (is_signed && ((int64_t)rows[i].file < 0 || (int64_t)rows[i].offset < 0 ||
				  (int64_t)rows[i].length < 0 || (int64_t)rows[i].op < 0)) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: negative file, offset, length or op", i);
			PyMem_Free(rows);
			return NULL;
		}
		if (rows[i].op >= IODL_OP_COUNT) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: op %llu is not read (0), write (1), fsync (2) "
				     "or fdatasync (3)", i, (unsigned long long)rows[i].op);
			PyMem_Free(rows);
			return NULL;
		}
	}
	return rows;
bad:
	PyErr_SetString(PyExc_ValueError, "plan must be a contiguous array of PLAN_DTYPE rows, or of shape "
			"(n, 4) or (n, 3) with dtype uint64 or int64 (file, offset, length[, op])");
	return NULL;
}

/* fds as C ints, each 0..INT_MAX; `fake`: the null engine looks at none, so -1 ("no file") too */
int *iodl_get_fds(PyObject *obj, size_t *n, int fake)
{
	PyObject *seq = PySequence_Fast(obj, "fds must be a sequence of file descriptors");
	int *fds;

	if (!seq)
		return NULL;
	*n = (size_t)PySequence_Fast_GET_SIZE(seq);
	fds = PyMem_Calloc(*n ? *n : 1, sizeof(int));
	if (!fds) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return NULL;
	}
	for (size_t i = 0; i < *n; i++) {
		int overflow;
		long v = PyLong_AsLongAndOverflow(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i), &overflow);

		if ((v == -1 && PyErr_Occurred()) || overflow || v < (fake ? -1 : 0) || v > INT_MAX) {
			if (!PyErr_Occurred())
				PyErr_Format(PyExc_ValueError, "fds[%zu] is not a file descriptor (0..%d%s)", i, INT_MAX,
					     fake ? ", or -1 for the null engine" : "");
			PyMem_Free(fds);
			Py_DECREF(seq);
			return NULL;
		}
		fds[i] = (int)v;
	}
	Py_DECREF(seq);
	return fds;
}

/*
 * Rows this engine must not run, refused before any I/O: a file past the fds, a data row longer
 * than the engine's buffers, an unaligned direct write.
 */
int iodl_check_plan(const struct iodl_plan_row *plan, size_t nrows, size_t nfds, Py_ssize_t block_size,
		    int direct)
{
	for (size_t i = 0; i < nrows; i++) {
		if (plan[i].file >= nfds) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: file %llu but only %zu fds", i,
				     (unsigned long long)plan[i].file, nfds);
			return -1;
		}
		if (plan[i].op == IODL_OP_FSYNC || plan[i].op == IODL_OP_FDATASYNC)
			continue;	/* a sync's offset and length are not used */
		if (plan[i].length > (uint64_t)block_size) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: length %llu exceeds block_size %zd", i,
				     (unsigned long long)plan[i].length, block_size);
			return -1;
		}
		/*
		 * A direct read may round its length up (the tail past EOF is not counted); a direct
		 * write may not: it would write bytes the plan did not ask for, and the kernel refuses
		 * an unaligned one (EINVAL) part way through the run. So it is refused here, before any.
		 */
		if (direct && plan[i].op == IODL_OP_WRITE &&
		    (plan[i].offset % IODL_ALIGN || plan[i].length % IODL_ALIGN)) {
			PyErr_Format(PyExc_ValueError, "plan row %zu: a direct write's offset and length must be "
				     "multiples of %d, not offset %llu, length %llu", i, IODL_ALIGN,
				     (unsigned long long)plan[i].offset, (unsigned long long)plan[i].length);
			return -1;
		}
	}
	return 0;
}

/*
 * shard_plan(sizes, block_size) -> bytearray of PLAN_DTYPE rows reading each shard whole, in
 * order, in block_size requests (the last one short): iodl/plan.py shard_plan's rows. In numpy
 * they were ~15 array operations a batch; a reader makes a batch's plan every step, and on one
 * core shared by many ranks each operation runs with its caches cold.
 */
PyObject *iodl_py_shard_plan(PyObject *Py_UNUSED(m), PyObject *args)
{
	Py_buffer sizes;
	long long bs;
	PyObject *out = NULL;
	size_t rows = 0;

	if (!PyArg_ParseTuple(args, "y*L:shard_plan", &sizes, &bs))
		return NULL;
	const int64_t *s = sizes.buf;
	size_t n = (size_t)sizes.len / 8;

	if (sizes.len % 8 || bs < 1) {
		PyErr_SetString(PyExc_ValueError, "shard_plan: sizes must be int64 and block_size >= 1");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] < 0) {
			PyErr_Format(PyExc_ValueError, "shard_plan: shard %zu has a negative size", i);
			goto out;
		}
		rows += (size_t)((s[i] + bs - 1) / bs);
	}
	out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(rows * sizeof(struct iodl_plan_row)));
	if (!out)
		goto out;
	struct iodl_plan_row *r = (struct iodl_plan_row *)PyByteArray_AS_STRING(out);

	for (size_t i = 0; i < n; i++) {
		for (int64_t off = 0; off < s[i]; off += bs, r++)
			*r = (struct iodl_plan_row){ .file = i, .offset = (uint64_t)off,
						     .length = (uint64_t)(s[i] - off < bs ? s[i] - off : bs),
						     .op = IODL_OP_READ };
	}
out:
	PyBuffer_Release(&sizes);
	return out;
}

/*
 * generated_paths(prefixes, folders, files, width, tail, shards) -> bytes: the paths of an iodl
 * dataset's shards (iodl/data/layout.py GeneratedPaths: prefix of copy c and folder f % folders,
 * then "train-", f zero-padded to width, tail; c, f = divmod(shard, files)), each ending with its
 * NUL, as the open threads take them (Opener.submit). prefixes: NUL-terminated, copy by copy,
 * folders of each. A batch's were 24 f-strings and a join in Python a step, each run with its
 * caches cold on a core shared by many ranks.
 */
PyObject *iodl_py_generated_paths(PyObject *Py_UNUSED(m), PyObject *args)
{
	Py_buffer pre, tail, shards;
	long long folders, files;
	int width;
	PyObject *out = NULL;
	const char **prefix = NULL;
	size_t copies = 0, longest = 0;

	if (!PyArg_ParseTuple(args, "y*LLiy*y*:generated_paths", &pre, &folders, &files, &width, &tail, &shards))
		return NULL;
	const char *p = pre.buf, *end = p + pre.len;
	const int64_t *s = shards.buf;
	size_t n = (size_t)shards.len / 8, total = 0, nprefix = 0;

	if (shards.len % 8 || folders < 1 || files < 1 || width < 0 || width > 30 || !pre.len || p[pre.len - 1] ||
	    memchr(tail.buf, 0, (size_t)tail.len)) {
		PyErr_SetString(PyExc_ValueError, "generated_paths: bad arguments");
		goto out;
	}
	for (const char *q = p; q < end; q += strlen(q) + 1)
		nprefix++;
	if (nprefix % (size_t)folders) {
		PyErr_SetString(PyExc_ValueError, "generated_paths: prefixes are not copies x folders");
		goto out;
	}
	copies = nprefix / (size_t)folders;
	prefix = malloc(nprefix * sizeof(*prefix));
	if (!prefix) {
		PyErr_NoMemory();
		goto out;
	}
	nprefix = 0;
	for (const char *q = p; q < end; q += strlen(q) + 1) {
		prefix[nprefix++] = q;
		longest = strlen(q) > longest ? strlen(q) : longest;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] < 0 || (uint64_t)s[i] / (uint64_t)files >= copies) {
			PyErr_Format(PyExc_IndexError, "a shard of the batch (%lld) outside 0..%lld", (long long)s[i],
				     (long long)(copies * (size_t)files) - 1);
			goto out;
		}
	}
	/* prefix + "train-" + up to 20 digits (or width) + tail + NUL, each */
	size_t each = longest + 6 + (size_t)(width > 20 ? width : 20) + (size_t)tail.len + 1;

	out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * each));
	if (!out)
		goto out;
	char *w = PyBytes_AS_STRING(out);

	/* each written by hand, not by snprintf: glibc's takes a slow path for "%0*lld" (~1 us a
	 * path with the caches cold, a batch's open-ahead paths each step) */
	for (size_t i = 0; i < n; i++) {
		long long c = s[i] / files, f = s[i] % files;
		const char *pre_c = prefix[c * folders + f % folders];
		size_t plen = strlen(pre_c);
		char digits[24];
		int nd = 0;

		do {
			digits[nd++] = (char)('0' + f % 10);
			f /= 10;
		} while (f);
		char *start = w;

		memcpy(w, pre_c, plen);
		w += plen;
		memcpy(w, "train-", 6);
		w += 6;
		for (int pad = width - nd; pad > 0; pad--)
			*w++ = '0';
		while (nd)
			*w++ = digits[--nd];
		memcpy(w, tail.buf, (size_t)tail.len);
		w += tail.len;
		*w++ = '\0';
		total += (size_t)(w - start);
	}
	if (_PyBytes_Resize(&out, (Py_ssize_t)total) < 0)
		out = NULL;
out:
	free(prefix);
	PyBuffer_Release(&pre);
	PyBuffer_Release(&tail);
	PyBuffer_Release(&shards);
	return out;
}

/* splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, a few operations a number; plenty for
 * dealing shards, which needs spread, not cryptography */
static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* uniform in [0, range), range >= 1: Lemire's multiply-shift, the few biased draws rejected */
static uint64_t below(uint64_t *state, uint64_t range)
{
	unsigned __int128 m = (unsigned __int128)splitmix64(state) * range;
	uint64_t low = (uint64_t)m;

	if (low < range) {
		uint64_t floor = -range % range;
		while (low < floor) {
			m = (unsigned __int128)splitmix64(state) * range;
			low = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/*
 * shuffled_range(out, seed, epoch): out (a writable contiguous int32 or int64 buffer of n items)
 * filled with 0..n-1 in a Fisher-Yates order drawn from (seed, epoch): the same order on every
 * rank that asks. numpy's Generator.shuffle took ~0.08 s of CPU for 1.17 M shards (retinanet's),
 * this ~0.02 s, each rank at start and at every epoch: at 72 ranks on 2 cores, ~2 s of the start-up.
 */
PyObject *iodl_py_shuffled_range(PyObject *Py_UNUSED(m), PyObject *args)
{
	PyObject *obj;
	Py_buffer out;
	unsigned long long seed, epoch;
	char fmt[64];

	if (!PyArg_ParseTuple(args, "OKK:shuffled_range", &obj, &seed, &epoch))
		return NULL;
	if (PyObject_GetBuffer(obj, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
		PyErr_Clear();
		PyErr_SetString(PyExc_ValueError, "shuffled_range: out must be a writable contiguous int32 or int64 array");
		return NULL;
	}
	iodl_format_bare(out.format ? out.format : "B", fmt, sizeof(fmt));
	if (!fmt[0] || fmt[1] || !strchr("ilq", fmt[0]) || (out.itemsize != 4 && out.itemsize != 8)) {
		PyBuffer_Release(&out);
		PyErr_SetString(PyExc_ValueError, "shuffled_range: out must be a writable contiguous int32 or int64 array");
		return NULL;
	}
	size_t n = (size_t)(out.len / out.itemsize);
	if (out.itemsize == 4 && n > (size_t)INT32_MAX + 1) {
		PyBuffer_Release(&out);
		PyErr_SetString(PyExc_ValueError, "shuffled_range: more items than int32 holds");
		return NULL;
	}
	/* the state from both numbers, each mixed in: (s, e) and (e, s) give different orders */
	uint64_t state = seed;
	state = splitmix64(&state) ^ epoch;
	(void)splitmix64(&state);

/* 0..n-1, then Fisher-Yates from the end: one body for both widths */
#define SHUFFLE_RANGE(type)                                               \
	do {                                                              \
		type *a = out.buf;                                        \
		for (size_t i = 0; i < n; i++)                            \
			a[i] = (type)i;                                   \
		for (size_t i = n; i > 1; i--) {                          \
			size_t j = (size_t)below(&state, i);              \
			type t = a[i - 1];                                \
			a[i - 1] = a[j];                                  \
			a[j] = t;                                         \
		}                                                         \
	} while (0)
	Py_BEGIN_ALLOW_THREADS
	if (out.itemsize == 4)
		SHUFFLE_RANGE(int32_t);
	else
		SHUFFLE_RANGE(int64_t);
#undef SHUFFLE_RANGE
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&out);
	Py_RETURN_NONE;
}
