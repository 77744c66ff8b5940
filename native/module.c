/*
 * iodl._native: the Python face of the C loop (see iodl/_native.pyi for the contract). This file
 * is the method table and the module's constants; each function lives in the binding file its
 * comment names (bind.h), which parses arguments, releases the GIL around the work and turns
 * errno into OSError naming the syscall (bind_errors.c). The work itself is plain C: core.c,
 * the engines, account.c, pagecache.c, content.c, barrier.c.
 */
#include "bind.h"

static PyMethodDef module_methods[] = {
	/* bind_engine.c: the engine registry and its clock */
	{ "engines", iodl_py_engines, METH_NOARGS, "compiled-in engine names" },
	{ "probe", iodl_py_probe, METH_O, "probe(engine) -> 0 if usable here, else an errno" },
	{ "monotonic_ns", iodl_py_monotonic_ns, METH_NOARGS, "the engine's clock: CLOCK_MONOTONIC in ns" },
	/* bind_account.c: counting a Python engine's completions as the loop counts its own */
	{ "account", (PyCFunction)(void (*)(void))iodl_py_account, METH_VARARGS | METH_KEYWORDS,
	  "account(times_ns, nbytes, cached, lat_ns, hist, *, window_start_ns=0, window_end_ns=0, series=None, "
	  "series_origin_ns=0, series_bucket_ns=1_000_000_000, live=None, clat_ns=None, slat_ns=None, "
	  "clat_hist=None, slat_hist=None, unmeasured=None, submit_ns=None, inflight=None, t_start_ns=0, "
	  "t_end_ns=0) -> the counted part of RunStats, for completions a Python engine recorded" },
	{ "hist_index", iodl_py_hist_index, METH_O, "latency histogram bucket of a value in ns" },
	/* bind_logs.c */
	{ "format_rows", iodl_py_format_rows, METH_O, "format_rows(rows) -> bytes: (n, k) int64 rows as 'a, b, c' lines" },
	/* bind_pagecache.c */
	{ "resident_bytes", iodl_py_resident_bytes, METH_VARARGS,
	  "resident_bytes(fd, offset, length) -> bytes of the range in the page cache, or None when the "
	  "kernel will not tell this caller (cachestat, or mincore before Linux 6.5)" },
	{ "cache_measurable", iodl_py_cache_measurable, METH_O,
	  "cache_measurable(fd) -> the kernel accounts this file's reads to the reader (cache hits are measured)" },
	{ "thread_read_bytes", iodl_py_thread_read_bytes, METH_NOARGS,
	  "bytes the calling thread's reads made the storage deliver so far (task I/O accounting)" },
	/* bind_barrier.c */
	{ "node_barrier", iodl_py_node_barrier, METH_VARARGS,
	  "node_barrier(shared_buffer, nranks, flag, until_ns=0) -> OR of the round's flags, once every rank arrived "
	  "and the latest until_ns (CLOCK_MONOTONIC) passed; waits in the kernel" },
	{ "node_resumed", iodl_py_node_resumed, METH_VARARGS,
	  "node_resumed(shared_buffer, wait_ns=0) -> bool: this rank is back at work since the barrier's last "
	  "release; wait_ns: then wait at most that long until the round's others are too (True: they are)" },
	{ "node_quiet", iodl_py_node_quiet, METH_VARARGS,
	  "node_quiet(shared_buffer, timeout_ns) -> True once every rank is back at work after a release "
	  "(the one under way, else the next), False on the timeout" },
	/* bind_opener.c */
	{ "opener", iodl_py_opener, METH_VARARGS,
	  "opener(threads, direct, inside) -> Opener: dataset files opened ahead on `threads` threads, in order, "
	  "with open_for_read's checks" },
	/* bind_plan.c */
	{ "shard_plan", iodl_py_shard_plan, METH_VARARGS,
	  "shard_plan(sizes, block_size) -> bytearray of PLAN_DTYPE rows: each shard (int64 sizes) read whole, "
	  "in order, in block_size requests" },
	{ "generated_paths", iodl_py_generated_paths, METH_VARARGS,
	  "generated_paths(prefixes, folders, files, width, tail, shards) -> bytes: an iodl dataset's paths of the "
	  "shards (int64), each ending with its NUL (NUL-terminated prefixes, copy by copy, folders of each)" },
	{ "shuffled_range", iodl_py_shuffled_range, METH_VARARGS,
	  "shuffled_range(out, seed, epoch): out (contiguous int32 or int64, n items) filled with 0..n-1 in the "
	  "Fisher-Yates order drawn from (seed, epoch)" },
	/* bind_rows.c */
	{ "pread_rows", iodl_py_pread_rows, METH_VARARGS,
	  "pread_rows(fd, base, row_bytes, rows, seen, stored) -> bytes: the rows (int64 indices of a table "
	  "seen rows long, its stored rows repeated; negative from the end) of a table at base in fd, in the "
	  "order asked, rows near each other read together; IndexError out of bounds, EOFError if the file is short" },
	/* smallfiles.c, listing.c, fileops.c: files at the speed of the syscalls */
	{ "write_files", iodl_py_write_files, METH_VARARGS,
	  "write_files(dirfd, prefix, width, tail, temp_suffix, indices, buffer, offsets, lengths): files named "
	  "prefix + index (zero-padded to width) + tail in dirfd, each created exclusively under its temp name "
	  "(never through a link), written from buffer[offset:offset+length], closed and renamed" },
	{ "list_dir", iodl_py_list_dir, METH_VARARGS,
	  "list_dir(dirfd, prefix, threads) -> (names, offsets, sizes, rest): the directory's regular files by "
	  "name (prefix + name packed, int64 offsets and sizes as bytes), stat'ed on `threads` threads without "
	  "following links; rest: [(name, kind)] of the other entries, kind 'd' directory, 'l' link, 'o' other" },
	{ "file_ops", iodl_py_file_ops, METH_VARARGS,
	  "file_ops(op, paths, hist) -> (files done, t_start_ns, t_end_ns): fio's filecreate (op 0, exclusive, "
	  "marked), filestat (1 stat, 2 lstat, 3 statx) or filedelete (4, marked files only) on each NUL-terminated "
	  "path; each call's latency into the int64 histogram" },
	{ NULL }
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "iodl._native",
	.m_doc = "The per-I/O loop in C; see iodl/_native.pyi.",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
	PyObject *m;

	/* refuse to load with an ops table the core cannot drive (fio check_engine_ops) */
	for (const struct iodl_engine_ops *const *e = iodl_engines; *e; e++) {
		const char *why = iodl_check_engine_ops(*e);

		if (why)
			return PyErr_Format(PyExc_ImportError, "engine '%s': %s", (*e)->name, why);
	}
	if (PyType_Ready(&iodl_engine_type) < 0)
		return NULL;
	m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	if (PyModule_AddIntConstant(m, "HIST_BITS", IODL_HIST_BITS) < 0 ||
	    PyModule_AddIntConstant(m, "HIST_BUCKETS", IODL_HIST_BUCKETS) < 0 ||
	    PyModule_AddIntConstant(m, "DEPTH_BUCKETS", IODL_DEPTH_BUCKETS) < 0 ||
	    PyModule_AddIntConstant(m, "SERIES_SHIFT", IODL_SERIES_SHIFT) < 0 ||
	    PyModule_AddIntConstant(m, "SERIES_WIDTH", IODL_SERIES_WIDTH) < 0 ||
	    PyModule_AddIntConstant(m, "ALIGN", IODL_ALIGN) < 0 ||
	    PyModule_AddObjectRef(m, "Engine", (PyObject *)&iodl_engine_type) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
