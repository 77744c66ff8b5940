/*
 * The Python face of native/: what the binding files share. module.c is the method table; each
 * function it lists lives in a bind_*.c file of its own, or beside its code (listing.c,
 * smallfiles.c, fileops.c). Only binding files include this header, first (Python.h must come
 * before the system headers): the loop, the engines and the page-cache, content and barrier code
 * stay free of Python.
 */
#ifndef IODL_BIND_H
#define IODL_BIND_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core.h"

/*
 * bind_errors.c: errno -> OSError, of the subclass errno picks (FileNotFoundError...) as
 * PyErr_SetFromErrno does; both return NULL. This one: OSError(err, "<strerror> (originated
 * from <syscall>)").
 */
PyObject *iodl_oserror_wsyscall(int err, const char *syscall);
/*
 * OSError(err, what, filename): `what` when it is a phrase (has a space: "exists already ..."),
 * else err's strerror (`what` is then the call's name, which the message does not repeat);
 * filename (NULL: none) decoded as os.fsdecode does.
 */
PyObject *iodl_oserror_file(int err, const char *what, const char *filename);

/* bind_arrays.c: arrays and buffers borrowed from the caller for one call. */
/* A writable buffer of at least len bytes, 8-byte aligned (a shared mmap, a numpy view of one) */
int iodl_get_shared(PyObject *obj, Py_buffer *view, Py_ssize_t len, const char *what);
/* int64 as numpy spells it in the buffer protocol: "l" or "q", native byte order */
int iodl_is_int64(const Py_buffer *view);
/* A writable C-contiguous int64 histogram of IODL_HIST_BUCKETS (ValueError naming `what` if not) */
int iodl_get_hist(PyObject *obj, Py_buffer *view, const char *what);
/* A buffer format without native little-endian markers ('@', '=', '<'): "L", "T{L:file:...}" */
void iodl_format_bare(const char *fmt, char *out, size_t n);

/*
 * The arrays a run counts into (Engine.run and account take the same ones): borrowed for the
 * call, then given back by iodl_outputs_release, also after an error part way through.
 */
struct iodl_outputs {
	Py_buffer hist, clat, slat, fsync, series, live, whist, wclat, wslat;
};

int iodl_outputs_get(struct iodl_outputs *o, PyObject *hist, PyObject *clat, PyObject *slat, PyObject *fsync,
		     PyObject *series, PyObject *live, struct iodl_run_args *a, long long series_origin_ns,
		     long long series_bucket_ns);
/* Engine.run's write_hist, write_clat_hist, write_slat_hist: the writes' own histograms, or None */
int iodl_outputs_get_writes(struct iodl_outputs *o, PyObject *whist, PyObject *wclat, PyObject *wslat,
			    struct iodl_run_args *a);
void iodl_outputs_release(struct iodl_outputs *o);

/* bind_plan.c: the plan and its fds, checked before any I/O (see _native.pyi Engine.run) */
struct iodl_plan_row *iodl_get_plan(PyObject *obj, size_t *nrows);
int *iodl_get_fds(PyObject *obj, size_t *n, int fake);
/* 0, or -1 with ValueError naming the first row this engine must not run */
int iodl_check_plan(const struct iodl_plan_row *plan, size_t nrows, size_t nfds, Py_ssize_t block_size,
		    int direct);

/* bind_opener.c: the tickets' opens from an Opener (iodl_opener_take), waiting with the GIL
 * released, a signal looked for every slice: 0, or -1 with a Python error (not an Opener, a ticket
 * not waiting, a signal's exception: the tickets then stay waiting, the caller drops them) */
struct iodl_open_result;
int iodl_py_opener_take(PyObject *opener, const int64_t *tickets, size_t n, struct iodl_open_result *out);

/* bind_engine.c */
extern PyTypeObject iodl_engine_type;
PyObject *iodl_py_engines(PyObject *m, PyObject *unused);
PyObject *iodl_py_probe(PyObject *m, PyObject *arg);
PyObject *iodl_py_monotonic_ns(PyObject *m, PyObject *unused);

/* bind_account.c */
/* st->depth as a list of DEPTH_BUCKETS ints: RunStats' and account's "depth" */
PyObject *iodl_depth_list(const struct iodl_stats *st);
PyObject *iodl_py_account(PyObject *m, PyObject *args, PyObject *kw);
PyObject *iodl_py_hist_index(PyObject *m, PyObject *arg);

/* bind_logs.c */
PyObject *iodl_py_format_rows(PyObject *m, PyObject *arg);

/* bind_pagecache.c */
PyObject *iodl_py_resident_bytes(PyObject *m, PyObject *args);
PyObject *iodl_py_cache_measurable(PyObject *m, PyObject *arg);
PyObject *iodl_py_thread_read_bytes(PyObject *m, PyObject *unused);

/* bind_barrier.c */
PyObject *iodl_py_node_barrier(PyObject *m, PyObject *args);
PyObject *iodl_py_node_resumed(PyObject *m, PyObject *args);
PyObject *iodl_py_node_quiet(PyObject *m, PyObject *args);

/* bind_opener.c: opener.c's open-ahead pool */
PyObject *iodl_py_opener(PyObject *m, PyObject *args);

/* bind_rows.c: a batch's table rows (rows.c) */
PyObject *iodl_py_pread_rows(PyObject *m, PyObject *args);
/* bind_plan.c: a batch of whole shards' plan (iodl/plan.py shard_plan) */
PyObject *iodl_py_shard_plan(PyObject *m, PyObject *args);
PyObject *iodl_py_generated_paths(PyObject *m, PyObject *args);
PyObject *iodl_py_shuffled_range(PyObject *m, PyObject *args);

/* beside their code */
PyObject *iodl_py_write_files(PyObject *m, PyObject *args);	/* smallfiles.c */
PyObject *iodl_py_list_dir(PyObject *m, PyObject *args);	/* listing.c */
PyObject *iodl_py_file_ops(PyObject *m, PyObject *args);	/* fileops.c */

#endif
